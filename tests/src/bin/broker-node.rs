//! The broker shim server, built inside this package so the tests can start it as a process.
fn main() -> anyhow::Result<()> {
    diskless_broker_shim::cli::main()
}
