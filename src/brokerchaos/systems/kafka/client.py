"""The Kafka client side, whichever server is under it: confluent-kafka (librdkafka) producers
and the reader.

Delivery reports become history rows: no error is an *ack* (with acks=0 the client's word
only); an error the broker or client gives before the message could have been written is a
*nack*; anything else, a local message timeout above all, is *unknown*: the message may have
been stored.
"""
from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
import time
import traceback
from typing import ClassVar, Optional

from ..base import Client, ClientEvents, DeliverCallback, OutcomeCallback, Roles, SystemError_
from ..consumer import LiveConsumer
from ..runtime import quiet_logger, wait_until

TAIL_QUIET_S = 1.5  # past the high watermark, the read ends after this long without a message

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


def transactional_id(stream: str, producer: str) -> str:
    return f"{stream}-{producer}"


def java_hash(s: str) -> int:
    """Java's String.hashCode with its sign bit cleared (Kafka's Utils.abs), as Kafka places a
    transactional id on a `__transaction_state` partition."""
    h = 0
    for ch in s:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h & 0x7FFFFFFF


def admin_for(bootstrap: str, timeout_ms: int = 3000):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": timeout_ms,
                        "log_level": 0, "logger": quiet_logger("librdkafka")})


class KafkaClient(Client):
    # librdkafka's reconnect.backoff.ms 50 doubling to reconnect.backoff.max.ms 1000 (below),
    # each with -25 %..+50 % jitter
    reconnect_steps_ms = (50.0, 150.0, 350.0, 750.0, 1750.0, 2750.0, 3750.0)
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
                raise self.cluster.exited(down[0])
            for n in self.cluster.node_names:
                await self.metadata_from(n, 3.0)
            return True, "every broker answers"

        await wait_until(look, timeout, "Kafka brokers")

    async def create_stream(self, timeout: float) -> str:
        from confluent_kafka.admin import NewTopic

        o = self.options
        config = {}
        if o.min_insync_replicas:
            config["min.insync.replicas"] = str(o.min_insync_replicas)
        if o.broker == "apache":
            config["unclean.leader.election.enable"] = str(o.unclean_leader_election).lower()
        rf = min(self.ctx.scenario.cluster.replicas, len(self.cluster.node_names))
        topics = self.topics()
        futs = self._admin().create_topics([NewTopic(t, o.partitions, rf, config=config) for t in topics],
                                           operation_timeout=timeout, request_timeout=timeout)
        for t in topics:
            await asyncio.to_thread(futs[t].result, timeout)

        # the controller has the topics; the brokers' metadata follows a moment later
        async def led():
            md = await self.metadata()
            for name in topics:
                t = md.topics.get(name)
                if not (t is not None and t.error is None and len(t.partitions) == o.partitions and all(
                        p.leader >= 0 for p in t.partitions.values())):
                    return False, f"{name}: {t.error if t is not None and t.error else 'no leader yet'}"
            return True, "led"

        await wait_until(led, timeout, f"topic {self.stream_name}")
        return self.stream_name

    def topics(self) -> list[str]:
        """The run's topics: the stream, and a consume-transform-produce group's output."""
        g = self.ctx.scenario.workload.group
        return [self.stream_name] + ([self.output_name] if g is not None and g.commit == "transaction" else [])

    @property
    def output_name(self) -> str:
        return f"{self.stream_name}-out"

    async def drop_stream(self) -> None:
        try:
            topics = self.topics()
            futs = self._admin().delete_topics(topics, operation_timeout=5, request_timeout=5)
            for t in topics:
                await asyncio.to_thread(futs[t].result, 6)
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

    @property
    def java_set(self) -> str:
        """The server set whose kafka-clients jar the Java client runs (the servers' release)."""
        return f"kafka-{self.ctx.scenario.cluster.version or '3.9'}"

    def library(self) -> dict:
        if self.options.client == "java":
            from ..jclient import jar_version

            return {"library": "java", "artifact": "org.apache.kafka:kafka-clients",
                    "version": jar_version(self.java_set, "kafka-clients")}
        import confluent_kafka

        return {"library": "librdkafka", "version": confluent_kafka.libversion()[0],
                "binding": f"confluent-kafka {confluent_kafka.version()[0]}"}

    def producer(self, name: str) -> "KafkaProducer":
        txn = self.ctx.scenario.workload.transactions is not None
        p = (self.txn_producer if txn else KafkaProducer)(self, name)
        self.clients.append(p)
        return p

    def reader(self, name: str) -> "KafkaReader":
        return KafkaReader(self, name)

    def output_reader(self, name: str) -> "KafkaReader":
        return KafkaReader(self, name, self.output_name)

    def consumer(self, name: str) -> "KafkaConsumer":
        return KafkaConsumer(self, name)

    group_kinds = ("classic", "consumer")

    @classmethod
    def group_error(cls, scenario) -> Optional[tuple[str, str]]:
        o = scenario.options or {}
        if scenario.workload.group.kind == "consumer" and (o.get("broker", "apache") != "apache"
                                                           or (scenario.cluster.version or "3.9").startswith("3.")):
            return "kind", "the consumer protocol (KIP-848) needs Apache Kafka 4.x (cluster.version: 4.1)"
        if scenario.workload.group.commit == "transaction" and o.get("broker", "apache") != "apache":
            return "commit", "transactions are tried on Apache Kafka only here (broker: apache)"
        return None

    group_transactions = True

    transactions = True
    txn_producer: ClassVar[type] = None  # KafkaTxnProducer (txn.py), set by the package

    @classmethod
    def txn_error(cls, scenario) -> Optional[tuple[str, str]]:
        o = scenario.options or {}
        if o.get("broker", "apache") != "apache":
            return "options.broker", "transactions are tried on Apache Kafka only here (broker: apache)"
        if str(o.get("acks", "all")) != "all":
            return "options.acks", "a transactional producer is idempotent: acks must be all"
        return None

    def group_member(self, name: str, spec, events):
        if spec.commit == "transaction":
            from .ctp import KafkaTransformMember

            return KafkaTransformMember(self, name, spec, events)
        from .group import KafkaGroupMember

        return KafkaGroupMember(self, name, spec, events)

    async def close(self) -> None:
        self.clients.clear()
        self.admin = None


