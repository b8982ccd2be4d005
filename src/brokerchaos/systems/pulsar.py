"""Pulsar wire protocol: the pulsar-lite broker, the official pulsar-client (C++ core).

Locally one pulsar-lite broker (PyPI `pulsar-lite`, storage in RocksDB) in node n1's
namespace. What is real: the Pulsar binary protocol and the client's send queue, batching,
send timeouts, reconnects and Reader. What is not: BookKeeper ensembles and quorums,
ZooKeeper, bundle ownership moving between brokers (one broker: killing the owner is a full
outage). `--external` runs the same workload against a real cluster.

Send callbacks become history rows: Ok is an *ack* (offset: the message id); a send timeout
or a lost connection is *unknown*; a refusal before anything was written (queue full,
producer closed, message too big, topic terminated) is a *nack*.
"""
from __future__ import annotations

import asyncio
import json
import time
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field

from ..errors import ScenarioError
from .base import (Client, DeliverCallback, NodeExited, OutcomeCallback, Roles, System, SystemError_, http_get,
                   packaged_binary, quiet_logger, wait_until)
from .cluster import LocalCluster
from .registry import SYSTEMS

# results meaning the message was never written
DEFINITE = frozenset({
    "ProducerQueueIsFull", "AlreadyClosed", "InvalidMessage", "MessageTooBig", "TopicTerminated",
    "ProducerBlockedQuotaExceededError", "ProducerBlockedQuotaExceededException", "ProducerFenced",
    "InvalidTopicName", "AuthorizationError", "AuthenticationError", "InvalidConfiguration",
})


def outcome_of(result) -> tuple[str, Optional[str]]:
    """A send callback's result -> (kind, detail)."""
    name = getattr(result, "name", str(result)).split(".")[-1]
    if name == "Ok":
        return "ack", None
    return ("nack" if name in DEFINITE else "unknown"), name


def pulsar_lite_binary() -> str:
    return packaged_binary("pulsar_lite", "pulsar-lite", "pip install pulsar-lite")


class PulsarOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    batching: bool = Field(True, description="producer batching")
    batching_max_publish_delay_ms: int = Field(5, ge=0, le=60_000)
    batching_max_messages: int = Field(1000, ge=1, le=100_000)
    send_timeout_ms: Optional[int] = Field(
        None, ge=100, le=3_600_000, description="client send timeout (unknown after it); default: "
                                                "workload.ack_timeout minus 1 s")
    namespace: str = Field("public/default", pattern=r"^[\w.-]+/[\w.-]+$", description="tenant/namespace")


class PulsarLite(LocalCluster):
    """One pulsar-lite broker per node (in practice one: it has no clustering)."""

    ports = {"client": 6650}

    def launch(self, node: str) -> None:
        d = self.datadir / node
        d.mkdir(parents=True, exist_ok=True)
        conf = d / "pulsar-lite.toml"
        # metrics off: it would listen on 0.0.0.0:8080
        conf.write_text("[metrics]\nenabled = false\n")
        self.spawn_node(node, [pulsar_lite_binary(), "--config", str(conf), "--addr",
                               "{}:{}".format(*self.address(node)), "--db-path", str(d / "db"), "--log-level", "warn"])


class PulsarClient(Client):
    @property
    def topic(self) -> str:
        return f"persistent://{self.options.namespace}/{self.stream_name}"

    def service_url(self) -> str:
        return "pulsar://" + ",".join("{}:{}".format(*self.cluster.address(n)) for n in self.cluster.node_names)

    def new_client(self, timeout: float = 10.0):
        import pulsar

        return pulsar.Client(self.service_url(), operation_timeout_seconds=max(1, int(timeout)),
                             connection_timeout_ms=3000, logger=quiet_logger("pulsar"))

    async def connect(self, timeout: float) -> None:
        async def look():
            if self.cluster.not_running():
                raise NodeExited(f"pulsar broker exited while starting; see {self.ctx.logdir}")
            await self.serving()
            return True, "serving"

        await wait_until(look, timeout, "Pulsar broker")

    async def serving(self) -> None:
        for n in self.cluster.node_names:
            _, w = await asyncio.wait_for(asyncio.open_connection(*self.cluster.address(n)), 3)
            w.close()
        client = self.new_client(3)
        try:
            await asyncio.to_thread(client.get_topic_partitions, f"persistent://{self.options.namespace}/bc-probe")
        finally:
            await asyncio.to_thread(client.close)

    async def create_stream(self, timeout: float) -> str:
        return self.topic  # created by the first producer

    def producer(self, name: str) -> "PulsarProducer":
        return PulsarProducer(self, name)

    def reader(self, name: str) -> "PulsarReader":
        return PulsarReader(self, name)


class PulsarRoles(Roles):
    client: PulsarClient

    async def leader(self) -> str:
        """The broker owning the topic, by the admin REST lookup where a node has an `admin`
        address; a single broker owns everything."""
        names = self.cluster.node_names
        admin = None
        for n in names:
            try:
                admin = self.cluster.address(n, "admin")
                break
            except LookupError:
                continue
        if admin is None or len(names) == 1:
            return names[0]
        from urllib.parse import urlsplit

        path = f"/lookup/v2/topic/persistent/{self.client.options.namespace}/{self.ctx.stream_name}"
        body = json.loads(await http_get(*admin, path, 5.0))
        b = urlsplit(body.get("brokerUrl", ""))
        node = self.cluster.node_at(b.hostname or "", b.port or 6650)
        if node is None:
            raise SystemError_(f"topic owner {body.get('brokerUrl')!r} is not a node of the cluster")
        return node

    async def whole(self) -> tuple[bool, str]:
        await self.client.serving()
        return True, "serving"


