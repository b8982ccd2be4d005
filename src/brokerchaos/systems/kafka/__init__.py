"""Kafka: real Apache Kafka from Maven Central by default (apache.py: replication, ISR, leader
election, ZooKeeper or KRaft), or tansu (tansu.py: the Kafka protocol on one S3 store, no
replication) as `options.broker: tansu`; the same confluent-kafka client for both (client.py).
"""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ...errors import ScenarioError
from ...scenario import release_text
from ..base import COORDINATOR, ELECT, REASSIGN, REPLICAS
from .. import jvm, needs, releases
from .. import pyclients
from ..pyclients import PyClient
from ..registry import SYSTEMS
from ..system import System
from .apache import KRaftKafka, ZooKeeperKafka
from .zkroles import ApacheKafkaRoles
from .client import KafkaClient
from . import release
from .library import outcome_of
from .roles import KafkaRoles
from .tansu import TansuRoles, TansuServers, tansu_binary
from .txn import KafkaTxnProducer

KafkaClient.txn_producer = KafkaTxnProducer  # client.py cannot import it: txn.py builds on client.py

__all__ = ["Kafka", "KafkaOptions", "outcome_of", "tansu_binary"]

# the pinned releases (release.py: any other is fetched by cluster.version; release.DEFAULT names the default)
VERSIONS = tuple(release.PINNED)


class KafkaOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    broker: Literal["apache", "tansu"] = Field(
        "apache", description="apache: Apache Kafka from Maven Central (cluster.version: 4.4 on KRaft, the "
                              "default; 3.9 on ZooKeeper; 4.1; any release from 3.0); tansu: the Kafka protocol on "
                              "one S3 store, no replication")
    metadata: Optional[Literal["zookeeper", "kraft"]] = Field(
        None, description="apache: where the cluster's metadata lives: zookeeper (one ZooKeeper server, host zk) "
                          "or kraft (one KRaft controller, host controller); default: ZooKeeper before 4.0, "
                          "KRaft from 4.0 (no ZooKeeper mode), KRaft from 3.3 only")
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
    client_version: Optional[str] = Field(
        None, description="the client release the producers and readers run: with client: java, kafka-clients "
                          "(2.0.0 on, from Maven Central: 2.0.0 was the dedup seed's; default: the servers' "
                          "release); with librdkafka, confluent-kafka (2.4.0 on, from PyPI, with the librdkafka "
                          "its wheel carries; default: the one installed), a session on another release running "
                          "in a child interpreter")
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

    @field_validator("client_version", mode="before")
    @classmethod
    def _client_version(cls, v):
        return release_text(v)


def librdkafka(version: str) -> PyClient:
    """confluent-kafka `version`, with the librdkafka its wheel carries (2.4: the oldest
    the harness's requirement names)."""
    return PyClient("confluent-kafka", "confluent_kafka", (2, 4), version)


def _check_releases(o: KafkaOptions, version) -> None:
    """The servers' mode and the Java client's release against the release cluster.version names."""
    if o.client_version is not None and o.client != "java":
        why = librdkafka(o.client_version).form_error()
        if why:
            raise ScenarioError(f"scenario field 'options.client_version': {why}")
    if o.broker == "tansu":
        if o.metadata is not None:
            raise ScenarioError("scenario field 'options.metadata': an Apache Kafka setting; tansu has no "
                                "metadata quorum")
        return
    if release.form_error(version) is not None:
        return  # version_error says why
    for field, why in (("client_version", release.client_error(o.client_version, version)),
                       ("metadata", release.mode_error(version, o.metadata))):
        if why:
            raise ScenarioError(f"scenario field 'options.{field}': {why}")