class KafkaRoles(Roles):
    """Roles as the cluster's metadata gives them: the partition leader, its replicas and
    in-sync replicas, the controller. Partition 0 stands for the topic."""

    client: KafkaClient

    def node_of(self, md, broker_id: int) -> str:
        b = md.brokers.get(broker_id)
        node = b and self.cluster.node_at(b.host, b.port)
        if node is None:
            raise SystemError_(f"broker {broker_id} is not a known node")
        return node

    async def partition(self) -> tuple[object, object]:
        md = await self.client.metadata()
        t = md.topics.get(self.ctx.stream_name)
        if t is None or t.error is not None or not t.partitions:
            raise SystemError_(f"no metadata for topic {self.ctx.stream_name}")
        return md, t.partitions[min(t.partitions)]

    async def leader(self) -> str:
        md, p = await self.partition()
        if p.leader < 0:
            raise SystemError_(f"partition {p.id} of {self.ctx.stream_name} has no leader")
        return self.node_of(md, p.leader)

    async def replicas(self) -> list[str]:
        md, p = await self.partition()
        lead = self.node_of(md, p.leader)
        return [lead] + [self.node_of(md, r) for r in p.replicas if r != p.leader]

    async def group_coordinator(self, group: str) -> str:
        """The group's coordinator: the broker leading its `__consumer_offsets` partition, as
        FindCoordinator answers (through describe_consumer_groups)."""
        gid = f"{self.ctx.stream_name}-{group}"
        fut = self.client._admin().describe_consumer_groups([gid], request_timeout=3)[gid]
        c = (await asyncio.to_thread(fut.result, 5)).coordinator
        node = c is not None and self.cluster.node_at(c.host, c.port)
        if not node:
            raise SystemError_(f"the coordinator of group {gid} ({c}) is not a known node")
        return node

    async def txn_coordinator(self) -> str:
        """The first producer's transaction coordinator: the broker leading the partition of
        `__transaction_state` its transactional id hashes to (Kafka's own rule: the id's
        Java hashCode, its sign bit cleared, modulo the topic's partitions)."""
        tid = transactional_id(self.ctx.stream_name, "p1")
        md = await asyncio.to_thread(self.client._admin().list_topics, "__transaction_state", 5)
        t = md.topics.get("__transaction_state")
        if t is None or t.error is not None or not t.partitions:
            raise SystemError_("no metadata for __transaction_state (no transaction begun yet?)")
        p = t.partitions.get(java_hash(tid) % len(t.partitions))
        if p is None or p.leader < 0:
            raise SystemError_(f"the __transaction_state partition of {tid} has no leader")
        return self.node_of(md, p.leader)

    async def elect_leaders(self) -> dict:
        """A preferred-leader election over every partition of the run's topics (election.py)."""
        from .election import elect_preferred

        return await elect_preferred(self)

    async def assignment(self) -> list[str]:
        """The partition's replicas in their assigned order (reassign.py)."""
        from .reassign import assignment

        return (await assignment(self))[0]

    async def reassign(self, replicas: list[str], timeout: float) -> dict:
        """The partition moved to `replicas` by the controller, waited for (reassign.py)."""
        from .reassign import reassign

        return await reassign(self, replicas, timeout)

    async def describe(self) -> dict:
        """The topic's details as a broker's metadata gives them, as the seed printed them
        around each fault."""
        md, p = await self.partition()
        # a broker out of the metadata (dead, or cut off from the coordinator) by its id: n<id>
        names = {b: self.cluster.node_at(md.brokers[b].host, md.brokers[b].port) if b in md.brokers
                 else (f"n{b}" if f"n{b}" in self.cluster.node_names else str(b))
                 for b in set(p.replicas) | set(p.isrs) | {p.leader}}
        out = {"leader": names.get(p.leader) if p.leader >= 0 else None,
               "replicas": [names[r] for r in p.replicas], "isr": [names[r] for r in p.isrs]}
        ctrl = md.controller_id
        if ctrl is not None and ctrl in md.brokers:
            out["controller"] = self.cluster.node_at(md.brokers[ctrl].host, md.brokers[ctrl].port)
        return out

    async def stream_ready(self) -> bool:
        """Every partition led, and every replica in sync."""
        md = await self.client.metadata()
        t = md.topics.get(self.ctx.stream_name)
        return t is not None and t.error is None and bool(t.partitions) and all(
            p.leader >= 0 and sorted(p.isrs) == sorted(p.replicas) for p in t.partitions.values())


