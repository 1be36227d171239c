//! Authorization on the Kafka listeners (`[kafka.authorizer]`, Kafka's StandardAuthorizer): two
//! brokers over one cluster, each with a SASL_PLAINTEXT listener and the authorizer, `User:admin`
//! the super user. Real clients (confluent-kafka's AdminClient, Producer and Consumer, kafka-python's
//! KafkaAdminClient) check, in `tests/python/kafka_authorization.py`: refusals before any ACL
//! (TOPIC_ and CLUSTER_AUTHORIZATION_FAILED, Metadata without the topics), grants made through
//! broker A enforced by broker B (a FIGURE: how long it took), prefixed and literal patterns,
//! GROUP_AUTHORIZATION_FAILED, DENY over ALLOW, DeleteAcls revoking.
//!
//! Then the ACLs survive what the cluster survives: metadata partition 0's leader is killed, and a
//! broker started afterwards (a fresh process, nothing cached) enforces the same bindings.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use diskless_cluster_tests::*;

/// Adds `user` with `password` to the SCRAM credentials file, through the broker's CLI.
fn add_user(file: &std::path::Path, user: &str, password: &str) {
    let mut child = Command::new(broker_binary())
        .args(["scram-credential", "--file"])
        .arg(file)
        .args(["--user", user])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(format!("{password}\n").as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "scram-credential: {}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acls_are_enforced_by_every_broker_as_kafka_enforces_them() {
    if !kafka_clients_available() {
        return;
    }
    let mut c = Cluster::start(3, Options { metadata_partitions: 2, ..Default::default() }).await;
    let users = c.path("kafka-users.toml");
    let (admin_pw, alice_pw, bob_pw) = ("admin-secret-pw", "alice-secret-pw", "bob-secret-pw");
    for (u, p) in [("admin", admin_pw), ("alice", alice_pw), ("bob", bob_pw)] {
        add_user(&users, u, p);
    }
    let kafka_toml = format!(
        "security_protocol = \"SASL_PLAINTEXT\"\n\
         [kafka.sasl]\ncredentials = \"{}\"\nmechanisms = [\"SCRAM-SHA-256\"]\n\
         [kafka.authorizer]\nsuper_users = [\"User:admin\"]\n",
        users.display()
    );
    let options = BrokerOptions { kafka: true, kafka_toml, commit_interval_ms: 50, ..BrokerOptions::default() };
    let storage = TestStorage::Local(c.path("objects"));
    let a = BrokerProc::start(&c, "a", &storage, &options).await;
    let b = BrokerProc::start(&c, "b", &storage, &options).await;
    let (ka, kb) = (a.kafka_addr.clone().unwrap(), b.kafka_addr.clone().unwrap());
    let args = |a: &str, b: &str| {
        vec![a.to_string(), b.to_string(), "SCRAM-SHA-256".into(), admin_pw.into(), alice_pw.into(), bob_pw.into()]
    };
    run_python_checks("kafka_authorization.py", args(&ka, &kb), "ALL AUTHORIZATION CHECKS PASSED").await;

    // The bindings are the cluster's: kill metadata partition 0's leader, start a new broker, and
    // it refuses and allows as the others did (alice may read `orders`' metadata, bob may not
    // write to it).
    c.wait_for_leaders(Duration::from_secs(30)).await;
    let leader = c.leaders(c.ids()[0]).await[0];
    c.kill(leader);
    c.wait_for_leaders(Duration::from_secs(30)).await;
    drop(a);
    let fresh = BrokerProc::start(&c, "c", &storage, &options).await;
    let kc = fresh.kafka_addr.clone().unwrap();
    run_python_checks("kafka_authorization_after.py", args(&kc, &kb), "ACLS KEPT").await;
}

/// On an SSL listener that requires client certificates, a client is `User:CN=<its certificate's
/// common name>` (Kafka's default `ssl.principal.mapping.rules` for such a certificate): a super
/// user named by its certificate grants another certificate's principal a topic, which that client
/// could not write before and can after (confluent-kafka, `tests/python/kafka_authorization_certs.py`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_is_its_principal() {
    if !kafka_clients_available() {
        return;
    }
    let c = Cluster::start(3, Options { metadata_partitions: 2, ..Default::default() }).await;
    let dir = c.path("kafka-certs");
    let ca = diskless_tls::certs::Ca::new("kafka clients CA").unwrap();
    ca.write(&dir).unwrap();
    let server = ca.issue("broker", &["127.0.0.1", "localhost"]).unwrap().write(&dir, "broker").unwrap();
    let admin = ca.issue("admin", &[]).unwrap().write(&dir, "admin").unwrap();
    let carol = ca.issue("carol", &[]).unwrap().write(&dir, "carol").unwrap();
    let kafka_toml = format!(
        "security_protocol = \"SSL\"\n\
         [kafka.tls]\ncert = \"{}\"\nkey = \"{}\"\nca = \"{}\"\nrequire_client_cert = true\n\
         [kafka.authorizer]\nsuper_users = [\"User:CN=admin\"]\n",
        server.cert.display(),
        server.key.display(),
        server.ca.display()
    );
    let options = BrokerOptions { kafka: true, kafka_toml, ..BrokerOptions::default() };
    let broker = BrokerProc::start(&c, "a", &TestStorage::Local(c.path("objects")), &options).await;
    let path = |p: &std::path::Path| p.display().to_string();
    let args = vec![
        broker.kafka_addr.clone().unwrap(),
        path(&server.ca),
        path(&admin.cert),
        path(&admin.key),
        path(&carol.cert),
        path(&carol.key),
    ];
    run_python_checks("kafka_authorization_certs.py", args, "CERTIFICATE PRINCIPALS CHECKED").await;
}
