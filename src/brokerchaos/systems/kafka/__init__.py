"""Kafka: real Apache Kafka from Maven Central by default (apache.py: replication, ISR, leader
election, ZooKeeper or KRaft), or tansu (tansu.py: the Kafka protocol on one S3 store, no
replication) as `options.broker: tansu`; the same confluent-kafka client for both (client.py).
"""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ...errors import ScenarioError
from ..base import COORDINATOR, ELECT, REASSIGN
from .. import needs
from ..registry import SYSTEMS
from ..system import System
from .apache import ApacheKafkaRoles, KRaftKafka, ZooKeeperKafka
from .client import KafkaClient
from .library import outcome_of
from .roles import KafkaRoles
from .tansu import TansuRoles, TansuServers, tansu_binary
from .txn import KafkaTxnProducer

KafkaClient.txn_producer = KafkaTxnProducer  # client.py cannot import it: txn.py builds on client.py

__all__ = ["Kafka", "KafkaOptions", "outcome_of", "tansu_binary"]

# cluster.version -> the local cluster that runs it; the first is the default
VERSIONS = {"3.9": ZooKeeperKafka, "4.1": KRaftKafka}


class KafkaOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    broker: Literal["apache", "tansu"] = Field(
        "apache", description="apache: Apache Kafka from Maven Central (3.9 on ZooKeeper, or 4.1 on KRaft by "
                              "cluster.version); tansu: the Kafka protocol on one S3 store, no replication")
    acks: Literal["0", "1", "all"] = Field("all", description="producer acks: 0, 1 or all")
    min_insync_replicas: Optional[int] = Field(None, ge=1, le=9, description="topic min.insync.replicas")
    unclean_leader_election: bool = Field(False, description="unclean.leader.election.enable (apache)")
    replica_lag_time_max_ms: int = Field(10_000, ge=100, le=3_600_000,
                                         description="replica.lag.time.max.ms (apache; the seed's era: 10 s)")
    zk_session_timeout_ms: int = Field(6_000, ge=1_000, le=120_000,
                                       description="zookeeper.session.timeout.ms (apache 3.9; the seed's: 6 s)")
    partitions: int = Field(1, ge=1, le=64, description="topic partitions (ordering holds per partition only)")
    flush_messages: Optional[int] = Field(
        None, ge=1, le=1_000_000_000,
        description="log.flush.interval.messages (apache): a broker fsyncs a partition's log after this many "
                    "messages (1: before it acks each batch, leader and followers alike); default Kafka's: never, "
                    "the OS writes the page cache back when it decides (what a power-off drops)")
    auto_leader_rebalance: bool = Field(
        True, description="auto.leader.rebalance.enable (apache): the controller moves each partition's leadership "
                          "back to its preferred replica by itself (Kafka's default; also 5 s after a new controller "
                          "takes over); false: only an election does it, as operators set it who run one")
    retention_check_ms: Optional[int] = Field(
        None, ge=100, le=86_400_000,
        description="log.retention.check.interval.ms (apache): how often a broker deletes segments past "
                    "retention (by its own clock: the clock fault); default Kafka's, 5 minutes")
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
    client_config: dict[str, Any] = Field(default_factory=dict,
                                          description="any other librdkafka producer property")
    client: Literal["librdkafka", "java"] = Field(
        "librdkafka", description="the producers' client library: librdkafka (confluent-kafka), or java: "
                                  "kafka-clients of the servers' release in a child process (docs/java-clients.md)")
    isolation: Literal["read_committed", "read_uncommitted"] = Field(
        "read_committed", description="the checking read's isolation.level: read_uncommitted hands it aborted "
                                      "transactions' messages too (a positive control of the aborted reads)")

    @field_validator("acks", mode="before")
    @classmethod
    def _acks(cls, v):
        return str(v) if isinstance(v, int) and not isinstance(v, bool) else v


@SYSTEMS.register("kafka")
class Kafka(System):
    description = ("Apache Kafka 3.9 on ZooKeeper (host `zk`) or 4.1 on KRaft, RF 3, confluent-kafka; "
                   "options.broker tansu: one S3 store, no replication")
    client_options = frozenset({"acks", "batch_messages", "client", "client_config", "isolation", "linger_ms",
                                "max_in_flight", "message_timeout_ms", "min_insync_replicas", "partitions",
                                "request_timeout_ms", "retries"})  # the topic's and the clients' settings
    client_workload = frozenset({"group", "dedup", "transactions"})
    client_cluster = frozenset({"replicas"})  # the stream's, set by the client that creates it
    Options = KafkaOptions
    LocalCluster = ZooKeeperKafka
    Client = KafkaClient
    Roles = ApacheKafkaRoles
    offers = frozenset({COORDINATOR, ELECT, REASSIGN})

    @classmethod
    def variants(cls):
        return (*((f"kafka {v}", {}, v) for v in VERSIONS), ("kafka on tansu", {"broker": "tansu"}, None))

    machine_setup = (needs.server_set("kafka-3.9", "Kafka 3.9 and ZooKeeper"),
                     needs.server_set("kafka-4.1", "Kafka 4.1 (KRaft)"))

    @classmethod
    def machine_needs(cls, options, version):
        return () if options.get("broker") == "tansu" else ("java", f"kafka-{version or next(iter(VERSIONS))}")

    @classmethod
    def server_versions(cls):
        v = {k: needs.pom_version(f"kafka-{k}", "kafka_2.13") for k in VERSIONS}
        return (f"  kafka           {v['3.9']} (ZooKeeper), {v['4.1']} (KRaft): Maven Central, pinned poms",)

    @classmethod
    def versions(cls, scenario) -> tuple[str, ...]:
        return tuple(VERSIONS) if KafkaOptions.model_validate(scenario.options).broker == "apache" else ()

    @classmethod
    def local_cluster(cls, scenario):
        if KafkaOptions.model_validate(scenario.options).broker == "tansu":
            return TansuServers
        return VERSIONS[scenario.cluster.version or next(iter(VERSIONS))]

    @classmethod
    def roles_offers(cls, scenario) -> frozenset[str]:
        tansu = KafkaOptions.model_validate(scenario.options).broker == "tansu"
        return cls.offers - {ELECT, REASSIGN} if tansu else cls.offers  # tansu: one store, no replicas

    @classmethod
    def roles_class(cls, scenario) -> type[KafkaRoles]:
        return TansuRoles if KafkaOptions.model_validate(scenario.options).broker == "tansu" else ApacheKafkaRoles

    @classmethod
    def check(cls, scenario) -> None:
        o = KafkaOptions.model_validate(scenario.options)
        w = scenario.workload
        c = scenario.cluster
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
        if c.replicas > c.nodes:
            raise ScenarioError(f"scenario field 'cluster.replicas': {c.replicas} is more than the {c.nodes} nodes")
        if o.broker == "tansu" and not o.auto_leader_rebalance:
            raise ScenarioError("scenario field 'options.auto_leader_rebalance': an Apache Kafka broker setting")
        for key in ("flush_messages", "retention_check_ms"):
            if o.broker == "tansu" and getattr(o, key) is not None:
                raise ScenarioError(f"scenario field 'options.{key}': an Apache Kafka broker setting; tansu keeps "
                                    "its data in one S3 store")
        if o.min_insync_replicas is not None and o.min_insync_replicas > c.replicas:
            raise ScenarioError(f"scenario field 'options.min_insync_replicas': {o.min_insync_replicas} is more "
                                f"than the {c.replicas} replicas; every write would be refused")