class _BrokerStates(logging.Handler):
    """librdkafka's broker state changes (its `debug: broker` log, facility STATE, served by
    poll() on the loop's thread) as client events: UP -> anything is a disconnect, and the
    next -> UP of that broker its reconnect. And (`debug: topic`, facility BRKDELGT) the
    broker the topic's first partition is handed to: the one the producer writes to from
    then on, known before any of its acks, as the log is served from the same queue as the
    delivery reports (the statistics say it too, but up to an interval late: acks from a new
    leader were put down to the old one)."""

    # a learned broker (host:port/id); the bootstrap entries (…/bootstrap) are dropped
    # once the metadata names the brokers, which is not a disconnect
    CHANGE = re.compile(r"(\S+):(\d+)/\d+: Broker changed state (\w+) -> (\w+)")
    DELEGATE = re.compile(r"(\S+) \[0\]: delegate to broker (\S+):(\d+)/\d+ ")

    def __init__(self, producer: "KafkaProducer") -> None:
        super().__init__(logging.DEBUG)
        self.producer = producer
        self.down: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = record.getMessage()
            m = self.CHANGE.search(line)
            if not m:
                d = self.DELEGATE.search(line)
                # to the internal broker (:0/internal) when no leader is known: where it
                # wrote last stays, as with the statistics
                if d and d.group(1) == self.producer.topic and d.group(3) != "0":
                    self.producer._node = self.producer.system.cluster.node_at(d.group(2), int(d.group(3)))
                return
            host, port, old, new = m.groups()
            node = self.producer.system.cluster.node_at(host, int(port)) or f"{host}:{port}"
            if old == "UP" and new != "UP" and not self.producer.closing:
                self.down.add(node)
                self.producer.on_event("disconnect", node, f"librdkafka: broker {old} -> {new}")
            elif new == "UP" and node in self.down:
                self.down.discard(node)
                self.producer.on_event("reconnect", node, f"librdkafka: broker {old} -> {new}")
        except Exception:  # a log line must never break the client
            pass


