#!/usr/bin/env python3
"""Consumer groups on diskless topics with real clients: kcat -G, confluent-kafka subscribe() with
three consumers (one leaves, one is killed -9), kafka-python with manual commits, and the admin
APIs (list and describe groups, their committed offsets, delete a group).

At-least-once, no gaps: every message produced is seen, and a consumer that starts from the group's
committed offsets resumes exactly there. Prints figures (rebalance time, OffsetCommit latency).

Usage: consumer_groups.py BROKER   (host:port of a diskless broker's Kafka listener)
Exits non-zero with a message on the first failed check; prints ALL GROUP CHECKS PASSED at the end.
"""
import os
import signal
import subprocess
import sys
import time

BROKER = sys.argv[1]


def check(cond, what):
    if not cond:
        print("FAILED:", what, flush=True)
        sys.exit(1)
    print("ok:", what, flush=True)


from confluent_kafka import Consumer, Producer, TopicPartition, KafkaException  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402


def create(name, partitions):
    admin = AdminClient({"bootstrap.servers": BROKER})
    for f in admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1, config={"diskless.enable": "true"})]).values():
        f.result(timeout=30)


def produce(name, partitions, start, n):
    p = Producer({"bootstrap.servers": BROKER, "linger.ms": 10, "acks": "all"})
    for i in range(start, start + n):
        p.produce(name, value=f"m{i}".encode(), partition=i % partitions)
    check(p.flush(60) == 0, f"{name}: produced messages {start}..{start + n}")


def child_consumer():
    """Run as a separate process (so it can be killed -9): consume and commit for ever."""
    topic, group = sys.argv[3], sys.argv[4]
    c = Consumer({"bootstrap.servers": BROKER, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    c.subscribe([topic])
    while True:
        m = c.poll(0.5)
        if m is not None and not m.error():
            print(f"{m.partition()} {m.offset()}", flush=True)
            c.commit(message=m, asynchronous=False)


if len(sys.argv) > 2 and sys.argv[2] == "--child":
    child_consumer()
    sys.exit(0)

# ------------------------------------------------------------------ kcat -G
create("kg", 3)
subprocess.run(["kcat", "-b", BROKER, "-P", "-t", "kg", "-K:"], input="\n".join(f"k{i}:v{i}" for i in range(60)).encode(),
               check=True, timeout=60)


def kcat_group(count):
    out = subprocess.run(["kcat", "-b", BROKER, "-G", "kgroup", "-X", "auto.offset.reset=earliest", "-c", str(count), "-f", "%p %o %s\n",
                          "-X", "auto.commit.interval.ms=200", "kg"], capture_output=True, timeout=120)
    check(out.returncode == 0, f"kcat -G consumed {count} messages (stderr tail: {out.stderr[-300:]!r})")
    return [line.split() for line in out.stdout.decode().splitlines() if line.strip()]


first = kcat_group(60)
check(sorted(v for _, _, v in first) == sorted(f"v{i}" for i in range(60)), "kcat -G: the group consumed every message once")
subprocess.run(["kcat", "-b", BROKER, "-P", "-t", "kg", "-K:"], input="\n".join(f"k{i}:v{i}" for i in range(60, 90)).encode(),
               check=True, timeout=60)
second = kcat_group(30)
check(sorted(v for _, _, v in second) == sorted(f"v{i}" for i in range(60, 90)),
      "kcat -G: a restart resumes from the committed offsets (only the 30 new messages)")

# ------------------------------------------------------------------ confluent-kafka: three consumers share six partitions
TOPIC, GROUP, P = "cg", "three", 6
create(TOPIC, P)
produce(TOPIC, P, 0, 600)
assigned = {}


def on_assign(name):
    def cb(consumer, parts):
        assigned[name] = {p.partition for p in parts}
    return cb


def consumer(name):
    c = Consumer({"bootstrap.servers": BROKER, "group.id": GROUP, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                  "partition.assignment.strategy": "range", "client.id": name})
    c.subscribe([TOPIC], on_assign=on_assign(name), on_revoke=lambda c, p: assigned.pop(name, None))
    return c


seen = {}  # (partition, offset) -> value
commit_times = []


def poll_all(consumers, until, deadline_s):
    deadline = time.time() + deadline_s
    while time.time() < deadline and not until():
        for c in consumers:
            m = c.poll(0.05)
            if m is None or m.error():
                continue
            seen[(m.partition(), m.offset())] = m.value().decode()
            t = time.time()
            try:
                c.commit(message=m, asynchronous=False)
                commit_times.append(time.time() - t)
            except KafkaException as e:
                # A rebalance between the poll and the commit: at-least-once, the message comes again.
                print("commit refused:", e, flush=True)
    return until()


started = time.time()
cs = [consumer(f"c{i}") for i in range(3)]


def shared():
    return len(assigned) == 3 and sorted(p for s in assigned.values() for p in s) == list(range(P))


check(poll_all(cs, shared, 90), f"three consumers share the six partitions: {assigned}")
rebalance_s = time.time() - started
print(f"FIGURE rebalance of 3 consumers (first subscribe to all assigned, incl. the 3 s initial delay): {rebalance_s:.2f} s", flush=True)
check(poll_all(cs, lambda: len(seen) >= 600, 120), f"the group consumed all 600 messages ({len(seen)})")

# One leaves: its partitions move to the others; nothing is lost.
cs[2].close()
assigned.pop("c2", None)
produce(TOPIC, P, 600, 300)


def two_share():
    return set(assigned) == {"c0", "c1"} and sorted(p for s in assigned.values() for p in s) == list(range(P))


check(poll_all(cs[:2], lambda: two_share() and len(seen) >= 900, 120), f"after one left, two share every partition and got all 900 ({assigned}, {len(seen)})")
for c in cs[:2]:
    c.close()
assigned.clear()

# kill -9 a consumer: its partitions move after the session timeout.
child = subprocess.Popen([sys.executable, __file__, BROKER, "--child", TOPIC, GROUP], stdout=subprocess.PIPE)
time.sleep(1)
survivor = consumer("s")
check(poll_all([survivor], lambda: len(assigned.get("s", ())) in range(1, P), 90), f"a survivor and a child process share the group ({assigned})")
produce(TOPIC, P, 900, 300)
time.sleep(3)
os.kill(child.pid, signal.SIGKILL)
child.wait()
killed_at = time.time()
# What the killed member consumed (it printed each message before committing it).
for line in child.stdout.read().decode().splitlines():
    p, o = line.split()
    seen[(int(p), int(o))] = "child"


def all_seen():
    return all(max((o for (pp, o) in seen if pp == p), default=-1) >= 199 for p in range(P))


check(poll_all([survivor], lambda: assigned.get("s") == set(range(P)) and all_seen(), 120),
      f"after kill -9 of the other member, the survivor owns every partition and every message was seen ({len(seen)})")
print(f"FIGURE partitions of a killed consumer moved after {time.time() - killed_at:.1f} s (session timeout 6 s)", flush=True)
survivor.close()
for p in range(P):
    offsets = sorted(o for (pp, o) in seen if pp == p)
    check(offsets == list(range(len(offsets))) and len(offsets) == 200, f"partition {p}: offsets 0..199 all seen, no gap")

# The committed offsets are exact: a fresh member of the group starts at the end.
admin = AdminClient({"bootstrap.servers": BROKER})
from confluent_kafka import ConsumerGroupTopicPartitions  # noqa: E402
res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(GROUP)])
committed = {tp.partition: tp.offset for tp in list(res.values())[0].result(timeout=30).topic_partitions if tp.topic == TOPIC}
check(committed == {p: 200 for p in range(P)}, f"AdminClient: the group's committed offsets are the ends ({committed})")

