"""The Kafka client side, whichever server is under it: confluent-kafka (librdkafka) producers
and the reader.

Delivery reports become history rows: no error is an *ack* (with acks=0 the client's word
only); an error the broker or client gives before the message could have been written is a
*nack*; anything else, a local message timeout above all, is *unknown*: the message may have
been stored.

The admin side is here (KafkaClient: topics made and dropped, offsets, the cluster's
metadata); the producer (producer.py), the read and live consumer (read.py) and the roles
(roles.py) beside it.
"""
from __future__ import annotations

import asyncio
from typing import ClassVar, Optional

from ..base import Client
from ..runtime import quiet_logger, wait_until
from . import release
from .library import admin_for
from .producer import KafkaProducer
from .read import KafkaConsumer, KafkaReader
from .segments import SegmentReader


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
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import NewTopic

        o = self.options
        config = {}
        if o.min_insync_replicas:
            config["min.insync.replicas"] = str(o.min_insync_replicas)
        if o.broker == "apache":
            config["unclean.leader.election.enable"] = str(o.unclean_leader_election).lower()
        rf = min(self.ctx.scenario.cluster.replicas, len(self.cluster.node_names))
        topics = self.topics()
        # the broker answers once the controller has made them: its answer may take longer
        # than the admin's usual 3 s socket timeout (seen on a loaded machine: the topic made,
        # the answer "Local: Timed out"); a create whose answer was lost anyway is told by the
        # metadata below, which waits for each topic's leaders
        admin = admin_for(self.bootstrap(), int(timeout * 1000))
        futs = admin.create_topics([NewTopic(t, o.partitions, rf, config=config) for t in topics],
                                   operation_timeout=timeout, request_timeout=timeout)
        for t in topics:
            try:
                await asyncio.to_thread(futs[t].result, timeout)
            except KafkaException as e:
                if e.args[0].code() != KafkaError._TIMED_OUT:
                    raise

        # the controller has the topics; each broker's metadata cache follows a moment later,
        # and the run's next question (the leader at the start) may go to any of them: wait
        # until every live broker answers with the topics led
        async def led():
            for n in self.cluster.node_names:
                if self.cluster.alive(n):
                    why = unled(await self.metadata_from(n, 3.0), topics, o.partitions)
                    if why:
                        return False, f"{n}: {why}"
            return True, "led on every broker"

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
        """The set whose kafka-clients jar the Java client runs: options.client_version's, else
        the servers' release."""
        if self.options.client_version is not None:
            return release.client_set(self.options.client_version)
        r = release.resolve(self.ctx.scenario.cluster.version)
        r.pom()  # a release's own pom, where the Java client's jars come from
        return r.set_name

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

    replica_reads = True

    def replica_reader(self, name: str, node: str) -> "SegmentReader":
        return SegmentReader(self.cluster, node, self.options.partitions)

    group_kinds = ("classic", "consumer")

    @classmethod
    def group_error(cls, scenario) -> Optional[tuple[str, str]]:
        o = scenario.options or {}
        if scenario.workload.group.kind == "consumer" and (o.get("broker", "apache") != "apache"
                                                           or not release.kraft(scenario.cluster.version, None)):
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


def unled(md, topics: list[str], partitions: int) -> str | None:
    """Why a metadata answer does not yet show every topic with its partitions led, or None."""
    for name in topics:
        t = md.topics.get(name)
        if t is None or t.error is not None:
            return f"{name}: {t.error if t is not None else 'not known yet'}"
        if len(t.partitions) != partitions or any(p.leader < 0 for p in t.partitions.values()):
            return f"{name}: no leader yet"
    return None
