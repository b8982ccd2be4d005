"""The MQTT client side over paho-mqtt, served by the run's event loop: a connection (paho's
external loop), the transmitter (QoS 1 publishes, PUBACK = ack) and the receiver (a
persistent session, reconnecting with it to the next node when its node goes away)."""
from __future__ import annotations

import asyncio
import random
import select
import threading
import time
from typing import Optional

from ..base import Client, ClientEvents, DeliverCallback, OutcomeCallback, SystemError_
from ..runtime import Handoff, port_open
from .replicated import in_effect


def _paho():
    import paho.mqtt.client as mqtt

    return mqtt


# the brokers whose shared subscriptions ($share/...) the harness runs
SHARED = ("mosquitto", "vernemq")


class MqttClient(Client):
    """Producers publish at QoS 1; the reader is the live receiver (one per run)."""

    many_topics = False

    def __init__(self, ctx, cluster) -> None:
        super().__init__(ctx, cluster)
        self.receiver: Optional[MqttReceiver] = None

    def _picks(self) -> tuple[str, str]:
        """(transmitter's node, receiver's node): drawn per run with the seed where random."""
        o, names = self.options, self.cluster.node_names
        rng = random.Random(f"{self.ctx.scenario.seed}/{self.ctx.run_id}/mqtt-nodes")
        tx = o.tx_node if o.tx_node != "random" else rng.choice(names)
        rx = o.rx_node if o.rx_node != "random" else rng.choice(names)
        return tx, rx

    @property
    def tx_node(self) -> str:
        return self._picks()[0]

    @property
    def rx_node(self) -> str:
        return self._picks()[1]

    def mqtt_addr(self, node: str) -> tuple[str, int]:
        return self.cluster.address(node, "mqtt")

    async def connect(self, timeout: float) -> None:
        await mqtt_ports(self.cluster, timeout)

    @property
    def topic(self) -> str:
        """`options.topic`, and on an external cluster a level of the session's own below it."""
        return f"{self.options.topic}/{self.ctx.tag}" if self.ctx.tag else self.options.topic

    async def create_stream(self, timeout: float) -> str:
        return self.topic

    def producer(self, name: str) -> "MqttProducer":
        return MqttProducer(self, name)

    def reader(self, name: str) -> "MqttReceiver":
        self.receiver = MqttReceiver(self, name)
        return self.receiver

    def consumer(self, name: str) -> "MqttReceiver":
        # the reader is live already; more subscribers with sessions of their own observe
        return MqttReceiver(self, name)

    async def close(self) -> None:
        self.receiver = None

    group_kinds = ("shared",)  # an MQTT shared subscription ($share/<group>/<topic>)

    @classmethod
    def group_error(cls, scenario) -> Optional[tuple[str, str]]:
        broker = (scenario.options or {}).get("broker", "rabbitmq")
        if broker not in SHARED:
            return "kind", (f"the harness runs MQTT shared subscriptions on {', '.join(SHARED)}, not on {broker} "
                            "(options.broker)")
        return None

    def group_member(self, name: str, spec, events):
        from .group import MqttGroupMember

        return MqttGroupMember(self, name, spec, events)


async def mqtt_ports(cluster, timeout: float) -> None:
    """Every node's MQTT port accepts a connection."""
    deadline = time.monotonic() + timeout
    for n in cluster.node_names:
        while True:
            if not cluster.alive(n):
                raise SystemError_(f"{n} is not running")
            if await port_open(cluster.address(n, "mqtt")):
                break
            if time.monotonic() > deadline:
                raise SystemError_(f"MQTT port of {n} not open within {timeout}s")
            await asyncio.sleep(0.2)


