"""The producer is never the bottleneck: the recorded producer against the bare client.

    sudo .venv/bin/python benchmarks/producer.py [--systems nats,redis,rabbitmq,mqtt,kafka,pulsar]
                                                 [--messages 100000] [--rounds 3]

For each system, one cluster started as `brokerchaos run` starts it (the settings of the
scenario named in SCENARIOS, no fault, no rate), then rounds of two write phases on a fresh
stream each, in alternating order:

- bare: the fastest loop the same client library offers, without recording: nats-py's
  `publish_async` with its own pending bound, redis-py pipelines (the driver's batch, WAIT
  and connections), aio-pika publisher confirms, paho's `publish` from the caller's thread
  with `on_publish` in paho's, confluent-kafka's `produce` with `poll`, pulsar-client's
  `send_async` (the library's own queue as the bound); the scenario's payload size,
  durability settings and in-flight bound (messages sent and not answered: the workload's
  definition, kept by a semaphore or a count where the library has no bound of its own);
- recorded: the harness's ProducerLoop with the system's driver, every send and outcome a
  history row (Parquet, as in a run).

Rate = messages ÷ (last ack − first send), connection set-up excluded on both sides. Prints
one JSON line per system: the best and median of each and their ratio (target >= 0.9).
BC_PROFILE=1 prints where the recorded producer's thread spent its time (cProfile).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from brokerchaos import scenario as sc  # noqa: E402
from brokerchaos.history import Recorder  # noqa: E402
from brokerchaos.sandbox import Sandbox  # noqa: E402
from brokerchaos.systems.base import node_names  # noqa: E402
from brokerchaos.systems import SYSTEMS, Deployment  # noqa: E402
from brokerchaos.workload.payload import encode  # noqa: E402
from brokerchaos.workload.producer import ProducerLoop  # noqa: E402

SCENARIOS = {
    "nats": "nats-no-fault.yaml", "redis": "redis-kill-primary.yaml", "rabbitmq": "rabbitmq-kill-leader.yaml",
    "mqtt": "mosquitto-kill.yaml", "kafka": "kafka-acksall-kill-leader.yaml", "pulsar": "pulsar-no-fail.yaml",
}
TIMEOUT = 300.0


class Clock:
    """First send and last ack of one write phase."""

    def __init__(self, n: int) -> None:
        self.n, self.acked, self.t0, self.t1 = n, 0, None, None
        self.done = threading.Event()

    def start(self) -> None:
        self.t0 = time.monotonic()

    def ack(self) -> None:
        self.acked += 1
        if self.acked == self.n:
            self.t1 = time.monotonic()
            self.done.set()

    def rate(self) -> float:
        if self.t1 is None:
            raise SystemExit(f"only {self.acked} of {self.n} messages acked")
        return self.n / (self.t1 - self.t0)


def payloads(n: int, size: int) -> list[bytes]:
    # made before the clock starts on both sides: the recorded loop encodes as it sends
    return [encode("p1", v, size) for v in range(1, n + 1)]


# -- the bare loops, one per client library ------------------------------------------------------

async def bare_nats(dep, n: int, in_flight: int, size: int) -> float:
    import nats

    nc = await nats.connect(dep.client.servers(), name="bare")
    try:
        js = nc.jetstream(publish_async_max_pending=in_flight)
        subject, data, c = f"{dep.client.stream_name}.p1", payloads(n, size), Clock(n)
        c.start()
        for d in data:
            fut = await js.publish_async(subject, d)
            fut.add_done_callback(lambda f: c.ack() if not f.exception() else None)
        await asyncio.wait_for(js.publish_async_completed(), TIMEOUT)
        return c.rate()
    finally:
        await nc.close()


async def bare_redis(dep, n: int, in_flight: int, size: int) -> float:
    from brokerchaos.systems.redis import FIELD, client_for

    o, stream = dep.client.options, dep.client.stream_name
    addr = await dep.client.primary_addr()
    data, c = payloads(n, size), Clock(n)
    conns = [client_for(addr, timeout=10) for _ in range(o.connections)]
    next_i = [0]

    async def writer(r) -> None:
        while next_i[0] < n:
            lo = next_i[0]
            next_i[0] = hi = min(n, lo + o.batch)
            pipe = r.pipeline(transaction=False)
            for d in data[lo:hi]:
                pipe.xadd(stream, {FIELD: d})
            if o.wait_replicas:
                pipe.execute_command("WAIT", o.wait_replicas, o.wait_timeout_ms)
            await pipe.execute()
            for _ in range(hi - lo):
                c.ack()

    try:
        for r in conns:
            await r.ping()
        c.start()
        await asyncio.wait_for(asyncio.gather(*(writer(r) for r in conns)), TIMEOUT)
        return c.rate()
    finally:
        for r in conns:
            await r.aclose()


async def bare_rabbitmq(dep, n: int, in_flight: int, size: int) -> float:
    import aio_pika

    o, key = dep.client.options, dep.client.stream_name
    node = dep.client.producer("p1").nodes[0]
    conn = await dep.client.connection(node, timeout=5.0)
    try:
        ex = (await conn.channel(publisher_confirms=True)).default_exchange
        mode = aio_pika.DeliveryMode.PERSISTENT if o.persistent else aio_pika.DeliveryMode.NOT_PERSISTENT
        data, c, slots = payloads(n, size), Clock(n), asyncio.Semaphore(in_flight)
        tasks = set()

        async def one(d: bytes) -> None:
            try:
                await ex.publish(aio_pika.Message(d, delivery_mode=mode), routing_key=key, mandatory=o.mandatory)
                c.ack()
            finally:
                slots.release()

        c.start()
        for d in data:
            await slots.acquire()
            t = asyncio.ensure_future(one(d))
            tasks.add(t)
            t.add_done_callback(tasks.discard)
        await asyncio.wait_for(asyncio.gather(*tasks), TIMEOUT)
        return c.rate()
    finally:
        await conn.close()


def _paho_loop(host: str, port: int, topic: str, qos: int, n: int, in_flight: int, size: int) -> float:
    import paho.mqtt.client as mqtt

    cl = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="bare", clean_session=True)
    cl.max_inflight_messages_set(in_flight)
    cl.max_queued_messages_set(0)
    c, connected, slots = Clock(n), threading.Event(), threading.Semaphore(in_flight)

    def acked(*_a) -> None:
        c.ack()
        slots.release()

    cl.on_connect = lambda *a: connected.set()
    cl.on_publish = acked
    cl.connect(host, port, keepalive=30)
    cl.loop_start()
    try:
        if not connected.wait(10):
            raise SystemExit("paho: no CONNACK within 10 s")
        data = payloads(n, size)
        c.start()
        for d in data:
            slots.acquire()
            cl.publish(topic, d, qos=qos)
        c.done.wait(TIMEOUT)
        return c.rate()
    finally:
        cl.disconnect()
        cl.loop_stop()


async def bare_mqtt(dep, n: int, in_flight: int, size: int) -> float:
    s = dep.client
    host, port = s.mqtt_addr(s.tx_node)
    return await asyncio.to_thread(_paho_loop, host, port, s.options.topic, s.options.qos, n, in_flight, size)


def _kafka_loop(conf: dict, topic: str, n: int, in_flight: int, size: int) -> float:
    from confluent_kafka import Producer

    p = Producer(conf)
    p.list_topics(topic, 10)  # connected, metadata known: the other side's open() does the same
    data, c = payloads(n, size), Clock(n)
    answered = [0]

    def report(err, msg) -> None:
        answered[0] += 1
        if err is None:
            c.ack()

    c.start()
    for i, d in enumerate(data):
        while i - answered[0] >= in_flight:
            p.poll(0.001)
        while True:
            try:
                p.produce(topic, d, on_delivery=report)
                break
            except BufferError:
                p.poll(0.005)
        p.poll(0)
    p.flush(TIMEOUT)
    return c.rate()


async def bare_kafka(dep, n: int, in_flight: int, size: int) -> float:
    conf = dep.client.producer_config("bare")
    return await asyncio.to_thread(_kafka_loop, conf, dep.client.stream_name, n, in_flight, size)


def _pulsar_loop(system, n: int, in_flight: int, size: int) -> float:
    o = system.options
    client = system.new_client(10)
    try:
        p = client.create_producer(system.topic, block_if_queue_full=True, max_pending_messages=in_flight,
                                   batching_enabled=o.batching, batching_max_messages=o.batching_max_messages,
                                   batching_max_publish_delay_ms=o.batching_max_publish_delay_ms)
        data, c = payloads(n, size), Clock(n)

        def done(result, _msg_id) -> None:
            if getattr(result, "name", str(result)).split(".")[-1] == "Ok":
                c.ack()

        c.start()
        for d in data:
            p.send_async(d, done)
        p.flush()
        c.done.wait(TIMEOUT)
        return c.rate()
    finally:
        client.close()


async def bare_pulsar(dep, n: int, in_flight: int, size: int) -> float:
    return await asyncio.to_thread(_pulsar_loop, dep.client, n, in_flight, size)


BARE = {"nats": bare_nats, "redis": bare_redis, "rabbitmq": bare_rabbitmq, "mqtt": bare_mqtt,
        "kafka": bare_kafka, "pulsar": bare_pulsar}


async def recorded(dep, s, hist: Path, k: int) -> float:
    """The harness's producer loop, recording as in a run."""
    w = s.workload
    c = Clock(w.messages)
    client = dep.client.producer("p1")
    inner_open = client.open

    async def open_then_start(on_outcome) -> None:
        await inner_open(on_outcome)
        c.start()

    client.open = open_then_start
    rec = Recorder(hist / f"round-{k}", f"round-{k}", "p1", time.monotonic_ns())
    loop = ProducerLoop("p1", client, rec, w, c.ack)
    prof = None
    if os.environ.get("BC_PROFILE"):  # where the recorded producer's thread spends its time
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    await loop.run(time.monotonic() + TIMEOUT)
    if prof is not None:
        import pstats

        prof.disable()
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(25)
    rec.close()
    return c.rate()


