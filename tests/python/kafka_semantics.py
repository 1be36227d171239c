#!/usr/bin/env python3
"""Kafka's answers, checked with three client implementations (confluent-kafka / librdkafka,
kafka-python, aiokafka) against a diskless broker:

- ListOffsets by timestamp names the earliest *record* whose timestamp is >= t (not the first
  offset of the batch holding it), in batches of many records with timestamps out of order,
  compressed and not, and never below the log start after DeleteRecords cut a batch in two;
  MAX_TIMESTAMP names the first record holding the largest timestamp.
- A KIP-848 (group.protocol=consumer) consumer reads at once (consumer_protocol.py checks more),
  and a transactional producer's init_transactions succeeds at once with each client
  (transactions: transactions.py).

- Topic configs: DescribeConfigs (values, sources, synonyms, read-only), IncrementalAlterConfigs
  (SET, DELETE, validate_only, Kafka's refusals), AlterConfigs (kafka-python: the whole set), the
  broker's own configs.
- CreatePartitions over the Kafka protocol (confluent-kafka and kafka-python): validate_only
  changes nothing, Kafka's refusals (the same count, fewer, a wrong number of assignments), and
  new partitions produced to through one broker and read through the other at once.

Usage: kafka_semantics.py BROKER BROKER_B   (host:port of two diskless brokers' Kafka listeners)
Exits non-zero with a message on the first failed check.
"""
import asyncio
import sys
import time

BROKER, BROKER_B = sys.argv[1], sys.argv[2]


def check(cond, what):
    if not cond:
        print("FAILED:", what, flush=True)
        sys.exit(1)
    print("ok:", what, flush=True)


from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as TP
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

admin = AdminClient({"bootstrap.servers": BROKER})


def create(name, partitions):
    fs = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1, config={"diskless.enable": "true"})])
    for f in fs.values():
        f.result(timeout=30)


