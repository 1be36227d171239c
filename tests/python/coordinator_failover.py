#!/usr/bin/env python3
"""A consumer group keeps consuming when the broker coordinating it is killed -9.

Two confluent-kafka consumers in one group, bootstrapped to both brokers, consume a 6-partition
topic and commit synchronously after each poll. When they have seen about half of the first
messages, the script prints PHASE1 and waits for a line on stdin: the test kills the broker that
coordinates the group, then writes GO. More messages are produced (through either broker); the
consumers must see every offset of every partition (at-least-once, no gaps), the committed offsets
must end at the partitions' ends, and no committed offset may go back below what was committed
before the kill.

Usage: coordinator_failover.py BOOTSTRAP TOPIC GROUP   (BOOTSTRAP: host:port,host:port)
Prints FAILOVER CHECKS PASSED at the end; exits non-zero with a message on the first failed check.
"""
import sys
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition, KafkaException

BOOTSTRAP, TOPIC, GROUP = sys.argv[1], sys.argv[2], sys.argv[3]
PARTITIONS = 6
FIRST, SECOND = 300, 300


def check(cond, what):
    if not cond:
        print("FAILED:", what, flush=True)
        sys.exit(1)
    print("ok:", what, flush=True)


def produce(start, n):
    p = Producer({"bootstrap.servers": BOOTSTRAP, "linger.ms": 10, "acks": "all", "message.timeout.ms": 120000})
    for i in range(start, start + n):
        p.produce(TOPIC, value=f"m{i}".encode(), partition=i % PARTITIONS)
    check(p.flush(150) == 0, f"produced messages {start}..{start + n}")


seen = {p: set() for p in range(PARTITIONS)}
lock = threading.Lock()
stop = threading.Event()
commit_errors = []


def consume(name):
    c = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": GROUP, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                  "client.id": name})
    c.subscribe([TOPIC])
    try:
        while not stop.is_set():
            msgs = c.consume(num_messages=20, timeout=0.5)
            got = [m for m in msgs if not m.error()]
            with lock:
                for m in got:
                    seen[m.partition()].add(m.offset())
            if got:
                try:
                    c.commit(asynchronous=False)
                except KafkaException as e:
                    # The coordinator died or moved: the next commit carries these offsets too.
                    commit_errors.append(str(e))
    finally:
        c.close()


def count():
    with lock:
        return sum(len(s) for s in seen.values())


def committed():
    c = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": GROUP, "enable.auto.commit": False})
    for _ in range(60):
        try:
            tps = c.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=10)
            c.close()
            return {tp.partition: tp.offset for tp in tps}
        except KafkaException:
            time.sleep(1)
    c.close()
    check(False, "committed offsets readable")


produce(0, FIRST)
threads = [threading.Thread(target=consume, args=(f"c{i}",)) for i in range(2)]
for t in threads:
    t.start()
deadline = time.time() + 90
while count() < FIRST // 2 and time.time() < deadline:
    time.sleep(0.05)
check(count() >= FIRST // 2, f"the group consumes before the kill ({count()} seen)")
before = committed()
print("PHASE1", flush=True)
sys.stdin.readline()
killed_at = time.time()
produce(FIRST, SECOND)
after = committed()
check(all(after[p] >= before[p] for p in range(PARTITIONS)),
      f"no committed offset lost over the kill: {before} then {after}")
ends = {p: (FIRST + SECOND) // PARTITIONS for p in range(PARTITIONS)}
deadline = time.time() + 120
while time.time() < deadline:
    with lock:
        done = all(seen[p] >= set(range(ends[p])) for p in range(PARTITIONS))
    if done:
        break
    time.sleep(0.2)
print(f"FIGURE all {FIRST + SECOND} messages seen {time.time() - killed_at:.1f} s after the kill", flush=True)
with lock:
    for p in range(PARTITIONS):
        missing = sorted(set(range(ends[p])) - seen[p])
        check(not missing, f"partition {p}: every offset below {ends[p]} seen (missing {missing[:10]})")
# The committed offsets reach the ends (the consumers commit after each poll).
deadline = time.time() + 60
while time.time() < deadline:
    c = committed()
    if all(c[p] == ends[p] for p in range(PARTITIONS)):
        break
    time.sleep(1)
stop.set()
for t in threads:
    t.join(30)
check(all(c[p] == ends[p] for p in range(PARTITIONS)), f"committed offsets {c} are the ends {ends}")
print(f"FIGURE commits refused during the failover: {len(commit_errors)}", flush=True)
print("FAILOVER CHECKS PASSED", flush=True)
