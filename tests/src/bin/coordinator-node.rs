//! The coordinator server, built inside this package so the cluster tests can start it as a real
//! process (`CARGO_BIN_EXE_coordinator-node`). Same code as `diskless-coordinator`.
#[global_allocator]
static ALLOCATOR: diskless_coordinator::NodeAllocator = diskless_coordinator::NodeAllocator;

fn main() -> anyhow::Result<()> {
    diskless_coordinator::cli::server_main()
}
