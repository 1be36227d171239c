//! Operator CLI for a coordinator cluster. See `coordctl --help` and `diskless_coordinator::ctl`.
fn main() -> std::process::ExitCode {
    diskless_coordinator::ctl::main()
}
