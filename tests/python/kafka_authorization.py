#!/usr/bin/env python3
"""Authorization as Kafka's StandardAuthorizer, through two brokers with `[kafka.authorizer]`
(super user `User:admin`, `allow.everyone.if.no.acl.found` off) over SASL_PLAINTEXT:

- before any ACL, alice may not produce (TOPIC_AUTHORIZATION_FAILED), sees no topic in Metadata,
  may not create ACLs (CLUSTER_AUTHORIZATION_FAILED) nor list them (kafka-python sees
  CLUSTER_AUTHORIZATION_FAILED; librdkafka drops DescribeAcls' error code and shows an empty list);
  the super user may do everything;
- ACLs created by the super user through broker A (confluent-kafka's AdminClient) are enforced by
  broker B within a bound (FIGURE: how long it took); alice then produces, consumes in her group
  (a PREFIXED group ACL), sees only the topics she may describe;
- bob, with READ on the topic but no group ACL, is refused GROUP_AUTHORIZATION_FAILED;
- a DENY wins over an ALLOW; DeleteAcls by filter revokes, and broker B refuses again;
- kafka-python's KafkaAdminClient describes the bindings as the super user and is refused as bob.

Usage: kafka_authorization.py BROKER_A BROKER_B MECHANISM ADMIN_PW ALICE_PW BOB_PW
Exits non-zero with a message on the first failed check.
"""
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

A, B, MECH, ADMIN_PW, ALICE_PW, BOB_PW = sys.argv[1:7]
N = 10
# How long a change made through one broker may take to be enforced by another (the broker reads
# the ACLs every second).
PROPAGATION_BOUND = 15.0


def check(cond, what):
    if not cond:
        print("FAILED:", what, flush=True)
        sys.exit(1)
    print("ok:", what, flush=True)


def conf(broker, user, pw):
    return {
        "bootstrap.servers": broker,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": MECH,
        "sasl.username": user,
        "sasl.password": pw,
    }


def produce(broker, user, pw, topic, n=N, tag="m"):
    """Produces n messages; returns the first delivery error's code, or None."""
    p = Producer({**conf(broker, user, pw), "linger.ms": 5, "acks": "all", "message.timeout.ms": 10000})
    errors = []
    for i in range(n):
        p.produce(topic, value=f"{tag} {i}".encode(), partition=0, on_delivery=lambda e, m: e and errors.append(e))
    p.flush(20)
    return errors[0].code() if errors else None


def consume(broker, user, pw, topic, group, want, timeout=20):
    """Consumes from the start in `group`; returns (values, first error code)."""
    c = Consumer({**conf(broker, user, pw), "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    got, error, deadline = [], None, time.time() + timeout
    while len(got) < want and time.time() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error() is not None:
            if m.error().code() != KafkaError._PARTITION_EOF:
                error = m.error().code()
                break
            continue
        got.append(m.value())
    if got and error is None:
        c.commit(asynchronous=False)
    c.close()
    return got, error


def failure_code(fn):
    try:
        fn()
    except KafkaException as e:
        return e.args[0].code()
    return None


def eventually(what, fn, bound=PROPAGATION_BOUND):
    """Calls fn until it returns true; the seconds it took."""
    start = time.time()
    while time.time() - start < bound:
        if fn():
            return time.time() - start
        time.sleep(0.2)
    check(False, f"{what} within {bound} s")


su = AdminClient(conf(A, "admin", ADMIN_PW))
for t in ["orders", "secret"]:
    for f in su.create_topics([NewTopic(t, num_partitions=1, replication_factor=1,
                                        config={"diskless.enable": "true"})]).values():
        f.result(timeout=30)
check(True, "the super user creates topics")
check(produce(A, "admin", ADMIN_PW, "orders", tag="admin") is None, "the super user produces")

# ------------------------------------------------------------------ nothing granted yet
start = time.time()
code = produce(A, "alice", ALICE_PW, "orders")
check(code == KafkaError.TOPIC_AUTHORIZATION_FAILED, f"alice without ACLs: TOPIC_AUTHORIZATION_FAILED (got {code})")
print(f"FIGURE time to TOPIC_AUTHORIZATION_FAILED: {time.time() - start:.2f} s", flush=True)
alice_admin = AdminClient(conf(A, "alice", ALICE_PW))
seen = set(alice_admin.list_topics(timeout=10).topics)
check(not ({"orders", "secret"} & seen), f"alice's Metadata lists no topic she may not describe ({sorted(seen)})")
ANY = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                       AclPermissionType.ANY)
# librdkafka drops DescribeAcls' error code (its rd_kafka_DescribeAclsResponse_parse answers success
# whatever the code): a refusal reaches it as an empty list, which leaks nothing. kafka-python,
# below, sees the code itself.
listed = alice_admin.describe_acls(ANY).result(timeout=10)
check(listed == [], f"alice's DescribeAcls through librdkafka shows nothing ({listed})")
code = failure_code(lambda: [f.result(timeout=10) for f in alice_admin.create_acls([
    AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:alice", "*", AclOperation.ALL,
               AclPermissionType.ALLOW)]).values()])
check(code == KafkaError.CLUSTER_AUTHORIZATION_FAILED, f"alice may not grant herself (got {code})")

# ------------------------------------------------------------------ grants through broker A
grants = [
    AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:alice", "*", AclOperation.WRITE,
               AclPermissionType.ALLOW),
    AclBinding(ResourceType.TOPIC, "ord", ResourcePatternType.PREFIXED, "User:alice", "*", AclOperation.READ,
               AclPermissionType.ALLOW),
    AclBinding(ResourceType.GROUP, "alice-", ResourcePatternType.PREFIXED, "User:alice", "*", AclOperation.READ,
               AclPermissionType.ALLOW),
    AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:bob", "*", AclOperation.READ,
               AclPermissionType.ALLOW),
]
for f in su.create_acls(grants).values():
    f.result(timeout=30)
