//! Writes the fuzz targets' seed inputs (`fuzz/seeds/<target>/`) from the crates' own
//! `fuzz_targets::seeds()`: `fuzz/run.sh --seeds` (built here, on the stable toolchain, so no
//! second RocksDB build is needed for it).

fn main() -> std::io::Result<()> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds");
    let all =
        diskless_broker_shim::fuzz_targets::seeds().into_iter().chain(diskless_coordinator::fuzz_targets::seeds());
    let mut counts = std::collections::BTreeMap::<&str, usize>::new();
    for (target, bytes) in all {
        let n = counts.entry(target).or_default();
        let dir = root.join(target);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(format!("seed-{n:03}")), bytes)?;
        *n += 1;
    }
    for (target, n) in counts {
        println!("{target}: {n} seeds");
    }
    Ok(())
}
