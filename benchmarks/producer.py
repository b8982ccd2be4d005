"""The producer is never the bottleneck: the recorded producer against the bare client.

    sudo .venv/bin/python benchmarks/producer.py [--systems nats,redis,rabbitmq,mqtt,kafka,pulsar,kafka-java]
                                                 [--messages 100000] [--rounds 3] [--processes 1]
                                                 [--switch 0.0005]

For each system, one cluster started as `brokerchaos run` starts it (the settings of the
scenario named in SCENARIOS, no fault, no rate), then rounds of two write phases on a fresh
stream each, in alternating order:

- bare: the fastest loop the same client library offers, without recording: nats-py's
  `publish_async` with its own pending bound, redis-py pipelines (the driver's batch, WAIT
  and connections), aio-pika publisher confirms, paho's `publish` with its socket on the
  asyncio loop (its fastest; its own thread is slower), confluent-kafka's `produce` with `poll`, pulsar-client's
  `send_async` (the library's own queue as the bound); the scenario's payload size,
  durability settings and in-flight bound (messages sent and not answered: the workload's
  definition, kept by a semaphore or a count where the library has no bound of its own);
- recorded: the harness's ProducerLoop with the system's driver, every send and outcome a
  history row (Parquet, as in a run).

With `--processes P` (P > 1) each round has two more write phases: the bare loop in P forked
processes (messages ÷ P each), and the recorded producers in P processes as
`workload.processes: P` runs them (ProducerProcesses, one ProducerLoop each), compared with
the faster of the two bare sides.

Both loops run with the interpreter's switch interval a run's write phase has
(workload/producer.py SWITCH_S; `--switch` sets another for both). Rate = messages ÷
(last ack − first send), connection set-up excluded on both sides. Prints
one JSON line per system: the best and median of each and their ratio (target >= 0.9), and
the median CPU time the benchmark's process spent per message on each side in one process
(all its threads: the client library's own included; connecting and the recorder's writes
too), which on this 2-core machine is taken from the brokers. `kafka-java` is Kafka with
`options.client: java`: the recorded side drives the Java client over its line protocol
(systems/jclient.py), the bare side is librdkafka's loop; its `children` CPU is the Java
client's process (its JVM's start and JIT included), reaped at the phase's end.
BC_PROFILE=1 prints where the recorded producer's thread spent its time (cProfile).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import signal
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
from brokerchaos.runner import Terminated, _on_sigterm  # noqa: E402
from brokerchaos.sandbox import Sandbox  # noqa: E402
from brokerchaos.systems.base import node_names  # noqa: E402
from brokerchaos.systems import SYSTEMS, Deployment  # noqa: E402
from brokerchaos.workload.payload import encode  # noqa: E402
from brokerchaos.workload.producer import SWITCH_S, ProducerLoop  # noqa: E402

SCENARIOS = {
    "nats": "nats-no-fault.yaml", "redis": "redis-kill-primary.yaml", "rabbitmq": "rabbitmq-kill-leader.yaml",
    "mqtt": "mosquitto-kill.yaml", "kafka": "kafka-acksall-kill-leader.yaml", "pulsar": "pulsar-no-fail.yaml",
    "kafka-java": "kafka-acksall-kill-leader.yaml",
}
# a case that is a system with other options: its recorded side through another client (the
# bare side stays the system's own library: Kafka's Java client against librdkafka's bare loop)
OPTIONS = {"kafka-java": {"client": "java"}}
TIMEOUT = 300.0
_KEPT: list = []


class Clock:
    """First send and last ack of one write phase."""

    def __init__(self, n: int) -> None:
        self.n, self.acked, self.t0, self.t1 = n, 0, None, None
        self.done = threading.Event()

    barrier = None  # in a process of several: they all start sending at once
    last = None  # the window of the last rate taken: several processes' are combined

    def start(self) -> None:
        if Clock.barrier is not None:
            Clock.barrier.wait(60)
        self.t0 = time.monotonic()

    def ack(self) -> None:
        self.acked += 1
        if self.acked == self.n:
            self.t1 = time.monotonic()
            self.done.set()

    def rate(self) -> float:
        if self.t1 is None:
            raise SystemExit(f"only {self.acked} of {self.n} messages acked")
        Clock.last = (self.t0, self.t1)
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


async def bare_mqtt(dep, n: int, in_flight: int, size: int) -> float:
    """paho's fastest: its external loop on asyncio (loop_read when readable, loop_write
    when it has something to send), publishing from the loop's own thread. With paho's own
    thread (loop_start) it was slower: against a local Mosquitto, 17,900 msg/s against 29,000."""
    import paho.mqtt.client as mqtt

    s = dep.client
    host, port = s.mqtt_addr(s.tx_node)
    loop = asyncio.get_running_loop()
    cl = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"bare-{os.getpid()}", clean_session=True)
    cl.max_inflight_messages_set(0)  # the count below is the bound: paho's scans its messages at each PUBACK
    cl.max_queued_messages_set(0)
    c, connected, free, waiter = Clock(n), asyncio.Event(), [in_flight], [None]

    def acked(*_a) -> None:
        c.ack()
        free[0] += 1
        if waiter[0] is not None and not waiter[0].done():
            waiter[0].set_result(None)

    cl.on_connect = lambda *a: connected.set()
    cl.on_publish = acked
    # the socket is opened (and CONNECT queued) by connect() in a worker thread
    cl.on_socket_open = lambda _c, _u, sock: loop.call_soon_threadsafe(loop.add_reader, sock, cl.loop_read)
    cl.on_socket_close = lambda _c, _u, sock: loop.remove_reader(sock)
    cl.on_socket_register_write = lambda _c, _u, sock: loop.call_soon_threadsafe(loop.add_writer, sock,
                                                                                 cl.loop_write)
    cl.on_socket_unregister_write = lambda _c, _u, sock: loop.remove_writer(sock)
    await asyncio.to_thread(cl.connect, host, port, 30)
    try:
        await asyncio.wait_for(connected.wait(), 10)
        data = payloads(n, size)
        c.start()
        for i, d in enumerate(data):
            while free[0] <= 0:
                waiter[0] = loop.create_future()
                await waiter[0]
            free[0] -= 1
            cl.publish(s.options.topic, d, qos=s.options.qos)
            if i % 32 == 0:
                await asyncio.sleep(0)
        await asyncio.to_thread(c.done.wait, TIMEOUT)
        return c.rate()
    finally:
        cl.disconnect()
        await asyncio.sleep(0.1)  # the DISCONNECT written


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
    import pulsar

    o = system.options
    client = system.new_client(10)
    try:
        p = client.create_producer(system.topic, block_if_queue_full=True, max_pending_messages=in_flight,
                                   batching_enabled=o.batching, batching_max_messages=o.batching_max_messages,
                                   batching_max_publish_delay_ms=o.batching_max_publish_delay_ms)
        data, c = payloads(n, size), Clock(n)

        ok = pulsar.Result.Ok

        def done(result, _msg_id) -> None:
            if result == ok:
                c.ack()

        c.start()
        for d in data:
            p.send_async(d, done)
        p.flush()
        c.done.wait(TIMEOUT)
        return c.rate()
    finally:
        client.close()
        # freed while its IO threads log through Python, a pulsar-client object can deadlock
        # on the interpreter lock: kept until the process ends
        _KEPT.append((client, locals().get("p")))


async def bare_pulsar(dep, n: int, in_flight: int, size: int) -> float:
    return await asyncio.to_thread(_pulsar_loop, dep.client, n, in_flight, size)


BARE = {"nats": bare_nats, "redis": bare_redis, "rabbitmq": bare_rabbitmq, "mqtt": bare_mqtt,
        "kafka": bare_kafka, "pulsar": bare_pulsar}


def bare_in_processes(dep, system: str, n: int, in_flight: int, size: int, procs: int) -> float:
    """The bare loop in `procs` forked processes, n / procs messages each, all starting to
    send together: messages ÷ (last ack anywhere − first send anywhere)."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    Clock.barrier = ctx.Barrier(procs)
    out = ctx.Queue()

    def child() -> None:
        import gc

        gc.freeze()  # as workload/processes.py does: nothing of the parent's is finalized here
        try:
            asyncio.run(BARE[system](dep, n // procs, in_flight, size))
            out.put(Clock.last)
        except BaseException as e:
            out.put(f"{type(e).__name__}: {e}")
        out.close()
        out.join_thread()
        os._exit(0)  # without freeing the client objects (see _pulsar_loop)

    try:
        ps = [ctx.Process(target=child, daemon=True) for _ in range(procs)]
        for p in ps:
            p.start()
        got = [out.get(timeout=TIMEOUT + 60) for _ in ps]
        for p in ps:
            p.join(30)
    finally:
        Clock.barrier = None
    bad = [g for g in got if isinstance(g, str)]
    if bad:
        raise SystemExit(f"{system}: a bare process failed: {bad[0]}")
    return (n // procs * procs) / (max(t1 for _, t1 in got) - min(t0 for t0, _ in got))


async def recorded_in_processes(dep, s, hist: Path, k: int, procs: int) -> float:
    """The harness's producers as `workload.processes` runs them: `procs` processes of one
    ProducerLoop each, n / procs messages each; the rate from their history rows (first send
    to last ack, the loop's own clock), after all have connected."""
    import multiprocessing

    from brokerchaos.workload import ProducerProcesses

    w = s.workload.model_copy(update={"messages": s.workload.messages // procs})
    barrier = multiprocessing.get_context("fork").Barrier(procs)
    origin = time.monotonic_ns()
    run = f"round-{k}-x{procs}"
    where = hist / run

    def make(name: str) -> ProducerLoop:
        client = dep.client.producer(name)
        inner_open = client.open

        async def open_then_wait(on_outcome) -> None:
            await inner_open(on_outcome)
            barrier.wait(60)

        client.open = open_then_wait
        return ProducerLoop(name, client, Recorder(where, run, name, origin), w)

    names = [f"p{i}" for i in range(1, procs + 1)]
    group = ProducerProcesses(names, procs, w, make, lambda: None, dep.client.forked)
    await group.start()
    await group.run(time.monotonic() + TIMEOUT)
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    t = ds.dataset(str(where)).to_table(columns=["type", "t_ns", "producer", "value"])
    sends = t.filter(pc.equal(t["type"], "send"))["t_ns"]
    acks = t.filter(pc.equal(t["type"], "ack"))
    acked = len(set(zip(acks["producer"].to_pylist(), acks["value"].to_pylist())))
    return acked / ((pc.max(acks["t_ns"]).as_py() - pc.min(sends).as_py()) / 1e9)


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


async def rounds(dep, s, rounds_n: int, hist: Path, procs: int = 1) -> dict:
    await dep.up(timeout=180)
    w = s.workload
    # pyarrow's Parquet writer loads its parts on the first flush (0.4 s): a session has
    # done that before its first producer does, in its warm-up analysis
    with Recorder(hist.parent / "warm-up", "warm-up", "p1", time.monotonic_ns()) as r:
        r.record("send", "p1", 1)
    sides = ("bare", "recorded") if procs == 1 else ("bare", "recorded", f"bare-{procs}", f"recorded-{procs}")
    out: dict = {which: [] for which in sides}
    cpu: dict = {which: [] for which in ("bare", "recorded", "children")}
    try:
        for k in range(rounds_n):
            order = sides if k % 2 == 0 else sides[::-1]
            for which in order:
                # a fresh stream each time, by a name of its own (Kafka deletes topics lazily)
                dep.begin_run(f"bench-{k}-{which}", dep.ctx.logdir)
                await dep.client.create_stream(timeout=60)
                cpu0, kids0 = time.process_time(), _children_cpu()
                try:
                    if which == "bare":
                        rate = await BARE[s.system](dep, w.messages, w.in_flight, w.message_size)
                    elif which == "recorded":
                        rate = await recorded(dep, s, hist, k)
                    elif which.startswith("bare-"):
                        rate = await asyncio.to_thread(bare_in_processes, dep, s.system, w.messages, w.in_flight,
                                                       w.message_size, procs)
                    else:
                        rate = await recorded_in_processes(dep, s, hist, k, procs)
                    out[which].append(round(rate))
                    if which in cpu:  # this process's threads, the client library's included
                        cpu[which].append(round((time.process_time() - cpu0) / w.messages * 1e6, 1))
                    if which == "recorded":  # a Java client's process, reaped at the phase's end (its start included)
                        cpu["children"].append(round((_children_cpu() - kids0) / w.messages * 1e6, 1))
                finally:
                    await dep.client.drop_stream()
    finally:
        await dep.client.close()
    return out, cpu


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def bench(case: str, messages: int, rounds_n: int, procs: int = 1) -> dict:
    doc = sc.load_document(ROOT / "scenarios" / SCENARIOS[case])
    system = doc["system"]
    doc["options"] = {**(doc.get("options") or {}), **OPTIONS.get(case, {})}
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
            got, cpu = sb.run_client(lambda: rounds(dep, s, rounds_n, Path(tmp) / "history", procs),
                                timeout=180 + rounds_n * 3 * (TIMEOUT + 60))
            rows = _sends_and_acks(Path(tmp) / "history")
        finally:
            dep.stop()
    want = rounds_n * (messages + (messages // procs * procs if procs > 1 else 0))
    if rows.get("acked") != want or rows.get("sent") != want:
        raise SystemExit(f"{case}: the recorded rounds wrote {rows}, expected {want} messages sent and acked")
    best = {k: max(v) for k, v in got.items()}
    med = {k: statistics.median(v) for k, v in got.items()}
    out = {"system": case, "scenario": SCENARIOS[case], "messages": messages, "in_flight": s.workload.in_flight,
           "processes": procs, "msgs_per_s": got, "best": best, "median": med,
           "cpu_us_per_msg": {k: statistics.median(v) for k, v in cpu.items()},
           "ratio_best": round(best["recorded"] / best["bare"], 3),
           "ratio_median": round(med["recorded"] / med["bare"], 3), "recorded_rows": rows}
    if procs > 1:
        # against the fastest bare loop: in one process, or in as many as the recorded side has
        rec, bare = f"recorded-{procs}", max(("bare", f"bare-{procs}"), key=lambda k: med[k])
        out.update({"reference": bare, f"ratio_median_{procs}": round(med[rec] / med[bare], 3),
                    f"ratio_best_{procs}": round(best[rec] / max(best["bare"], best[f"bare-{procs}"]), 3)})
    return out


def _sends_and_acks(hist: Path) -> dict:
    """What the recorded rounds wrote: every message sent and acked (checked), and the rows."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    t = ds.dataset(str(hist)).to_table(columns=["run", "producer", "value", "type"])
    counts = {r["values"]: r["counts"] for r in pc.value_counts(t["type"]).to_pylist()}
    # a resend after a timeout is two sends and maybe two acks of one message: counted once here
    for kind, key in (("send", "sent"), ("ack", "acked")):
        k = t.filter(pc.equal(t["type"], kind))
        counts[key] = len(set(zip(*(k[c].to_pylist() for c in ("run", "producer", "value")))))
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--systems", default=",".join(SCENARIOS))
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--processes", type=int, default=1,
                    help="recorded producers in this many processes (workload.processes), one producer each; the bare "
                         "loop runs in one process and in as many, the faster is the reference")
    ap.add_argument("--switch", type=float, default=SWITCH_S,
                    help=f"the interpreter's switch interval for both loops, seconds (default {SWITCH_S}: a run's "
                         "write phase's; Python's own is 0.005)")
    args = ap.parse_args()
    if not args.switch > 0:
        print("--switch: must be more than 0 seconds", file=sys.stderr)
        sys.exit(2)
    sys.setswitchinterval(args.switch)
    if args.processes < 1:
        print("--processes: must be at least 1", file=sys.stderr)
        sys.exit(2)
    for system in args.systems.split(","):
        if system not in SCENARIOS:
            print(f"--systems: unknown system {system!r} (one of {', '.join(SCENARIOS)})", file=sys.stderr)
            sys.exit(2)
    # a SIGTERM unwinds like an error: every cluster stopped, every namespace removed
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        for system in args.systems.split(","):
            print(json.dumps(bench(system, args.messages, args.rounds, args.processes)), flush=True)
    except Terminated:
        print("terminated: clusters stopped, namespaces removed", file=sys.stderr)
        sys.exit(143)


if __name__ == "__main__":
    sys.exit(main())