mine = su.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:alice", None,
                                         AclOperation.ANY, AclPermissionType.ANY)).result(timeout=10)
check(sorted(map(str, mine)) == sorted(map(str, grants[:3])), f"DescribeAcls by principal: alice's three ({mine})")

took = eventually("broker B lets alice produce", lambda: produce(B, "alice", ALICE_PW, "orders", n=1) is None)
print(f"FIGURE grant through broker A enforced by broker B after {took:.2f} s", flush=True)
# Both brokers enforce the grants (either may coordinate alice's group).
eventually("broker A lets alice produce", lambda: produce(A, "alice", ALICE_PW, "orders", n=1) is None)
check(produce(B, "alice", ALICE_PW, "orders", tag="alice") is None, "alice produces through broker B")
got, err = consume(B, "alice", ALICE_PW, "orders", "alice-readers", want=N + 2)
check(err is None and len(got) >= N + 2, f"alice consumes in group alice-readers ({len(got)} messages, error {err})")
seen = set(AdminClient(conf(B, "alice", ALICE_PW)).list_topics(timeout=10).topics)
check("orders" in seen and "secret" not in seen, f"alice's Metadata: orders, not secret ({sorted(seen)})")
code = produce(B, "alice", ALICE_PW, "secret", n=1)
check(code == KafkaError.TOPIC_AUTHORIZATION_FAILED, f"alice may not write secret (got {code})")
# KIP-430: the operations alice may do to `orders`, as librdkafka's describe_topics asks (Metadata
# with include_topic_authorized_operations): READ and WRITE granted, DESCRIBE implied.
from confluent_kafka import TopicCollection

alice_b = AdminClient(conf(B, "alice", ALICE_PW))
desc = list(alice_b.describe_topics(TopicCollection(["orders"]), include_authorized_operations=True).values())[0]
desc = desc.result(timeout=10)
ops = set(desc.authorized_operations or [])
check(ops == {AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE},
      f"alice's authorized operations on orders (KIP-430): {sorted(o.name for o in ops)}")

# bob reads the topic but has no group.
got, err = consume(A, "bob", BOB_PW, "orders", "bobs-group", want=1)
check(err == KafkaError.GROUP_AUTHORIZATION_FAILED, f"bob without a group ACL: GROUP_AUTHORIZATION_FAILED (got {err})")
code = produce(A, "bob", BOB_PW, "orders", n=1)
check(code == KafkaError.TOPIC_AUTHORIZATION_FAILED, f"bob may not write orders (got {code})")

# ------------------------------------------------------------------ DENY wins, DeleteAcls revokes
deny = AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:alice", "*", AclOperation.READ,
                  AclPermissionType.DENY)
for f in su.create_acls([deny]).values():
    f.result(timeout=30)
eventually("broker B denies alice's reads", lambda: consume(B, "alice", ALICE_PW, "orders", "alice-2", want=1,
                                                           timeout=5)[1] == KafkaError.TOPIC_AUTHORIZATION_FAILED)
check(True, "a DENY wins over the prefixed ALLOW")
writes = AclBindingFilter(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:alice", None,
                          AclOperation.WRITE, AclPermissionType.ANY)
deleted = list(su.delete_acls([writes]).values())[0].result(timeout=30)
check([str(d) for d in deleted] == [str(grants[0])], f"DeleteAcls by filter removed alice's WRITE ({deleted})")
took = eventually("broker B refuses alice's writes again",
                  lambda: produce(B, "alice", ALICE_PW, "orders", n=1) == KafkaError.TOPIC_AUTHORIZATION_FAILED)
print(f"FIGURE revocation through broker A enforced by broker B after {took:.2f} s", flush=True)

# ------------------------------------------------------------------ kafka-python
from kafka.admin import (ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType, KafkaAdminClient,
                         ResourcePatternFilter)
from kafka.admin import ResourceType as KResourceType
from kafka.errors import ClusterAuthorizationFailedError


def kp_admin(user, pw):
    return KafkaAdminClient(bootstrap_servers=B, security_protocol="SASL_PLAINTEXT", sasl_mechanism=MECH,
                            sasl_plain_username=user, sasl_plain_password=pw, request_timeout_ms=10000)


kfilter = ACLFilter(principal=None, host="*", operation=ACLOperation.ANY, permission_type=ACLPermissionType.ANY,
                    resource_pattern=ResourcePatternFilter(KResourceType.TOPIC, "orders", ACLResourcePatternType.ANY))
acls, _ = kp_admin("admin", ADMIN_PW).describe_acls(kfilter)
check(len(acls) == 2, f"kafka-python: the two bindings naming topic orders, bob's READ and the DENY ({acls})")
try:
    kp_admin("alice", ALICE_PW).describe_acls(kfilter)
    check(False, "kafka-python: alice may not describe ACLs")
except ClusterAuthorizationFailedError:
    check(True, "kafka-python: alice may not describe ACLs (ClusterAuthorizationFailedError)")
try:
    kp_admin("bob", BOB_PW).describe_acls(kfilter)
    check(False, "kafka-python: bob may not describe ACLs")
except ClusterAuthorizationFailedError:
    check(True, "kafka-python: bob may not describe ACLs (ClusterAuthorizationFailedError)")

print("ALL AUTHORIZATION CHECKS PASSED", flush=True)
