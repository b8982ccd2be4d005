"""A bookie replaced, as an operator decommissions one (BookKeeper's `decommissionbookie`,
through the bookies' HTTP admin API): the bookie shut down and its disk deleted, then
`/api/v1/autorecovery/decommission` asks AutoRecovery to copy every ledger it held onto the
other bookies; at the heal a new, empty bookie (formatted, its old cookie deleted) starts
in its place and registers as writable. The bookie is a member again once the cluster's own
check says no ledger is under-replicated. Needs options.autorecovery (the auditor, the
replication workers and the HTTP admin API)."""
from __future__ import annotations

import asyncio
import json
import time

from ..base import SystemError_
from ..runtime import http_request


class BookieMembership:
    """remove_member/add_member of ApachePulsarRoles (the cluster's `bookies`, `wipe`)."""

    async def bookies_writable(self) -> list[str]:
        """The bookies registered writable, as a live bookie's HTTP admin API lists them."""
        c, last = self.cluster, "no bookie answered"
        for b in c.bookies:
            if not c.alive(b):
                continue
            try:
                status, body = await http_request(*c.address(b, "bookie_admin"),
                                                  "/api/v1/bookie/list_bookies?type=rw&print_hostnames=false", 10.0)
            except (OSError, asyncio.TimeoutError) as e:
                last = f"{b}: {type(e).__name__}"
                continue
            if status == 200:
                return sorted(self.client.bookie_at(addr) for addr in json.loads(body))
            last = f"{b}: HTTP {status}"
        raise LookupError(f"no bookie listed the writable bookies ({last})")

    async def remove_member(self, node: str, same_name: bool = False) -> dict:
        c = self.cluster
        if node not in c.bookies:
            raise LookupError(f"{node} is not a bookie: replace a bookie (target bookie)")
        before = await self.bookies_writable()
        await asyncio.to_thread(c.stop_node, node)
        await asyncio.to_thread(c.wipe, node)
        src = "{}:{}".format(*c.address(node, "bookie"))
        reply = await self._decommission(src)
        return {"verb": f"{node} shut down, its disk deleted, AutoRecovery's decommission of {src}",
                "members_before": before, "members_after": await self.bookies_writable(), "reply": reply}

    async def _decommission(self, src: str) -> str:
        c, last = self.cluster, "no live bookie"
        for b in c.bookies:
            if not c.alive(b):
                continue
            try:
                status, body = await http_request(*c.address(b, "bookie_admin"), "/api/v1/autorecovery/decommission",
                                                  60.0, method="PUT", body=json.dumps({"bookie_src": src}).encode())
            except (OSError, asyncio.TimeoutError) as e:
                last = f"{b}: {type(e).__name__}"
                continue
            if status == 200:
                return f"HTTP 200 from {b}"
            last = f"{b}: HTTP {status} {body[:120]!r}"
        raise SystemError_(f"decommission of bookie {src}: {last}")

    async def add_member(self, node: str, timeout: float) -> dict:
        """The new bookie started (formatted empty), waited for until it is writable and no
        ledger is under-replicated."""
        t0 = time.monotonic()
        await asyncio.to_thread(self.cluster.start_node, node)
        in_sync, under = None, None
        while time.monotonic() - t0 < timeout:
            try:
                under = await self.under_replicated()
                if node in await self.bookies_writable() and not under:
                    in_sync = round(time.monotonic() - t0, 3)
                    break
            except LookupError:  # no auditor elected for a moment
                pass
            await asyncio.sleep(1.0)
        return {"verb": f"a new bookie on {node}, its disk formatted", "members_after": await self.bookies_writable(),
                "in_sync_s": in_sync, "under_replicated": under,
                "copied": "no ledger under-replicated" if in_sync is not None else f"under-replicated: {under}"}
