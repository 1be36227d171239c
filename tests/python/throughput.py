#!/usr/bin/env python3
"""Produce and consume throughput with a real client (confluent-kafka / librdkafka) against a
diskless broker. Not a test: prints figures.

Usage: throughput.py BROKER [MESSAGES] [SIZE]
"""
import sys
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

broker = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 200_000
size = int(sys.argv[3]) if len(sys.argv) > 3 else 1024
partitions = 8
topic = f"tp-{uuid.uuid4().hex[:8]}"
admin = AdminClient({"bootstrap.servers": broker})
admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1, config={"diskless.enable": "true"})])[topic].result(30)
p = Producer({"bootstrap.servers": broker, "linger.ms": 100, "batch.size": 1_000_000, "queue.buffering.max.kbytes": 1_048_576,
              "enable.idempotence": True, "compression.type": "none", "message.max.bytes": int(sys.argv[4]) if len(sys.argv) > 4 else 1_000_000})
value = b"x" * size
t0 = time.time()
for i in range(n):
    while True:
        try:
            p.produce(topic, value=value, partition=i % partitions)
            break
        except BufferError:
            p.poll(0.05)
left = p.flush(120)
dt = time.time() - t0
print(f"produce: {n} x {size} B in {dt:.2f} s = {n * size / dt / 2**20:.1f} MiB/s, {n / dt:.0f} msg/s (unflushed {left})")
c = Consumer({"bootstrap.servers": broker, "group.id": "tp", "enable.auto.commit": False, "fetch.max.bytes": 52_428_800,
              "max.partition.fetch.bytes": 8_388_608})
c.assign([TopicPartition(topic, q, 0) for q in range(partitions)])
got = 0
t0 = time.time()
while got < n and time.time() - t0 < 120:
    for m in c.consume(10_000, 1.0):
        if not m.error():
            got += 1
dt = time.time() - t0
print(f"consume: {got} x {size} B in {dt:.2f} s = {got * size / dt / 2**20:.1f} MiB/s, {got / dt:.0f} msg/s")
c.close()
