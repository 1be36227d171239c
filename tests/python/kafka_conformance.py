#!/usr/bin/env python3
"""The clients' side of the conformance suite (t75): three independent client implementations —
confluent-kafka (librdkafka), kafka-python and aiokafka — ask a diskless broker, through their own
APIs, for what does not exist (a topic, a group) and for what is off (ACLs without an
authorizer), and must each report the error a Kafka broker gives: UNKNOWN_TOPIC_OR_PARTITION,
GROUP_ID_NOT_FOUND, SECURITY_DISABLED. Every check names the client, the API and what came back.

Usage: kafka_conformance.py BROKER
Exits non-zero with a message on the first failed check.
"""
import asyncio
import sys

BROKER = sys.argv[1]
TOPIC = "no-such-topic"
GROUP = "no-such-group"


def check(cond, what):
    if not cond:
        print("FAILED:", what, flush=True)
        sys.exit(1)
    print("ok:", what, flush=True)


# ------------------------------------------------------------------ confluent-kafka (librdkafka)
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, ConfigResource,
                                   NewPartitions, OffsetSpec, ResourcePatternType, ResourceType)

admin = AdminClient({"bootstrap.servers": BROKER})


def ck_code(fn):
    try:
        fn()
    except KafkaException as e:
        return e.args[0].code()
    return None


md = admin.list_topics(topic=TOPIC, timeout=10)
check(md.topics[TOPIC].error is not None and md.topics[TOPIC].error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART,
      f"librdkafka Metadata: UNKNOWN_TOPIC_OR_PARTITION ({md.topics[TOPIC].error})")
cases = [
    ("DescribeConfigs", lambda: list(admin.describe_configs([ConfigResource(ResourceType.TOPIC, TOPIC)]).values())[0]
     .result(timeout=10), KafkaError.UNKNOWN_TOPIC_OR_PART),
    ("DeleteTopics", lambda: list(admin.delete_topics([TOPIC], operation_timeout=10).values())[0].result(timeout=20),
     KafkaError.UNKNOWN_TOPIC_OR_PART),
    ("CreatePartitions", lambda: list(admin.create_partitions([NewPartitions(TOPIC, 3)]).values())[0]
     .result(timeout=20), KafkaError.UNKNOWN_TOPIC_OR_PART),
    ("ListOffsets", lambda: list(admin.list_offsets({TopicPartition(TOPIC, 0): OffsetSpec.latest()}).values())[0]
     .result(timeout=10), KafkaError.UNKNOWN_TOPIC_OR_PART),
    ("DeleteGroups", lambda: list(admin.delete_consumer_groups([GROUP]).values())[0].result(timeout=10),
     KafkaError.GROUP_ID_NOT_FOUND),
    ("CreateAcls", lambda: list(admin.create_acls([AclBinding(
        ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:alice", "*", AclOperation.READ,
        AclPermissionType.ALLOW)]).values())[0].result(timeout=10), KafkaError.SECURITY_DISABLED),
]
for api, fn, want in cases:
    got = ck_code(fn)
    # librdkafka looks a partition's leader up in Metadata before it sends ListOffsets: for a topic
    # that does not exist it never asks, and answers _NOENT itself (against any broker).
    ok = got == want or (api == "ListOffsets" and got == KafkaError._NOENT)
    check(ok, f"librdkafka {api}: {KafkaError(want).name()} (got {got})")

# Leader epochs (KIP-320): ListOffsets names the partition's epoch, the broker registry's
# generation — at least 1 once this broker registered (it was always 0 before).
from confluent_kafka.admin import NewTopic

for f in admin.create_topics([NewTopic("conformance-epochs", num_partitions=1, replication_factor=1,
                                       config={"diskless.enable": "true"})]).values():
    f.result(timeout=30)
info = list(admin.list_offsets({TopicPartition("conformance-epochs", 0): OffsetSpec.latest()}).values())[0]
info = info.result(timeout=10)
check(info.leader_epoch is not None and info.leader_epoch >= 1,
      f"librdkafka ListOffsets names the leader epoch ({info.leader_epoch})")
