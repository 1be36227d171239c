#!/usr/bin/env python3
"""A consume-transform-produce worker with exactly-once semantics (confluent-kafka / librdkafka),
for t69_exactly_once.rs, which kills it (and the broker coordinating its transactions) with
`kill -9` and starts it again.

  eos_worker.py seed  BROKERS IN N              # N records in-0..in-{N-1} to IN's 2 partitions
  eos_worker.py work  BROKERS IN OUT GROUP TXID # IN -> OUT, one transaction per poll, until caught up
  eos_worker.py check BROKERS IN OUT GROUP N    # OUT (read_committed) holds each input once

`work` reads IN in a consumer group (static membership, so a restarted worker takes its place at
once; read_committed; no auto commit) and, per batch it polled, produces each record's value to
the same partition of OUT and commits the batch's offsets with the transaction
(`send_offsets_to_transaction`). Any error ends it with exit code 3 (the harness starts it again:
`init_transactions` fences and aborts what it left open, the group's offsets say where to resume).
It exits 0 once the group's committed offsets are IN's high watermarks.
"""
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition


START = time.time()


def log(*args):
    print("%.2f" % (time.time() - START), *args, flush=True)


def seed(brokers, topic, n):
    p = Producer({"bootstrap.servers": brokers, "enable.idempotence": True, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, key=b"k%d" % i, value=b"in-%d" % i, partition=i % 2)
    left = p.flush(60)
    if left:
        log("FAILED: %d records not delivered" % left)
        sys.exit(1)
    log("seeded %d" % n)


def caught_up(c, topic):
    """Whether the group's committed offsets are IN's high watermarks (every input processed)."""
    parts = [TopicPartition(topic, p) for p in (0, 1)]
    committed = c.committed(parts, 10)
    for tp in committed:
        _, high = c.get_watermark_offsets(TopicPartition(topic, tp.partition), 10, cached=False)
        if tp.offset < 0 or tp.offset < high:
            return False
    return True


def work(brokers, src, dst, group, txid):
    p = Producer({
        "bootstrap.servers": brokers,
        "transactional.id": txid,
        "transaction.timeout.ms": 10000,
        "linger.ms": 5,
    })
    p.init_transactions(60)
    log("transactions initialized")
    c = Consumer({
        "bootstrap.servers": brokers,
        "group.id": group,
        "group.instance.id": txid + "-member",
        "session.timeout.ms": 6000,
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    })
    c.subscribe([src])
    done = 0
    idle = 0
    while True:
        # Small transactions: the copy takes long enough (hundreds of transactions) for the
        # test's crashes to land mid-stream whatever the machine's speed.
        msgs = [m for m in c.consume(10, 0.5) if not m.error()]
        if not msgs:
            idle += 1
            if idle >= 2 and len(c.assignment()) == 2 and caught_up(c, src):
                log("caught up after %d records" % done)
                return
            continue
        idle = 0
        p.begin_transaction()
        for m in msgs:
            p.produce(dst, key=m.key(), value=m.value(), partition=m.partition())
        p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 30)
        p.commit_transaction(30)
        done += len(msgs)
        log("committed %d" % done)


def check(brokers, src, dst, group, n):
    c = Consumer({
        "bootstrap.servers": brokers,
        "group.id": group + "-check",
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
    })
    c.assign([TopicPartition(dst, 0, 0), TopicPartition(dst, 1, 0)])
    got = []
    deadline = time.time() + 60
    quiet_since = None
    while time.time() < deadline:
        m = c.poll(0.5)
        if m is None:
            # Past n, a little longer: a duplicate would come after.
            if len(got) >= n:
                quiet_since = quiet_since or time.time()
                if time.time() - quiet_since > 2:
                    break
            continue
        if not m.error():
            got.append(m.value().decode())
    c.close()
    want = ["in-%d" % i for i in range(n)]
    missing = sorted(set(want) - set(got))
    dups = sorted({v for v in got if got.count(v) > 1})
    log("FIGURE output records: %d (want %d)" % (len(got), n))
    if missing or dups or len(got) != n:
        log("FAILED: OUT is not each input once: %d records, missing %s, duplicated %s"
            % (len(got), missing[:10], dups[:10]))
        sys.exit(1)
    g = Consumer({"bootstrap.servers": brokers, "group.id": group, "enable.auto.commit": False})
    committed = g.committed([TopicPartition(src, 0), TopicPartition(src, 1)], 30)
    g.close()
    if sum(tp.offset for tp in committed) != n:
        log("FAILED: the group's offsets are not the end of IN: %s" % committed)
        sys.exit(1)
    log("exactly once: %d input records, each in OUT once, offsets at the end of IN" % n)


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    try:
        if cmd == "seed":
            seed(args[0], args[1], int(args[2]))
        elif cmd == "work":
            work(*args[:5])
        elif cmd == "check":
            check(args[0], args[1], args[2], args[3], int(args[4]))
        else:
            log("unknown command %s" % cmd)
            sys.exit(2)
    except KafkaException as e:
        log("worker error: %s" % e)
        sys.exit(3)


main()
