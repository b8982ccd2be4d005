"""RabbitMQ's client side: a durable queue, publisher confirms, the aio-pika client.

The workload: a durable queue declared on the first node (so a quorum queue's first
leader and a classic queue's home are n1), persistent messages published with publisher
confirms, many in flight, by producers connected to the other nodes; the read consumes
everything with manual acks.

Queue types (`options.queue_type`): quorum (Raft, the leader is the Raft leader), classic
(one node, not replicated: the positive control for loss on a node kill) and stream.
"""
from __future__ import annotations

import asyncio
import time
from typing import Optional

from ..base import Client, ClientEvents, DeliverCallback, OutcomeCallback, SystemError_
from ..consumer import LiveConsumer
from ..roles import Roles
from ..runtime import port_open, wait_until
from .cluster import AUTH, Management, node_of
from .ralog import MemberReader, last_index, member_dir


def _aio_pika():
    import logging

    import aio_pika

    # a refused connection while failing over is expected and reported by us, not logged
    for name in ("aio_pika", "aiormq"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    return aio_pika


class RabbitClient(Client):
    async def connect(self, timeout: float) -> None:
        first = self.cluster.node_names[0]

        async def look():
            return await port_open(self.cluster.address(first)), f"{first}'s AMQP port closed"

        await wait_until(look, timeout, "RabbitMQ")

    async def connection(self, node: str, timeout: float = 5.0):
        ip, port = self.cluster.address(node)
        return await asyncio.wait_for(
            _aio_pika().connect(host=ip, port=port, login=AUTH[0], password=AUTH[1], timeout=timeout,
                                client_properties={"connection_name": "brokerchaos"}),
            timeout + 1)

    @staticmethod
    async def close_connection(conn) -> None:
        """Close it, whatever state it is in, within 3 s."""
        await _close(conn)

    def queue_arguments(self) -> dict:
        qt = self.options.queue_type
        r = self.ctx.scenario.cluster.replicas
        ttl = {} if self.options.message_ttl is None else {"x-message-ttl": self.options.message_ttl * 1000}
        if qt == "quorum":
            return {"x-queue-type": "quorum", "x-quorum-initial-group-size": r, **ttl}
        if qt == "stream":
            return {"x-queue-type": "stream", "x-initial-cluster-size": r}
        return ttl

    async def create_stream(self, timeout: float) -> str:
        # a node that has just booted may still be enabling feature flags ("the corresponding
        # feature flag is disabled" for a quorum queue); one CI run on a loaded machine saw
        # that last past 30 s, so the first declare gets as long as the cluster's start
        deadline = time.monotonic() + max(timeout, 90)
        last: object = None
        first = self.cluster.node_names[0]
        while time.monotonic() < deadline:
            conn = None
            try:
                conn = await self.connection(first)
                ch = await conn.channel()
                await ch.declare_queue(self.stream_name, durable=True, arguments=self.queue_arguments())
                return self.stream_name
            except Exception as e:  # a fresh cluster may still be settling
                last = e
                await asyncio.sleep(0.3)
            finally:
                if conn is not None:
                    await _close(conn)
        raise SystemError_(f"could not declare queue {self.stream_name} within {timeout}s: {last!r}")

    async def drop_stream(self) -> None:
        conn = None
        try:
            conn = await self.connection(self.cluster.node_names[0], timeout=3.0)
            ch = await conn.channel()
            await asyncio.wait_for(ch.queue_delete(self.stream_name), 5)
        except Exception:  # best effort
            pass
        finally:
            if conn is not None:
                await _close(conn)

    async def reading_node(self, api: Management) -> str:
        """Where a consumer connects: the queue leader's node, else any running node."""
        names = self.cluster.node_names
        try:
            return await api.queue_leader(self.stream_name)
        except Exception:  # any running node will do
            return next((n for n in names if self.cluster.alive(n)), names[0])

    def producer_nodes(self) -> list[str]:
        names = self.cluster.node_names
        on = self.options.producers_on
        if on == "first" or len(names) == 1:
            return names[:1]
        return names[1:] if on == "others" else list(names)

    def producer(self, name: str) -> "RabbitProducer":
        nodes = self.producer_nodes()
        i = int(name[1:]) - 1 if name[1:].isdigit() else 0
        # round-robin, and fail over to the next node in the same order
        return RabbitProducer(self, name, nodes[i % len(nodes):] + nodes[:i % len(nodes)])

    def reader(self, name: str) -> "RabbitReader":
        return RabbitReader(self, name)

    def consumer(self, name: str) -> "RabbitConsumer":
        return RabbitConsumer(self, name)

    # a quorum queue's members read one by one, before the end read settles what they hold
    replica_reads = True
    replicas_before_read = True

    async def replica_nodes(self) -> list[str]:
        """The nodes with a member of the run's queue in their files, once their logs end at
        the same index (a member restarted catches up after the cluster is whole), or after
        `workload.read_idle` less a second: then they are read as they are."""
        ra = getattr(self.cluster, "ra_dir", None)
        if ra is None:
            raise SystemError_("this cluster's files are not the harness's to read (an external cluster)")
        nodes = [n for n in self.cluster.node_names if member_dir(ra(n), self.stream_name) is not None]
        if not nodes:
            raise SystemError_(f"no node has a member of {self.stream_name} in its files")
        deadline = time.monotonic() + max(self.ctx.scenario.workload.read_idle - 1.0, 0.5)
        while time.monotonic() < deadline:
            ends = {n: await asyncio.to_thread(last_index, ra(n), self.stream_name) for n in nodes}
            if len(set(ends.values())) == 1:
                break
            await asyncio.sleep(0.5)
        return nodes

    def replica_reader(self, name: str, node: str) -> "MemberReader":
        return MemberReader(self.cluster, node, self.stream_name)

    group_kinds = ("queue",)  # competing consumers on the run's queue (group.py)
    group_takes = True

    @classmethod
    def group_error(cls, scenario) -> Optional[tuple[str, str]]:
        if (scenario.options or {}).get("queue_type", "quorum") == "stream":
            return "kind", ("competing consumers share a quorum or classic queue; a stream is read by offset "
                            "(options.queue_type)")
        if scenario.workload.group.commit == "auto":
            return "commit", ("RabbitMQ's auto-ack (no_ack) is not offered: what the broker pushed to a member "
                              "killed before reading it leaves no trace and would be taken for the broker's loss; "
                              "`before` acks each message as it arrives, the same loss made visible")
        return None

    def group_member(self, name: str, spec, events):
        from .group import RabbitGroupMember

        return RabbitGroupMember(self, name, spec, events)


class RabbitRoles(Roles):
    """Leaders and health from the management API, by majority of the nodes that answer."""

    def __init__(self, ctx, cluster, client) -> None:
        super().__init__(ctx, cluster, client)
        self.api = Management(cluster)

    async def leader(self) -> str:
        return await self.api.queue_leader(self.ctx.stream_name)

    async def replicas(self) -> list[str]:
        info = await self.api.queue(self.ctx.stream_name)
        lead = node_of(self.cluster, info.get("leader") or info.get("node") or "")
        members = [node_of(self.cluster, m) for m in info.get("members") or []]
        return ([lead] if lead else []) + [m for m in members if m and m != lead]

    async def whole(self) -> tuple[bool, str]:
        return await self.api.whole()

    async def group_coordinator(self, group: str) -> str:
        """The queue's leader hands its messages to the competing consumers."""
        return await self.leader()

    async def stepdown(self, node: str, role: str) -> str:
        """3.10 has no leader transfer for one queue: the operator's verb is draining the
        node (maintenance mode), which moves every quorum-queue leader off it and closes
        its client listeners; heal revives it."""
        if role != "leader":
            raise LookupError("RabbitMQ has no coordinator role to step down from")
        if not hasattr(self.cluster, "maintenance"):
            raise LookupError("draining needs a cluster the harness started (external: a `command` fault hook)")
        holder = await self.leader()
        if holder != node:
            raise LookupError(f"{node} is not the queue leader ({holder} is)")
        await asyncio.to_thread(self.cluster.maintenance, node, "drain")
        return "rabbitmq-upgrade drain"

    async def stepdown_every(self, node: str) -> dict:
        """The drain moves every quorum-queue leader off the node, whichever it leads."""
        if not hasattr(self.cluster, "maintenance"):
            raise LookupError("draining needs a cluster the harness started (external: a `command` fault hook)")
        await asyncio.to_thread(self.cluster.maintenance, node, "drain")
        return {"verb": "rabbitmq-upgrade drain"}

    async def step_back(self, node: str) -> None:
        if self.cluster.alive(node):
            await asyncio.to_thread(self.cluster.maintenance, node, "revive")

    async def set_replicas(self, count: int) -> dict:
        """A quorum queue's members changed to `count`: followers deleted one by one (the
        last joined first), or nodes that hold no member added (`rabbitmq-queues
        delete_member` / `add_member`, asked of the leader's node). New members catch up
        from the leader's log."""
        if not hasattr(self.cluster, "queue_member"):
            raise LookupError("membership changes need a cluster the harness started (external: a `command` hook)")
        q = self.ctx.stream_name
        before = await self.replicas()
        lead = before[0]
        if count < len(before):
            verb, changed = "delete_member", list(reversed(before[1:]))[:len(before) - count]
        else:
            verb, changed = "add_member", [n for n in self.cluster.node_names if n not in before][:count - len(before)]
        for n in changed:
            await asyncio.to_thread(self.cluster.queue_member, lead, verb, q, n)
        return {"verb": f"rabbitmq-queues {verb} {' '.join(changed) or '(none)'}", "replicas_before": len(before),
                "peers_before": before, "peers_after": await self.replicas()}

    async def stream_ready(self) -> bool:
        """The queue has a leader on a running node and every member is online."""
        info = await self.api.queue(self.ctx.stream_name)
        lead = info.get("leader") or info.get("node")
        members = set(info.get("members") or [lead])
        online = set(info.get("online") or [lead])
        return bool(lead and self.cluster.alive(node_of(self.cluster, lead) or "") and members <= online
                    and info.get("state") in (None, "running", "live"))


async def _close(conn) -> None:
    try:
        await asyncio.wait_for(conn.close(), 3)
    except Exception:
        pass


class RabbitProducer(ClientEvents):
    """Persistent messages with publisher confirms; each publish is its own task, so as
    many are in flight as the producer loop allows. A lost connection makes the messages
    on it *unknown* and moves the producer to the next node. Client events: aio-pika's
    close_callbacks of the connection in use (a plain connection: aio-pika does not
    reconnect it), and the next connection opened after one."""

    def __init__(self, system: RabbitClient, name: str, nodes: list[str]) -> None:
        self.system = system
        self.name = name
        self.nodes = nodes
        self.idx = 0
        self.conn = None
        self.exchange = None
        self.current: Optional[str] = None
        self.on_outcome: Optional[OutcomeCallback] = None
        self.tasks: set[asyncio.Task] = set()
        self.ready = asyncio.Event()
        self.reconnecting: Optional[asyncio.Task] = None
        self.generation = 0
        self.down = False  # a disconnect was recorded; the next connection is its reconnect
        self.closing = False

    async def open(self, on_outcome: OutcomeCallback) -> None:
        self.on_outcome = on_outcome
        await self._reconnect(first=True)

    async def _reconnect(self, first: bool = False) -> None:
        self.ready.clear()
        old, self.conn, self.exchange, self.current = self.conn, None, None, None
        if old is not None:
            await _close(old)
        attempt = 0
        while True:
            node = self.nodes[self.idx % len(self.nodes)]
            try:
                conn = await self.system.connection(node, timeout=2.0)
                ch = await conn.channel(publisher_confirms=True)
                self.conn, self.exchange, self.current = conn, ch.default_exchange, node
                conn.close_callbacks.add(self._closed)
                self.generation += 1
                self.ready.set()
                if self.down:
                    self.down = False
                    self.on_event("reconnect", node, "aio-pika: connected")
                return
            except Exception as e:  # try the next node
                attempt += 1
                self.idx += 1
                if first and attempt >= 3 * len(self.nodes):
                    raise SystemError_(f"{self.name}: cannot connect to {self.nodes}: {e!r}") from e
                await asyncio.sleep(0.1 if attempt < len(self.nodes) else 0.5)

    def _closed(self, conn, exc) -> None:
        # our own closes (a failover's, the run's end) come from a connection no longer in use
        if conn is self.conn and not self.closing:
            self.down = True
            self.on_event("disconnect", self.current, f"aio-pika close_callbacks: {exc!r}"[:200])

    def _lost(self, generation: int) -> None:
        if generation == self.generation and (self.reconnecting is None or self.reconnecting.done()):
            self.idx += 1
            self.reconnecting = asyncio.ensure_future(self._reconnect())

    async def send(self, value: int, payload: bytes) -> None:
        if not self.ready.is_set():
            # backpressure while we fail over; the producer loop's ack_timeout bounds it
            try:
                await asyncio.wait_for(self.ready.wait(), self.system.ctx.scenario.workload.ack_timeout)
            except asyncio.TimeoutError:
                raise ConnectionError("not connected to any node") from None
        if not self.send_now(value, payload):
            raise ConnectionError("not connected to any node")

    def send_now(self, value: int, payload: bytes) -> bool:
        if not self.ready.is_set():  # failing over: `send` waits for the next connection
            return False
        t = asyncio.ensure_future(self._publish(value, payload, self.exchange, self.current, self.generation))
        self.tasks.add(t)
        t.add_done_callback(self.tasks.discard)
        return True

    async def _publish(self, value: int, payload: bytes, exchange, node: str, generation: int) -> None:
        ap = _aio_pika()
        o = self.system.options
        msg = ap.Message(payload, delivery_mode=ap.DeliveryMode.PERSISTENT if o.persistent
                         else ap.DeliveryMode.NOT_PERSISTENT)
        try:
            await exchange.publish(msg, routing_key=self.system.stream_name, mandatory=o.mandatory)
        except asyncio.CancelledError:
            raise
        except ap.exceptions.DeliveryError as e:
            # Basic.Nack: the broker failed to store it; Basic.Return: routed nowhere
            frame = getattr(e, "frame", None)
            text = getattr(frame, "reply_text", None)
            self.on_outcome(value, "nack", None, node, f"Basic.{type(frame).__name__}" + (f": {text}" if text else ""))
            return
        except Exception as e:  # connection or channel lost: the outcome is unknowable
            self.on_outcome(value, "unknown", None, node, f"{type(e).__name__}: {e}"[:200])
            self._lost(generation)
            return
        self.on_outcome(value, "ack", None, node, None)

    def node(self) -> Optional[str]:
        return self.current if self.ready.is_set() else None

    async def close(self) -> None:
        self.closing = True
        for t in list(self.tasks):
            t.cancel()
        if self.reconnecting is not None:
            self.reconnecting.cancel()
        await asyncio.gather(*self.tasks, *( [self.reconnecting] if self.reconnecting else []),
                             return_exceptions=True)
        if self.conn is not None:
            await _close(self.conn)


class RabbitReader:
    """Consumes the whole queue with manual acks (stream: from the first offset) until
    the broker reports nothing left."""

    def __init__(self, client: RabbitClient, name: str) -> None:
        self.system = client
        self.name = name
        self.api = Management(client.cluster)

    async def read(self, deliver: DeliverCallback, idle: float) -> str:
        s = self.system
        deadline = time.monotonic() + idle
        conn, node, last = None, None, ""
        while conn is None:
            # a node just restarted may still be booting
            node = await s.reading_node(self.api)
            try:
                conn = await s.connection(node, timeout=2.0)
            except Exception as e:
                last = f"cannot connect to {node}: {type(e).__name__}: {e}"
                if time.monotonic() > deadline:
                    return f"incomplete: {last}"
                await asyncio.sleep(0.5)
        try:
            ch = await conn.channel()
            await ch.set_qos(prefetch_count=s.options.prefetch)
            try:
                q = await ch.declare_queue(s.stream_name, passive=True)
            except Exception as e:  # e.g. a classic queue whose node is down
                return f"incomplete: queue {s.stream_name} unavailable on {node}: {type(e).__name__}: {e}"
            return await self._consume_all(ch, q, node, deliver, idle)
        finally:
            await _close(conn)

    async def _consume_all(self, ch, q, node: str, deliver: DeliverCallback, idle: float) -> str:
        """Every message of the queue (a stream's up to the count the API gave first), acked
        as it goes; ends when the queue reports nothing left, or nothing came for `idle` s."""
        s = self.system
        stream = s.options.queue_type == "stream"
        expected = int((await self.api.queue(s.stream_name)).get("messages") or 0) if stream else None
        got = 0
        last_progress = time.monotonic()
        inbox: asyncio.Queue = asyncio.Queue()
        tag = await q.consume(inbox.put, no_ack=False, arguments={"x-stream-offset": "first"} if stream else None)
        try:
            while True:
                try:
                    message = await asyncio.wait_for(inbox.get(), 0.5)
                except asyncio.TimeoutError:
                    if stream and expected is not None and got >= expected:
                        return "complete"
                    if not stream and (await ch.declare_queue(s.stream_name, passive=True)
                                       ).declaration_result.message_count == 0:
                        return "complete"
                    if time.monotonic() - last_progress > idle:
                        return f"incomplete: no delivery for {idle:.0f}s ({got} read)"
                    continue
                got += 1
                last_progress = time.monotonic()
                off = message.headers.get("x-stream-offset") if stream and message.headers else None
                deliver(message.body, None if off is None else str(off), node)
                if got % 500 == 0 or inbox.empty():
                    await message.ack(multiple=True)
        finally:
            try:
                await asyncio.wait_for(q.cancel(tag), 3)
            except Exception:
                pass


class RabbitConsumer(LiveConsumer):
    """Consumes the run's queue while producers publish, with manual acks (multiple, every
    100 messages or when nothing more is waiting), as an application does. Consuming takes
    a message out of a classic or quorum queue, so these deliveries are part of the end
    check; a stream is read from its first offset and only observed. A lost connection
    (aio-pika's plain connection does not come back) makes it connect again, to the queue
    leader's node first; unacked messages are redelivered by the broker."""

    def __init__(self, client: RabbitClient, name: str) -> None:
        super().__init__(client, name)
        self.api = Management(client.cluster)
        self.stream = client.options.queue_type == "stream"
        self.checks = not self.stream
        self.next_offset: Optional[int] = None
        self.conn = None

    async def consume(self, deliver: DeliverCallback) -> None:
        s = self.system
        node = await s.reading_node(self.api)
        await self.shutdown()
        self.conn = await s.connection(node, timeout=2.0)
        ch = await self.conn.channel()
        await ch.set_qos(prefetch_count=s.options.prefetch)
        q = await ch.declare_queue(s.stream_name, passive=True)
        inbox: asyncio.Queue = asyncio.Queue()
        args = None
        if self.stream:
            args = {"x-stream-offset": "first" if self.next_offset is None else self.next_offset}
        await q.consume(inbox.put, no_ack=False, arguments=args)
        n = 0
        while True:
            try:
                message = await asyncio.wait_for(inbox.get(), 1.0)
            except asyncio.TimeoutError:
                if self.conn.is_closed:
                    raise ConnectionError(f"connection to {node} lost") from None
                continue
            n += 1
            off = message.headers.get("x-stream-offset") if self.stream and message.headers else None
            if off is not None:
                self.next_offset = int(off) + 1
            deliver(message.body, None if off is None else str(off), node)
            if n % 100 == 0 or inbox.empty():
                await message.ack(multiple=True)

    async def shutdown(self) -> None:
        if self.conn is not None:
            await _close(self.conn)
            self.conn = None
