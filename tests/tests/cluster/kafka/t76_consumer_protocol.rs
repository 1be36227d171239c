//! KIP-848 consumer groups (`group.protocol=consumer`) with librdkafka through two
//! brokers: the coordinator assigns, a partition is never given to two consumers at once,
//! consumers join, leave and are killed with `kill -9`, every record is seen and the committed
//! offsets end at the partitions' ends (`tests/python/consumer_protocol.py`). Then the broker
//! coordinating the group is killed: through the other broker, which loads the group from the
//! coordinator cluster, a new consumer of the group resumes exactly at the committed offsets.

use diskless_cluster_tests::*;

const TOPIC: &str = "kip848";
const GROUP: &str = "kip848-group";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn t76_consumer_protocol_members_share_partitions_rebalance_and_resume() {
    if !kafka_clients_available() {
        return;
    }
    let c = Cluster::start(3, Options::default()).await;
    // Fast timers for the test: a killed member is gone after 4 s, members heartbeat every 0.5 s.
    let groups = "\n[groups]\nconsumer_session_timeout_ms = 4000\nconsumer_heartbeat_interval_ms = 500\n";
    let options = BrokerOptions {
        kafka: true,
        commit_interval_ms: 20,
        kafka_toml: groups.to_string(),
        ..BrokerOptions::default()
    };
    let storage = TestStorage::Local(c.path("objects"));
    let mut a = BrokerProc::start(&c, "a", &storage, &options).await;
    let mut b = BrokerProc::start(&c, "b", &storage, &options).await;
    let (ka, kb) = (a.kafka_addr.clone().unwrap(), b.kafka_addr.clone().unwrap());
    let both = format!("{ka},{kb}");
    let out = run_python_checks(
        "consumer_protocol.py",
        vec![both, TOPIC.into(), GROUP.into()],
        "ALL CONSUMER PROTOCOL CHECKS PASSED",
    )
    .await;
    println!("{out}");

    // Kill the broker coordinating the group; the other takes it over from the cluster.
    let mut k = diskless_cluster_tests::nemesis::kafka_client::KafkaClient::connect(&ka).await.unwrap();
    let coordinator = k.find_group_coordinator(GROUP).await.unwrap();
    let survivor = if coordinator == a.broker_id {
        a.kill();
        kb
    } else {
        b.kill();
        ka
    };
    let out = run_python_checks(
        "consumer_protocol.py",
        vec![survivor, TOPIC.into(), GROUP.into(), "--resume".into(), "101".into()],
        "ALL CONSUMER PROTOCOL CHECKS PASSED",
    )
    .await;
    println!("{out}");
}