@SYSTEMS.register("kafka")
class Kafka(System):
    description = ("Apache Kafka 4.4 on KRaft by default (any release by cluster.version; 3.x on ZooKeeper, "
                   "host `zk`), RF 3, confluent-kafka; "
                   "options.broker tansu: one S3 store, no replication")
    client_options = frozenset({"acks", "batch_messages", "client", "client_config", "client_version", "isolation",
                                "linger_ms",
                                "max_in_flight", "message_timeout_ms", "min_insync_replicas", "partitions",
                                "request_timeout_ms", "retries"})  # the topic's and the clients' settings
    client_workload = frozenset({"group", "dedup", "transactions"})
    client_cluster = frozenset({"replicas"})  # the stream's, set by the client that creates it
    Options = KafkaOptions
    LocalCluster = ZooKeeperKafka
    Client = KafkaClient
    Roles = ApacheKafkaRoles
    offers = frozenset({COORDINATOR, ELECT, REASSIGN, REPLICAS})

    @classmethod
    def variants(cls):
        cached = [v for v in release.cached() if v not in release.PINNED.values()]
        return (*((f"kafka {v}", {}, v) for v in VERSIONS),
                ("kafka, any other release from 3.0 (cluster.version" + (f"; cached: {', '.join(cached)}"
                                                                         if cached else "") + ")", {}, releases.ANY),
                ("kafka on tansu", {"broker": "tansu"}, None))

    machine_setup = (needs.server_set("kafka-3.9", "Kafka 3.9 and ZooKeeper"),
                     needs.server_set("kafka-4.1", "Kafka 4.1 (KRaft)"),
                     needs.server_set(f"kafka-{release.DEFAULT}", "Kafka's default release (KRaft)"),
                     needs.package("mvn", "any other Kafka release (cluster.version), fetched once", "maven",
                                   "/usr/bin/mvn"))

    @classmethod
    def machine_needs(cls, options, version):
        if options.get("broker") == "tansu":
            return ()
        return releases.machine_needs(version or release.DEFAULT, release.resolve)

    @classmethod
    def server_versions(cls):
        v = {k: needs.pom_version(f"kafka-{k}", "kafka_2.13") for k in VERSIONS}
        others = [r for r in release.cached() if r not in v.values()]
        return (f"  kafka           {v[release.DEFAULT]} (KRaft, default), {v['4.1']} (KRaft), {v['3.9']} (ZooKeeper): "
                "Maven Central, pinned poms; any "
                "release from 3.0.0 by cluster.version (fetched once)"
                + (f"; cached: {', '.join(others)}" if others else ""),)

    @classmethod
    def version_error(cls, scenario):
        o = KafkaOptions.model_validate(scenario.options)
        if o.broker == "tansu":
            return super().version_error(scenario)
        return release.form_error(scenario.cluster.version)

    @classmethod
    def releases(cls, scenario, fetch: bool = True, of: str = "server") -> list[str]:
        if of == "client" and KafkaOptions.model_validate(scenario.options).client != "java":
            return [v for v in librdkafka("0.0").listing().versions(fetch) if librdkafka(v).form_error() is None]
        if of == "client":
            return [v for v in release.CLIENTS.versions(fetch)
                    if release.client_error(v, scenario.cluster.version) is None]
        if KafkaOptions.model_validate(scenario.options).broker == "tansu":
            return []
        return [v for v in release.LISTING.versions(fetch) if release.form_error(v) is None]

    @classmethod
    def install(cls, scenario) -> None:
        """The release's jars, resolved before anything starts (Maven says if it does not exist)."""
        o = KafkaOptions.model_validate(scenario.options)
        if scenario.external is None and o.broker == "apache":
            release.resolve(scenario.cluster.version).classpath()
        if o.client_version is not None and o.client == "java":
            jvm.classpath(release.client_set(o.client_version))
        pyclients.ensure(cls.python_client(scenario))

    @classmethod
    def python_client(cls, scenario):
        o = KafkaOptions.model_validate(scenario.options)
        return librdkafka(o.client_version) if o.client_version is not None and o.client != "java" else None

    @classmethod
    def local_cluster(cls, scenario):
        o = KafkaOptions.model_validate(scenario.options)
        if o.broker == "tansu":
            return TansuServers
        return KRaftKafka if release.kraft(scenario.cluster.version, o.metadata) else ZooKeeperKafka

    @classmethod
    def roles_offers(cls, scenario) -> frozenset[str]:
        tansu = KafkaOptions.model_validate(scenario.options).broker == "tansu"
        return cls.offers - {ELECT, REASSIGN, REPLICAS} if tansu else cls.offers  # tansu: one store, no replicas

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
        _check_releases(o, c.version)
        if o.broker == "tansu" and not o.auto_leader_rebalance:
            raise ScenarioError("scenario field 'options.auto_leader_rebalance': an Apache Kafka broker setting")
        for key in ("flush_messages", "retention_check_ms"):
            if o.broker == "tansu" and getattr(o, key) is not None:
                raise ScenarioError(f"scenario field 'options.{key}': an Apache Kafka broker setting; tansu keeps "
                                    "its data in one S3 store")
        if o.min_insync_replicas is not None and o.min_insync_replicas > c.replicas:
            raise ScenarioError(f"scenario field 'options.min_insync_replicas': {o.min_insync_replicas} is more "
                                f"than the {c.replicas} replicas; every write would be refused")
