#!/usr/bin/env python3
"""KIP-932 share groups with librdkafka's ShareConsumer (confluent-kafka): several consumers share
one partition's records (each record delivered to one consumer), acknowledged records are not
delivered again, the records a consumer held when it was killed with kill -9 are delivered again
once their locks expire (delivery count 2), and a record released at every delivery is archived at
the delivery count limit; a consumer killed with kill -9 gives its records back at once (its
connection closed), one frozen (SIGSTOP) when their locks expire. The brokers run with `share_auto_offset_reset = "earliest"`, a lock of
LOCK_S seconds and a delivery count limit of LIMIT.

Usage: share_groups.py BROKER[,BROKER...] TOPIC GROUP [--resume]
(--resume: only the last check: records produced now reach a new consumer of the group)
Exits non-zero with a message on the first failed check; prints ALL SHARE GROUP CHECKS PASSED.
"""
import signal
import subprocess
import sys
import time

BROKERS, TOPIC, GROUP = sys.argv[1], sys.argv[2], sys.argv[3]
LOCK_S = 4
LIMIT = 3
RECORDS = 300


def check(cond, what):
    if not cond:
        print("FAILED:", what, flush=True)
        sys.exit(1)
    print("ok:", what, flush=True)


from confluent_kafka import AcknowledgeType, Producer, ShareConsumer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402


def share_consumer(name, explicit=False, max_poll=20):
    conf = {"bootstrap.servers": BROKERS, "group.id": GROUP, "client.id": name, "max.poll.records": max_poll}
    if explicit:
        conf["share.acknowledgement.mode"] = "explicit"
    c = ShareConsumer(conf)
    c.subscribe([TOPIC])
    return c


def records(batch):
    out = []
    for m in batch:
        if m.error() is None:
            out.append(m)
        else:
            print("error:", m.error(), flush=True)
    return out


def produce(values):
    # Batches of 10 records: a share fetch acquires whole batches, so small ones are shared out.
    p = Producer({"bootstrap.servers": BROKERS, "linger.ms": 5, "acks": "all"})
    for i, v in enumerate(values):
        p.produce(TOPIC, value=v.encode(), partition=0)
        if i % 10 == 9:
            p.flush(60)
    check(p.flush(60) == 0, f"produced {len(values)} records")


def child():
    """A share consumer in its own process (so it can be killed -9), explicit acknowledgement:
    prints the offsets of its first records and then holds them for ever."""
    c = share_consumer("holder", explicit=True, max_poll=5)
    while True:
        got = records(c.poll(0.5))
        if got:
            print("held", ",".join(str(m.offset()) for m in got), flush=True)
            while True:
                time.sleep(1)


def consume_until(consumers, want, seconds):
    """Polls `consumers` in turn (implicit acknowledgement) until the values in `want` were seen;
    returns value -> list of (consumer index, delivery count, offset)."""
    seen = {}
    deadline = time.time() + seconds
    while time.time() < deadline and not want <= set(seen):
        for i, c in enumerate(consumers):
            for m in records(c.poll(0.2)):
                seen.setdefault(m.value().decode(), []).append((i, m.delivery_count(), m.offset()))
    for c in consumers:
        c.commit_sync()
    return seen


