"""MQTT with the paho-mqtt client: the VerneMQ seed's session test.

Brokers (`options.broker`): the RabbitMQ MQTT plugin on the 3-node RabbitMQ cluster (a
QoS 1 subscription of a persistent session is a classic queue on the node the subscriber
first connected to), the MQTT listener of the NATS JetStream cluster (sessions and
messages in replicated streams), or a single Mosquitto node (QoS 1, persistence on).

The test, as in the seed: a receiver with a persistent session (fixed client id, clean
session off) is subscribed before the transmitter starts and reads *live*; the
transmitter publishes the run's keyspace at QoS 1 (PUBACK = ack) to a node drawn per run
with the seed; the fault hits the receiver's node (target `leader` here means the node
holding the receiver's session, `consumer-node` says the same generally); the receiver
reconnects to another node with the same session and keeps reading until nothing new has
arrived for `read_idle` seconds. The cluster and the receiver's session live on from run
to run, so a message of an earlier run delivered late is a stowaway: producer names carry
the run id ("p1-run-004"), the seed's sequence id."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ...errors import ScenarioError
from ..base import SystemError_, node_names
from ..cluster import LocalCluster
from ..nats import bin as natsbin
from ..rabbitmq.cluster import RabbitMqttServers
from .. import needs
from ..registry import SYSTEMS
from ..roles import Roles
from ..system import System
from . import vernemq
from .backends import MOSQUITTO, MosquittoServer, MqttRoles, NatsMqttRoles, NatsMqttServers, RabbitMqttRoles
from .client import MqttClient
from .vernemq import VerneRoles, VerneServers

__all__ = ["MOSQUITTO", "Mqtt", "MqttOptions", "BACKENDS"]


class MqttOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    broker: Literal["rabbitmq", "nats", "mosquitto", "vernemq"] = Field(
        "rabbitmq", description="rabbitmq (the MQTT plugin on the RabbitMQ cluster), nats (the MQTT listener of "
                                "the JetStream cluster), mosquitto (one node) or vernemq (a VerneMQ cluster from a "
                                "release: $BROKERCHAOS_VERNEMQ, else ../shared/vernemq)")
    qos: Literal[0, 1] = Field(1, description="QoS of publish and subscription")
    clean_session: bool = Field(False, description="receiver's clean-session flag (false: a persistent session)")
    tx_node: str = Field("random", description="node the transmitter connects to: random (drawn per run "
                                               "with the seed) or a node name")
    rx_node: str = Field("random", description="node the receiver connects to: random or a node name")
    topic: str = Field("bc/keyspace", description="topic of every run (one topic: late messages are stowaways)")
    keepalive: int = Field(5, ge=1, le=600, description="MQTT keepalive, seconds")
    rx_reconnect_s: float = Field(30.0, gt=0, le=3600, description="after the write: how long the receiver may "
                                                                  "stay disconnected before the read is incomplete")
    autosave_interval: int = Field(1800, ge=0, le=86_400,
                                   description="mosquitto: seconds between persistence saves (its default)")
    ack_wait_s: float = Field(30.0, gt=0, le=3600, description="nats: redelivery of a QoS 1 message the receiver "
                                                             "has not acknowledged (NATS's default 30 s)")
    netsplit_writes: bool = Field(
        True, description="vernemq: allow_register, _publish, _subscribe and _unsubscribe_during_netsplit (off, "
                          "VerneMQ's default, refuses every new connection while a node is down)")
    outgoing_clustering_buffer_size: int = Field(
        10_000, ge=0, le=100_000_000, description="vernemq: bytes of the inter-node buffer while a peer is unreachable "
                                                  "(VerneMQ's default 10000; the seed's knob)")
    shared_subscription_policy: Literal["prefer_local", "local_only", "random"] = Field(
        "prefer_local", description="vernemq: which member of a shared subscription ($share/...) gets a message: "
                                    "one on the node it was published to if any (prefer_local, VerneMQ's default), "
                                    "only such one (local_only), or any (random)")
    max_queued_messages: int = Field(
        1000, ge=-1, le=100_000_000, description="vernemq: max_online_messages and max_offline_messages of a "
                                                 "session (VerneMQ's default 1000; -1: no bound)")


BACKENDS = {"rabbitmq": (RabbitMqttServers, RabbitMqttRoles), "nats": (NatsMqttServers, NatsMqttRoles),
            "mosquitto": (MosquittoServer, MqttRoles), "vernemq": (VerneServers, VerneRoles)}


@SYSTEMS.register("mqtt")
class Mqtt(System):
    description = ("MQTT (paho-mqtt), QoS 1, a live receiver with a persistent session: "
                   "RabbitMQ's MQTT plugin on its cluster, NATS's MQTT listener, Mosquitto or a VerneMQ cluster")
    client_options = frozenset({"clean_session", "keepalive", "qos", "rx_node", "rx_reconnect_s", "topic",
                                "tx_node"})
    client_workload = frozenset({"group", "dedup", "transactions"})
    Options = MqttOptions
    Client = MqttClient
    tags_runs = True  # producer names carry the run id: late messages of other runs are stowaways

    @classmethod
    def variants(cls):
        return tuple((f"mqtt on {b}", {"broker": b}, None) for b in BACKENDS)

    machine_setup = (needs.package("mosquitto", "MQTT on Mosquitto", "mosquitto", "/usr/sbin/mosquitto"),
                     needs.Need("vernemq", "MQTT on VerneMQ",
                                f"put the release in ../shared/vernemq or set {vernemq.RELEASE_ENV}", vernemq.missing))

    @classmethod
    def machine_needs(cls, options, version):
        backend = options.get("broker", "rabbitmq")
        return natsbin.machine_needs(version) if backend == "nats" else (backend,)

    @classmethod
    def server_versions(cls):
        return (f"  mosquitto       {needs.debian('mosquitto')} (Debian)",
                f"  vernemq         {vernemq.version_found()}")

    @classmethod
    def services_needed(cls, scenario) -> tuple[str, ...]:
        # every backend's MQTT listener; the backend's own health and session lookups
        broker = MqttOptions.model_validate(scenario.options).broker
        return ("mqtt",) + {"rabbitmq": ("mgmt",), "nats": ("monitor",), "mosquitto": (), "vernemq": ("http",)}[broker]

    @classmethod
    def local_offers(cls) -> frozenset[str]:
        """What some broker's local cluster offers beyond the verbs (options.broker picks which:
        VerneMQ's power and clock); a scenario is checked against its own broker's."""
        return frozenset().union(*(getattr(c, "extra_offers", frozenset()) for c, _ in BACKENDS.values()))

    @classmethod
    def local_cluster(cls, scenario) -> type[LocalCluster]:
        return BACKENDS[MqttOptions.model_validate(scenario.options).broker][0]

    @classmethod
    def roles_class(cls, scenario) -> type[Roles]:
        return BACKENDS[MqttOptions.model_validate(scenario.options).broker][1]

    @classmethod
    def version_error(cls, scenario):
        if MqttOptions.model_validate(scenario.options).broker == "nats":
            return natsbin.version_error(scenario.cluster.version)
        return super().version_error(scenario)

    @classmethod
    def install(cls, scenario) -> None:
        broker = MqttOptions.model_validate(scenario.options).broker
        if broker == "nats" and scenario.external is None:
            natsbin.binary(scenario.cluster.version)
        if broker == "vernemq" and scenario.external is None:
            try:
                vernemq.release()  # unpacked once; none at all is the scenario's to fix
            except SystemError_ as e:
                raise ScenarioError(f"scenario field 'options.broker': vernemq: {e}") from None

    @classmethod
    def check(cls, scenario) -> None:
        o = scenario.options
        n = scenario.cluster.nodes
        if o.get("broker") == "mosquitto" and n != 1:
            raise ScenarioError(f"scenario field 'cluster.nodes': mosquitto runs one node; set it to 1 (got {n})")
        names = set(node_names(n))
        for key in ("tx_node", "rx_node"):
            v = o.get(key, "random")
            if v != "random" and v not in names:
                raise ScenarioError(f"scenario field 'options.{key}': {v!r} is not random or one of "
                                    f"{', '.join(sorted(names))}")
        if scenario.cluster.replicas > n:
            raise ScenarioError(f"scenario field 'cluster.replicas': {scenario.cluster.replicas} is more than "
                                f"the {n} nodes")
