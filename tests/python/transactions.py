#!/usr/bin/env python3
"""Transactional producers against diskless brokers, with real clients: confluent-kafka
(librdkafka), aiokafka and kafka-python. BROKERS is a bootstrap list of two brokers: a transactional id is
coordinated by one of them, and the partitions are served by both.

- Commit and abort: a read_committed consumer gets exactly the committed transactions' records,
  none of the aborted ones; a read_uncommitted one gets both.
- Fencing: a second producer with the same transactional id fences the first (its commit fails
  with a fatal error) and aborts its open transaction; the first's records are never visible.
- aiokafka: `async with producer.transaction()` commits and an exception aborts; kafka-python
  commits and aborts.

- Consume-transform-produce: a confluent-kafka consumer of IN feeds a transactional producer to OUT,
  sending its offsets with each transaction (`send_offsets_to_transaction`): OUT holds every input
  record exactly once, and the group's committed offsets are the end of IN.

Usage: transactions.py BROKERS TOPIC IN OUT
Exits non-zero with a message on the first failed check.
"""
import asyncio
import sys
import time

BROKERS, TOPIC, IN, OUT = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]


def check(cond, what):
    if not cond:
        print("FAILED:", what, flush=True)
        sys.exit(1)
    print("ok:", what, flush=True)


def producer(txn_id):
    from confluent_kafka import Producer

    p = Producer({
        "bootstrap.servers": BROKERS,
        "transactional.id": txn_id,
        "transaction.timeout.ms": 30000,
        "linger.ms": 5,
    })
    p.init_transactions(30)
    return p


def send(p, values):
    for i, v in enumerate(values):
        p.produce(TOPIC, value=v.encode(), partition=i % 2)
    p.flush(30)


def read(isolation, expected_count, group):
    """Every record value of both partitions, from the start, until `expected_count` arrived and
    then a quiet second (so records that should not be there have had time to show up)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({
        "bootstrap.servers": BROKERS,
        "group.id": group,
        "isolation.level": isolation,
        "enable.auto.commit": False,
    })
    c.assign([TopicPartition(TOPIC, 0, 0), TopicPartition(TOPIC, 1, 0)])
    got = []
    deadline = time.time() + 40
    while time.time() < deadline:
        m = c.poll(0.5)
        if m is None:
            if len(got) >= expected_count:
                break
            continue
        if m.error():
            continue
        got.append(m.value().decode())
    c.close()
    return got


def confluent():
    from confluent_kafka import KafkaException

    p = producer("tx-a")
    p.begin_transaction()
    send(p, ["c1-%d" % i for i in range(6)])
    p.commit_transaction(30)
    p.begin_transaction()
    send(p, ["a1-%d" % i for i in range(4)])
    p.abort_transaction(30)
    p.begin_transaction()
    send(p, ["c2-%d" % i for i in range(4)])
    p.commit_transaction(30)
    check(True, "confluent-kafka: commit, abort, commit")

    # Fencing: the second producer of tx-f fences the first, whose open transaction is aborted.
    first = producer("tx-f")
    first.begin_transaction()
    send(first, ["z-%d" % i for i in range(2)])
    second = producer("tx-f")
    fenced = False
    try:
        first.commit_transaction(30)
    except KafkaException as e:
        err = e.args[0]
        fenced = err.fatal() or "fenced" in str(err).lower() or "epoch" in str(err).lower()
        print("first producer:", err, flush=True)
    check(fenced, "the older producer of tx-f is fenced")
    second.begin_transaction()
    send(second, ["f-%d" % i for i in range(2)])
    second.commit_transaction(30)

    committed = sorted(["c1-%d" % i for i in range(6)] + ["c2-%d" % i for i in range(4)] + ["f-0", "f-1"])
    got = read("read_committed", len(committed), "txn-rc")
    check(sorted(got) == committed, "read_committed gets the committed records only: %s" % sorted(got))
    everything = committed + ["a1-%d" % i for i in range(4)] + ["z-0", "z-1"]
    got = read("read_uncommitted", len(everything), "txn-ru")
    check(sorted(got) == sorted(everything), "read_uncommitted gets every record: %s" % sorted(got))
    return committed


async def aiokafka_checks(before):
    from aiokafka import AIOKafkaProducer

    p = AIOKafkaProducer(bootstrap_servers=BROKERS, transactional_id="tx-aio")
    await p.start()
    try:
        async with p.transaction():
            for i in range(3):
                await p.send_and_wait(TOPIC, ("k-%d" % i).encode(), partition=i % 2)
        try:
            async with p.transaction():
                await p.send_and_wait(TOPIC, b"x-0", partition=0)
                raise RuntimeError("abort me")
        except RuntimeError:
            pass
    finally:
        await p.stop()
    want = sorted(before + ["k-0", "k-1", "k-2"])
    got = read("read_committed", len(want), "txn-aio")
    check(sorted(got) == want, "aiokafka: the committed transaction visible, the aborted one not: %s" % sorted(got))


def kafka_python_checks(before):
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=BROKERS, transactional_id="tx-kp")
    p.init_transactions()
    p.begin_transaction()
    for i in range(2):
        p.send(TOPIC, ("kp-%d" % i).encode(), partition=i % 2)
    p.commit_transaction()
    p.begin_transaction()
    # Sent before the abort: a kafka-python producer with nothing sent yet ends no transaction.
    p.send(TOPIC, b"kx-0", partition=1).get(30)
    p.abort_transaction()
    p.close()
    want = sorted(before + ["kp-0", "kp-1"])
    got = read("read_committed", len(want), "txn-kp")
    check(sorted(got) == want, "kafka-python: committed visible, aborted not: %s" % sorted(got))
    return want


def consume_transform_produce():
    from confluent_kafka import Consumer, Producer, TopicPartition

    n = 40
    plain = Producer({"bootstrap.servers": BROKERS, "enable.idempotence": True})
    for i in range(n):
        plain.produce(IN, value=("in-%d" % i).encode(), partition=i % 2)
    plain.flush(30)
    c = Consumer({
        "bootstrap.servers": BROKERS,
        "group.id": "ctp",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
    })
    c.subscribe([IN])
    p = producer("tx-ctp")
    done = 0
    deadline = time.time() + 60
    while done < n and time.time() < deadline:
        msgs = [m for m in c.consume(7, 1.0) if not m.error()]
        if not msgs:
            continue
        p.begin_transaction()
        for m in msgs:
            p.produce(OUT, value=b"out-" + m.value(), partition=m.partition())
        p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 30)
        p.commit_transaction(30)
        done += len(msgs)
    committed = c.committed([TopicPartition(IN, 0), TopicPartition(IN, 1)], 30)
    c.close()
    check(done == n, "consume-transform-produce processed %d of %d" % (done, n))
    check(sum(tp.offset for tp in committed) == n, "the group's offsets are the end of IN: %s" % committed)
    c = Consumer({"bootstrap.servers": BROKERS, "group.id": "ctp-check", "isolation.level": "read_committed",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(OUT, 0, 0), TopicPartition(OUT, 1, 0)])
    got = []
    deadline = time.time() + 30
    while time.time() < deadline:
        m = c.poll(0.5)
        if m is None:
            if len(got) >= n:
                break
            continue
        if not m.error():
            got.append(m.value().decode())
    c.close()
    check(sorted(got) == sorted("out-in-%d" % i for i in range(n)), "OUT holds every input record once: %d" % len(got))


committed = confluent()
asyncio.run(aiokafka_checks(committed))
kafka_python_checks(committed + ["k-0", "k-1", "k-2"])
consume_transform_produce()
print("all transaction checks passed", flush=True)
