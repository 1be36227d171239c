//! The coordinator node server. See `diskless-coordinator --help`.
#[global_allocator]
static ALLOCATOR: diskless_coordinator::NodeAllocator = diskless_coordinator::NodeAllocator;

fn main() -> anyhow::Result<()> {
    diskless_coordinator::cli::server_main()
}