async def _first(a: asyncio.Event, b: asyncio.Event, timeout: float) -> Optional[asyncio.Event]:
    ta, tb = asyncio.ensure_future(a.wait()), asyncio.ensure_future(b.wait())
    done, pending = await asyncio.wait({ta, tb}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    for t in pending:
        t.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    return a if ta in done else b if tb in done else None


_READ_BURST = 64


class _Connection:
    """One paho client on one node, its socket served by the asyncio loop (paho's external
    loop: loop_read when readable, loop_write when it has something to send, loop_misc once
    a second); callbacks are handed to the loop's next turn. A new one per (re)connection,
    so paho never replays old messages.

    Not paho's own thread: a publish from another thread takes paho's message lock against
    that thread and wakes it through a socket pair, and every callback takes the interpreter
    lock back; measured against a local Mosquitto, QoS 1, 100 in flight, the same loop
    without the thread sends 29,000 msg/s at 34 µs of CPU a message, with it 17,900 at 71."""

    def __init__(self, addr: tuple[str, int], keepalive: int, client_id: str, clean: bool, node: str, loop,
                 on_message=None, on_publish=None, on_lost=None) -> None:
        mqtt = _paho()
        self.node = node
        self.loop = loop
        self.handoff = Handoff(loop)
        self.connected = asyncio.Event()
        self.lost = False
        self.closed = False
        self.result: Optional[str] = None
        self.sock = None  # the socket the loop watches, while paho has it open
        self.sock_closed = asyncio.Event()
        self.misc: Optional[asyncio.Task] = None
        c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=clean,
                        reconnect_on_failure=False)
        # no bound of paho's: the producer loop keeps the workload's, and with one paho looks
        # through every message under way for a queued one at each PUBACK (a third of its
        # time per message at 100 in flight)
        c.max_inflight_messages_set(0)
        c.max_queued_messages_set(0)

        self.subscribed = asyncio.Event()
        self.refused = asyncio.Event()
        self._wire(c, on_message, on_publish, on_lost)
        self.client = c
        self.keepalive = keepalive
        self.addr = addr
        self._thread = threading.get_ident()

    def _wire(self, c, on_message, on_publish, on_lost) -> None:
        """paho's callbacks, each handed to the loop (_hand, _on_loop)."""
        def on_connect(_c, _u, _flags, rc, _p=None):
            self.result = str(rc)
            if not rc.is_failure:
                self._hand(self.connected.set)

        def on_disconnect(_c, _u, _flags, rc, _p=None):
            self.lost = True
            if on_lost is not None:
                self._hand(on_lost, self, str(rc))

        def on_subscribe(_c, _u, _mid, codes, _p=None):
            ok = all(not rc.is_failure for rc in codes)
            self._hand(self.subscribed.set if ok else self.refused.set)

        c.on_connect = on_connect
        c.on_disconnect = on_disconnect
        c.on_subscribe = on_subscribe
        if on_message is not None:
            c.on_message = lambda _c, _u, msg: self._hand(on_message, self, msg.payload)
        if on_publish is not None:
            c.on_publish = lambda _c, _u, mid, _rc=None, _p=None: self._hand(on_publish, self, mid)
        # the socket's life: opened (and its CONNECT queued) by reconnect() in a worker
        # thread, everything after on the loop
        c.on_socket_open = lambda _c, _u, sock: self._on_loop(self._watch, sock)
        c.on_socket_close = lambda _c, _u, sock: self._on_loop(self._unwatch, sock)
        c.on_socket_register_write = lambda _c, _u, sock: self._on_loop(self._want_write, sock)
        c.on_socket_unregister_write = lambda _c, _u, sock: self._on_loop(self._done_writing, sock)

    def _hand(self, fn, *args) -> None:
        """Out of paho's call, to the loop's next turn, in order; after the run's loop is
        gone, dropped."""
        self.handoff.put(fn, *args)

    def _on_loop(self, fn, sock) -> None:
        if threading.get_ident() == self._thread:
            fn(sock)
        else:
            try:
                self.loop.call_soon_threadsafe(fn, sock)
            except RuntimeError:  # the loop is closed: nothing watches it any more
                pass

    def _watch(self, sock) -> None:
        if self.closed or sock.fileno() < 0:  # given up on while reconnect() was connecting
            sock.close()
            return
        self.sock = sock
        self.loop.add_reader(sock, self._read)

    def _unwatch(self, sock) -> None:
        if sock is self.sock:
            self.sock = None
            self.loop.remove_reader(sock)
            self.loop.remove_writer(sock)
            self.sock_closed.set()

    def _want_write(self, sock) -> None:
        if sock is self.sock:
            self.loop.add_writer(sock, self.client.loop_write)

    def _done_writing(self, sock) -> None:
        if sock is self.sock:
            self.loop.remove_writer(sock)

    def _read(self) -> None:
        # paho's loop_read reads as many packets as it has QoS messages under way: one, for
        # a receiver, whose QoS 1 messages are answered as they come. A burst is read here
        # without a turn of the loop (an epoll round) per message.
        sock = self.sock
        for _ in range(_READ_BURST):
            self.client.loop_read()
            if self.sock is not sock or not select.select((sock,), (), (), 0)[0]:
                return

    async def _misc(self) -> None:
        # keepalive: PINGREQ when quiet, and the connection given up when the PINGRESP does
        # not come (how a partition is noticed); paho's own loop does this once a second
        while self.sock is not None:
            self.client.loop_misc()
            await asyncio.sleep(1.0)

    async def open(self, timeout: float) -> bool:
        try:
            # the TCP connect blocks (up to connect_timeout), so never on the loop: a node
            # behind a partition would hold every other task
            self.client.connect_timeout = timeout
            self.client.connect_async(self.addr[0], self.addr[1], keepalive=self.keepalive)
            # the socket's registration, handed over by the thread, runs before this returns
            await asyncio.wait_for(asyncio.to_thread(self.client.reconnect), timeout + 1)
            self.misc = asyncio.ensure_future(self._misc())
            await asyncio.wait_for(self.connected.wait(), timeout)
            return True
        except (OSError, asyncio.TimeoutError):
            await self.close()
            return False
        except asyncio.CancelledError:
            self._drop()
            raise

    def _drop(self) -> None:
        """Stop watching and close the socket, without a DISCONNECT."""
        self.closed = True
        if self.misc is not None:
            self.misc.cancel()
        sock = self.sock
        if sock is not None:
            self._unwatch(sock)
            sock.close()

    async def close(self) -> None:
        # a DISCONNECT, sent when the socket takes it; paho closes the socket after it
        if self.sock is not None and not self.closed:
            try:
                self.client.disconnect()
                await asyncio.wait_for(self.sock_closed.wait(), 2)
            except Exception:
                pass
        self._drop()


