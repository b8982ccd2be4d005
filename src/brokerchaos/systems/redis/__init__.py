"""Redis with Sentinel: redis-server + sentinel from Debian, the redis-py client.

One redis-server and one sentinel per node namespace; n1 starts as the primary, the others
replicate it. The workload writes a Redis Stream: XADD is a send and its reply (the entry
id) the ack; the read is XRANGE from the start on the primary the sentinels name. Writes
are pipelined in batches on a few connections so thousands can be in flight.

Durability setting: `options.wait_replicas: n` sends `WAIT n timeout` after each batch (the
analogue of acks=all); a batch that reaches fewer replicas is recorded as *unknown*, since
Redis has already applied it on the primary and may or may not keep it. Replication is
asynchronous otherwise: a primary cut off from its replicas and sentinels keeps acking the
clients that can still reach it, and when the sentinels have promoted another node those
writes are discarded (the split-brain positive control).

The package: servers (cluster.py), the client (client.py, conn.py), roles (roles.py), the
producer, the read and live consumer (read.py) and a consumer group's member (group.py).
"""
from __future__ import annotations

from ...errors import ScenarioError
from ..base import REPLACE, STEPDOWN
from .. import needs
from ..registry import SYSTEMS
from ..system import System
from .client import RedisClient
from .cluster import RedisOptions, RedisServers
from .conn import FIELD, client_for
from .roles import RedisRoles

__all__ = ["Redis", "RedisOptions", "FIELD", "client_for"]


@SYSTEMS.register("redis")
class Redis(System):
    description = "Redis primary + replicas with one Sentinel per node (redis-server 7), a Redis Stream"
    client_options = frozenset({"batch", "connections", "follow_failover", "wait_replicas", "wait_timeout_ms"})
    client_workload = frozenset({"group", "dedup", "transactions"})
    client_cluster = frozenset({"replicas"})  # the stream's, set by the client that creates it
    Options = RedisOptions
    LocalCluster = RedisServers
    Client = RedisClient
    Roles = RedisRoles
    offers = frozenset({STEPDOWN, REPLACE})  # SENTINEL FAILOVER; a replica replaced
    external_services = ("sentinel",)  # the primary, as the sentinels name it

    machine_setup = (needs.Need("redis", "Redis and Sentinel", needs.APT.format("redis-server redis-sentinel"),
                                lambda: needs.absent("redis-server") or needs.absent("redis-sentinel")),)

    @classmethod
    def machine_needs(cls, options, version):
        return ("redis",)

    @classmethod
    def server_versions(cls):
        return (f"  redis           {needs.debian('redis-server')} (Debian)",)

    @classmethod
    def check(cls, scenario) -> None:
        c = scenario.cluster
        if c.replicas != c.nodes:
            raise ScenarioError(f"scenario field 'cluster.replicas': Redis replicates to every node; set it to "
                                f"cluster.nodes ({c.nodes})")
        w = scenario.options.get("wait_replicas", 0)
        if isinstance(w, int) and w > c.nodes - 1:
            raise ScenarioError(f"scenario field 'options.wait_replicas': {w} is more than the {c.nodes - 1} replicas")
