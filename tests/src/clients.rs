//! Real Kafka clients (kcat, kafka-python, confluent-kafka, aiokafka, KafkaJS): whether they are
//! installed, and running the check scripts of `tests/python/` and `tests/node/`.

use std::process::Command;

fn node_dir() -> String {
    format!("{}/node", env!("CARGO_MANIFEST_DIR"))
}

/// Whether kcat, confluent-kafka, kafka-python, aiokafka and KafkaJS are installed; in CI
/// (`DISKLESS_CI`) they must be, elsewhere a test without them prints why it skips.
pub fn kafka_clients_available() -> bool {
    let have = |tool: &str, probe: &[&str]| Command::new(tool).args(probe).output().is_ok_and(|o| o.status.success());
    let kafkajs = format!("require('{}/node_modules/kafkajs')", node_dir());
    let ready = have("kcat", &["-V"])
        && have("python3", &["-c", "import confluent_kafka, kafka, aiokafka"])
        && have("node", &["-e", &kafkajs]);
    if !ready {
        assert!(
            std::env::var_os("DISKLESS_CI").is_none(),
            "kcat, confluent-kafka, kafka-python, aiokafka and KafkaJS are required in CI"
        );
        eprintln!(
            "SKIPPED: run deploy/prereqs.sh --tests (kcat from apt; confluent-kafka, kafka-python, aiokafka from \
             pip; KafkaJS from npm into tests/node) to run the client tests"
        );
    }
    ready
}

/// Runs the KafkaJS script `tests/node/<script>` with `args`, as [`run_python_checks`] runs a
/// Python one.
pub async fn run_node_checks(script: &str, args: Vec<String>, passed: &str) -> String {
    let path = format!("{}/{script}", node_dir());
    let out = tokio::task::spawn_blocking(move || Command::new("node").arg(path).args(args).output())
        .await
        .expect("the node task")
        .expect("run node");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_checks_passed(script, out.status.success(), &stdout, &stderr, passed);
    stdout
}

/// Runs the client script `tests/python/<script>` with `args`; asserts that it exited 0 having
/// printed `passed`, and prints the `FIGURE` lines it reported. Returns its output.
pub async fn run_python_checks(script: &str, args: Vec<String>, passed: &str) -> String {
    let path = format!("{}/python/{script}", env!("CARGO_MANIFEST_DIR"));
    let out = tokio::task::spawn_blocking(move || Command::new("python3").arg(path).args(args).output())
        .await
        .expect("the python3 task")
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_checks_passed(script, out.status.success(), &stdout, &stderr, passed);
    stdout
}

/// Asserts that a client script succeeded (`ok`) and printed `passed`, showing its output and the
/// tail of its stderr otherwise; prints the `FIGURE` lines it reported.
pub fn assert_checks_passed(script: &str, ok: bool, stdout: &str, stderr: &str, passed: &str) {
    for line in stdout.lines().filter(|l| l.starts_with("FIGURE")) {
        println!("{line}");
    }
    let mut from = stderr.len().saturating_sub(3000);
    while !stderr.is_char_boundary(from) {
        from += 1;
    }
    let tail = &stderr[from..];
    assert!(ok && stdout.contains(passed), "{script}: checks failed\n--- stdout\n{stdout}\n--- stderr (tail)\n{tail}");
}