class KafkaProducer(ClientEvents):
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
        self.closing = False

    async def open(self, on_outcome: OutcomeCallback) -> None:
        self.on_outcome = on_outcome
        self.p = await asyncio.to_thread(self._new_producer)
        self.poller = asyncio.create_task(self._poll())
        # where it will write, known before the first statistics arrive (a fast run can
        # reach a fault's trigger sooner)
        try:
            md = await asyncio.to_thread(self.system._admin().list_topics, self.topic, 5)
            part = md.topics[self.topic].partitions[0]
            b = md.brokers.get(part.leader)
            if b is not None:
                self._node = self.system.cluster.node_at(b.host, b.port)
        except Exception:  # the statistics will tell
            pass

    def _new_producer(self):
        """librdkafka's producer, or the Java client's in its process (java.py), blocking."""
        if self.system.options.client == "java":
            from .java import JavaProducer

            log = self.system.ctx.logdir / f"java-{self.name}.log"
            return JavaProducer(self._config(), self.topic, self.system.java_set, log, self._leader_at)
        from confluent_kafka import Producer

        return Producer(self._config())

    def _leader_at(self, host: str, port: int) -> None:
        """The Java client's metadata named a new leader of the first partition."""
        self._node = self.system.cluster.node_at(host, port)

    def _config(self) -> dict:
        conf = self.system.producer_config(self.name)
        conf["stats_cb"] = self._stats
        if "debug" not in conf:  # the connection's life as the client sees it (history rows)
            # not logging.getLogger: that one registers it for good, one per run of a soak
            log = logging.Logger(f"brokerchaos.librdkafka.{self.name}", logging.DEBUG)
            log.addHandler(_BrokerStates(self))
            conf.update({"debug": "broker,topic", "log_level": 7, "logger": log})
        return conf

    def _stats(self, raw: str) -> None:
        try:
            self._follow(raw)
        except Exception:
            traceback.print_exc()

    def _follow(self, raw: str) -> None:
        """The broker the client writes to: the leader its metadata names for the lowest
        partition, whether or not its connection is up yet. Not some other broker that is
        connected: at the start the leader's connection can come up after the bootstrap
        broker's, and after a kill the metadata names the dead leader until it is refreshed,
        and librdkafka writes to no one else meanwhile (a `client-node` fault resolved then
        hit a broker the producer never wrote to)."""
        try:
            stats = json.loads(raw)
        except ValueError:
            return
        parts = stats.get("topics", {}).get(self.topic, {}).get("partitions", {})
        led = [p for k, p in sorted(parts.items()) if k != "-1" and p.get("leader", -1) >= 0]
        if not led:  # no leader known (an election, or metadata not in yet): where it wrote last
            return
        leader = led[0]["leader"]
        named = [b for b in stats.get("brokers", {}).values() if b.get("nodeid") == leader]
        # tansu's brokers all call themselves the same id: then the one connected is it
        for b in sorted(named, key=lambda b: b.get("state") != "UP"):
            host, _, port = b.get("nodename", "").rpartition(":")
            self._node = self.system.cluster.node_at(host, int(port)) if port.isdigit() else None
            return
        self._node = None

    def _report(self, value: int, err, msg) -> None:
        # an exception must not reach librdkafka: confluent-kafka loses it in poll() and
        # the outcome would go unrecorded
        try:
            self._record(value, err, msg)
        except Exception:
            traceback.print_exc()

    def _record(self, value: int, err, msg) -> None:
        kind, detail = outcome_of(err)
        off = msg.offset()  # None with acks=0: the broker never said where
        offset = f"{msg.partition()}:{off}" if kind == "ack" and off is not None and off >= 0 else None
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
        self.closing = True
        if self.poller is not None:
            self.poller.cancel()
            await asyncio.gather(self.poller, return_exceptions=True)
        if self.p is not None:
            # nothing is outstanding unless the write phase timed out; what still is gets
            # its report now (a message never sent is a nack, one in flight unknown)
            self.p.purge()
            self._poll_once()
            await asyncio.to_thread(self.p.flush, 5)
            self._poll_once()
            await asyncio.to_thread(close_library, self.p)
            if getattr(self.p, "reports_after_close", False):  # the Java client's last reports; a
                self._poll_once()  # closed librdkafka producer (confluent-kafka 2.16's close()) refuses a poll

    def _poll_once(self) -> None:
        try:
            self.p.poll(0)
        except Exception as e:
            print(f"kafka poll: {type(e).__name__}: {e}", file=sys.stderr)


