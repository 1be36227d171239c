//! The deployment files are valid and agree with the code: the Kubernetes manifests against the
//! Kubernetes schemas (`kubernetes-validate --strict`, offline), the compose file against the
//! compose specification's schema (`check-jsonschema`'s bundled copy), the node and broker
//! configurations they carry parse as the binaries' own configuration types, addresses and
//! metrics ports line up across files, the systemd units pass `systemd-analyze verify` with their
//! hardening in place, and the Dockerfile has the shape the README promises. The image itself is
//! not built here (no Docker daemon on the CI machine).
//!
//! The validators are pip packages (`deploy/prereqs.sh --tests` installs them); without them the
//! test fails under `tests/run.sh` (`DISKLESS_CI=1`) and is skipped otherwise.

use std::path::{Path, PathBuf};
use std::process::Command;

use diskless_broker_shim::config::ShimConfig;
use diskless_coordinator::node::NodeConfig;
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("repository root").to_path_buf()
}

/// Whether `tool` runs; fails under CI when it does not.
fn have(tool: &str) -> bool {
    let ok = Command::new(tool).arg("--help").output().is_ok_and(|o| o.status.success());
    if !ok {
        assert!(std::env::var_os("DISKLESS_CI").is_none(), "{tool} is missing: run deploy/prereqs.sh --tests");
        eprintln!("skipping the {tool} check: {tool} is not installed (deploy/prereqs.sh --tests installs it)");
    }
    ok
}

/// Every YAML document of `path`, as JSON (PyYAML, which the tests already need).
fn yaml_docs(path: &Path) -> Vec<Value> {
    let out = Command::new("python3")
        .args(["-c", "import sys, yaml, json; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))"])
        .arg(path)
        .output()
        .expect("run python3");
    assert!(out.status.success(), "{}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON from python")
}

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{cmd:?} failed:\n{text}");
    text
}

#[test]
fn kubernetes_manifests_validate_and_agree_with_the_node_configuration() {
    let dir = root().join("deploy/kubernetes");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let docs: Vec<Value> = files.iter().flat_map(|f| yaml_docs(f)).collect();
    let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap_or_default()).collect();
    for kind in ["ConfigMap", "Service", "StatefulSet", "PodDisruptionBudget"] {
        assert!(kinds.contains(&kind), "{kind} missing: {kinds:?}");
    }
    if have("kubernetes-validate") {
        let text = run_ok(Command::new("kubernetes-validate").arg("--strict").args(&files));
        assert_eq!(text.matches(" passed for resource ").count(), docs.len(), "{text}");
    }

    let find = |kind: &'static str| docs.iter().filter(move |d| d["kind"] == kind);
    let sts = find("StatefulSet").next().unwrap();
    let name = sts["metadata"]["name"].as_str().unwrap();
    let service = sts["spec"]["serviceName"].as_str().unwrap();
    let headless = find("Service").find(|s| s["metadata"]["name"] == service).expect("the headless Service");
    assert_eq!(headless["spec"]["clusterIP"], "None");
    assert_eq!(headless["spec"]["publishNotReadyAddresses"], true);
    assert_eq!(find("PodDisruptionBudget").next().unwrap()["spec"]["maxUnavailable"], 1);
    let pod = &sts["spec"]["template"]["spec"];
    assert!(pod["affinity"]["podAntiAffinity"].is_object());
    assert_eq!(sts["spec"]["volumeClaimTemplates"].as_array().map(Vec::len), Some(1));
    let c = &pod["containers"][0];
    assert!(c["readinessProbe"]["grpc"]["port"] == 7001 && c["readinessProbe"]["grpc"].get("service").is_none());
    assert_eq!(c["livenessProbe"]["grpc"]["service"], "diskless.admin.v1.AdminService");

    // The node configuration parses as the node's own type, and its members are the first three
    // pods at their names in the headless Service.
    let cm = find("ConfigMap").next().unwrap();
    let mut table: toml::Table = cm["data"]["node.toml"].as_str().unwrap().parse().expect("node.toml parses");
    // What start.sh adds for pod 0.
    table.insert("node_id".into(), toml::Value::Integer(1));
    table.insert("advertise".into(), toml::Value::String(format!("{name}-0.{service}:7001")));
    let config: NodeConfig = table.try_into().expect("node.toml is a node configuration");
    config.validate().expect("node.toml validates");
    let members: Vec<String> = config.members.iter().map(|m| m.addr.clone()).collect();
    let expected: Vec<String> = (0..3).map(|i| format!("{name}-{i}.{service}:7001")).collect();
    assert_eq!(members, expected);
    assert_eq!(config.metrics_addr.as_deref(), Some("0.0.0.0:9101"));
    let start = cm["data"]["start.sh"].as_str().unwrap();
    assert!(start.contains(&format!(".{service}:7001")) && start.contains("--node-id"), "{start}");
    assert!(config.first_dir().starts_with(c["volumeMounts"][0]["mountPath"].as_str().unwrap()));
}

