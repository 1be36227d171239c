//! Keeps the benchmark working: half a second of every workload on each system, one system at a
//! time — our cluster, then a private PostgreSQL, then one with a synchronous standby (without
//! PostgreSQL installed the run measures our system alone, except in CI).

use std::process::Command;

#[test]
fn the_benchmark_runs_end_to_end_and_writes_its_table_json_and_plot() {
    let pg = ["17", "16", "15", "14"]
        .iter()
        .any(|v| std::path::Path::new(&format!("/usr/lib/postgresql/{v}/bin/initdb")).exists());
    if !pg {
        assert!(std::env::var_os("DISKLESS_CI").is_none(), "PostgreSQL is required in CI");
        eprintln!("SKIPPED the PostgreSQL half: install postgresql to run it");
    }
    let out = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_diskless-bench"));
    cmd.arg("--smoke").arg("--out").arg(out.path()).env("RUST_BACKTRACE", "0");
    if !pg {
        cmd.arg("--no-postgres");
    }
    let r = cmd.output().expect("run diskless-bench");
    let stdout = String::from_utf8_lossy(&r.stdout);
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "bench failed\n{stdout}\n{}", &stderr[stderr.len().saturating_sub(4000)..]);
    assert!(stdout.contains("raft-coordinator"), "{stdout}");
    if pg {
        assert!(stdout.contains("postgresql") && stdout.contains("Index Scan"), "{stdout}");
        assert!(stdout.contains("postgresql-replicated"), "{stdout}");
    }
    for workload in ["fan-out", "/s offered", "ListOffsets latest (strict)", "idle CPU"] {
        assert!(stdout.contains(workload), "no {workload} in\n{stdout}");
    }
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("results.json")).unwrap()).unwrap();
    let rows = json["rows"].as_array().unwrap();
    let per_system = 10; // smoke: 2 commit client counts, 1 offered, 1 fan-out, 4 reads, 2 depths
    assert_eq!(rows.len(), if pg { 3 * per_system } else { per_system }, "rows: {rows:#?}");
    for r in rows.iter().filter(|r| r["system"].as_str().unwrap().starts_with("postgresql")) {
        // A baseline that refuses batches (say, a broken commit function) measures nothing real.
        assert_eq!(r["errors"].as_u64(), Some(0), "{r:#}");
    }
    let idle = json["phases"][0]["idle_cpu"]["percent_of_one_core_per_node"].as_array().unwrap();
    assert_eq!(idle.len(), 3, "idle CPU of each node");
    assert!(rows.iter().all(|r| r["samples"].as_u64().unwrap() > 0), "every workload measured something");
    let svg = std::fs::read_to_string(out.path().join("commit-latency.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("raft-coordinator p99"));
}

#[test]
fn the_data_path_phase_measures_latency_and_idle_consumers_through_a_broker() {
    let out = tempfile::tempdir().unwrap();
    let r = Command::new(env!("CARGO_BIN_EXE_diskless-bench"))
        .args(["data-path", "--smoke", "--out"])
        .arg(out.path())
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run diskless-bench data-path");
    let stdout = String::from_utf8_lossy(&r.stdout);
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "data path failed\n{stdout}\n{}", &stderr[stderr.len().saturating_sub(4000)..]);
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("data-path.json")).unwrap()).unwrap();
    // Every record produced was acknowledged without error and seen by the consumer.
    assert!(json["sent"].as_u64().unwrap() > 0, "{json:#}");
    assert_eq!(json["errors"].as_u64(), Some(0), "{json:#}");
    assert!(json["produce_ack_ms"]["p50"].as_f64().unwrap() > 0.0, "{json:#}");
    assert!(json["end_to_end_ms"]["p50"].as_f64().unwrap() > 0.0, "{json:#}");
    let idle = json["idle"].as_array().unwrap();
    assert_eq!(idle.iter().map(|i| i["consumers"].as_u64().unwrap()).collect::<Vec<_>>(), vec![0, 10]);
    // The consumers' long polls were answered (at their max_wait_ms).
    assert!(idle[1]["fetches_per_s"].as_f64().unwrap() > 0.0, "{json:#}");
    // The replay: every consumer read the whole topic (4 MiB each), through catch-up GETs.
    let replay = &json["replay"];
    assert!(replay["mib_replayed"].as_f64().unwrap() >= 10.0 * 4.0, "{json:#}");
    assert!(replay["catch_up_gets"].as_f64().unwrap() > 0.0, "{json:#}");
    // The wake step: both consumers received the records, through each broker.
    let w = &json["wake"];
    assert!(w["records"].as_u64().unwrap() > 0, "{json:#}");
    assert!(w["same_broker_ms"]["received"].as_u64().unwrap() > 0, "{json:#}");
    assert!(w["other_broker_ms"]["received"].as_u64().unwrap() > 0, "{json:#}");
    // The throughput step: written without error, and the consumer read all of it.
    let t = &json["throughput"];
    assert_eq!(t["errors"].as_u64(), Some(0), "{json:#}");
    assert!(t["acked_mib_per_s"].as_f64().unwrap() > 0.0, "{json:#}");
    assert!(t["consumed_mib_per_s"].as_f64().unwrap() >= t["acked_mib_per_s"].as_f64().unwrap(), "{json:#}");
    // The transactions step: 1 and 4 transactional producers committed, and the idempotent
    // producers of the baseline wrote the same requests without error.
    let runs = json["transactions"]["runs"].as_array().unwrap();
    assert_eq!(runs.iter().map(|r| r["producers"].as_u64().unwrap()).collect::<Vec<_>>(), vec![1, 4]);
    for r in runs {
        let x = &r["transactional"];
        assert!(x["transactions"].as_u64().unwrap() > 0, "{json:#}");
        assert!(x["records_per_s"].as_f64().unwrap() > 0.0, "{json:#}");
        for figure in ["add_partitions_ms", "produce_ms", "end_txn_ms", "transaction_ms"] {
            assert!(x[figure]["p50"].as_f64().unwrap() > 0.0, "{figure}: {json:#}");
        }
        let idem = r["idempotent"].as_array().unwrap();
        assert_eq!(idem.len(), 2, "{json:#}");
        for i in idem {
            assert_eq!(i["errors"].as_u64(), Some(0), "{json:#}");
            assert_eq!(i["records"].as_u64(), Some(x["records"].as_u64().unwrap()), "{json:#}");
            assert!(i["transactional_over_idempotent"].as_f64().unwrap() > 0.0, "{json:#}");
        }
    }
}