# ------------------------------------------------------------------ ListOffsets by timestamp
BASE = 1_700_000_000_000
# Per partition, one batch of 40 records (librdkafka sends what one flush holds as one batch),
# timestamps out of order: record i has BASE + STAMP(i).
N = 40
def stamp(i):
    return ((i * 37) % N) * 100 + (i // 10) * 7


CODECS = {0: "none", 1: "lz4", 2: "zstd", 3: "gzip"}
create("by-time", len(CODECS))
for p, codec in CODECS.items():
    pr = Producer({"bootstrap.servers": BROKER, "linger.ms": 1000, "batch.num.messages": 1000, "compression.type": codec})
    for i in range(N):
        pr.produce("by-time", value=f"r{i}".encode(), partition=p, timestamp=BASE + stamp(i))
    check(pr.flush(30) == 0, f"produced one {codec} batch of {N} records")


def want_at_or_after(t, start=0):
    hits = [i for i in range(start, N) if BASE + stamp(i) >= t]
    return (hits[0], BASE + stamp(hits[0])) if hits else (-1, -1)


def ask(p, spec):
    r = list(admin.list_offsets({TP("by-time", p): spec}).values())[0].result(timeout=30)
    return r.offset, r.timestamp


targets = [BASE - 1, BASE, BASE + 1] + [BASE + stamp(i) + d for i in range(0, N, 3) for d in (-1, 0, 1)] + [BASE + 10_000]
for p, codec in CODECS.items():
    wrong = [(t - BASE, ask(p, OffsetSpec.for_timestamp(t)), want_at_or_after(t)) for t in targets]
    wrong = [w for w in wrong if w[1] != w[2]]
    check(not wrong, f"confluent-kafka: {len(targets)} lookups by timestamp in a {codec} batch name the earliest record >= t ({wrong[:3]})")
    top = max(range(N), key=lambda i: (stamp(i), -i))
    got = ask(p, OffsetSpec.max_timestamp())
    check(got == (top, BASE + stamp(top)), f"confluent-kafka: MAX_TIMESTAMP in a {codec} batch is the record holding it ({got}, want {(top, BASE + stamp(top))})")

# What the record lookup costs: a lookup by timestamp (coordinator, then one batch read back) beside
# one of the latest offset (coordinator only), in the same run.
def per_lookup_ms(spec, n=40):
    t0 = time.time()
    for _ in range(n):
        ask(1, spec)
    return (time.time() - t0) * 1000 / n


by_time, latest = per_lookup_ms(OffsetSpec.for_timestamp(BASE + 1234)), per_lookup_ms(OffsetSpec.latest())
print(f"FIGURE ListOffsets through confluent-kafka admin: by timestamp {by_time:.2f} ms, latest {latest:.2f} ms per lookup", flush=True)

# kafka-python and aiokafka: offsets_for_times, the same answers.
from kafka import KafkaConsumer
from kafka import TopicPartition as KTP

kc = KafkaConsumer(bootstrap_servers=BROKER)
for p, codec in list(CODECS.items())[:2]:
    wrong = []
    for t in targets:
        r = kc.offsets_for_times({KTP("by-time", p): t})[KTP("by-time", p)]
        got = (r.offset, r.timestamp) if r is not None else (-1, -1)
        if got != want_at_or_after(t):
            wrong.append((t - BASE, got, want_at_or_after(t)))
    check(not wrong, f"kafka-python: offsets_for_times in a {codec} batch ({wrong[:3]})")
kc.close()


async def aio_lookups():
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as ATP

    c = AIOKafkaConsumer(bootstrap_servers=BROKER)
    await c.start()
    try:
        wrong = []
        for t in targets:
            r = (await c.offsets_for_times({ATP("by-time", 1): t}))[ATP("by-time", 1)]
            got = (r.offset, r.timestamp) if r is not None else (-1, -1)
            if got != want_at_or_after(t):
                wrong.append((t - BASE, got, want_at_or_after(t)))
        return wrong
    finally:
        await c.stop()


wrong = asyncio.run(aio_lookups())
check(not wrong, f"aiokafka: offsets_for_times in an lz4 batch ({wrong[:3]})")

# DeleteRecords in the middle of the batch: no lookup answers below the new log start.
CUT = 17
low = list(admin.delete_records([TP("by-time", 0, CUT)]).values())[0].result(timeout=30).low_watermark
check(low == CUT, f"DeleteRecords cut the batch at {CUT}")
wrong = [(t - BASE, ask(0, OffsetSpec.for_timestamp(t)), want_at_or_after(t, CUT)) for t in targets]
wrong = [w for w in wrong if w[1] != w[2]]
check(not wrong, f"lookups by timestamp after DeleteRecords name records at or after the log start ({wrong[:3]})")

# ------------------------------------------------------------------ CreatePartitions
from confluent_kafka.admin import NewPartitions


def partitions_of(a, name):
    return len(a.list_topics(name, timeout=30).topics[name].partitions)


def create_partitions(a, count, validate_only=False):
    f = a.create_partitions([NewPartitions("grow", count)], validate_only=validate_only)["grow"]
    try:
        f.result(timeout=30)
        return None
    except KafkaException as e:
        return e.args[0].name()


create("grow", 2)
admin_b = AdminClient({"bootstrap.servers": BROKER_B})
check(create_partitions(admin, 5, validate_only=True) is None and partitions_of(admin, "grow") == 2, "CreatePartitions validate_only changes nothing")
check(create_partitions(admin, 2) == "INVALID_PARTITIONS", "CreatePartitions to the same count is INVALID_PARTITIONS")
check(create_partitions(admin, 1) == "INVALID_PARTITIONS", "CreatePartitions to fewer is INVALID_PARTITIONS")
# Warm broker B's catalog with the old count, then grow the topic through A.
check(partitions_of(admin_b, "grow") == 2, "broker B sees 2 partitions")
grown = create_partitions(admin, 5)
check(grown is None, f"CreatePartitions 2 -> 5 ({grown})")
check(partitions_of(admin_b, "grow") == 5 and partitions_of(admin, "grow") == 5, "both brokers list 5 partitions at once")
pr = Producer({"bootstrap.servers": BROKER_B, "linger.ms": 0})
delivered = []
pr.produce("grow", value=b"to-the-new-partition", partition=4, on_delivery=lambda e, m: delivered.append((e, m.offset() if m else None)))
pr.flush(30)
check(delivered and delivered[0][0] is None and delivered[0][1] == 0, f"a record produced through broker B to new partition 4 ({delivered})")
c = Consumer({"bootstrap.servers": BROKER, "group.id": "unused", "enable.auto.commit": False})
c.assign([TP("grow", 4, 0)])
got, deadline = None, time.time() + 20
while got is None and time.time() < deadline:
    m = c.poll(0.5)
    if m is not None and not m.error():
        got = m.value()
c.close()
check(got == b"to-the-new-partition", f"... and read through broker A ({got})")

# ------------------------------------------------------------------ committed offsets' metadata
# Kafka's offset.metadata.max.bytes (4096): longer metadata is OFFSET_METADATA_TOO_LARGE, the rest
# of the commit taken. kafka-python sends it (librdkafka refuses it before sending).
from kafka import TopicPartition as KTP
from kafka.structs import OffsetAndMetadata

kc = KafkaConsumer(bootstrap_servers=BROKER, group_id="metadata-limit", enable_auto_commit=False)
try:
    kc.commit({KTP("grow", 0): OffsetAndMetadata(1, "m" * 4097, -1), KTP("grow", 1): OffsetAndMetadata(1, "m" * 4096, -1)})
    refused = None
except Exception as e:
    refused = type(e).__name__
kept = (kc.committed(KTP("grow", 0)), kc.committed(KTP("grow", 1)))
kc.close()
check(refused == "OffsetMetadataTooLargeError", f"a commit with 4097 bytes of metadata is OFFSET_METADATA_TOO_LARGE ({refused})")
check(kept == (None, 1), f"... and the partition with 4096 bytes is committed ({kept})")
from kafka.admin import KafkaAdminClient
from kafka.admin import NewPartitions as KNewPartitions

ka = KafkaAdminClient(bootstrap_servers=BROKER_B)
# confluent-kafka checks the number of assignments itself; kafka-python sends what it is given.
try:
    ka.create_partitions({"grow": KNewPartitions(total_count=8, new_assignments=[[1]])})
    refused = None
except Exception as e:
    refused = type(e).__name__
check(refused == "InvalidReplicationAssignmentError", f"CreatePartitions with too few assignments is INVALID_REPLICA_ASSIGNMENT ({refused})")
ka.create_partitions({"grow": KNewPartitions(total_count=7)})
ka.close()
check(partitions_of(admin, "grow") == 7, "kafka-python's create_partitions 5 -> 7")

# ------------------------------------------------------------------ topic configs
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, ResourceType

TOPIC = ConfigResource(ResourceType.TOPIC, "configured")
fs = admin.create_topics([NewTopic("configured", num_partitions=1, replication_factor=1,
                                   config={"diskless.enable": "true", "retention.ms": "3600000"})])
list(fs.values())[0].result(timeout=30)


def source(e):
    return int(getattr(e.source, "value", e.source))


def described(a=admin):
    return list(a.describe_configs([ConfigResource(ResourceType.TOPIC, "configured")]).values())[0].result(timeout=30)


def alter(entries, validate_only=False):
    r = ConfigResource(ResourceType.TOPIC, "configured", incremental_configs=[
        ConfigEntry(n, v, incremental_operation=op) for n, v, op in entries])
    try:
        list(admin.incremental_alter_configs([r], validate_only=validate_only).values())[0].result(timeout=30)
        return None
    except KafkaException as e:
        return e.args[0].name()


d = described()
check(d["retention.ms"].value == "3600000" and source(d["retention.ms"]) == ConfigSource.DYNAMIC_TOPIC_CONFIG.value,
      f"DescribeConfigs shows the retention.ms CreateTopics set, as a topic config ({d['retention.ms']})")
check(d["retention.bytes"].value == "-1" and source(d["retention.bytes"]) == ConfigSource.DEFAULT_CONFIG.value, "retention.bytes is Kafka's default")
check(d["cleanup.policy"].value == "delete" and d["diskless.enable"].value == "true" and d["diskless.enable"].is_read_only,
      "cleanup.policy delete; diskless.enable true, read-only")
check(d["max.message.bytes"].value == "1048588" and not d["max.message.bytes"].is_read_only
      and source(d["max.message.bytes"]) == ConfigSource.DEFAULT_CONFIG.value, "max.message.bytes: the broker's default, alterable")
syn = list(described()["retention.ms"].synonyms)
check(syn == ["retention.ms", "log.retention.ms"], f"synonyms of retention.ms ({syn})")
SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE
check(alter([("retention.bytes", "1048576", SET)], validate_only=True) is None and described()["retention.bytes"].value == "-1",
      "IncrementalAlterConfigs validate_only changes nothing")
check(alter([("retention.bytes", "1048576", SET)]) is None and described()["retention.bytes"].value == "1048576",
      "IncrementalAlterConfigs SET retention.bytes")
for entries, what in [([("cleanup.policy", "compact", SET)], "cleanup.policy=compact"),
                      ([("segment.bytes", "1000", SET)], "a Kafka config diskless topics do not honour"),
                      ([("retention.ms", "-5", SET)], "retention.ms below -1"),
                      ([("retention.ms", "soon", SET)], "retention.ms not a number"),
                      ([("diskless.enable", "false", SET)], "diskless.enable"),
                      ([("max.message.bytes", "-1", SET)], "max.message.bytes below 0"),
                      ([("max.message.bytes", str(2**31 - 1), SET)], "max.message.bytes above what a WAL segment holds"),
                      ([("message.timestamp.type", "logappendtime", SET)], "a timestamp type Kafka does not name"),
                      ([("message.timestamp.before.max.ms", "-1", SET)], "message.timestamp.before.max.ms below 0"),
                      ([("no.such.config", "1", SET)], "an unknown config")]:
    check(alter(entries) == "INVALID_CONFIG", f"IncrementalAlterConfigs refuses {what} with INVALID_CONFIG")
check(described()["retention.bytes"].value == "1048576", "a refused alteration changed nothing")


def create_error(config):
    """The error code name of a CreateTopics with `config` (None: created)."""
    fs = admin.create_topics([NewTopic("refused-" + "-".join(config).replace(".", "-"), num_partitions=1,
                                       replication_factor=1, config={"diskless.enable": "true", **config})])
    try:
        list(fs.values())[0].result(timeout=30)
        return None
    except KafkaException as e:
        return e.args[0].name()


# CreateTopics refuses what AlterConfigs refuses, by name: a setting asked for is never dropped.
for config, what in [({"segment.bytes": "1000"}, "a Kafka config diskless topics do not honour"),
                     ({"min.insync.replicas": "2"}, "min.insync.replicas"),
                     ({"no.such.config": "1"}, "an unknown config"),
                     ({"cleanup.policy": "compact"}, "cleanup.policy=compact")]:
    got = create_error(config)
    check(got == "INVALID_CONFIG", f"CreateTopics refuses {what} with INVALID_CONFIG ({got})")
check(create_error({"cleanup.policy": "delete"}) is None, "CreateTopics takes cleanup.policy=delete")
check(alter([("retention.ms", None, DELETE)]) is None and described()["retention.ms"].value == "604800000"
      and source(described()["retention.ms"]) == ConfigSource.DEFAULT_CONFIG.value, "DELETE retention.ms: back to the default")
check(described(admin_b)["retention.bytes"].value == "1048576", "the other broker describes the same configs")

from kafka.admin import ConfigResource as KConfigResource
from kafka.admin import ConfigResourceType as KType

ka = KafkaAdminClient(bootstrap_servers=BROKER)
resp = ka.alter_configs([KConfigResource(KType.TOPIC, "configured", configs={"retention.ms": "7200000"})], incremental=False)
d = described()
check(d["retention.ms"].value == "7200000" and d["retention.bytes"].value == "1048576",
      f"kafka-python AlterConfigs (the legacy whole-set form: the client sends the other dynamic configs back) "
      f"({d['retention.ms'].value}, {d['retention.bytes'].value}; {resp})")
r = ka.describe_configs([KConfigResource(KType.TOPIC, "configured")])
check("7200000" in repr(r), "kafka-python describe_configs sees retention.ms")
ka.close()
md = admin.list_topics(timeout=30)
for b in md.brokers.values():
    bc = list(admin.describe_configs([ConfigResource(ResourceType.BROKER, str(b.id))]).values())[0].result(timeout=30)
    check(bc["broker.id"].value == str(b.id) and bc["message.max.bytes"].value == "1048588", f"broker {b.id} describes itself")

# ------------------------------------------------------------------ settings the brokers enforce
# max.message.bytes and the timestamp settings are kept by the coordinator cluster and enforced by
# every broker: the topics have PARTS partitions, led by both brokers.
from confluent_kafka import KafkaError, TIMESTAMP_LOG_APPEND_TIME


PARTS = 6


def create_with(name, config):
    fs = admin.create_topics([NewTopic(name, num_partitions=PARTS, replication_factor=1, config={"diskless.enable": "true", **config})])
    list(fs.values())[0].result(timeout=30)


def produce_errors(topic, size, timestamp=None):
    """The delivery error codes (None: delivered) of one record of `size` bytes to each partition."""
    out = []
    pr = Producer({"bootstrap.servers": BROKER, "linger.ms": 0, "retries": 0, "message.timeout.ms": 20000})
    for p in range(PARTS):
        kw = {"timestamp": timestamp} if timestamp is not None else {}
        pr.produce(topic, value=b"x" * size, partition=p, on_delivery=lambda e, m: out.append(e and e.code()), **kw)
    pr.flush(30)
    return sorted(out, key=str)


def leaders(topic):
    return {p.leader for p in admin.list_topics(topic, timeout=30).topics[topic].partitions.values()}


create_with("limited", {"max.message.bytes": "2000"})
check(len(leaders("limited")) == 2, f"the partitions of 'limited' are led by two brokers ({leaders('limited')})")
d = list(admin.describe_configs([ConfigResource(ResourceType.TOPIC, "limited")]).values())[0].result(timeout=30)
check(d["max.message.bytes"].value == "2000" and source(d["max.message.bytes"]) == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
      and list(d["max.message.bytes"].synonyms) == ["max.message.bytes", "message.max.bytes"],
      f"CreateTopics keeps max.message.bytes as a topic config, message.max.bytes its synonym ({d['max.message.bytes']})")
errs = produce_errors("limited", 5000)
check(errs == [KafkaError.MSG_SIZE_TOO_LARGE] * PARTS, f"both brokers refuse a 5000-byte batch with MESSAGE_TOO_LARGE ({errs})")
check(produce_errors("limited", 500) == [None] * PARTS, "a 500-byte record is stored")
r = ConfigResource(ResourceType.TOPIC, "limited", incremental_configs=[
    ConfigEntry("max.message.bytes", None, incremental_operation=DELETE)])
list(admin.incremental_alter_configs([r]).values())[0].result(timeout=30)
# Each broker reads the catalog again within 5 s (CATALOG_MAX_AGE).
start = time.monotonic()
while (errs := produce_errors("limited", 5000)) != [None] * PARTS and time.monotonic() - start < 20:
    time.sleep(0.5)
took = time.monotonic() - start
print(f"FIGURE max.message.bytes deleted: both brokers take the larger batch {took:.1f} s after the change", flush=True)
check(errs == [None] * PARTS, f"after DELETE max.message.bytes both brokers take 5000 bytes again, "
      f"{time.monotonic() - start:.1f} s after the change ({errs})")

create_with("stamped", {"message.timestamp.type": "LogAppendTime"})
before = int(time.time() * 1000)
check(produce_errors("stamped", 10, timestamp=1000) == [None] * PARTS, "a LogAppendTime topic takes a record with an old CreateTime")
c = Consumer({"bootstrap.servers": BROKER, "group.id": "stamped-reader", "enable.auto.commit": False})
c.assign([TP("stamped", p, 0) for p in range(PARTS)])
got = []
deadline = time.monotonic() + 30
while len(got) < PARTS and time.monotonic() < deadline:
    m = c.poll(1.0)
    if m is not None and m.error() is None:
        got.append(m.timestamp())
c.close()
check(len(got) == PARTS and all(kind == TIMESTAMP_LOG_APPEND_TIME and ts >= before for kind, ts in got),
      f"records of a LogAppendTime topic carry the brokers' append time, not the producer's ({got})")

create_with("bounded", {"message.timestamp.before.max.ms": "60000", "message.timestamp.after.max.ms": "60000"})
now = int(time.time() * 1000)
for ts, what in [(now - 3_600_000, "an hour old"), (now + 3_600_000, "an hour ahead")]:
    errs = produce_errors("bounded", 10, timestamp=ts)
    check(errs == [KafkaError.INVALID_TIMESTAMP] * PARTS, f"both brokers refuse a CreateTime {what} with INVALID_TIMESTAMP ({errs})")
check(produce_errors("bounded", 10, timestamp=now) == [None] * PARTS, "a CreateTime of now is stored")

ka = KafkaAdminClient(bootstrap_servers=BROKER_B)
r = ka.describe_configs([KConfigResource(KType.TOPIC, "bounded")])
check("60000" in repr(r) and "message.timestamp.before.max.ms" in repr(r),
      "kafka-python describe_configs through the other broker sees the timestamp bounds")
ka.close()

# ------------------------------------------------------------------ fail fast for what is not built
# A client must report the refusal at once, not retry until its own timeout.
FAST = 10.0


def ck_transactions():
    p = Producer({"bootstrap.servers": BROKER, "transactional.id": "tx-confluent"})
    try:
        p.init_transactions(60)
    except KafkaException as e:
        return e.args[0].name()
    return None


def ck_kip848():
    errors = []
    c = Consumer({"bootstrap.servers": BROKER, "group.id": "kip848", "group.protocol": "consumer",
                  "auto.offset.reset": "earliest", "error_cb": lambda e: errors.append(f"{e.name()}: {e.str()}")})
    c.subscribe(["by-time"])
    deadline = time.time() + 60
    try:
        while time.time() < deadline and not errors:
            m = c.poll(0.2)
            if m is not None and m.error():
                errors.append(f"{m.error().name()}: {m.error().str()}")
            elif m is not None:
                return None
    except KafkaException as e:
        errors.append(e.args[0].name())
    finally:
        c.close()
    return errors[0] if errors else "read nothing in 60 s"


def kp_transactions():
    from kafka import KafkaProducer

    try:
        p = KafkaProducer(bootstrap_servers=BROKER, transactional_id="tx-kafka-python", max_block_ms=60000)
        p.init_transactions()
    except Exception as e:  # kafka-python raises its KafkaError subclasses
        return type(e).__name__
    return None


def aio_transactions():
    from aiokafka import AIOKafkaProducer

    async def go():
        p = AIOKafkaProducer(bootstrap_servers=BROKER, transactional_id="tx-aiokafka", request_timeout_ms=60000)
        try:
            await asyncio.wait_for(p.start(), 60)
        except Exception as e:
            return type(e).__name__
        finally:
            await p.stop()
        return None

    return asyncio.run(go())


def works(what, f):
    t0 = time.time()
    err = f()
    dt = time.time() - t0
    print(f"FIGURE {what}: done after {dt:.2f} s: {err}", flush=True)
    check(err is None and dt < FAST, f"{what} succeeds at once ({dt:.2f} s: {err})")


works("confluent-kafka init_transactions", ck_transactions)
works("kafka-python init_transactions", kp_transactions)
works("aiokafka transactional start", aio_transactions)
works("confluent-kafka group.protocol=consumer reads", ck_kip848)

print("ALL SEMANTICS CHECKS PASSED", flush=True)
