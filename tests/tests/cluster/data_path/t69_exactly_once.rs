//! Exactly-once through crashes: a consume-transform-produce worker (librdkafka, a
//! transactional producer committing its consumer group's offsets with each transaction,
//! `tests/python/eos_worker.py`) copies 6,000 records from one topic to another through two brokers
//! while it is killed with `kill -9` several times, and so is the broker coordinating its
//! transactions, once while the worker runs and once together with it. Each new worker fences the
//! last one's transaction (`init_transactions`) and resumes from the group's committed offsets.
//! Afterwards a `read_committed` reader finds every input record in the output exactly once, and
//! the group's offsets at the end of the input.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use diskless_cluster_tests::*;
use kafka_protocol::messages::{ApiKey, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;

const IN: &str = "eos-in";
const OUT: &str = "eos-out";
const GROUP: &str = "eos";
const TXID: &str = "eos-worker";
const RECORDS: usize = 6_000;

fn script() -> String {
    format!("{}/python/eos_worker.py", env!("CARGO_MANIFEST_DIR"))
}

/// Starts `eos_worker.py work`, its output appended to `log`.
fn start_worker(brokers: &str, log: &std::path::Path) -> Child {
    let out = std::fs::File::options().create(true).append(true).open(log).expect("open the worker's log");
    Command::new("python3")
        .arg(script())
        .args(["work", brokers, IN, OUT, GROUP, TXID])
        .stdout(out.try_clone().expect("the log again"))
        .stderr(out)
        .stdin(Stdio::null())
        .spawn()
        .expect("start the worker")
}

/// The broker id coordinating transactional id `id`, as `addr` names it.
async fn txn_coordinator(addr: &str, id: &str) -> i32 {
    let req = FindCoordinatorRequest::default()
        .with_key_type(1)
        .with_coordinator_keys(vec![StrBytes::from_string(id.into())]);
    let r: FindCoordinatorResponse = kafka_call(addr, ApiKey::FindCoordinator, 4, &req).await;
    assert_eq!(r.coordinators[0].error_code, 0, "{r:?}");
    r.coordinators[0].node_id.0
}

/// Runs the worker for up to `d`; its exit status if it ended within it.
async fn run_for(w: &mut Child, d: Duration) -> Option<std::process::ExitStatus> {
    let until = Instant::now() + d;
    while Instant::now() < until {
        if let Some(status) = w.try_wait().expect("the worker's status") {
            return Some(status);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn t69_a_consume_transform_produce_loop_killed_with_its_coordinator_writes_each_record_once() {
    if !kafka_clients_available() {
        return;
    }
    let c = Cluster::start(3, Options::default()).await;
    let options = BrokerOptions { kafka: true, commit_interval_ms: 20, ..BrokerOptions::default() };
    let storage = TestStorage::Local(c.path("objects"));
    let mut brokers =
        [BrokerProc::start(&c, "a", &storage, &options).await, BrokerProc::start(&c, "b", &storage, &options).await];
    for t in [IN, OUT] {
        create_topic_via(&mut brokers[0].client().await, t, 2).await;
    }
    let addrs: Vec<String> = brokers.iter().map(|b| b.kafka_addr.clone().expect("a Kafka listener")).collect();
    let bootstrap = addrs.join(",");
    let seeded = run_python_checks(
        "eos_worker.py",
        vec!["seed".into(), bootstrap.clone(), IN.into(), RECORDS.to_string()],
        "seeded",
    )
    .await;
    print!("{seeded}");

    let log = c.path("eos-worker.log");
    let mut kills = 0;
    let mut broker_kills = 0;
    // The crashes: (how long the worker runs first, whether its coordinating broker dies then too,
    // whether the worker dies). A new worker commits its first transaction about 3.3 s after it
    // starts (joining the group), then one every few tens of milliseconds: each crash lands
    // mid-stream.
    let plan = [
        (Duration::from_millis(4_500), false, true),
        (Duration::from_millis(4_000), true, false),
        (Duration::from_millis(1_000), false, true),
        (Duration::from_millis(4_200), true, true),
        (Duration::from_millis(4_800), false, true),
    ];
    let mut worker = start_worker(&bootstrap, &log);
    for (runs, broker_dies, worker_dies) in plan {
        if let Some(status) = run_for(&mut worker, runs).await {
            // It ended early (an error it cannot go on from is exit 3, by design): start it again.
            println!("worker ended by itself ({status}); starting it again");
            worker = start_worker(&bootstrap, &log);
            continue;
        }
        if broker_dies {
            let id = txn_coordinator(&addrs[0], TXID).await;
            let b = brokers.iter_mut().find(|b| b.broker_id == id).expect("the coordinator is one of ours");
            b.kill();
            broker_kills += 1;
            println!("killed broker {id}, the transactions' coordinator");
            tokio::time::sleep(Duration::from_millis(500)).await;
            b.restart().await;
        }
        if worker_dies {
            worker.kill().expect("kill -9 the worker");
            worker.wait().expect("reap the worker");
            kills += 1;
            worker = start_worker(&bootstrap, &log);
        }
    }
    // Then let it finish; it may still fail over once (its errors end it with 3).
    let deadline = Instant::now() + Duration::from_secs(150);
    loop {
        match run_for(&mut worker, Duration::from_secs(1)).await {
            Some(s) if s.success() => break,
            Some(s) => {
                println!("worker ended ({s}); starting it again");
                worker = start_worker(&bootstrap, &log);
            }
            None => {}
        }
        if Instant::now() > deadline {
            let _ = worker.kill();
            panic!("the worker did not catch up: {}", std::fs::read_to_string(&log).unwrap_or_default());
        }
    }
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let errors = text.matches("worker error").count();
    // The workers that committed something: each run's lines follow its "transactions initialized".
    let productive = text.split("transactions initialized").skip(1).filter(|run| run.contains(" committed ")).count();
    println!(
        "FIGURE worker killed {kills} times, its coordinating broker {broker_kills} times; {errors} worker errors; \
         {productive} workers committed transactions"
    );
    assert!(kills >= 3 && broker_kills >= 1, "the crashes happened");
    assert!(productive >= 3, "crashes landed mid-stream: {productive} workers committed\n{text}");
    let out = run_python_checks(
        "eos_worker.py",
        vec!["check".into(), bootstrap, IN.into(), OUT.into(), GROUP.into(), RECORDS.to_string()],
        "exactly once",
    )
    .await;
    print!("{out}");
}
