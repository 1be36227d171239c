//! The broker's Kafka listeners with security: one broker with a PLAINTEXT, an SSL, a SASL_SSL
//! and a SASL_PLAINTEXT listener (each its own port; Metadata advertises the port of the listener
//! a client came in on, so a client bootstrapped over TLS keeps talking TLS).
//!
//! - confluent-kafka and kafka-python produce and consume over SSL and over SASL_SSL with
//!   SCRAM-SHA-256, SCRAM-SHA-512 and PLAIN (kafka-python also PLAIN over SASL_PLAINTEXT); a wrong
//!   password or an unknown user is refused with SASL_AUTHENTICATION_FAILED and the broker's
//!   reason (see `tests/python/kafka_security.py`).
//! - The credentials are made with `diskless-broker scram-credential` (the password read from
//!   standard input) and the file holds no password.
//! - On a SASL listener, ApiVersions is answered before authentication and any other request
//!   closes the connection.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use diskless_cluster_tests::*;

const PASSWORD: &str = "alice-secret-pw";

/// A request frame: size, api key, version, correlation id, null client id, body.
fn request(api_key: i16, version: i16, correlation: i32, body: &[u8]) -> Vec<u8> {
    let mut r = vec![];
    r.extend_from_slice(&api_key.to_be_bytes());
    r.extend_from_slice(&version.to_be_bytes());
    r.extend_from_slice(&correlation.to_be_bytes());
    r.extend_from_slice(&(-1i16).to_be_bytes());
    r.extend_from_slice(body);
    let mut framed = (r.len() as i32).to_be_bytes().to_vec();
    framed.extend(r);
    framed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_clients_over_tls_and_sasl_and_wrong_passwords_are_refused() {
    if !kafka_clients_available() {
        return;
    }
    let c = Cluster::start(3, Options { metadata_partitions: 2, ..Default::default() }).await;
    let dir = c.path("kafka-security");
    let ca = diskless_tls::certs::Ca::new("kafka test CA").unwrap();
    ca.write(&dir).unwrap();
    let tls = ca.issue("broker", &["127.0.0.1", "localhost"]).unwrap().write(&dir, "broker").unwrap();

    // Credentials through the CLI, the password on standard input; none stored in clear.
    let users = dir.join("users.toml");
    let mut child = Command::new(broker_binary())
        .args(["scram-credential", "--file"])
        .arg(&users)
        .args(["--user", "alice"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(format!("{PASSWORD}\n").as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "scram-credential: {}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&users).unwrap();
    assert!(text.contains("[users.alice.SCRAM-SHA-256]") && text.contains("[users.alice.SCRAM-SHA-512]"), "{text}");
    assert!(!text.contains(PASSWORD), "the credentials file holds no password");

    let port = || format!("127.0.0.1:{}", free_port());
    let (plain, ssl, sasl_ssl, sasl_plain) = (port(), port(), port(), port());
    let extra_toml = format!(
        "[kafka]\nlisten = \"{plain}\"\n\
         [[kafka.listeners]]\nname = \"SECURE\"\nlisten = \"{ssl}\"\nsecurity_protocol = \"SSL\"\n\
         [[kafka.listeners]]\nname = \"EXTERNAL\"\nlisten = \"{sasl_ssl}\"\nsecurity_protocol = \"SASL_SSL\"\n\
         [[kafka.listeners]]\nname = \"INTERNAL_SASL\"\nlisten = \"{sasl_plain}\"\nsecurity_protocol = \"SASL_PLAINTEXT\"\n\
         [kafka.tls]\ncert = \"{}\"\nkey = \"{}\"\n\
         [kafka.sasl]\ncredentials = \"{}\"\n",
        tls.cert.display(),
        tls.key.display(),
        users.display()
    );
    let options = BrokerOptions { extra_toml, commit_interval_ms: 50, ..BrokerOptions::default() };
    let broker = BrokerProc::start(&c, "a", &TestStorage::Local(c.path("objects")), &options).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    for addr in [&plain, &ssl, &sasl_ssl, &sasl_plain] {
        while tokio::net::TcpStream::connect(addr).await.is_err() {
            assert!(std::time::Instant::now() < deadline, "no Kafka listener on {addr}: {}", broker.log_tail());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    // Before authentication on a SASL listener: ApiVersions is answered, Metadata closes the
    // connection.
    let addr = sasl_plain.clone();
    let closed = tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(&request(18, 0, 1, &[])).unwrap();
        let mut size = [0u8; 4];
        s.read_exact(&mut size).unwrap();
        let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
        s.read_exact(&mut body).unwrap();
        assert_eq!(&body[..4], &1i32.to_be_bytes(), "the ApiVersions answer");
        assert_eq!(&body[4..6], &0i16.to_be_bytes(), "ApiVersions without error");
        s.write_all(&request(3, 0, 2, &0i32.to_be_bytes())).unwrap();
        let mut buf = [0u8; 64];
        matches!(s.read(&mut buf), Ok(0) | Err(_))
    })
    .await
    .unwrap();
    assert!(closed, "Metadata before authentication closes the connection");

    let args = vec![ssl, sasl_ssl, sasl_plain, tls.ca.display().to_string(), "alice".into(), PASSWORD.into()];
    run_python_checks("kafka_security.py", args, "ALL SECURITY CHECKS PASSED").await;
}

/// The broker's own gRPC API (BrokerService) with `[tls]` (the coordinator listeners' settings):
/// a client with a certificate of the CA creates a topic and produces; one without a certificate,
/// or without TLS, is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_broker_api_takes_mutual_tls() {
    use diskless_proto::broker::broker_service_client::BrokerServiceClient;
    use diskless_proto::broker::{CreateTopicRequest, ProduceRequest};
    use diskless_tls::ClientTls;

    let c = Cluster::start(3, Options { metadata_partitions: 2, ..Default::default() }).await;
    let dir = c.path("api-certs");
    let ca = diskless_tls::certs::Ca::new("broker API CA").unwrap();
    ca.write(&dir).unwrap();
    let server = ca.issue("broker-api", &["127.0.0.1", "localhost"]).unwrap().write(&dir, "broker-api").unwrap();
    let client = ca.issue("producer-app", &[]).unwrap().write(&dir, "producer-app").unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let coordinators: Vec<String> = c.ids().iter().map(|id| format!("\"{}\"", c.addr(*id))).collect();
    let config = format!(
        "listen = \"{addr}\"\ncoordinators = [{}]\n[storage]\nkind = \"local\"\npath = \"{}\"\n\
         [tls]\ncert = \"{}\"\nkey = \"{}\"\nca = \"{}\"\n",
        coordinators.join(", "),
        c.path("objects").display(),
        server.cert.display(),
        server.key.display(),
        server.ca.display()
    );
    let path = c.path("broker-api.toml");
    std::fs::write(&path, config).unwrap();
    let log = std::fs::File::create(c.path("broker-api.log")).unwrap();
    let mut child = Command::new(broker_binary()).arg("--config").arg(&path).stderr(log).spawn().unwrap();
    struct Kill<'a>(&'a mut std::process::Child);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _kill = Kill(&mut child);
    let endpoint =
        || tonic::transport::Endpoint::from_shared(format!("http://{addr}")).unwrap().timeout(Duration::from_secs(10));
    let tls = ClientTls::new(&client).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut api = loop {
        let mut api = BrokerServiceClient::new(diskless_tls::client::channel(endpoint(), Some(tls.clone())));
        let r = api
            .create_topic(CreateTopicRequest {
                name: "secure".into(),
                partitions: 1,
                retention_ms: None,
                retention_bytes: None,
            })
            .await;
        match r {
            Ok(r) if r.get_ref().error_code == 0 => break api,
            other => {
                let log = std::fs::read_to_string(c.path("broker-api.log")).unwrap_or_default();
                assert!(std::time::Instant::now() < deadline, "no topic over TLS: {other:?}\n{log}");
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    };
    let r = produce_retrying(&mut api, "secure", 0, batch_of(&["over mTLS".into()])).await;
    assert_eq!(r.base_offset, 0);

    for (what, tls) in [("no certificate", Some(ClientTls::anonymous(&client.ca).unwrap())), ("no TLS", None)] {
        let mut other = BrokerServiceClient::new(diskless_tls::client::channel(endpoint(), tls));
        let r = other
            .produce(ProduceRequest { topic: "secure".into(), partition: 0, records: batch_of(&["x".into()]) })
            .await;
        assert!(r.is_err(), "{what}: refused, got {r:?}");
    }
}
