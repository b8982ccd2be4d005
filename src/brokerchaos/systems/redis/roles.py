"""Who holds what in a Redis deployment: the primary (the sentinels' word) and its replicas."""
from __future__ import annotations

from ..base import Client, SystemError_
from ..roles import Roles
from .client import _parse_info


class RedisRoles(Roles):
    """The leader is the primary the sentinels name."""

    client: Client

    async def leader(self) -> str:
        ip, port = await self.client.primary_addr()
        node = self.cluster.node_at(ip, port)
        if node is None:
            raise SystemError_(f"sentinels name an unknown primary {ip}:{port}")
        return node

    async def whole(self) -> tuple[bool, str]:
        return await self.client.settled()

    async def group_coordinator(self, group: str) -> str:
        """A Streams group lives in the stream, on the primary."""
        return await self.leader()

    async def stepdown(self, node: str, role: str) -> str:
        """SENTINEL FAILOVER: a sentinel promotes a replica without a vote, as for a dead
        primary, but the old primary is told to follow the new one (no writes lost to it)."""
        if role != "leader":
            raise LookupError("Redis has no coordinator role to step down from")
        holder = await self.leader()
        if holder != node:
            raise LookupError(f"{node} is not the primary ({holder} is)")
        errors = []
        for n in [x for x in self.cluster.node_names if x != node] + [node]:
            try:
                await self.client.sentinel(self.cluster.address(n, "sentinel"), "FAILOVER")
                return f"SENTINEL FAILOVER {self.client.options.master_name} (sentinel of {n})"
            except Exception as e:  # that sentinel is down or busy: another one
                errors.append(f"{n}: {type(e).__name__}: {e}")
        raise SystemError_(f"no sentinel took SENTINEL FAILOVER ({'; '.join(errors)})")

    async def stream_ready(self) -> bool:
        """The named primary is a primary with every replica online."""
        lead = await self.leader()
        info = _parse_info(await self.client.ask(self.cluster.address(lead), "INFO", "replication"))
        online = sum(1 for k, v in info.items() if k.startswith("slave") and "state=online" in v)
        return info.get("role") == "master" and online >= len(self.cluster.node_names) - 1
