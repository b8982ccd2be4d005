"""Client libraries' own connection reports into client events, without a broker: the
Pulsar C++ client's log lines (as pulsar-client 3 writes them, recorded from a topic
unload), and aio-pika's close callbacks. (NATS, Kafka, Redis and MQTT are checked against
real brokers in the integration tests.)"""
import asyncio
import logging
from types import SimpleNamespace

from brokerchaos.systems.pulsar.client import CLIENT_LOG, PulsarProducer, _ProducerStates


def test_a_rescheduled_producer_is_a_disconnect_and_its_next_creation_a_reconnect():
    at = {("198.18.0.12", 6650): "n2", ("198.18.0.13", 6650): "n3"}
    system = SimpleNamespace(cluster=SimpleNamespace(node_at=lambda h, p: at.get((h, p))),
                             ctx=SimpleNamespace(scenario=SimpleNamespace(workload=SimpleNamespace(dedup=False))))
    p = PulsarProducer(system, "p1")
    events: list = []
    p.on_event = lambda *e: events.append(e)
    CLIENT_LOG.listeners = frozenset({_ProducerStates(p, "persistent://public/default/bc-run-001", "p1-run-001")})

    def line(text, level=logging.INFO):
        CLIENT_LOG.emit(logging.LogRecord("x", level, "", 0, text, None, None))

    t = "[persistent://public/default/bc-run-001, p1-run-001]"
    line(f"{t} Created producer on broker [198.18.0.100:43880 -> 198.18.0.12:6650] ")  # the first: no event
    # another producer's lines, and a consumer's, are not this one's
    line("[persistent://public/default/bc-run-001, p2-run-001] Schedule reconnection in 0.1 s")
    line("[persistent://public/default/bc-run-001, live-l1, 0] Schedule reconnection in 0.1 s")
    assert events == []
    line(f"{t} Schedule reconnection in 0.1 s")  # its connection lost
    assert events[0][:2] == ("disconnect", "n2")
    line("[198.18.0.100:43880 -> 198.18.0.12:6650] Received send error from server: fenced", logging.WARNING)
    line(f"{t} Schedule reconnection in 0.3 s")  # a second attempt is the same outage
    line(f"{t} Created producer on broker [198.18.0.100:42442 -> 198.18.0.13:6650] ")
    assert [e[:2] for e in events] == [("disconnect", "n2"), ("reconnect", "n3")]
    line(f"{t} Closing producer for topic persistent://public/default/bc-run-001")  # our own close
    assert len(events) == 2
    CLIENT_LOG.listeners = frozenset()


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

    from brokerchaos.systems.base import Handoff

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
