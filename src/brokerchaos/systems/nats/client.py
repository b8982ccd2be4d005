"""The harness's NATS client: the admin connection (stream made and dropped, its info) and the
producers. Publishing uses core publish with a per-message reply subject instead of
js.publish, so thousands of messages can be in flight at once (about 2x the throughput
here). Dedup: the `Nats-Msg-Id` header within the stream's duplicate window."""
from __future__ import annotations

import asyncio
import json
import time
from typing import Optional

from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from nats.js import api
from nats.js.errors import APIError

from ..base import Client, ClientEvents, OutcomeCallback, SystemError_
from .cluster import meta_whole, node_of_server
from .conn import _close, _connect
from .read import NatsConsumer, NatsReader
from .store import StoreReader


class NatsClient(Client):
    # reconnect_time_wait 0.2 s between attempts at one server
    reconnect_steps_ms = tuple(200.0 * k for k in range(1, 11))

    def __init__(self, ctx, cluster) -> None:
        super().__init__(ctx, cluster)
        self.nc = None
        self.js = None

    def servers(self) -> list[str]:
        return ["nats://{}:{}".format(*self.cluster.address(n)) for n in self.cluster.node_names]

    async def leader_node(self) -> str:
        """The node leading the stream, as the JetStream API says over this connection."""
        info = await self.info()
        if info.cluster is None or not info.cluster.leader:
            # single server without clustering: it is the leader
            if len(self.cluster.node_names) == 1:
                return self.cluster.node_names[0]
            raise SystemError_(f"stream {self.stream_name} has no leader")
        return await node_of_server(self.cluster, info.cluster.leader)

    async def leader_first(self) -> list[str]:
        """Every server's URL, the stream leader's first (options.producers_connect: leader)."""
        first = "nats://{}:{}".format(*self.cluster.address(await self.leader_node()))
        return [first] + [u for u in self.servers() if u != first]

    def node_of_url(self, netloc: str) -> Optional[str]:
        host, _, port = netloc.rpartition(":")
        return self.cluster.node_at(host, int(port)) if port.isdigit() else None

    async def connect(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        self.nc = await _connect(self.servers(), "brokerchaos-admin", timeout, check=self._all_running)
        self.js = self.nc.jetstream(timeout=2)
        last: Exception | None = None
        while time.monotonic() < deadline:
            self._all_running()
            try:
                await self.js.account_info()
                return
            except (APIError, NatsTimeout, asyncio.TimeoutError) as e:
                last = e
                await asyncio.sleep(0.1)
        raise SystemError_(f"JetStream not ready within {timeout}s: {last!r}")

    def _all_running(self) -> None:
        """A server of ours that exited while starting (its configuration refused: its log
        says why) is not waited for."""
        for n in self.cluster.node_names:
            if not self.cluster.alive(n):
                raise self.cluster.exited(n)

    async def create_stream(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                await self.js.add_stream(
                    name=self.stream_name,
                    subjects=[f"{self.stream_name}.>"],
                    num_replicas=self.ctx.scenario.cluster.replicas,
                    storage=api.StorageType.FILE,
                    duplicate_window=120.0,
                )
                await self._answered_everywhere(deadline)
                return self.stream_name
            except (APIError, NatsTimeout, asyncio.TimeoutError) as e:
                # right after start-up the meta leader may not yet know every peer
                last = e
                await asyncio.sleep(0.2)
        # an APIError's repr drops its code and description ("BadRequestError()"); its str keeps
        # them. Placement picks from the meta group's peers: its view says which it knew (once a
        # fresh 2.10.23 cluster's meta leader found none for 30 s, its error naming no reason)
        try:
            _, meta = await asyncio.wait_for(meta_whole(self.cluster), 5.0)
        except Exception as e:  # the error is the point; the view only helps read it
            meta = f"the meta group's view not read: {e!r}"
        raise SystemError_(f"could not create stream {self.stream_name} within {timeout}s: "
                           f"{type(last).__name__}: {last} ({meta})")

    async def _answered_everywhere(self, deadline: float) -> None:
        """Every server has a route to the stream's subjects. Only the stream's leader
        subscribes to them; the others learn it over the routes, and until then a publish
        there is answered "no responders" (once in CI: a fresh 2.15.1 cluster's routes still
        being paired off nacked the first 490 ms of the write on n2). The probe names another
        stream (Nats-Expected-Stream), which every release refuses before storing anything."""
        for node, url in zip(self.cluster.node_names, self.servers()):
            nc = await _connect([url], "brokerchaos-ready", max(1.0, deadline - time.monotonic()))
            try:
                await self._answered(nc, node, deadline)
            finally:
                await _close(nc)

    async def _answered(self, nc, node: str, deadline: float) -> None:
        """A probe published through `nc` (to `node`) is answered, asked again until `deadline`."""
        while True:
            try:
                await nc.request(f"{self.stream_name}._ready", b"", timeout=1, headers={"Nats-Expected-Stream": "-"})
                return
            except (NoRespondersError, NatsTimeout, asyncio.TimeoutError) as e:
                if time.monotonic() >= deadline:
                    said = "no responders" if isinstance(e, NoRespondersError) else "no answer within 1 s"
                    raise SystemError_(f"stream {self.stream_name} made, but {node} still has no "
                                       f"route to its subjects (a publish there: {said})") from None
                await asyncio.sleep(0.05)

    async def drop_stream(self) -> None:
        try:
            await self.js.delete_stream(self.stream_name)
        except Exception:  # best effort
            pass

    async def info(self):
        return await self.js.stream_info(self.stream_name)

    def producer(self, name: str) -> "NatsProducer":
        return NatsProducer(self, name)

    def reader(self, name: str) -> "NatsReader":
        return NatsReader(self, name)

    def consumer(self, name: str) -> "NatsConsumer":
        return NatsConsumer(self, name)

    replica_reads = True

    def replica_reader(self, name: str, node: str) -> "StoreReader":
        return StoreReader(self.cluster, node)

    group_kinds = ("durable",)  # one durable pull consumer, shared by the members

    def group_member(self, name: str, spec, events):
        from .group import NatsGroupMember

        return NatsGroupMember(self, name, spec, events, _connect, _close)

    async def close(self) -> None:
        await _close(self.nc)
        self.nc = None


class NatsProducer(ClientEvents):
    def __init__(self, client: NatsClient, name: str) -> None:
        self.system = client
        self.name = name
        self.subject = f"{client.stream_name}.{name}"
        self.dedup = client.ctx.scenario.workload.dedup
        self.nc = None
        self.inbox = ""
        self._at: Optional[str] = None
        self._closing = False

    async def open(self, on_outcome: OutcomeCallback) -> None:
        async def disconnected() -> None:
            if not self._closing:  # nats-py calls it on our own close too
                self.on_event("disconnect", self._at, "nats-py disconnected_cb")

        async def reconnected() -> None:
            self._at = self.node()
            self.on_event("reconnect", self._at, "nats-py reconnected_cb")

        leader_first = self.system.options.producers_connect == "leader"
        servers = await self.system.leader_first() if leader_first else self.system.servers()
        self.nc = await _connect(servers, f"brokerchaos-{self.name}", 30, disconnected, reconnected,
                                 ordered=leader_first)
        self._at = self.node()  # the node a disconnect leaves (nats-py no longer says)
        self.inbox = self.nc.new_inbox()
        prefix_len = len(self.inbox) + 1
        handled = [0]

        async def on_reply(msg) -> None:
            handled[0] += 1
            if handled[0] % 256 == 0:
                # nats-py drains a subscription's backlog without yielding; a burst of
                # thousands of acks would otherwise hold back the nemesis
                await asyncio.sleep(0)
            value = int(msg.subject[prefix_len:])
            node = self.node()
            hdr = msg.headers
            if hdr and hdr.get("Status") == "503":
                on_outcome(value, "nack", None, node, "no responders")
                return
            try:
                body = json.loads(msg.data)
            except ValueError:
                on_outcome(value, "nack", None, node, f"unparseable reply {msg.data[:80]!r}")
                return
            err = body.get("error")
            if err:
                on_outcome(value, "nack", None, node, f"{err.get('code')} {err.get('description')}")
                return
            on_outcome(value, "ack", str(body.get("seq")), node, "duplicate" if body.get("duplicate") else None)

        await self.nc.subscribe(self.inbox + ".*", cb=on_reply, pending_msgs_limit=-1, pending_bytes_limit=-1)

    async def send(self, value: int, payload: bytes) -> None:
        headers = {"Nats-Msg-Id": f"{self.name}-{value}"} if self.dedup else None
        await self.nc.publish(self.subject, payload, reply=f"{self.inbox}.{value}", headers=headers)

    def node(self) -> Optional[str]:
        nc = self.nc
        if nc is None or nc.connected_url is None or not nc.is_connected:
            return None
        return self.system.node_of_url(nc.connected_url.netloc)

    async def close(self) -> None:
        self._closing = True
        await _close(self.nc)
