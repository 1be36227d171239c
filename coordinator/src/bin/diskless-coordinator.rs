//! The coordinator node server. See `diskless-coordinator --help`.
fn main() -> anyhow::Result<()> {
    diskless_coordinator::cli::server_main()
}
