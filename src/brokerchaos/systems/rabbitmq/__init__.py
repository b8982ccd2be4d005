"""RabbitMQ: a 3-node cluster from Debian's rabbitmq-server 3.10 (cluster.py), a durable
queue with publisher confirms through aio-pika (client.py).

Queue types (`options.queue_type`): quorum (Raft, the leader is the Raft leader), classic
(one node, not replicated: the positive control for loss on a node kill) and stream.
"""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from ...errors import ScenarioError
from ..base import EVERY, REPLICAS, STEPDOWN
from .. import needs
from ..registry import SYSTEMS
from ..system import System
from .client import RabbitClient, RabbitRoles
from .cluster import SERVER, RabbitServers

__all__ = ["SERVER", "RabbitMQ", "RabbitOptions"]


class RabbitOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    queue_type: Literal["quorum", "classic", "stream"] = Field(
        "quorum", description="quorum (Raft-replicated), classic (one node, not replicated) or stream")
    producers_on: Literal["others", "all", "first"] = Field(
        "others", description="nodes producers connect to, round-robin: others than the queue's first node, "
                              "all, or the first")
    persistent: bool = Field(True, description="delivery_mode 2 (persistent) messages")
    mandatory: bool = Field(True, description="publish with mandatory: an unroutable message comes back (nack)")
    prefetch: int = Field(2000, ge=1, le=65_535, description="consumer prefetch for the read")
    restart_on_failure: bool = Field(
        True, description="a node whose process exits on its own (a boot that failed) is started again, as the "
                          "Debian package's service does (Restart=on-failure); each restart is in run.json and "
                          "the cluster's whole line. false: it stays down, and the run is not whole")
    message_ttl: Optional[int] = Field(
        None, ge=1, le=10 * 365 * 86_400,
        description="seconds a message may wait in the queue (x-message-ttl), judged by the queue's node's "
                    "wall clock; unset: no expiry. Not for streams (they have max-age)")


@SYSTEMS.register("rabbitmq")
class RabbitMQ(System):
    description = "RabbitMQ cluster (rabbitmq-server 3.10): quorum, classic or stream queue, publisher confirms"
    client_options = frozenset({"mandatory", "message_ttl", "persistent", "prefetch", "producers_on",
                                "queue_type"})  # the queue's arguments and the clients' settings
    client_workload = frozenset({"group", "dedup", "transactions"})
    client_cluster = frozenset({"replicas"})  # the stream's, set by the client that creates it
    Options = RabbitOptions
    LocalCluster = RabbitServers
    Client = RabbitClient
    Roles = RabbitRoles
    # draining a node (maintenance mode) moves every queue it leads; a quorum queue's members
    # can be deleted and added (replicas)
    offers = frozenset({STEPDOWN, EVERY, REPLICAS})
    external_services = ("mgmt",)  # queue leaders and health from the management API

    machine_setup = (needs.Need("rabbitmq", "RabbitMQ", needs.APT.format("rabbitmq-server"),
                                lambda: needs.absent("rabbitmq-server", "/usr/lib/rabbitmq/bin/rabbitmq-server")),)

    @classmethod
    def machine_needs(cls, options, version):
        return ("rabbitmq",)

    @classmethod
    def server_versions(cls):
        return (f"  rabbitmq-server {needs.debian('rabbitmq-server')} (Debian)",)

    @classmethod
    def roles_offers(cls, scenario) -> frozenset[str]:
        """Members are a quorum queue's: a classic queue has one node, a stream its own verbs."""
        quorum = scenario.options.get("queue_type", "quorum") == "quorum"
        return cls.offers if quorum else cls.offers - {REPLICAS}

    @classmethod
    def check(cls, scenario) -> None:
        c = scenario.cluster
        qt = scenario.options.get("queue_type", "quorum")
        if qt == "classic" and c.replicas != 1 and "replicas" in c.model_fields_set:
            raise ScenarioError("scenario field 'cluster.replicas': a classic queue lives on one node; set it to 1")
        if qt != "quorum" and scenario.workload.read_replicas:
            raise ScenarioError(f"scenario field 'workload.read_replicas': a {qt} queue has no members to read one by "
                                "one; it is for options.queue_type quorum")
        w = scenario.workload
        if w.read_replicas and (w.consumers or w.group is not None):
            raise ScenarioError("scenario field 'workload.read_replicas': consumers settle what they take from the "
                                "queue, and its members then drop it from their logs; read replicas without them")
        if qt == "stream" and scenario.options.get("message_ttl") is not None:
            raise ScenarioError("scenario field 'options.message_ttl': a stream does not expire messages one by one")
        if c.replicas > c.nodes:
            raise ScenarioError(f"scenario field 'cluster.replicas': {c.replicas} is more than the {c.nodes} nodes")