class _Failover(ClientEvents):
    """A client that stays on one node until it loses it, then tries the nodes in order
    from the next one, a fresh paho client per attempt, until one takes it. Its client
    events are paho's own: on_disconnect of the connection in use, on_connect (CONNACK
    accepted) of the one that replaces it."""

    def __init__(self, system: MqttClient, name: str) -> None:
        self.system = system
        self.name = name
        self.conn: Optional[_Connection] = None
        self.reconnecting: Optional[asyncio.Task] = None
        self.order: list[str] = []
        self.idx = 0
        self.closing = False
        self.errors: list[str] = []
        # the first CONNACK may wait for the broker to set MQTT up (NATS creates its streams
        # then: seen to take over 2 s on a fresh cluster); a failover must move on quickly
        self.connack_wait = 15.0

    async def _attempt(self, node: str, loop) -> Optional[_Connection]:
        raise NotImplementedError

    def _on_lost(self, conn: _Connection, why: str) -> None:
        """What the subclass must settle when its connection goes (before reconnecting)."""

    async def _begin(self, first: str) -> None:
        names = self.system.cluster.node_names
        i = names.index(first)
        self.order = names[i:] + names[:i]
        if not await self._connect(attempts=3 * len(self.order)):
            raise SystemError_(f"{self.name}: no MQTT node accepted a connection ({self.order}; "
                               f"{'; '.join(self.errors[-2:])})")
        self.connack_wait = 3.0

    async def _connect(self, attempts: int) -> bool:
        loop = asyncio.get_running_loop()
        for _ in range(attempts):
            conn = await self._attempt(self.order[self.idx % len(self.order)], loop)
            if conn is not None:
                self.conn = conn
                return True
            self.idx += 1
            await asyncio.sleep(0.2)
        return False

    def _lost(self, conn: _Connection, why: str) -> None:
        if conn is not self.conn or self.closing:
            return  # an old connection, or our own DISCONNECT
        self.errors.append(f"{conn.node}: {why}")
        self.on_event("disconnect", conn.node, f"paho on_disconnect: {why}"[:200])
        self._on_lost(conn, why)
        self.conn = None
        self.idx += 1
        if self.reconnecting is None or self.reconnecting.done():
            self.reconnecting = asyncio.ensure_future(self._reconnect(conn))

    async def _reconnect(self, old: _Connection) -> None:
        await old.close()
        while not await self._connect(attempts=len(self.order)):
            await asyncio.sleep(0.5)
        self.on_event("reconnect", self.conn.node, "paho on_connect")

    async def close(self) -> None:
        self.closing = True
        if self.reconnecting is not None:
            self.reconnecting.cancel()
            await asyncio.gather(self.reconnecting, return_exceptions=True)
        if self.conn is not None:
            # a clean DISCONNECT keeps a persistent session (and what it queues) on the broker
            await self.conn.close()
            self.conn = None


