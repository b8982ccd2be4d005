"""Pulsar: real Apache Pulsar with BookKeeper and ZooKeeper from Maven Central by default
(apache.py), or one pulsar-lite broker (lite.py: the protocol only) as `options.broker: lite`;
the same pulsar-client for both (client.py).
"""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ...errors import ScenarioError
from ...scenario import release_text
from ..base import COORDINATOR, ENSEMBLE, REPLACE, STEPDOWN, UNLOAD
from .. import jvm, needs, releases
from . import release
from .. import pyclients
from ..pyclients import PyClient
from ..registry import SYSTEMS
from ..system import System
from .apache import ZK, ApachePulsar, ApachePulsarRoles, bookie_names
from .client import PulsarClient
from .java import PulsarJavaProducer, PulsarJavaTxnProducer
from .library import outcome_of
from .lite import PulsarLite, pulsar_lite_binary
from .roles import PulsarRoles

PulsarClient.java_producers = (PulsarJavaProducer, PulsarJavaTxnProducer)  # java.py builds on client.py

__all__ = ["Pulsar", "PulsarOptions", "outcome_of", "pulsar_lite_binary"]


class PulsarOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    broker: Literal["apache", "lite"] = Field(
        "apache", description="apache: Apache Pulsar 4.0 brokers on BookKeeper and ZooKeeper (Maven Central); "
                              "lite: one pulsar-lite broker, the protocol only")
    bookies: int = Field(3, ge=1, le=9, description="bookies (apache), hosts b1, b2, …")
    ensemble_size: int = Field(2, ge=1, le=9, description="E: bookies a ledger is striped over (seed default 2)")
    write_quorum: int = Field(2, ge=1, le=9, description="Qw: copies of each entry (seed default 2)")
    ack_quorum: int = Field(2, ge=1, le=9, description="Qa: copies before the ack (seed default 2)")
    skip_lost_data: bool = Field(
        False, description="autoSkipNonRecoverableData: readers skip entries no bookie has any more (else the read "
                           "stops there and the run is undecided)")
    journal_sync: bool = Field(
        True, description="bookies' journalSyncData: fsync the journal before an entry is acknowledged (apache; "
                          "off: a bookie's power cut loses what it acknowledged and had not yet synced)")
    zk_force_sync: bool = Field(
        True, description="ZooKeeper's forceSync: fsync its transaction log before a write is answered (apache)")
    zk_session_timeout_ms: int = Field(30_000, ge=1_000, le=300_000,
                                       description="brokers' and bookies' ZooKeeper session timeout (apache)")
    session_expired: Literal["reconnect", "shutdown"] = Field(
        "reconnect", description="what a broker does when its ZooKeeper session expires "
                                 "(zookeeperSessionExpiredPolicy; apache): reconnect, Pulsar's default since 2.10 "
                                 "(PIP-118: it keeps serving its topics), or shutdown, the seeds' era: it exits, its "
                                 "topics move to another broker, and the harness starts it again as the post's "
                                 "container restart policy did")
    autorecovery: bool = Field(
        False, description="bookies run BookKeeper's AutoRecovery (auditor and replication worker) and their HTTP "
                           "admin API; every run ends with the check that no ledger is under-replicated (apache)")
    rereplication_grace_s: float = Field(
        30.0, ge=0, le=3600, description="with autorecovery: openLedgerRereplicationGracePeriod, how long a "
                                         "replication worker leaves a ledger still open for writes before it fences "
                                         "it and copies it again")
    recovery_timeout_s: float = Field(
        180.0, ge=0, le=3600, description="with autorecovery: how long a run's end check waits for AutoRecovery to "
                                          "leave no ledger under-replicated (0: one look)")
    client: Literal["cpp", "java"] = Field(
        "cpp", description="the producers' client library: cpp (pulsar-client, the C++ core), or java: "
                           "pulsar-client-original of the servers' release in a child process, with transactions "
                           "(docs/java-clients.md)")
    batching: bool = Field(True, description="producer batching")
    batching_max_publish_delay_ms: int = Field(5, ge=0, le=60_000)
    batching_max_messages: int = Field(1000, ge=1, le=100_000)
    client_version: Optional[str] = Field(
        None, description="the client release the producers and readers run: with client: java, "
                          "pulsar-client-original (3.0.0 on, from Maven Central; default: the servers' release); "
                          "with cpp, pulsar-client (3.5.0 on, from PyPI, with the C++ client its wheel carries; "
                          "default: the one installed), a session on another release running in a child "
                          "interpreter")
    send_timeout_ms: Optional[int] = Field(
        None, ge=0, le=3_600_000, description="client send timeout (unknown after it); 0: none, the client retries "
                                              "until the broker answers (workload.ack_timeout still bounds each "
                                              "send's wait); default: workload.ack_timeout minus 1 s")
    partitions: int = Field(
        1, ge=1, le=64, description="a partitioned topic of this many partitions (apache, C++ client): the "
                                    "producer's router spreads the messages, the read takes each partition in "
                                    "turn and ordering holds per partition; the owner, the ledgers and the "
                                    "ensemble the faults aim at are the first partition's")
    namespace: str = Field("public/default", pattern=r"^[\w.-]+/[\w.-]+$", description="tenant/namespace")

    def send_timeout(self, ack_timeout: float) -> int:
        """The producers' send timeout in ms (0: none): the option, else 1 s below the
        harness's ack_timeout, so that the client's own timeout answers first."""
        return int((ack_timeout - 1.0) * 1000) if self.send_timeout_ms is None else self.send_timeout_ms

    @field_validator("client_version", mode="before")
    @classmethod
    def _client_version(cls, v):
        return release_text(v)