#[test]
fn the_compose_file_validates_and_agrees_with_the_broker_and_prometheus_configurations() {
    let dir = root().join("deploy/compose");
    let file = dir.join("compose.yaml");
    if have("check-jsonschema") {
        run_ok(Command::new("check-jsonschema").args(["--builtin-schema", "vendor.compose-spec"]).arg(&file));
    }
    let compose = &yaml_docs(&file)[0];
    let services = compose["services"].as_object().expect("services");
    let mut names: Vec<&str> = services.keys().map(String::as_str).collect();
    names.sort();
    assert_eq!(names, ["broker", "coordinator-1", "coordinator-2", "coordinator-3", "prometheus", "s3", "s3-init"]);
    let members = services["coordinator-1"]["environment"]["DISKLESS_MEMBERS"].as_str().unwrap();
    assert_eq!(members, "1=coordinator-1:7001,2=coordinator-2:7001,3=coordinator-3:7001");
    assert!(services["broker"]["ports"].as_array().unwrap().iter().any(|p| p == "9092:9092"));
    assert_eq!(services["broker"]["image"], services["coordinator-1"]["image"]);
    assert_eq!(services["broker"]["build"]["dockerfile"], "deploy/docker/Dockerfile");

    let broker: ShimConfig =
        toml::from_str(&std::fs::read_to_string(dir.join("broker.toml")).unwrap()).expect("broker.toml parses");
    broker.validate().expect("broker.toml validates");
    assert_eq!(broker.coordinators, ["coordinator-1:7001", "coordinator-2:7001", "coordinator-3:7001"]);
    assert_eq!(broker.kafka.as_ref().map(|k| k.listen.as_str()), Some("0.0.0.0:9092"));

    // Prometheus scrapes the services at their metrics ports, with the shared alert rules.
    let prom = &yaml_docs(&root().join("deploy/prometheus/prometheus-compose.yml"))[0];
    let targets: Vec<&str> = prom["scrape_configs"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|j| j["static_configs"][0]["targets"].as_array().unwrap())
        .map(|t| t.as_str().unwrap())
        .collect();
    let broker_metrics = broker.metrics_addr.as_deref().unwrap().rsplit(':').next().unwrap().to_string();
    assert_eq!(
        targets,
        ["coordinator-1:9101", "coordinator-2:9101", "coordinator-3:9101", &format!("broker:{broker_metrics}")]
    );
    assert_eq!(services["coordinator-1"]["environment"]["DISKLESS_METRICS_ADDR"], "0.0.0.0:9101");
    let mounts = services["prometheus"]["volumes"].as_array().unwrap();
    assert!(mounts.iter().any(|m| m.as_str().unwrap().starts_with("../prometheus/alerts.yml:")));
}

