"""Who holds what in a Redis deployment: the primary (the sentinels' word) and its replicas."""
from __future__ import annotations

import asyncio
import time

from ..base import Client, SystemError_
from ..roles import Roles
from .client import _healthy_replicas, _parse_info


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

    async def members(self) -> list[str]:
        """The primary, then the replicas its INFO lists (connected, whatever their state)."""
        lead = await self.leader()
        info = _parse_info(await self.client.ask(self.cluster.address(lead), "INFO", "replication"))
        found = []
        for k, v in info.items():
            if k.startswith("slave") and k[5:].isdigit():
                f = dict(kv.split("=", 1) for kv in v.split(",") if "=" in kv)
                node = self.cluster.node_at(f.get("ip", ""), int(f.get("port", 0)))
                found.append(node or f"{f.get('ip')}:{f.get('port')}")
        return [lead, *sorted(found)]

    async def _full_syncs(self, lead: str) -> int:
        info = _parse_info(await self.client.ask(self.cluster.address(lead), "INFO", "stats"))
        return int(info.get("sync_full", 0))

    async def _reset_sentinels(self, replicas: int, each_s: float = 30.0) -> dict:
        """SENTINEL RESET on each sentinel that answers, one after the other as Redis's
        documentation asks: each forgets the replicas and sentinels it knew and learns them
        again (a removed replica stays forgotten); the next is reset once this one knows the
        other sentinels and `replicas` replicas again (up to `each_s`), so that the others
        can still agree on a failover meanwhile. Per sentinel, seconds until it knew them
        (None: not within the bound, or down)."""
        out: dict = {}
        for n in self.cluster.node_names:
            addr = self.cluster.address(n, "sentinel")
            try:
                await self.client.sentinel(addr, "RESET")
            except Exception:  # that sentinel is down: it learns the truth when it is back
                out[n] = None
                continue
            t0 = time.monotonic()
            out[n] = None
            while time.monotonic() - t0 < each_s:
                try:
                    if (len(await self.client.sentinel(addr, "SENTINELS")) >= len(self.cluster.node_names) - 1
                            and _healthy_replicas(await self.client.sentinel(addr, "REPLICAS")) >= replicas):
                        out[n] = round(time.monotonic() - t0, 3)
                        break
                except Exception:
                    pass
                await asyncio.sleep(0.2)
        return out

    async def remove_member(self, node: str, same_name: bool = False) -> dict:
        """A replica removed: shut down, its data deleted, its configuration rewritten (a new
        machine's), and every sentinel reset so that none keeps it as a replica."""
        lead = await self.leader()
        if node == lead:
            raise LookupError(f"{node} is the primary: replace a replica (target follower)")
        before = await self.members()
        syncs = await self._full_syncs(lead)
        await asyncio.to_thread(self.cluster.stop_node, node)
        await asyncio.to_thread(self.cluster.renew, node, self.cluster.address(lead))
        reset = await self._reset_sentinels(len(before) - 2)
        return {"verb": f"{node} shut down and its data deleted; SENTINEL RESET on each sentinel in turn",
                "members_before": before, "members_after": await self.members(), "full_syncs_before": syncs,
                "sentinels_knew_again_s": reset}

    async def add_member(self, node: str, timeout: float) -> dict:
        """A new, empty server in the removed replica's place, replicating from the primary
        now (a full resync); waited for until the primary has every replica online and every
        sentinel knows them."""
        lead = await self.leader()
        await asyncio.to_thread(self.cluster.renew, node, self.cluster.address(lead))
        syncs = await self._full_syncs(lead)
        t0 = time.monotonic()
        await asyncio.to_thread(self.cluster.start_node, node)
        in_sync = None
        while time.monotonic() - t0 < timeout:
            try:
                if await self.stream_ready() and (await self.client.settled())[0]:
                    in_sync = round(time.monotonic() - t0, 3)
                    break
            except Exception:  # the sentinels are learning the new replica
                pass
            await asyncio.sleep(0.2)
        after = await self._full_syncs(lead)
        return {"verb": f"a new server on {node} replicating from {lead}", "members_after": await self.members(),
                "in_sync_s": in_sync, "full_syncs": after - syncs,
                "copied": f"{after - syncs} full resync(s) by the primary {lead}"}
