#!/usr/bin/env python3
"""Kafka clients over the broker's secured listeners: confluent-kafka (librdkafka) and kafka-python
each produce and consume over SSL, over SASL_SSL with SCRAM-SHA-256, SCRAM-SHA-512 and PLAIN, and
kafka-python over SASL_PLAINTEXT with PLAIN; a wrong password and an unknown user are refused with
SASL_AUTHENTICATION_FAILED (the broker's message, error code 58), and nothing is readable then;
without an authorizer the ACL APIs answer SECURITY_DISABLED.

Usage: kafka_security.py SSL_ADDR SASL_SSL_ADDR SASL_PLAINTEXT_ADDR CA_PEM USER PASSWORD
Exits non-zero with a message on the first failed check.
"""
import logging
import sys
import time

SSL, SASL_SSL, SASL_PLAIN, CA, USER, PASSWORD = sys.argv[1:7]
N = 30


def check(cond, what):
    if not cond:
        print("FAILED:", what, flush=True)
        sys.exit(1)
    print("ok:", what, flush=True)


def values(tag):
    return [f"{tag} message {i}".encode() for i in range(N)]


# ------------------------------------------------------------------ confluent-kafka (librdkafka)
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def ck_conf(broker, protocol, mechanism=None, user=USER, password=PASSWORD):
    c = {"bootstrap.servers": broker, "security.protocol": protocol}
    if "SSL" in protocol:
        c["ssl.ca.location"] = CA
    if mechanism:
        c.update({"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password})
    return c


def ck_round_trip(tag, conf):
    admin = AdminClient(conf)
    for f in admin.create_topics([NewTopic(tag, num_partitions=1, replication_factor=1, config={"diskless.enable": "true"})]).values():
        f.result(timeout=30)
    p = Producer({**conf, "linger.ms": 5, "acks": "all"})
    errors = []
    for v in values(tag):
        p.produce(tag, value=v, partition=0, on_delivery=lambda e, m: e and errors.append(e))
    left = p.flush(30)
    check(left == 0 and not errors, f"confluent-kafka {tag}: {N} messages delivered ({errors[:1]})")
    c = Consumer({**conf, "group.id": f"g-{tag}", "enable.auto.commit": False})
    c.assign([TopicPartition(tag, 0, 0)])
    got, deadline = [], time.time() + 30
    while len(got) < N and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append((m.offset(), m.value()))
    c.close()
    check(got == list(enumerate(values(tag))), f"confluent-kafka {tag}: consumed back, offsets 0..{N}, bytes exact")


def ck_refused(tag, conf):
    errors = []
    admin = AdminClient({**conf, "error_cb": lambda e: errors.append(e)})
    try:
        admin.list_topics(timeout=8)
        listed = True
    except KafkaException as e:
        listed = False
        errors.append(e.args[0])
    deadline = time.time() + 10
    while time.time() < deadline and not any(e.code() == KafkaError._AUTHENTICATION for e in errors):
        admin.poll(0.5)  # serves error_cb
    text = " | ".join(f"{e.code()}:{e.str()}" for e in errors)
    auth = [e for e in errors if e.code() in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED)]
    check(not listed, f"confluent-kafka {tag}: no metadata without authentication")
    check(
        any("invalid credentials" in e.str() for e in auth),
        f"confluent-kafka {tag}: refused with SASL authentication failed and the broker's reason ({text[:300]})",
    )


ck_round_trip("ck-ssl", ck_conf(SSL, "SSL"))
ck_round_trip("ck-scram256", ck_conf(SASL_SSL, "SASL_SSL", "SCRAM-SHA-256"))
ck_round_trip("ck-scram512", ck_conf(SASL_SSL, "SASL_SSL", "SCRAM-SHA-512"))
ck_round_trip("ck-plain", ck_conf(SASL_SSL, "SASL_SSL", "PLAIN"))
ck_refused("wrong SCRAM-SHA-256 password", ck_conf(SASL_SSL, "SASL_SSL", "SCRAM-SHA-256", password="not-" + PASSWORD))
ck_refused("wrong PLAIN password", ck_conf(SASL_SSL, "SASL_SSL", "PLAIN", password="not-" + PASSWORD))
ck_refused("unknown user", ck_conf(SASL_SSL, "SASL_SSL", "SCRAM-SHA-256", user="mallory"))

# ------------------------------------------------------------------ kcat (its own librdkafka, 2.0 on Debian 12: it
# sends its nonce twice in SCRAM's client-final message, which Kafka accepts)
import subprocess


def kcat(*args, stdin=None):
    base = ["kcat", "-b", SASL_SSL, "-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanisms=SCRAM-SHA-256",
            "-X", f"sasl.username={USER}", "-X", f"sasl.password={PASSWORD}", "-X", f"ssl.ca.location={CA}"]
    return subprocess.run(base + list(args), input=stdin, capture_output=True, timeout=60)


kcat_admin = AdminClient(ck_conf(SASL_SSL, "SASL_SSL", "SCRAM-SHA-256"))
kcat_topic = NewTopic("kcat-scram", num_partitions=1, replication_factor=1, config={"diskless.enable": "true"})
kcat_admin.create_topics([kcat_topic])["kcat-scram"].result(timeout=30)
r = kcat("-P", "-t", "kcat-scram", "-p", "0", stdin=b"".join(v + b"\n" for v in values("kcat")))
check(r.returncode == 0, f"kcat SCRAM-SHA-256 produce ({r.stderr[-300:]!r})")
r = kcat("-C", "-t", "kcat-scram", "-p", "0", "-o", "beginning", "-e", "-f", "%o %s\n")
want = "".join(f"{o} {v.decode()}\n" for o, v in enumerate(values("kcat")))
check(r.returncode == 0 and r.stdout.decode() == want, f"kcat SCRAM-SHA-256 consume ({r.stdout[-200:]!r} {r.stderr[-300:]!r})")

# ------------------------------------------------------------------ kafka-python
import kafka.errors as Errors
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTP
from kafka.admin import KafkaAdminClient, NewTopic as KNewTopic


def kp_conf(broker, protocol, mechanism=None, user=USER, password=PASSWORD):
    c = {"bootstrap_servers": broker, "security_protocol": protocol}
    if "SSL" in protocol:
        c["ssl_cafile"] = CA
    if mechanism:
        c.update({"sasl_mechanism": mechanism, "sasl_plain_username": user, "sasl_plain_password": password})
    return c


def kp_round_trip(tag, conf):
    admin = KafkaAdminClient(**conf)
    admin.create_topics([KNewTopic(tag, num_partitions=1, replication_factor=1, topic_configs={"diskless.enable": "true"})])
    admin.close()
    p = KafkaProducer(linger_ms=5, acks="all", **conf)
    futures = [p.send(tag, value=v, partition=0) for v in values(tag)]
    offsets = [f.get(timeout=30).offset for f in futures]
    p.close()
    check(offsets == list(range(N)), f"kafka-python {tag}: {N} messages acknowledged at offsets 0..{N}")
    c = KafkaConsumer(enable_auto_commit=False, consumer_timeout_ms=8000, **conf)
    c.assign([KTP(tag, 0)])
    c.seek(KTP(tag, 0), 0)
    got = []
    for m in c:
        got.append((m.offset, m.value))
        if len(got) == N:
            break
    c.close()
    check(got == list(enumerate(values(tag))), f"kafka-python {tag}: consumed back, offsets 0..{N}, bytes exact")


class Collect(logging.Handler):
    """kafka-python reports a failed bootstrap connection (with its exception) in its log only."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def kp_refused(tag, conf):
    seen = Collect()
    logging.getLogger("kafka").addHandler(seen)
    try:
        KafkaAdminClient(request_timeout_ms=8000, **conf).list_topics()
        check(False, f"kafka-python {tag}: refused")
    except (Errors.SaslAuthenticationFailedError, Errors.KafkaTimeoutError) as e:
        said = [str(e)] + seen.messages
        failed = [m for m in said if "SaslAuthenticationFailedError" in m and "invalid credentials" in m]
        check(failed, f"kafka-python {tag}: SaslAuthenticationFailedError with the broker's reason ({(failed or said)[0][:300]})")
    finally:
        logging.getLogger("kafka").removeHandler(seen)


kp_round_trip("kp-ssl", kp_conf(SSL, "SSL"))
kp_round_trip("kp-scram256", kp_conf(SASL_SSL, "SASL_SSL", "SCRAM-SHA-256"))
kp_round_trip("kp-scram512", kp_conf(SASL_SSL, "SASL_SSL", "SCRAM-SHA-512"))
kp_round_trip("kp-plain", kp_conf(SASL_PLAIN, "SASL_PLAINTEXT", "PLAIN"))
kp_refused("wrong SCRAM-SHA-256 password", kp_conf(SASL_SSL, "SASL_SSL", "SCRAM-SHA-256", password="not-" + PASSWORD))

# Without [kafka.authorizer] the ACL APIs answer SECURITY_DISABLED, as a Kafka broker without an
# authorizer does (kafka-python: librdkafka drops DescribeAcls' error code).
from kafka.admin import ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType, ResourcePatternFilter
from kafka.admin import ResourceType as KResourceType

any_acl = ACLFilter(principal=None, host="*", operation=ACLOperation.ANY, permission_type=ACLPermissionType.ANY,
                    resource_pattern=ResourcePatternFilter(KResourceType.ANY, None, ACLResourcePatternType.ANY))
try:
    KafkaAdminClient(request_timeout_ms=8000, **kp_conf(SASL_SSL, "SASL_SSL", "SCRAM-SHA-256")).describe_acls(any_acl)
    check(False, "DescribeAcls without an authorizer is refused")
except Errors.SecurityDisabledError as e:
    check(True, f"DescribeAcls without an authorizer: SECURITY_DISABLED ({e})")

print("ALL SECURITY CHECKS PASSED", flush=True)