#[test]
fn systemd_units_are_hardened_and_verify() {
    let dir = root().join("deploy/systemd");
    let tmp = tempfile::tempdir().unwrap();
    let mut copies = vec![];
    for unit in ["diskless-coordinator@.service", "diskless-broker.service"] {
        let text = std::fs::read_to_string(dir.join(unit)).unwrap();
        for directive in [
            "User=diskless",
            "ProtectSystem=strict",
            "NoNewPrivileges=yes",
            "LimitNOFILE=65536",
            "Restart=on-failure",
            "CapabilityBoundingSet=\n",
        ] {
            assert!(text.contains(directive), "{unit} lacks {directive:?}");
        }
        let writable = text.lines().find_map(|l| l.strip_prefix("ReadWritePaths=")).expect("ReadWritePaths");
        assert!(text.contains(&format!("StateDirectory={}", writable.trim_start_matches("/var/lib/"))), "{unit}");
        // verify checks the executable exists: point it at one that does.
        let exec = text.lines().find(|l| l.starts_with("ExecStart=")).unwrap();
        let copy = text.replace(exec, "ExecStart=/bin/true");
        let name = unit.replace("@.", "@1.");
        std::fs::write(tmp.path().join(&name), copy).unwrap();
        copies.push(tmp.path().join(name));
    }
    let toml_dir = root().join("deploy/systemd/node.example.toml");
    let mut node: toml::Table = std::fs::read_to_string(toml_dir).unwrap().parse().unwrap();
    node.insert("node_id".into(), toml::Value::Integer(1));
    let node: NodeConfig = node.try_into().expect("node.example.toml is a node configuration");
    node.validate().expect("node.example.toml validates");
    assert!(node.dirs().len() == 2, "the example shows two data directories");
    assert!(node.dirs().iter().all(|d| d.starts_with("/var/lib/diskless")), "the unit lets the node write only there");
    let broker: ShimConfig =
        toml::from_str(&std::fs::read_to_string(root().join("deploy/systemd/broker.example.toml")).unwrap())
            .expect("broker.example.toml is a broker configuration");
    broker.validate().expect("broker.example.toml validates");
    let kafka = broker.kafka.as_ref().expect("the example has Kafka listeners");
    assert!(
        kafka.all_listeners().iter().any(|l| l.security_protocol.sasl() && l.security_protocol.tls()),
        "the example shows a SASL_SSL listener"
    );
    assert!(broker.tls.is_some() && broker.coordinator_tls.is_some(), "the example secures the broker's gRPC sides");
    if have("systemd-analyze") {
        let out = Command::new("systemd-analyze").args(["verify", "--man=no"]).args(&copies).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let problems: Vec<&str> = stderr
            .lines()
            .filter(|l| !l.contains("diskless") || !l.contains("user"))
            .filter(|l| !l.is_empty())
            .collect();
        assert!(out.status.success() && problems.is_empty(), "systemd-analyze verify:\n{stderr}");
    }
}

#[test]
fn the_dockerfile_builds_the_three_binaries_into_a_slim_non_root_image() {
    let text = std::fs::read_to_string(root().join("deploy/docker/Dockerfile")).unwrap();
    let froms: Vec<&str> = text.lines().filter(|l| l.starts_with("FROM ")).collect();
    assert_eq!(froms.len(), 2, "{froms:?}");
    assert!(froms[0].starts_with("FROM rust:") && froms[0].ends_with(" AS build"), "{froms:?}");
    assert!(froms[1].contains("debian:") && froms[1].contains("-slim"), "{froms:?}");
    assert!(text.contains("libclang-dev"));
    for bin in ["diskless-coordinator", "coordctl", "diskless-broker"] {
        assert!(text.contains(&format!("--bin {bin}")) && text.contains(&format!("target/release/{bin}")), "{bin}");
    }
    assert!(text.contains("--locked"));
    let user = text.lines().rev().find_map(|l| l.strip_prefix("USER ")).expect("a USER line");
    assert!(!user.starts_with("0") && !user.starts_with("root"), "runs as {user}");
    let last_from = text.rfind("\nFROM ").unwrap();
    assert!(text[last_from..].contains("COPY --from=build"), "the binaries come from the build stage");

    // The builder's Rust is new enough for every locked dependency (cargo refuses older ones).
    let image: Vec<u64> = froms[0]["FROM rust:".len()..]
        .split(['-', ' '])
        .next()
        .unwrap()
        .split('.')
        .map(|x| x.parse().expect("rust:MAJOR.MINOR"))
        .collect();
    // Only the crates of this machine's platform: a fresh machine has downloaded no others (the
    // Windows, macOS and Android ones in Cargo.lock), and `--offline` cannot fetch them.
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let host = Command::new(rustc).arg("-vV").output().expect("rustc -vV");
    let host = String::from_utf8_lossy(&host.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
        .expect("rustc -vV names its host");
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked", "--offline", "--filter-platform", &host])
        .current_dir(root())
        .output()
        .expect("cargo metadata");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let meta: Value = serde_json::from_slice(&out.stdout).unwrap();
    let used: std::collections::HashSet<&str> =
        meta["resolve"]["nodes"].as_array().unwrap().iter().map(|n| n["id"].as_str().unwrap()).collect();
    for p in meta["packages"].as_array().unwrap().iter().filter(|p| used.contains(p["id"].as_str().unwrap())) {
        let Some(needs) = p["rust_version"].as_str() else { continue };
        let needs: Vec<u64> = needs.split('.').map(|x| x.parse().unwrap_or(0)).collect();
        assert!(
            image[..] >= needs[..needs.len().min(2)],
            "{} {} needs Rust {needs:?}, the Dockerfile builds with {image:?}",
            p["name"],
            p["version"]
        );
    }
}
