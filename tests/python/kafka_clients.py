#!/usr/bin/env python3
"""Real Kafka clients against diskless brokers: kcat, kafka-python and confluent-kafka each create a
diskless topic, produce keyed messages and consume them back with assigned partitions; every
message, in order per partition, contiguous offsets, exact bytes. Producing through one broker and
consuming through another; ListOffsets by timestamp and DeleteRecords through admin APIs.

Usage: kafka_clients.py BROKER_A BROKER_B   (host:port of two diskless brokers' Kafka listeners)
Exits non-zero with a message on the first failed check.
"""
import subprocess
import sys
import time

A, B = sys.argv[1], sys.argv[2]
PARTITIONS = 3
N = 120


def check(cond, what):
    if not cond:
        print("FAILED:", what, flush=True)
        sys.exit(1)
    print("ok:", what, flush=True)


def expected(tag):
    """Messages (key, value) per partition, in produce order."""
    per = {p: [] for p in range(PARTITIONS)}
    for i in range(N):
        per[i % PARTITIONS].append((f"key-{i}".encode(), f"{tag} message {i} \u00e9\x00\xff".encode("utf-8", "surrogateescape")))
    return per


def verify(tag, got):
    """got: {partition: [(offset, key, value)]}"""
    want = expected(tag)
    for p in range(PARTITIONS):
        msgs = got.get(p, [])
        check([o for o, _, _ in msgs] == list(range(len(want[p]))), f"{tag}: partition {p} offsets contiguous from 0 ({len(msgs)} messages)")
        check([(k, v) for _, k, v in msgs] == want[p], f"{tag}: partition {p} keys and values byte-exact, in produce order")


# ------------------------------------------------------------------ confluent-kafka (librdkafka)
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from confluent_kafka import TopicPartition as TP


def ck_create(broker, name):
    admin = AdminClient({"bootstrap.servers": broker})
    fs = admin.create_topics([NewTopic(name, num_partitions=PARTITIONS, replication_factor=1, config={"diskless.enable": "true"})])
    for f in fs.values():
        f.result(timeout=30)
    return admin


def ck_produce(broker, name, tag, idempotent):
    p = Producer({"bootstrap.servers": broker, "enable.idempotence": idempotent, "linger.ms": 20, "acks": "all"})
    errors = []
    for p_i, msgs in expected(tag).items():
        for k, v in msgs:
            p.produce(name, key=k, value=v, partition=p_i, on_delivery=lambda e, m: e and errors.append(e))
    left = p.flush(60)
    check(left == 0 and not errors, f"{tag}: confluent-kafka produced everything (idempotence={idempotent}) {errors[:3]}")


def ck_consume(broker, name):
    c = Consumer({"bootstrap.servers": broker, "group.id": "unused", "enable.auto.commit": False})
    c.assign([TopicPartition(name, p, 0) for p in range(PARTITIONS)])
    got = {p: [] for p in range(PARTITIONS)}
    deadline = time.time() + 30
    while sum(len(v) for v in got.values()) < N and time.time() < deadline:
        m = c.poll(0.5)
        if m is None or m.error():
            continue
        got[m.partition()].append((m.offset(), m.key(), m.value()))
    c.close()
    return got


ck_create(A, "ck-topic")
ck_produce(A, "ck-topic", "ck", idempotent=True)
verify("ck", ck_consume(A, "ck-topic"))

# A non-diskless topic is refused with a clear error.
admin_a = AdminClient({"bootstrap.servers": A})
try:
    admin_a.create_topics([NewTopic("classic", num_partitions=1, replication_factor=1)])["classic"].result(timeout=30)
    check(False, "a classic topic is refused")
except Exception as e:
    check("diskless.enable" in str(e), f"a classic topic is refused clearly ({e})")

# ------------------------------------------------------------------ two brokers: produce via A, consume via B
ck_create(A, "two-brokers")
ck_produce(A, "two-brokers", "ab", idempotent=False)
verify("ab", ck_consume(B, "two-brokers"))

# ------------------------------------------------------------------ kafka-python
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTP
from kafka.admin import KafkaAdminClient, NewTopic as KNewTopic