@SYSTEMS.register("pulsar")
class Pulsar(System):
    description = "Pulsar protocol: one pulsar-lite broker (RocksDB), pulsar-client; no BookKeeper (see the README)"
    Options = PulsarOptions
    LocalCluster = PulsarLite
    Client = PulsarClient
    Roles = PulsarRoles

    @classmethod
    def check(cls, scenario) -> None:
        c, w = scenario.cluster, scenario.workload
        if scenario.external is None and (c.nodes != 1 or c.replicas != 1):
            raise ScenarioError("scenario field 'cluster.nodes': pulsar-lite is a single broker; set cluster.nodes "
                                "and cluster.replicas to 1 (or test a real cluster with --external)")
        o = PulsarOptions.model_validate(scenario.options)
        if o.send_timeout_ms is not None and o.send_timeout_ms / 1000 >= w.ack_timeout:
            raise ScenarioError(f"scenario field 'options.send_timeout_ms': {o.send_timeout_ms} ms is not below "
                                f"workload.ack_timeout ({w.ack_timeout} s)")
        if o.send_timeout_ms is None and w.ack_timeout <= 1.1:
            raise ScenarioError("scenario field 'workload.ack_timeout': Pulsar needs more than 1.1 s "
                                "(the send timeout is derived from it)")


class PulsarProducer:
    def __init__(self, system: PulsarClient, name: str) -> None:
        self.system = system
        self.name = name
        self.client = None
        self.p = None
        self.on_outcome: Optional[OutcomeCallback] = None
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.dedup = system.ctx.scenario.workload.dedup

    async def open(self, on_outcome: OutcomeCallback) -> None:
        s, o, w = self.system, self.system.options, self.system.ctx.scenario.workload
        self.on_outcome = on_outcome
        self.loop = asyncio.get_running_loop()
        timeout_ms = o.send_timeout_ms or int((w.ack_timeout - 1.0) * 1000)
        self.client = s.new_client(10)
        kwargs = dict(
            block_if_queue_full=False, max_pending_messages=w.in_flight + 1000, send_timeout_millis=timeout_ms,
            batching_enabled=o.batching, batching_max_messages=o.batching_max_messages,
            batching_max_publish_delay_ms=o.batching_max_publish_delay_ms)
        if self.dedup:
            # broker-side dedup keys on (producer name, sequence id)
            kwargs["producer_name"] = f"{self.name}-{s.ctx.run_id}"
        deadline = time.monotonic() + 30
        while True:
            try:
                self.p = await asyncio.to_thread(self.client.create_producer, s.topic, **kwargs)
                return
            except Exception as e:
                if time.monotonic() > deadline:
                    raise SystemError_(f"cannot create a producer on {s.topic}: {e}") from None
                await asyncio.sleep(0.5)

    def _callback(self, value: int):
        def done(result, msg_id) -> None:  # on the client's own thread
            self.loop.call_soon_threadsafe(self._report, value, result, str(msg_id) if msg_id is not None else None)
        return done

    def _report(self, value: int, result, msg_id: Optional[str]) -> None:
        kind, detail = outcome_of(result)
        self.on_outcome(value, kind, msg_id if kind == "ack" else None, self.node(), detail)

    async def send(self, value: int, payload: bytes) -> None:
        if self.dedup:
            self.p.send_async(payload, self._callback(value), sequence_id=value)
        else:
            self.p.send_async(payload, self._callback(value))

    def node(self) -> Optional[str]:
        return self.system.cluster.node_names[0] if self.p is not None and self.p.is_connected() else None

    async def close(self) -> None:
        if self.p is not None:
            try:
                await asyncio.wait_for(asyncio.to_thread(self.p.flush), 10)
            except Exception:  # outstanding sends are already unknown
                pass
        if self.client is not None:
            await asyncio.to_thread(self.client.close)
        # the close's last callbacks were handed to the loop: let them run
        await asyncio.sleep(0)


class PulsarReader:
    """A Reader from the earliest message until none is available; every delivery recorded
    with its message id, so redeliveries (same id) and stored duplicates (new ids) differ."""

    def __init__(self, system: PulsarClient, name: str) -> None:
        self.system = system
        self.name = name

    @staticmethod
    def _batch(reader, n: int) -> tuple[list, bool]:
        import pulsar

        out = []
        while len(out) < n:
            try:
                if not out and not reader.has_message_available():
                    return out, True
                m = reader.read_next(500)
            except pulsar.Timeout:
                return out, False
            out.append((m.data(), str(m.message_id())))
        return out, False

    async def read(self, deliver: DeliverCallback, idle: float) -> str:
        import pulsar

        s = self.system
        client = s.new_client(10)
        try:
            deadline = time.monotonic() + idle
            reader = None
            while reader is None:
                try:
                    reader = await asyncio.to_thread(client.create_reader, s.topic, pulsar.MessageId.earliest)
                except Exception as e:
                    if time.monotonic() > deadline:
                        return f"incomplete: no reader on {s.topic} for {idle:.0f}s: {e}"
                    await asyncio.sleep(0.5)
            node = s.cluster.node_names[0]
            progress = time.monotonic()
            while True:
                try:
                    msgs, at_end = await asyncio.to_thread(self._batch, reader, 5000)
                except Exception as e:  # connection lost mid-read
                    msgs, at_end = [], False
                    if time.monotonic() - progress > idle:
                        return f"incomplete: {type(e).__name__}: {e}"
                for data, mid in msgs:
                    deliver(data, mid, node)
                if msgs:
                    progress = time.monotonic()
                elif at_end:
                    return "complete"
                elif time.monotonic() - progress > idle:
                    return f"incomplete: no message for {idle:.0f}s and the end not reached"
        finally:
            await asyncio.to_thread(client.close)