# ------------------------------------------------------------------ kafka-python: manual commits
from kafka import KafkaConsumer, TopicPartition as KTP  # noqa: E402

create("kp", 2)
produce("kp", 2, 0, 40)
kc = KafkaConsumer("kp", bootstrap_servers=BROKER, group_id="kpg", enable_auto_commit=False,
                   auto_offset_reset="earliest", consumer_timeout_ms=20000)
got = []
for m in kc:
    got.append(m.value.decode())
    if len(got) == 25:
        kc.commit()
        break
kc.close(autocommit=False)
check(len(got) == 25, "kafka-python: consumed 25 and committed")
kc = KafkaConsumer("kp", bootstrap_servers=BROKER, group_id="kpg", enable_auto_commit=False,
                   auto_offset_reset="earliest", consumer_timeout_ms=15000)
rest = [m.value.decode() for m in kc]
kc.close(autocommit=False)
check(sorted(got + rest) == sorted(f"m{i}" for i in range(40)) and len(rest) == 15,
      f"kafka-python: a new consumer resumes at the committed offsets ({len(rest)} more)")

# ------------------------------------------------------------------ admin: list, describe, delete
groups = admin.list_consumer_groups().result(timeout=30)
ids = {g.group_id for g in groups.valid}
check({"kgroup", GROUP, "kpg"} <= ids, f"AdminClient lists the groups ({sorted(ids)})")
d = admin.describe_consumer_groups([GROUP]).get(GROUP).result(timeout=30)
check(str(d.state).upper().endswith("EMPTY"), f"DescribeGroups: {GROUP} is empty once its consumers left ({d.state})")
for f in admin.delete_consumer_groups([GROUP]).values():
    f.result(timeout=30)
ids = {g.group_id for g in admin.list_consumer_groups().result(timeout=30).valid}
check(GROUP not in ids, "DeleteGroups removed the group and its offsets")

commit_times.sort()
if commit_times:
    p50 = commit_times[len(commit_times) // 2] * 1000
    p99 = commit_times[min(len(commit_times) - 1, int(len(commit_times) * 0.99))] * 1000
    print(f"FIGURE OffsetCommit (synchronous, client-measured) over {len(commit_times)}: P50 {p50:.1f} ms, P99 {p99:.1f} ms", flush=True)
print("ALL GROUP CHECKS PASSED", flush=True)
