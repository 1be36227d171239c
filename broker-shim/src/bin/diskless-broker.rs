//! The broker shim server: `diskless-broker --config broker.toml` (see deploy/local/).
fn main() -> anyhow::Result<()> {
    diskless_broker_shim::cli::main()
}
