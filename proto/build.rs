//! Compiles the gRPC contract. Uses the vendored `protoc` unless `PROTOC` is already set, so a
//! fresh machine needs no system package.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::var_os("PROTOC").is_none() {
        // SAFETY: build scripts are single-threaded; nothing else reads the environment yet.
        unsafe { std::env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?) };
    }
    let files = [
        "proto/diskless/coordinator/v1/coordinator.proto",
        "proto/diskless/internal/v1/raft.proto",
        "proto/diskless/admin/v1/admin.proto",
        "proto/diskless/broker/v1/broker.proto",
    ];
    // The file descriptor set serves gRPC server reflection (`grpcurl list`) and names the
    // methods the servers' metrics count. Admin types serialize to JSON for `coordctl --json`.
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    tonic_prost_build::configure()
        .file_descriptor_set_path(out.join("diskless_descriptor.bin"))
        .type_attribute(".diskless.admin.v1", "#[derive(serde::Serialize)]")
        .compile_protos(&files, &["proto"])?;
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    Ok(())
}
