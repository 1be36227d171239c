//! Parked fetches: a long-poll Fetch on broker B that cannot be answered yet costs the
//! coordinator cluster nothing while it waits, and is answered as soon as a commit through broker
//! A fills it — long before its `max_wait_ms` — because B hears of A's commit on its watch stream.
//! The watch survives the loss of the node it streams from (kill), that node's isolation from the
//! others (its replica can no longer vouch for its state), and leader changes: after each, a parked
//! fetch on B is still woken by A's next commit.

use std::time::{Duration, Instant};

use diskless_cluster_tests::nemesis::kafka_client::KafkaClient;
use diskless_cluster_tests::*;

/// Long enough that an answer before it can only be a wake-up.
const MAX_WAIT_MS: i32 = 20_000;

/// The end of `parked/0` (asked again while the cluster elects).
async fn end_of(client: &mut KafkaClient) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match client.list_offsets("parked", 0, -1).await {
            Ok((0, end)) => return end,
            r => assert!(Instant::now() < deadline, "no end offset after a minute: {r:?}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Produces `value` to `parked/0` through `a`, retrying retriable errors for up to a minute.
async fn produce_one(a: &str, value: &str) {
    let mut producer = KafkaClient::connect(a).await.expect("connect to broker a");
    let batch = bytes::Bytes::from(batch_of(&[value.to_string()]));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (code, _) = producer.produce("parked", 0, batch.clone()).await.expect("produce");
        if code == 0 {
            return;
        }
        assert!(retriable(i32::from(code)) && Instant::now() < deadline, "produce through a: error {code}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Parks a fetch on `b` at the end of `parked/0`, commits one record through `a` after `delay`,
/// and returns how long after the commit's acknowledgement the fetch was answered.
async fn woken_after_commit(a: &str, b: &str, delay: Duration, value: &str) -> Duration {
    let mut consumer = KafkaClient::connect(b).await.expect("connect to broker b");
    let end = end_of(&mut consumer).await;
    let parked_at = Instant::now();
    let parked = tokio::spawn(async move {
        let f = consumer.fetch_waiting("parked", 0, end, MAX_WAIT_MS).await.expect("parked fetch");
        (Instant::now(), f)
    });
    tokio::time::sleep(delay).await;
    produce_one(a, value).await;
    let acked = Instant::now();
    let (answered, f) = parked.await.expect("parked fetch task");
    eprintln!(
        "{value}: acknowledged {} ms after the fetch parked, answered {} ms after",
        (acked - parked_at).as_millis(),
        answered.saturating_duration_since(parked_at).as_millis()
    );
    assert_eq!(f.error_code, 0, "the parked fetch failed");
    assert!(!f.records.is_empty(), "the parked fetch ended at max_wait_ms with nothing: it was never woken");
    assert!(f.high_watermark > end);
    answered.saturating_duration_since(acked)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_fetch_costs_no_reads_and_wakes_on_another_brokers_commit_across_node_loss_and_isolation() {
    let mut c = Cluster::start(3, Options { metrics: true, ..Options::default() }).await;
    let options = BrokerOptions { kafka: true, commit_interval_ms: 50, ..BrokerOptions::default() };
    let a = BrokerProc::start(&c, "a", &TestStorage::Local(c.path("objects")), &options).await;
    let b = BrokerProc::start(&c, "b", &TestStorage::Local(c.path("objects")), &options).await;
    let (a_addr, b_addr) = (a.kafka_addr.clone().unwrap(), b.kafka_addr.clone().unwrap());
    create_topic_via(&mut a.client().await, "parked", 1).await;

    // A first commit, so both brokers know the topic; then a fetch parked at its end. While it
    // waits, the cluster serves (next to) no FindBatches: polling every 25 ms would be 120 in 3 s.
    let first = woken_after_commit(&a_addr, &b_addr, Duration::from_millis(500), "first").await;
    eprintln!("FIGURE parked fetch answered {} ms after the commit's acknowledgement", first.as_millis());
    let mut consumer = KafkaClient::connect(&b_addr).await.unwrap();
    let end = end_of(&mut consumer).await;
    let idle = tokio::spawn(async move { consumer.fetch_waiting("parked", 0, end, 4_000).await.unwrap() });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = find_batches_served(&c).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let during = find_batches_served(&c).await - before;
    let f = idle.await.unwrap();
    assert!(f.records.is_empty(), "nothing was produced: the fetch waits out its max_wait_ms");
    eprintln!("FIGURE FindBatches served during 3 s of one parked fetch: {during}");
    assert!(during <= 5.0, "a parked fetch polled the cluster: {during} FindBatches in 3 s");

    // Each node killed in turn (the watch streams on it break; one of them leads), then brought
    // back: a fetch parked on b is still woken by a's commit.
    for id in c.ids() {
        c.kill(id);
        let after = woken_after_commit(&a_addr, &b_addr, Duration::from_secs(1), &format!("killed-{id}")).await;
        eprintln!("FIGURE with node {id} killed: answered {} ms after the commit", after.as_millis());
        c.spawn(id);
        c.wait_for_leaders(Duration::from_secs(60)).await;
    }

    // Each node isolated from the others in turn: its replicas lose touch with their leaders, and
    // a watch on it ends; the brokers still reach it.
    for id in c.ids() {
        let others: Vec<u64> = c.ids().into_iter().filter(|&o| o != id).collect();
        c.block(id, &others).await;
        for &o in &others {
            c.block(o, &[id]).await;
        }
        // Produce works again once new leaders are elected (an isolated leader keeps its clients
        // waiting until then); by then the isolated node's replicas can no longer vouch for
        // themselves and a watch left on it would hear nothing more.
        produce_one(&a_addr, &format!("isolated-{id}-first")).await;
        let after = woken_after_commit(&a_addr, &b_addr, Duration::from_secs(1), &format!("isolated-{id}")).await;
        eprintln!("FIGURE with node {id} isolated: answered {} ms after the commit", after.as_millis());
        c.block(id, &[]).await;
        for &o in &others {
            c.block(o, &[]).await;
        }
        c.wait_for_leaders(Duration::from_secs(60)).await;
    }

    // Everything committed is there, in order.
    let mut consumer = KafkaClient::connect(&b_addr).await.unwrap();
    let all = consumer.fetch("parked", 0, 0).await.unwrap();
    let values: Vec<String> = kafka_records::decode(all.records)
        .unwrap()
        .into_iter()
        .map(|m| String::from_utf8(m.value.unwrap().to_vec()).unwrap())
        .collect();
    let mut expected = vec!["first".to_string()];
    expected.extend(c.ids().iter().map(|id| format!("killed-{id}")));
    expected.extend(c.ids().iter().flat_map(|id| [format!("isolated-{id}-first"), format!("isolated-{id}")]));
    assert_eq!(values, expected);
}