class MqttProducer(_Failover):
    """QoS 1 publishes; PUBACK is the ack. A lost connection makes its unanswered messages
    unknown, and the next connection (next node) starts clean: resends are the producer
    loop's, never paho's."""

    def __init__(self, system: MqttClient, name: str) -> None:
        super().__init__(system, name)
        self.pending: dict[tuple[int, int], tuple[int, str]] = {}  # (connection, mid) -> (value, node)
        self.on_outcome: Optional[OutcomeCallback] = None

    async def open(self, on_outcome: OutcomeCallback) -> None:
        self.on_outcome = on_outcome
        await self._begin(self.system.tx_node)

    async def _attempt(self, node: str, loop) -> Optional[_Connection]:
        conn = _Connection(self.system.mqtt_addr(node), self.system.options.keepalive,
                           f"{self.system.ctx.prefix}-{self.name}", True,
                           node, loop, on_publish=self._acked,
                           on_lost=self._lost)
        return conn if await conn.open(self.connack_wait) else None

    def _acked(self, conn: _Connection, mid: int) -> None:
        got = self.pending.pop((id(conn), mid), None)
        if got is not None:
            self.on_outcome(got[0], "ack", None, got[1], None)

    def _on_lost(self, conn: _Connection, why: str) -> None:
        for key in [k for k in self.pending if k[0] == id(conn)]:
            value, node = self.pending.pop(key)
            self.on_outcome(value, "unknown", None, node, f"connection lost: {why}"[:200])

    async def send(self, value: int, payload: bytes) -> None:
        if self.conn is None:
            deadline = time.monotonic() + self.system.ctx.scenario.workload.ack_timeout
            while self.conn is None:  # backpressure while failing over, bounded by the ack timeout
                if time.monotonic() > deadline:
                    raise ConnectionError("not connected to any node")
                await asyncio.sleep(0.01)
        if not self.send_now(value, payload):
            raise ConnectionError("not connected to any node")

    def send_now(self, value: int, payload: bytes) -> bool:
        conn = self.conn
        if conn is None:  # failing over: `send` waits for the next connection
            return False
        info = conn.client.publish(self.system.topic, payload, qos=self.system.options.qos)
        if info.rc != 0:
            raise ConnectionError(f"publish refused: {_paho().error_string(info.rc)}")
        if self.system.options.qos == 0:
            self.on_outcome(value, "unknown", None, conn.node, "QoS 0: no acknowledgement")
        else:
            self.pending[(id(conn), info.mid)] = (value, conn.node)
        return True

    def node(self) -> Optional[str]:
        return self.conn.node if self.conn is not None else None


