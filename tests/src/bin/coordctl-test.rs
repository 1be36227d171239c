//! `coordctl`, built inside this package so the cluster tests can run it as a process. Same code.
fn main() -> std::process::ExitCode {
    diskless_coordinator::ctl::main()
}
