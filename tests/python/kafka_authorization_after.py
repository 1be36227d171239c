#!/usr/bin/env python3
"""After kafka_authorization.py and a crash of metadata partition 0's leader: a broker started
since (nothing cached) enforces the same bindings — the four left (alice's prefixed READ on `ord`,
her group, bob's READ on `orders`, the DENY of her reads) — and refuses what they do not grant.

Usage: kafka_authorization_after.py NEW_BROKER OTHER_BROKER MECHANISM ADMIN_PW ALICE_PW BOB_PW
"""
import sys
import time

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient

C, B, MECH, ADMIN_PW, ALICE_PW, BOB_PW = sys.argv[1:7]


def check(cond, what):
    if not cond:
        print("FAILED:", what, flush=True)
        sys.exit(1)
    print("ok:", what, flush=True)


def conf(broker, user, pw):
    return {"bootstrap.servers": broker, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": MECH,
            "sasl.username": user, "sasl.password": pw}


def produce_error(broker, user, pw, topic):
    p = Producer({**conf(broker, user, pw), "acks": "all", "message.timeout.ms": 10000})
    errors = []
    p.produce(topic, value=b"x", partition=0, on_delivery=lambda e, m: e and errors.append(e))
    p.flush(20)
    return errors[0].code() if errors else None


# kafka-python: librdkafka drops DescribeAcls' error code, and a new leader may still be taking over.
from kafka.admin import (ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType, KafkaAdminClient,
                         ResourcePatternFilter, ResourceType as KResourceType)
from kafka.errors import KafkaError as KError

kp = KafkaAdminClient(bootstrap_servers=C, security_protocol="SASL_PLAINTEXT", sasl_mechanism=MECH,
                      sasl_plain_username="admin", sasl_plain_password=ADMIN_PW, request_timeout_ms=20000)
any_acl = ACLFilter(principal=None, host="*", operation=ACLOperation.ANY, permission_type=ACLPermissionType.ANY,
                    resource_pattern=ResourcePatternFilter(KResourceType.ANY, None, ACLResourcePatternType.ANY))
kept, deadline = None, time.time() + 30
while kept is None:
    try:
        kept, _ = kp.describe_acls(any_acl)
    except KError as e:
        print("DescribeAcls:", repr(e), flush=True)
        check(e.retriable and time.time() < deadline, f"DescribeAcls through the new broker ({e!r})")
        time.sleep(0.5)
check(len(kept) == 4, f"the new broker reads the four bindings left ({kept})")
seen = set(AdminClient(conf(C, "alice", ALICE_PW)).list_topics(timeout=10).topics)
check("orders" in seen and "secret" not in seen, f"alice's Metadata from the new broker ({sorted(seen)})")
for user, pw in [("alice", ALICE_PW), ("bob", BOB_PW)]:
    code = produce_error(C, user, pw, "orders")
    check(code == KafkaError.TOPIC_AUTHORIZATION_FAILED, f"{user} may not write orders through the new broker ({code})")
check(produce_error(C, "admin", ADMIN_PW, "orders") is None, "the super user writes through the new broker")
print("ACLS KEPT", flush=True)