KafkaAdminClient(bootstrap_servers=A).create_topics(
    [KNewTopic("kp-topic", num_partitions=PARTITIONS, replication_factor=1, topic_configs={"diskless.enable": "true"})]
)
kp = KafkaProducer(bootstrap_servers=A, linger_ms=20, acks="all")
futures = [kp.send("kp-topic", key=k, value=v, partition=p) for p, msgs in expected("kp").items() for k, v in msgs]
kp.flush()
check(all(f.get(timeout=30) is not None for f in futures), "kp: kafka-python produced everything")
kc = KafkaConsumer(bootstrap_servers=B, enable_auto_commit=False, auto_offset_reset="earliest", consumer_timeout_ms=8000)
kc.assign([KTP("kp-topic", p) for p in range(PARTITIONS)])
kc.seek_to_beginning()
got = {p: [] for p in range(PARTITIONS)}
for m in kc:
    got[m.partition].append((m.offset, m.key, m.value))
    if sum(len(v) for v in got.values()) >= N:
        break
kc.close()
verify("kp", got)

# ------------------------------------------------------------------ kcat
ck_create(A, "kcat-topic")
for p, msgs in expected("kcat").items():
    # kcat reads one message per line (key:value); the values here avoid newlines and ':' in keys.
    lines = b"".join(k + b"\t" + v.replace(b"\n", b" ") + b"\n" for k, v in msgs)
    r = subprocess.run(["kcat", "-b", A, "-P", "-t", "kcat-topic", "-p", str(p), "-K", "\t", "-X", "linger.ms=20"], input=lines, capture_output=True, timeout=60)
    check(r.returncode == 0, f"kcat: produced partition {p} ({r.stderr.decode()[-200:]})")
got = {}
for p in range(PARTITIONS):
    r = subprocess.run(["kcat", "-b", B, "-C", "-t", "kcat-topic", "-p", str(p), "-o", "beginning", "-e", "-f", "%o\t%k\t%s\n"], capture_output=True, timeout=60)
    check(r.returncode == 0, f"kcat: consumed partition {p}")
    got[p] = []
    for line in r.stdout.split(b"\n"):
        if line:
            o, k, v = line.split(b"\t", 2)
            got[p].append((int(o), k, v))
verify("kcat", got)

# ------------------------------------------------------------------ ListOffsets by timestamp, DeleteRecords (admin APIs)
ck_create(A, "admin-topic")
pr = Producer({"bootstrap.servers": A, "linger.ms": 0})
base = 1_700_000_000_000
for i in range(10):
    pr.produce("admin-topic", value=f"t{i}".encode(), partition=0, timestamp=base + i * 1000)
    pr.flush(30)
admin = AdminClient({"bootstrap.servers": A})
res = admin.list_offsets({TP("admin-topic", 0): OffsetSpec.for_timestamp(base + 4500)})
off = list(res.values())[0].result(timeout=30).offset
check(off == 5, f"ListOffsets by timestamp finds the first message at or after it (offset {off})")
res = admin.list_offsets({TP("admin-topic", 0): OffsetSpec.max_timestamp()})
info = list(res.values())[0].result(timeout=30)
check(info.offset == 9 and info.timestamp == base + 9000, f"ListOffsets max timestamp ({info.offset}, {info.timestamp})")
res = admin.list_offsets({TP("admin-topic", 0): OffsetSpec.latest()})
check(list(res.values())[0].result(timeout=30).offset == 10, "ListOffsets latest is the high watermark")
dr = admin.delete_records([TP("admin-topic", 0, 6)])
low = list(dr.values())[0].result(timeout=30)
check(low.low_watermark == 6, f"DeleteRecords moves the low watermark ({low.low_watermark})")
res = admin.list_offsets({TP("admin-topic", 0): OffsetSpec.earliest()})
check(list(res.values())[0].result(timeout=30).offset == 6, "ListOffsets earliest follows DeleteRecords")
c = Consumer({"bootstrap.servers": B, "group.id": "unused", "enable.auto.commit": False})
c.assign([TopicPartition("admin-topic", 0, 6)])
vals = []
deadline = time.time() + 20
while len(vals) < 4 and time.time() < deadline:
    m = c.poll(0.5)
    if m is not None and not m.error():
        vals.append(m.value())
c.close()
check(vals == [b"t6", b"t7", b"t8", b"t9"], f"after DeleteRecords the partition reads from the new start ({vals})")

print("ALL CLIENT CHECKS PASSED", flush=True)
