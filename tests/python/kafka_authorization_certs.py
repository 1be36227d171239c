#!/usr/bin/env python3
"""Certificate principals under the authorizer (t89): over an SSL listener with client
certificates, `User:CN=admin` (a super user by its certificate) creates a topic; `User:CN=carol`
may not write it (TOPIC_AUTHORIZATION_FAILED) until the super user grants that principal WRITE,
then may (confluent-kafka).

Usage: kafka_authorization_certs.py SSL_ADDR CA ADMIN_CERT ADMIN_KEY CAROL_CERT CAROL_KEY
"""
import sys

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType)

ADDR, CA, ADMIN_CERT, ADMIN_KEY, CAROL_CERT, CAROL_KEY = sys.argv[1:7]


def check(cond, what):
    if not cond:
        print("FAILED:", what, flush=True)
        sys.exit(1)
    print("ok:", what, flush=True)


def conf(cert, key):
    return {"bootstrap.servers": ADDR, "security.protocol": "SSL", "ssl.ca.location": CA,
            "ssl.certificate.location": cert, "ssl.key.location": key}


def produce_error(cert, key):
    p = Producer({**conf(cert, key), "acks": "all", "message.timeout.ms": 10000})
    errors = []
    p.produce("certs", b"x", partition=0, on_delivery=lambda e, m: errors.append(e))
    p.flush(20)
    return errors[0].code() if errors and errors[0] is not None else None


su = AdminClient(conf(ADMIN_CERT, ADMIN_KEY))
for f in su.create_topics([NewTopic("certs", num_partitions=1, replication_factor=1,
                                    config={"diskless.enable": "true"})]).values():
    f.result(timeout=30)
check(True, "User:CN=admin, a super user by its certificate, creates a topic")
code = produce_error(CAROL_CERT, CAROL_KEY)
check(code == KafkaError.TOPIC_AUTHORIZATION_FAILED, f"User:CN=carol without an ACL: TOPIC_AUTHORIZATION_FAILED ({code})")
grant = AclBinding(ResourceType.TOPIC, "certs", ResourcePatternType.LITERAL, "User:CN=carol", "*",
                   AclOperation.WRITE, AclPermissionType.ALLOW)
for f in su.create_acls([grant]).values():
    f.result(timeout=30)
code = produce_error(CAROL_CERT, CAROL_KEY)
check(code is None, f"User:CN=carol granted WRITE produces through the same broker at once ({code})")
print("CERTIFICATE PRINCIPALS CHECKED", flush=True)