async def rounds(dep, s, rounds_n: int, hist: Path) -> dict:
    await dep.up(timeout=180)
    w = s.workload
    # pyarrow's Parquet writer loads its parts on the first flush (0.4 s): a session has
    # done that before its first producer does, in its warm-up analysis
    with Recorder(hist.parent / "warm-up", "warm-up", "p1", time.monotonic_ns()) as r:
        r.record("send", "p1", 1)
    out: dict = {"bare": [], "recorded": []}
    try:
        for k in range(rounds_n):
            order = ("bare", "recorded") if k % 2 == 0 else ("recorded", "bare")
            for which in order:
                # a fresh stream each time, by a name of its own (Kafka deletes topics lazily)
                dep.begin_run(f"bench-{k}-{which}", dep.ctx.logdir)
                await dep.client.create_stream(timeout=60)
                try:
                    if which == "bare":
                        rate = await BARE[s.system](dep, w.messages, w.in_flight, w.message_size)
                    else:
                        rate = await recorded(dep, s, hist, k)
                    out[which].append(round(rate))
                finally:
                    await dep.client.drop_stream()
    finally:
        await dep.client.close()
    return out


def bench(system: str, messages: int, rounds_n: int) -> dict:
    doc = sc.load_document(ROOT / "scenarios" / SCENARIOS[system])
    doc.pop("faults", None)
    doc["fault"] = {"action": "none"}
    doc["runs"] = 1
    wl = dict(doc.get("workload") or {})
    wl.pop("rate", None)
    wl["messages"] = messages
    doc["workload"] = wl
    s = sc.build(doc)
    cls = SYSTEMS.get(system)
    cls.install(s)
    hosts = node_names(s.cluster.nodes) + list(cls.service_hosts(s))
    with tempfile.TemporaryDirectory(prefix="bc-producer-") as tmp, Sandbox(hosts, s.sandbox) as sb:
        dep = Deployment(cls, s, sb, "bench", Path(tmp) / "logs")
        try:
            dep.cluster.start()
            got = sb.run_client(lambda: rounds(dep, s, rounds_n, Path(tmp) / "history"),
                                timeout=180 + rounds_n * 2 * (TIMEOUT + 60))
            rows = _sends_and_acks(Path(tmp) / "history")
        finally:
            dep.stop()
    want = rounds_n * messages
    if rows.get("send") != want or rows.get("ack") != want:
        raise SystemExit(f"{system}: the recorded rounds wrote {rows}, expected {want} sends and acks")
    best = {k: max(v) for k, v in got.items()}
    med = {k: statistics.median(v) for k, v in got.items()}
    return {"system": system, "scenario": SCENARIOS[system], "messages": messages, "in_flight": s.workload.in_flight,
            "msgs_per_s": got, "best": best, "median": med,
            "ratio_best": round(best["recorded"] / best["bare"], 3),
            "ratio_median": round(med["recorded"] / med["bare"], 3), "recorded_rows": rows}


def _sends_and_acks(hist: Path) -> dict:
    """What the recorded rounds wrote: every send and every ack is there (checked)."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    t = ds.dataset(str(hist)).to_table(columns=["type"])
    counts = {r["values"]: r["counts"] for r in pc.value_counts(t["type"]).to_pylist()}
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--systems", default=",".join(SCENARIOS))
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    for system in args.systems.split(","):
        if system not in SCENARIOS:
            print(f"--systems: unknown system {system!r} (one of {', '.join(SCENARIOS)})", file=sys.stderr)
            sys.exit(2)
    for system in args.systems.split(","):
        print(json.dumps(bench(system, args.messages, args.rounds)), flush=True)


if __name__ == "__main__":
    sys.exit(main())