def cpp_client(version: str) -> PyClient:
    """pulsar-client `version`, with the C++ client its wheel carries (3.5: the oldest the
    harness's requirement names)."""
    return PyClient("pulsar-client", "pulsar", (3, 5), version)


def _check_autorecovery(scenario, o: PulsarOptions) -> None:
    if o.autorecovery and (o.broker == "lite" or scenario.external is not None):
        raise ScenarioError("scenario field 'options.autorecovery': the harness runs AutoRecovery on the bookies "
                            "it starts (options.broker apache, no --external)")
    if not o.autorecovery and o.broker == "apache" and any(f.action == "replace" for _, f in scenario.fault_fields()):
        raise ScenarioError("scenario field 'options.autorecovery': replace needs it: it decommissions a bookie "
                            "through AutoRecovery (its ledgers copied elsewhere); set autorecovery: true")


def _check_client_version(o: PulsarOptions) -> None:
    if o.client_version is None:
        return
    why = cpp_client(o.client_version).form_error() if o.client != "java" else release.client_error(o.client_version)
    if why:
        raise ScenarioError(f"scenario field 'options.client_version': {why}")




@SYSTEMS.register("pulsar")
class Pulsar(System):
    description = ("Apache Pulsar 4.2 by default (any release by cluster.version): brokers n1…, bookies b1… and "
                   "ZooKeeper (host `zk`), E-Qw-Qa from options, "
                   "broker deduplication with workload.dedup; options.broker lite: one pulsar-lite broker")
    client_options = frozenset({"batching", "batching_max_messages", "batching_max_publish_delay_ms", "client",
                                "client_version", "partitions", "send_timeout_ms"})
    # dedup and transactions are the brokers' settings; the replicas are read from the bookies'
    # files by the harness (entries.py), which no server is configured for
    client_workload = frozenset({"group", "read_replicas"})
    client_cluster = frozenset({"replicas"})  # the stream's, set by the client that creates it
    Options = PulsarOptions
    LocalCluster = ApachePulsar
    Client = PulsarClient
    Roles = ApachePulsarRoles
    # STEPDOWN: a topic unload; REPLACE: a bookie decommissioned (with options.autorecovery)
    offers = frozenset({ENSEMBLE, COORDINATOR, STEPDOWN, UNLOAD, REPLACE})
    external_services = ("admin",)  # the topic owner's lookup (or the file's admin_url)

    machine_setup = (needs.server_set(f"pulsar-{release.DEFAULT}", "Pulsar and BookKeeper"),)

    @classmethod
    def variants(cls):
        cached = [v for v in release.cached() if v not in release.PINNED.values()]
        return (("pulsar", {}, None),
                ("pulsar, any other release from 2.10 (cluster.version" + (f"; cached: {', '.join(cached)}"
                                                                           if cached else "") + ")", {}, releases.ANY))

    @classmethod
    def machine_needs(cls, options, version):
        if options.get("broker") == "lite":
            return ("java", f"pulsar-{release.DEFAULT}")
        return releases.machine_needs(version or release.DEFAULT, release.resolve)

    @classmethod
    def server_versions(cls):
        pinned = [needs.pom_version(f"pulsar-{name}", "pulsar-broker") for name in release.PINNED]
        default = needs.pom_version(f"pulsar-{release.DEFAULT}", "pulsar-broker")
        newest_first = sorted(pinned, key=lambda v: releases.parse(v) or (), reverse=True)
        named = ", ".join(f"{v} (default)" if v == default else str(v) for v in newest_first)
        others = [r for r in release.cached() if r not in pinned]
        return (f"  pulsar          {named}: Maven Central, pinned poms; any release from 2.10.0 by cluster.version "
                "(fetched once)" + (f"; cached: {', '.join(others)}" if others else ""),)

    @classmethod
    def version_error(cls, scenario):
        if PulsarOptions.model_validate(scenario.options).broker == "lite":
            return super().version_error(scenario)
        return release.form_error(scenario.cluster.version)

    @classmethod
    def releases(cls, scenario, fetch: bool = True, of: str = "server") -> list[str]:
        if of == "client" and PulsarOptions.model_validate(scenario.options).client != "java":
            return [v for v in cpp_client("0.0").listing().versions(fetch) if cpp_client(v).form_error() is None]
        if of == "client":
            return [v for v in release.CLIENTS.versions(fetch) if release.client_error(v) is None]
        if PulsarOptions.model_validate(scenario.options).broker == "lite":
            return []
        return [v for v in release.LISTING.versions(fetch) if release.form_error(v) is None]

    @classmethod
    def install(cls, scenario) -> None:
        """The release's jars, resolved before anything starts (Maven says if it does not exist)."""
        o = PulsarOptions.model_validate(scenario.options)
        if scenario.external is None and o.broker != "lite":
            release.resolve(scenario.cluster.version).classpath()
        if o.client_version is not None and o.client == "java":
            jvm.classpath(release.client_set(o.client_version))
        pyclients.ensure(cls.python_client(scenario))

    @classmethod
    def python_client(cls, scenario):
        o = PulsarOptions.model_validate(scenario.options)
        return cpp_client(o.client_version) if o.client_version is not None and o.client != "java" else None

    @classmethod
    def roles_offers(cls, scenario) -> frozenset[str]:
        o = PulsarOptions.model_validate(scenario.options)
        if o.broker == "lite":
            return frozenset()
        # a bookie decommissioned through AutoRecovery's HTTP admin API (bookies.py)
        return cls.offers if o.autorecovery and scenario.external is None else cls.offers - {REPLACE}

    @classmethod
    def local_cluster(cls, scenario):
        return PulsarLite if PulsarOptions.model_validate(scenario.options).broker == "lite" else ApachePulsar

    @classmethod
    def roles_class(cls, scenario):
        return PulsarRoles if PulsarOptions.model_validate(scenario.options).broker == "lite" else ApachePulsarRoles

    @classmethod
    def service_hosts(cls, scenario) -> tuple[str, ...]:
        o = PulsarOptions.model_validate(scenario.options)
        return () if o.broker == "lite" else (ZK, *bookie_names(o.bookies))

    @classmethod
    def end_check_s(cls, scenario) -> float:
        o = PulsarOptions.model_validate(scenario.options)
        return o.recovery_timeout_s + 60 if o.autorecovery and o.broker == "apache" else 0.0

    @classmethod
    def check(cls, scenario) -> None:
        c, w = scenario.cluster, scenario.workload
        o = PulsarOptions.model_validate(scenario.options)
        if o.broker == "lite" and scenario.external is None and (c.nodes != 1 or c.replicas != 1):
            raise ScenarioError("scenario field 'cluster.nodes': pulsar-lite is a single broker; set cluster.nodes "
                                "and cluster.replicas to 1 (or test a real cluster with --external)")
        _check_autorecovery(scenario, o)
        if o.broker == "lite" and o.session_expired != "reconnect":
            raise ScenarioError("scenario field 'options.session_expired': pulsar-lite keeps no ZooKeeper session; "
                                "it is for options.broker apache")
        if o.broker == "lite" and not (o.journal_sync and o.zk_force_sync):
            raise ScenarioError("scenario field 'options.journal_sync': pulsar-lite has no bookies or ZooKeeper; "
                                "journal_sync and zk_force_sync are for options.broker apache")
        if o.broker == "lite" and w.read_replicas:
            raise ScenarioError("scenario field 'workload.read_replicas': pulsar-lite has no bookies whose copies "
                                "could be read one by one; it is for options.broker apache")
        if o.broker == "apache":
            if o.ensemble_size > o.bookies:
                raise ScenarioError(f"scenario field 'options.ensemble_size': E={o.ensemble_size} needs that many "
                                    f"bookies; there are {o.bookies}")
            if not o.ack_quorum <= o.write_quorum <= o.ensemble_size:
                raise ScenarioError(f"scenario field 'options.write_quorum': need Qa <= Qw <= E, got "
                                    f"{o.ensemble_size}-{o.write_quorum}-{o.ack_quorum}")
        if o.partitions > 1:
            cls._check_partitioned(scenario, o)
        _check_client_version(o)
        if o.send_timeout_ms and o.send_timeout_ms / 1000 >= w.ack_timeout:
            raise ScenarioError(f"scenario field 'options.send_timeout_ms': {o.send_timeout_ms} ms is not below "
                                f"workload.ack_timeout ({w.ack_timeout} s)")
        if o.send_timeout_ms is not None and 0 < o.send_timeout_ms < 100:
            raise ScenarioError("scenario field 'options.send_timeout_ms': give 0 (none) or at least 100 ms")
        if o.send_timeout_ms is None and w.ack_timeout <= 1.1:
            raise ScenarioError("scenario field 'workload.ack_timeout': Pulsar needs more than 1.1 s "
                                "(the send timeout is derived from it)")

    @staticmethod
    def _check_partitioned(scenario, o: PulsarOptions) -> None:
        """What a partitioned topic is built for: the C++ producer and the end-of-run read."""
        w = scenario.workload
        if o.broker != "apache":
            raise ScenarioError("scenario field 'options.partitions': pulsar-lite has no admin API to create a "
                                "partitioned topic (options.broker: apache)")
        if o.client != "cpp":
            raise ScenarioError("scenario field 'options.partitions': a partitioned topic is written by the C++ "
                                "client here (options.client: cpp)")
        if w.group is not None or w.consumers:
            raise ScenarioError("scenario field 'options.partitions': a partitioned topic is read back at the end "
                                "only (no workload.group, no live consumer)")