librdkafka_epoch = info.leader_epoch
print(f"FIGURE leader epoch in ListOffsets (librdkafka): {librdkafka_epoch}", flush=True)
one = Producer({"bootstrap.servers": BROKER})
one.produce("conformance-epochs", b"one record", partition=0)
check(one.flush(30) == 0, "a record in conformance-epochs")

p = Producer({"bootstrap.servers": BROKER, "topic.metadata.propagation.max.ms": 1000, "message.timeout.ms": 10000})
errors = []
p.produce(TOPIC, b"x", partition=0, on_delivery=lambda e, m: errors.append(e))
p.flush(15)
check(errors and errors[0] is not None and errors[0].code() in (KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART),
      f"librdkafka Produce to a topic that does not exist: unknown topic ({errors[:1]})")

# ------------------------------------------------------------------ kafka-python
import kafka.errors as KErrors
from kafka.admin import (ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType, KafkaAdminClient, NewPartitions as KNewPartitions, ResourcePatternFilter)
from kafka.admin import ResourceType as KResourceType

ka = KafkaAdminClient(bootstrap_servers=BROKER, request_timeout_ms=15000)
described = ka.describe_topics([TOPIC])
check(described and described[0]["error_code"] == 3, f"kafka-python Metadata: error 3 ({described})")
# (kafka-python 3's describe_configs drops the per-resource error code: aiokafka checks it below.)
for api, fn, want in [
    ("DeleteTopics", lambda: ka.delete_topics([TOPIC], timeout_ms=15000), KErrors.UnknownTopicOrPartitionError),
    ("CreatePartitions", lambda: ka.create_partitions({TOPIC: KNewPartitions(total_count=3)}),
     KErrors.UnknownTopicOrPartitionError),
    ("DescribeAcls", lambda: ka.describe_acls(ACLFilter(
        principal=None, host="*", operation=ACLOperation.ANY, permission_type=ACLPermissionType.ANY,
        resource_pattern=ResourcePatternFilter(KResourceType.ANY, None, ACLResourcePatternType.ANY))),
     KErrors.SecurityDisabledError),
]:
    try:
        r = fn()
        check(False, f"kafka-python {api}: {want.__name__} (got {r})")
    except want as e:
        check(True, f"kafka-python {api}: {want.__name__} ({e})")
try:
    deleted = ka.delete_groups([GROUP])
    said = repr(deleted)
except KErrors.KafkaError as e:
    said = repr(e)
check("GroupIdNotFound" in said, f"kafka-python DeleteGroups: GroupIdNotFoundError ({said})")
ka.close()
from kafka import KafkaConsumer, TopicPartition as KTP

kc = KafkaConsumer(bootstrap_servers=BROKER)
found = kc.offsets_for_times({KTP("conformance-epochs", 0): 0})
kc.close()
check(found[KTP("conformance-epochs", 0)] is not None and found[KTP("conformance-epochs", 0)].leader_epoch == librdkafka_epoch,
      f"kafka-python offsets_for_times: the same leader epoch ({found})")


# ------------------------------------------------------------------ aiokafka
async def aio():
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.config_resource import ConfigResource as ACR, ConfigResourceType as ACRT
    a = AIOKafkaAdminClient(bootstrap_servers=BROKER, request_timeout_ms=15000)
    await a.start()
    try:
        d = await a.describe_topics([TOPIC])
        code = d[0]["error_code"] if isinstance(d[0], dict) else d[0][0]
        check(code == 3, f"aiokafka Metadata: error 3 ({d})")
        r = await a.describe_configs([ACR(ACRT.TOPIC, TOPIC)])
        codes = [res[0] for item in r for res in item.resources]
        check(codes == [3], f"aiokafka DescribeConfigs: error 3 ({codes})")
        r = await a.delete_topics([TOPIC], timeout_ms=15000)
        codes = [t[1] for t in r.topic_error_codes]
        check(codes == [3], f"aiokafka DeleteTopics: error 3 ({codes})")
        r = await a.describe_consumer_groups([GROUP])
        groups = [g for resp in r for g in resp.groups]
        check([(g[0], g[2]) for g in groups] == [(0, "Dead")],
              f"aiokafka DescribeGroups of a group that does not exist: no error, Dead (Kafka, v5) ({groups})")
    finally:
        await a.close()


asyncio.run(aio())
print("ALL CONFORMANCE CHECKS PASSED", flush=True)