def close_library(p) -> None:
    """The library's producer closed: the Java client's process ended, librdkafka's handle
    destroyed (confluent-kafka 2.16 has close(); older ones free it when collected)."""
    close = getattr(p, "close", None)
    if close is not None:
        close()


def new_consumer(system: KafkaClient, name: str, bootstrap: str, **conf):
    """A librdkafka consumer of the run's group `name`, from the earliest offset, quiet."""
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": bootstrap, "group.id": f"{system.ctx.stream_name}-{name}",
                     "auto.offset.reset": "earliest", "socket.timeout.ms": 3000, "log_level": 0,
                     "logger": quiet_logger("librdkafka"), **conf})


class KafkaReader:
    """Every partition from the beginning, at least up to the high watermark read when it
    starts (the Kafka seed counts loss against it), then on until nothing more comes."""

    def __init__(self, system: KafkaClient, name: str, topic: Optional[str] = None) -> None:
        self.system = system
        self.name = name
        self.topic = topic or system.stream_name

    def _consumer(self, bootstrap: str):
        return new_consumer(self.system, self.name, bootstrap, **{"enable.auto.commit": False,
                                                                  "fetch.max.bytes": 16 * 1024 * 1024,
                                                                  "isolation.level": self.system.options.isolation})

    async def _high(self, node: str) -> tuple[Optional[dict], str]:
        """{partition: high watermark} as `node` answers (a consumer bootstrapped on it alone)."""
        from confluent_kafka import TopicPartition

        s = self.system
        c = self._consumer(s.bootstrap([node]))
        try:
            md = await asyncio.to_thread(c.list_topics, self.topic, 3)
            t = md.topics.get(self.topic)
            if t is None or t.error is not None or not t.partitions:
                return None, str(t.error if t is not None else "no topic")
            out = {}
            for p in sorted(t.partitions):
                out[p] = (await asyncio.to_thread(c.get_watermark_offsets, TopicPartition(self.topic, p), 3,
                                                  False))[1]
            return out, ""
        except Exception as e:
            return None, f"{type(e).__name__}: {e}"
        finally:
            await asyncio.to_thread(c.close)

    async def _highest(self, idle: float) -> tuple[Optional[dict], Optional[str], str]:
        """Every node is asked (a tansu broker that served none of the writes was seen to
        report a high watermark 10,000 behind the store's): the highest high watermarks, the
        node that gave them, or why none came within `idle`."""
        deadline = time.monotonic() + idle
        high, node, last = None, None, ""
        while high is None:
            for n in self.system.cluster.node_names:
                got, why = await self._high(n)
                if got is None:
                    last = f"{n}: {why}"
                elif high is None or sum(got.values()) > sum(high.values()):
                    high, node = got, n
            if high is None:
                if time.monotonic() > deadline:
                    return None, None, last
                await asyncio.sleep(0.2)
        return high, node, ""

    async def read(self, deliver: DeliverCallback, idle: float) -> str:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        s = self.system
        high, node, last = await self._highest(idle)
        if high is None:
            return f"incomplete: no high watermark for {self.topic} for {idle:.0f}s ({last})"
        parts = sorted(high)
        c = self._consumer(s.bootstrap([node]))
        try:
            c.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in parts])
            pos = {p: 0 for p in parts}
            deleted: dict[int, int] = {}  # partition -> where its log started, past what was read
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
                _past_undelivered(c, self.topic, pos)
                if quiet > TAIL_QUIET_S:
                    await asyncio.to_thread(_past_deleted, c, self.topic, pos, deleted)
                if all(pos[p] >= high[p] for p in parts):
                    if quiet > TAIL_QUIET_S:
                        break
                elif quiet > idle:
                    behind = {p: high[p] - pos[p] for p in parts if pos[p] < high[p]}
                    return f"incomplete: no progress for {idle:.0f}s, {sum(behind.values())} below the high watermark"
            if deleted:
                starts = ", ".join(f"{p}:{o}" for p, o in sorted(deleted.items()))
                return f"complete: the log started at {starts}, past what was read (the broker deleted the rest)"
            return "complete"
        finally:
            await asyncio.to_thread(c.close)


