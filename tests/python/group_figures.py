#!/usr/bin/env python3
"""Figures for the group protocols (not a test: it asserts only that the work finished):

- rebalance time, classic against KIP-848 (`group.protocol=consumer`), with 3 and 30 members on a
  60-partition topic: (a) all members start at once, until every partition is assigned to exactly
  one member; (b) one more member joins a settled group, until the assignment is whole again with
  the newcomer holding partitions. librdkafka defaults otherwise (classic: `range` assignor, eager;
  the broker's `group.initial.rebalance.delay.ms` 3 s as Kafka's default).
- share-fetch throughput with 1 and 8 ShareConsumers on one partition, and 8 on 8 partitions:
  records per second draining RECORDS records produced beforehand (implicit acknowledgement),
  beside one plain consumer reading the same records of one partition (the baseline: Fetch,
  nothing acquired or acknowledged).

Usage: group_figures.py BROKER[,BROKER...] [--quick]
(environment GROUP_FIGURES=share: the share figures only)
Prints FIGURE lines; ends with ALL GROUP FIGURES MEASURED.
"""
import os
import sys
import threading
import time
import uuid

from confluent_kafka import Consumer, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

BROKERS = sys.argv[1]
QUICK = "--quick" in sys.argv
PARTITIONS = 60
RECORDS = 20_000 if QUICK else 100_000


def create(topic, partitions):
    admin = AdminClient({"bootstrap.servers": BROKERS})
    fs = admin.create_topics([NewTopic(topic, partitions, config={"diskless.enable": "true"})])
    for f in fs.values():
        f.result()


class Member(threading.Thread):
    def __init__(self, group, topic, protocol):
        super().__init__(daemon=True)
        conf = {"bootstrap.servers": BROKERS, "group.id": group, "enable.auto.commit": False}
        if protocol == "consumer":
            conf["group.protocol"] = "consumer"
        self.c = Consumer(conf)
        self.topic = topic
        self.stop = False
        self.assigned = set()

    def run(self):
        self.c.subscribe([self.topic])
        while not self.stop:
            self.c.poll(0.05)
            self.assigned = {tp.partition for tp in self.c.assignment()}
        self.c.close()


def whole(members):
    seen = [p for m in members for p in m.assigned]
    return len(seen) == PARTITIONS and set(seen) == set(range(PARTITIONS))


def settle(members, started, timeout=120):
    while time.time() - started < timeout:
        if whole(members) and all(m.assigned for m in members[: min(len(members), PARTITIONS)]):
            return time.time() - started
        time.sleep(0.02)
    return float("nan")


def rebalance(protocol, n):
    topic = f"rebalance-{protocol}-{n}-{uuid.uuid4().hex[:6]}"
    create(topic, PARTITIONS)
    group = f"g-{topic}"
    members = [Member(group, topic, protocol) for _ in range(n)]
    started = time.time()
    for m in members:
        m.start()
    cold = settle(members, started)
    extra = Member(group, topic, protocol)
    started = time.time()
    extra.start()
    members.append(extra)
    while time.time() - started < 120 and not (whole(members) and extra.assigned):
        time.sleep(0.02)
    join = time.time() - started
    for m in members:
        m.stop = True
    for m in members:
        m.join(30)
    print(f"FIGURE rebalance {protocol} members={n}: all join {cold:.2f} s, one more joins {join:.2f} s", flush=True)
    return cold, join


def share_throughput(consumers, partitions):
    topic = f"share-{consumers}-{partitions}-{uuid.uuid4().hex[:6]}"
    create(topic, partitions)
    p = Producer({"bootstrap.servers": BROKERS, "linger.ms": 20, "batch.num.messages": 500, "acks": "all"})
    for i in range(RECORDS):
        p.produce(topic, value=b"x" * 100, partition=i % partitions)
        if i % 10_000 == 9_999:
            p.poll(0)
    assert p.flush(120) == 0
    group = f"sg-{topic}"
    counts = [0] * consumers
    done = threading.Event()
    first = []  # when the first record arrived (joining the group and opening a session are before it)

    # Share groups start at the end by default: the brokers of this run use
    # share_auto_offset_reset = "earliest".
    def run(i):
        c = ShareConsumer({"bootstrap.servers": BROKERS, "group.id": group, "client.id": f"s{i}"})
        c.subscribe([topic])
        while not done.is_set():
            for m in c.poll(0.1):
                if m.error() is None:
                    if not first:
                        first.append(time.time())
                    counts[i] += 1
            if sum(counts) >= RECORDS:
                done.set()
        c.close()

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(consumers)]
    started = time.time()
    for t in threads:
        t.start()
    done.wait(300)
    ended = time.time()
    took = ended - started
    flowing = ended - first[0] if first else float("nan")
    for t in threads:
        t.join(30)
    total = sum(counts)
    if consumers == 1 and partitions == 1:
        # The baseline: one plain consumer reading the same records (Fetch, no acquisition).
        c = Consumer({"bootstrap.servers": BROKERS, "group.id": f"plain-{topic}", "enable.auto.commit": False})
        c.assign([TopicPartition(topic, 0, 0)])
        got, t0 = 0, time.time()
        while got < RECORDS and time.time() - t0 < 300:
            got += sum(1 for m in c.consume(1000, 0.5) if m.error() is None)
        plain = time.time() - t0
        c.close()
        print(f"FIGURE plain fetch consumers=1 (baseline): {got} records in {plain:.2f} s = {got / plain:,.0f} records/s", flush=True)
    print(f"FIGURE share-fetch consumers={consumers} partitions={partitions}: {total} records in {took:.2f} s = {total / took:,.0f} records/s "
          f"({total / flowing:,.0f} records/s from the first record, {took - flowing:.2f} s before it; "
          f"per consumer {counts})", flush=True)


def main():
    if os.environ.get("GROUP_FIGURES") != "share":
        for n in (3, 30):
            for protocol in ("classic", "consumer"):
                rebalance(protocol, n)
    for consumers, partitions in ((1, 1), (8, 1), (8, 8)):
        share_throughput(consumers, partitions)
    print("ALL GROUP FIGURES MEASURED", flush=True)


main()
