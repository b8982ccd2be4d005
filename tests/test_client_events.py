"""Client libraries' own connection reports into client events, without a broker: the
Pulsar C++ client's log file (lines as pulsar-client 3 writes them, recorded from a topic
unload), and aio-pika's close callbacks. (NATS, Kafka, Redis and MQTT are checked against
real brokers in the integration tests.)"""
import asyncio
import time
from datetime import datetime, timedelta
from types import SimpleNamespace

from brokerchaos.systems.pulsar.producer import LogTail, PulsarProducer, _ProducerStates


def test_a_rescheduled_producer_is_a_disconnect_and_its_next_creation_a_reconnect(tmp_path):
    """Lines as the C++ client's file logger writes them, read from the file the way a
    producer follows it."""
    at = {("198.18.0.12", 6650): "n2", ("198.18.0.13", 6650): "n3"}
    system = SimpleNamespace(cluster=SimpleNamespace(node_at=lambda h, p: at.get((h, p))),
                             ctx=SimpleNamespace(scenario=SimpleNamespace(workload=SimpleNamespace(dedup=False))))
    p = PulsarProducer(system, "p1")
    events: list = []
    p.on_event = lambda *e: events.append(e)
    log = tmp_path / "pulsar-client.log"
    log.write_text("2026-11-25 10:00:00.000 INFO  [1] ClientImpl:100 | an earlier run's line: not read\n")
    tail = LogTail(log)
    states = _ProducerStates(p, "persistent://public/default/bc-run-001", "p1-run-001")
    ago = datetime.now() - timedelta(seconds=2)

    def line(text, level="INFO ", ms=0):
        stamp = (ago + timedelta(milliseconds=ms)).strftime("%Y-%m-%d %H:%M:%S.%f")[:23]
        with log.open("a") as f:
            f.write(f"{stamp} {level} [140265023076032] ProducerImpl:123 | {text}\n")

    def read():
        for t, msg in tail.lines():
            states.line(t, msg)

    t = "[persistent://public/default/bc-run-001, p1-run-001]"
    line(f"{t} Created producer on broker [198.18.0.100:43880 -> 198.18.0.12:6650] ")  # the first: no event
    # another producer's lines, and a consumer's, are not this one's
    line("[persistent://public/default/bc-run-001, p2-run-001] Schedule reconnection in 0.1 s")
    line("[persistent://public/default/bc-run-001, live-l1, 0] Schedule reconnection in 0.1 s")
    read()
    assert events == []
    line(f"{t} Schedule reconnection in 0.1 s", ms=500)  # its connection lost
    with log.open("a") as f:
        f.write("2026-11-25 10:00:00.000 INFO  [1] ClientImpl:100 | half a li")  # not yet whole
    read()
    assert events[0][:2] == ("disconnect", "n2")
    # the line's own time, not when it was read: 1.5 s ago on the monotonic clock
    assert abs((time.monotonic_ns() - events[0][3]) / 1e9 - 1.5) < 0.3
    with log.open("a") as f:
        f.write("ne\n")
    line("[198.18.0.100:43880 -> 198.18.0.12:6650] Received send error from server: fenced", "WARN ")
    line(f"{t} Schedule reconnection in 0.3 s")  # a second attempt is the same outage
    line(f"{t} Created producer on broker [198.18.0.100:42442 -> 198.18.0.13:6650] ")
    read()
    assert [e[:2] for e in events] == [("disconnect", "n2"), ("reconnect", "n3")]
    line(f"{t} Closing producer for topic persistent://public/default/bc-run-001")  # our own close
    read()
    assert len(events) == 2
    tail.close()


def test_aio_pika_close_of_the_connection_in_use_is_a_disconnect_and_ours_is_not():
    """aio-pika's own close_callbacks, fired the way aio-pika fires them when the socket goes
    (a connection that never connected: no broker needed)."""
    from aio_pika.connection import Connection
    from yarl import URL

    from brokerchaos.systems.rabbitmq.client import RabbitProducer

    async def body():
        p = RabbitProducer(SimpleNamespace(), "p1", ["n1", "n2"])
        events: list = []
        p.on_event = lambda *e: events.append(e)

        def conn():
            c = Connection(URL("amqp://127.0.0.1:1/"))
            c.close_callbacks.add(p._closed)
            return c

        async def closed(c, exc):
            fut = asyncio.get_running_loop().create_future()
            fut.set_exception(exc)
            await c._on_connection_close(fut)

        p.conn, p.current = conn(), "n1"
        await closed(p.conn, ConnectionResetError("reset by peer"))
        assert [e[:2] for e in events] == [("disconnect", "n1")] and "reset by peer" in events[0][2]
        old, p.conn = p.conn, None  # a failover drops the old one before closing it
        await closed(old, ConnectionResetError("again"))
        p.conn, p.current = conn(), "n2"
        p.closing = True  # the run's end
        await closed(p.conn, ConnectionResetError("ours"))
        assert len(events) == 1 and p.down

    asyncio.run(body())


def test_callbacks_handed_from_library_threads_all_run_on_the_loop_in_order():
    # paho's and pulsar-client's threads hand their callbacks over in bursts (Handoff): none
    # may be lost or reordered, whatever the interleaving with the loop's drains
    import threading

    from brokerchaos.systems.runtime import Handoff

    got: list = []

    async def body():
        loop = asyncio.get_running_loop()
        h = Handoff(loop)
        done = asyncio.Event()
        n_threads, n = 4, 5000

        def take(thread, i):
            assert threading.current_thread() is threading.main_thread()
            got.append((thread, i))
            if len(got) == n_threads * n:
                done.set()

        def feed(thread):
            for i in range(n):
                h.put(take, thread, i)

        threads = [threading.Thread(target=feed, args=(k,)) for k in range(n_threads)]
        for t in threads:
            t.start()
        await asyncio.wait_for(done.wait(), 30)
        for t in threads:
            t.join()

    asyncio.run(body())
    assert len(got) == 4 * 5000
    for k in range(4):
        assert [i for t, i in got if t == k] == list(range(5000))


def test_pulsar_results_remembered_by_number_keep_their_own_outcome():
    import pulsar

    from brokerchaos.systems.pulsar.library import DEFINITE, outcome_of

    for name, result in pulsar.Result.__members__.items():
        want = ("ack", None) if name == "Ok" else ("nack" if name in DEFINITE else "unknown", name)
        assert outcome_of(result) == want and outcome_of(result) == want, name