def _past_deleted(c, topic: str, pos: dict, deleted: dict) -> None:
    """What the broker deleted (retention: the log now starts past it) can never be read:
    `pos` moved to each partition's log start, noted in `deleted`."""
    from confluent_kafka import KafkaException, TopicPartition

    for p in pos:
        try:
            low, _ = c.get_watermark_offsets(TopicPartition(topic, p), timeout=2.0, cached=False)
        except KafkaException:  # not answered now: asked again at the next quiet moment
            continue
        if low > pos[p]:
            pos[p] = deleted[p] = low


def _past_undelivered(c, topic: str, pos: dict) -> None:
    """What is never delivered (a transaction's commit and abort markers, an aborted
    transaction's messages) the consumer's position is past: `pos` moved there."""
    from confluent_kafka import TopicPartition

    for tp in c.position([TopicPartition(topic, p) for p in pos]):
        if tp.offset is not None and tp.offset > pos[tp.partition]:
            pos[tp.partition] = tp.offset


class KafkaConsumer(LiveConsumer):
    """A consumer of every partition from the beginning (assigned, so no group rebalance
    delays it), committing its offsets as librdkafka does by default; librdkafka follows
    partition leaders itself. Started again, it seeks to the next offset not delivered."""

    def __init__(self, client: KafkaClient, name: str) -> None:
        super().__init__(client, name)
        self.pos: dict[int, int] = {}
        self.c = None

    async def consume(self, deliver: DeliverCallback) -> None:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        s = self.system
        if self.c is None:
            self.c = new_consumer(s, self.name, s.bootstrap(), **{"enable.auto.commit": True})
        md = await self.blocking(self.c.list_topics, s.stream_name, 3)
        t = md.topics.get(s.stream_name)
        if t is None or t.error is not None or not t.partitions:
            raise SystemError_(f"topic {s.stream_name}: {t.error if t is not None else 'not found'}")
        self.c.assign([TopicPartition(s.stream_name, p, self.pos.get(p, OFFSET_BEGINNING))
                       for p in sorted(t.partitions)])
        while True:
            for m in await self.blocking(self.c.consume, 1000, 0.5):
                if m.error() is not None:
                    continue
                self.pos[m.partition()] = m.offset() + 1
                deliver(m.value(), f"{m.partition()}:{m.offset()}", None)

    async def shutdown(self) -> None:
        if self.c is not None:
            await asyncio.to_thread(self.c.close)
            self.c = None