class MqttReceiver(_Failover):
    """The live reader: subscribed before the transmitter starts, reconnecting with the
    same persistent session to the next node when its node goes away."""

    def __init__(self, system: MqttClient, name: str) -> None:
        super().__init__(system, name)
        self.deliver: Optional[DeliverCallback] = None
        self.last_delivery = time.monotonic()
        self.start_note: Optional[str] = None  # not on the node drawn; how long its subscription took to spread

    @property
    def client_id(self) -> str:
        return f"{self.system.ctx.prefix}-rx-{self.name}"

    @property
    def current(self) -> Optional[str]:
        return self.conn.node if self.conn is not None else None

    async def start(self, deliver: DeliverCallback) -> None:
        self.deliver = deliver
        await self._begin(self.system.rx_node)
        drawn, node = self.system.rx_node, self.conn.node
        notes = [f"on {node}, not on {drawn} ({'; '.join(self.errors[-2:])})"] if node != drawn else []
        spread = await in_effect(self.system.cluster, self.client_id, node, self.system.topic, self._subscribe_again)
        self.start_note = "; ".join(notes + ([f"subscription {spread}"] if spread else [])) or None

    async def _subscribe_again(self) -> None:
        """UNSUBSCRIBE and SUBSCRIBE on the connection (before the write: nothing is in flight),
        a new write to the broker's subscriber store."""
        conn, topic = self.conn, self.system.topic
        conn.subscribed.clear()
        conn.client.unsubscribe(topic)
        res, _ = conn.client.subscribe(topic, qos=self.system.options.qos)
        if res != 0 or await _first(conn.subscribed, conn.refused, 15.0) is not conn.subscribed:
            raise SystemError_(f"{self.name}: {conn.node} refused the subscription made again")

    async def _attempt(self, node: str, loop) -> Optional[_Connection]:
        o = self.system.options
        conn = _Connection(self.system.mqtt_addr(node), o.keepalive, self.client_id, o.clean_session, node, loop,
                           on_message=self._message, on_lost=self._lost)
        if not await conn.open(self.connack_wait):
            self.errors.append(f"{node}: no CONNACK within {self.connack_wait:.0f} s ({conn.result or 'no answer'})")
            return None
        res, _ = conn.client.subscribe(self.system.topic, qos=o.qos)
        # generous: NATS creates the session's JetStream consumers before its SUBACK, which on
        # a cluster that has just started was seen to take more than 5 s
        if res == 0 and await _first(conn.subscribed, conn.refused, 15.0) is conn.subscribed:
            return conn
        self.errors.append(f"{node}: subscription refused")
        await conn.close()
        return None

    def _message(self, conn: _Connection, payload: bytes) -> None:
        self.last_delivery = time.monotonic()
        self.deliver(payload, None, conn.node)

    async def finish(self, idle: float, all_acked_seen=lambda: False) -> str:
        """Keep reading until every acked message has arrived (then a short grace for
        duplicates right behind), or nothing new has arrived for `idle` seconds while
        connected, counted from the end of the write phase at the earliest."""
        self.last_delivery = max(self.last_delivery, time.monotonic())
        not_connected_since: Optional[float] = None
        checked = 0.0
        try:
            while True:
                now = time.monotonic()
                if self.conn is None:
                    not_connected_since = not_connected_since or now
                    bound = self.system.options.rx_reconnect_s
                    if now - not_connected_since > bound:
                        return f"incomplete: receiver not connected for {bound:.0f}s ({'; '.join(self.errors[-2:])})"
                else:
                    not_connected_since = None
                    quiet = now - self.last_delivery
                    if quiet > idle:
                        return "complete"
                    if quiet > 0.5 and now - checked > 0.5:
                        checked = now
                        if all_acked_seen():
                            return "complete"
                await asyncio.sleep(0.1)
        finally:
            await self.close()
