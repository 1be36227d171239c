#!/usr/bin/env python3
"""Transactions as consumers read them, with two client implementations (confluent-kafka
/ librdkafka and kafka-python) against a diskless broker whose topic holds, in offset order:
p-0, an aborted transaction (t-0, t-1) and its ABORT marker, p-1, a committed transaction (c-0,
c-1) and its COMMIT marker, p-2 (written by t67_transaction_reads.rs).

- read_committed: the plain records and the committed transaction's, never the aborted ones;
  the control batches are skipped.
- read_uncommitted: every data record, the aborted ones too.

Usage: transaction_reads.py BROKER TOPIC
Exits non-zero with a message on the first failed check.
"""
import sys
import time

BROKER, TOPIC = sys.argv[1], sys.argv[2]
COMMITTED = ["p-0", "p-1", "c-0", "c-1", "p-2"]
EVERYTHING = ["p-0", "t-0", "t-1", "p-1", "c-0", "c-1", "p-2"]


def check(cond, what):
    if not cond:
        print("FAILED:", what, flush=True)
        sys.exit(1)
    print("ok:", what, flush=True)


def confluent(isolation, want):
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({
        "bootstrap.servers": BROKER,
        "group.id": "txn-reads-" + isolation,
        "isolation.level": isolation,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    })
    c.assign([TopicPartition(TOPIC, 0, 0)])
    got = []
    deadline = time.time() + 30
    while len(got) < len(want) and time.time() < deadline:
        m = c.poll(0.5)
        if m is None or m.error():
            continue
        got.append(m.value().decode())
    # Nothing more comes (the aborted records are not delivered late).
    extra = c.poll(1.0)
    c.close()
    check(got == want, f"confluent-kafka {isolation}: {got}")
    check(extra is None or extra.error() is not None, f"confluent-kafka {isolation}: nothing after the last record")


def kafka_python(isolation, want):
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=BROKER, isolation_level=isolation, enable_auto_commit=False,
                      auto_offset_reset="earliest", api_version=(2, 5))
    tp = TopicPartition(TOPIC, 0)
    c.assign([tp])
    c.seek(tp, 0)
    got = []
    deadline = time.time() + 30
    while len(got) < len(want) and time.time() < deadline:
        for records in c.poll(timeout_ms=500).values():
            got.extend(r.value.decode() for r in records)
    c.close()
    check(got == want, f"kafka-python {isolation}: {got}")


confluent("read_committed", COMMITTED)
confluent("read_uncommitted", EVERYTHING)
kafka_python("read_committed", COMMITTED)
kafka_python("read_uncommitted", EVERYTHING)
print("all transaction read checks passed", flush=True)