def main():
    if len(sys.argv) > 4 and sys.argv[4] == "--resume":
        late = [f"late{i}" for i in range(10)]
        produce(late)
        c = share_consumer("resumer")
        # The test moved the start offset back to 300 (AlterShareGroupOffsets): k0.. come again.
        want = set(late) | {"k0", "k19", "f0", "f19"}
        seen = consume_until([c], want, 60)
        check(want <= set(seen), "from the altered start offset, records reach a new consumer through the other broker")
        check("r299" not in seen, "nothing below the altered start offset is delivered")
        c.close()
        print("ALL SHARE GROUP CHECKS PASSED", flush=True)
        return

    admin = AdminClient({"bootstrap.servers": BROKERS})
    fs = admin.create_topics([NewTopic(TOPIC, 1, config={"diskless.enable": "true"})])
    for f in fs.values():
        f.result()
    values = [f"r{i}" for i in range(RECORDS)]
    produce(values)

    # Three consumers share the one partition.
    started = time.time()
    cs = [share_consumer(f"c{i}") for i in range(3)]
    seen = consume_until(cs, set(values), 90)
    check(set(values) <= set(seen), f"all {RECORDS} records delivered ({len(seen)} seen)")
    dup = {v: d for v, d in seen.items() if len(d) > 1}
    check(not dup, f"each record delivered once (redelivered: {list(dup.items())[:5]})")
    per = [sum(1 for d in seen.values() if d[0][0] == i) for i in range(3)]
    check(sum(1 for n in per if n > 0) >= 2, f"several consumers shared the partition: {per}")
    print(f"FIGURE share consumers 3: {RECORDS} records in {time.time() - started:.1f} s, per consumer {per}", flush=True)
    for c in cs:
        c.close()

    # Accepted records are not delivered again.
    c = share_consumer("again")
    again = [m.value() for m in records(c.poll(3.0))] + [m.value() for m in records(c.poll(2.0))]
    check(not again, f"accepted records not delivered again (got {len(again)})")

    # A consumer killed with kill -9 holding records: its connection closes, and the broker gives
    # its records back at once, that delivery not counted (Kafka's release on disconnect). A
    # consumer frozen holding records (SIGSTOP: its connection stays open): they come back when
    # their locks expire, counted twice.
    for how, prefix in (("kill", "k"), ("freeze", "f")):
        held_values = [f"{prefix}{i}" for i in range(20)]
        produce(held_values)
        proc = subprocess.Popen([sys.executable, __file__, BROKERS, TOPIC, GROUP, "--child"], stdout=subprocess.PIPE, text=True)
        line = ""
        deadline = time.time() + 60
        while time.time() < deadline and not line.startswith("held"):
            line = proc.stdout.readline().strip() or line
        check(line.startswith("held"), f"the child holds records ({line!r})")
        held = [int(o) for o in line.split()[1].split(",")]
        if how == "kill":
            proc.kill()
        else:
            proc.send_signal(signal.SIGSTOP)
        stopped = time.time()
        seen = consume_until([c], set(held_values), 60)
        back = time.time() - stopped
        if how == "freeze":
            proc.kill()
        proc.wait()
        check(set(held_values) <= set(seen), f"every record delivered after the holder's {how}")
        counts = sorted({d[0][1] for v, d in seen.items() if d})
        want = 1 if how == "kill" else 2
        again = [v for v, d in seen.items() if d and d[0][2] in held and d[0][1] == want]
        if how == "kill":
            # Given back at the disconnect, not by lock expiry (which would count a delivery).
            check(len(again) == len(held), f"the killed holder's {len(held)} records back, the delivery not counted ({len(again)})")
        else:
            check(len(again) == len(held) and back >= LOCK_S - 1,
                  f"the frozen holder's {len(held)} records back after their lock, counted twice ({len(again)}, {back:.1f} s)")
        print(f"FIGURE held records back after the holder's {how} in {back:.1f} s (lock {LOCK_S} s), delivery counts {counts}", flush=True)
    c.close()

    # A record released at every delivery is archived at the delivery count limit.
    produce(["poison"])
    c = share_consumer("releaser", explicit=True, max_poll=5)
    counts = []
    deadline = time.time() + 30
    while time.time() < deadline:
        for m in records(c.poll(0.3)):
            if m.value() == b"poison":
                counts.append(m.delivery_count())
                c.acknowledge(m, AcknowledgeType.RELEASE)
            else:
                c.acknowledge(m, AcknowledgeType.ACCEPT)
        if len(counts) >= LIMIT:
            # Let the last release reach the broker, then look for one more delivery.
            c.commit_sync()
            extra = time.time() + 3
            while time.time() < extra:
                for m in records(c.poll(0.3)):
                    counts.append(m.delivery_count())
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
            break
    check(counts == list(range(1, LIMIT + 1)), f"the released record delivered {LIMIT} times, then archived ({counts})")
    c.close()
    print("ALL SHARE GROUP CHECKS PASSED", flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 4 and sys.argv[4] == "--child":
        child()
    else:
        main()
