"""What a Pulsar cluster with AutoRecovery says is short of copies: the ledgers its auditor
has marked under-replicated, asked of a bookie's HTTP admin API, and for a ledger still
listed at a run's end what it is (its topic, its state, its ensembles), so that an end check
that fails says which ledger and in what state without the bookies' logs."""
from __future__ import annotations

import asyncio
import base64
import binascii
import json
from typing import Optional

from ..runtime import http_request

SHOWN = 5  # ledgers described at most: the detail is one line of run.json


class UnderReplication:
    """copies_wait, under_replicated and short_of_copies of ApachePulsarRoles."""

    def copies_wait(self) -> Optional[float]:
        o = self.client.options
        return o.recovery_timeout_s if o.autorecovery else None

    async def under_replicated(self) -> list[str]:
        """The ledgers AutoRecovery's auditor has marked under-replicated, as a bookie's HTTP
        admin API lists them; LookupError if no bookie answers or no auditor is elected (an
        empty list from nobody watching would be a false all-clear)."""
        errors = []
        for b in self.cluster.bookies:
            try:
                status, body = await self._bookie_get(b, "/api/v1/autorecovery/who_is_auditor", 10.0)
                if status != 200 or not body.strip():
                    raise OSError(f"who_is_auditor: HTTP {status}" if status != 200 else "no auditor elected")
                status, body = await self._bookie_get(b, "/api/v1/autorecovery/list_under_replicated_ledger", 30.0)
            except (OSError, asyncio.TimeoutError) as e:
                errors.append(f"{b}: {e or type(e).__name__}")
                continue
            if status == 404 and b"No under replicated" in body:
                return []
            if status == 200:
                return [str(x) for x in json.loads(body)]
            errors.append(f"{b}: HTTP {status} {body[:60]!r}")
        raise LookupError("no bookie told its under-replicated ledgers: " + "; ".join(errors))

    async def short_of_copies(self, ids: list[str]) -> list[str]:
        """One line per listed ledger (the first SHOWN): its metadata as BookKeeper keeps it,
        or why it could not be read."""
        out = []
        for lid in ids[:SHOWN]:
            try:
                out.append(self.ledger_line(lid, await self._ledger_metadata(lid)))
            except (OSError, asyncio.TimeoutError, LookupError, ValueError) as e:
                out.append(f"ledger {lid}: metadata not read ({e or type(e).__name__})")
        return out

    async def _ledger_metadata(self, lid: str) -> dict:
        last: Exception = LookupError("no bookie is up")
        for b in self.cluster.bookies:
            try:
                status, body = await self._bookie_get(b, f"/api/v1/ledger/metadata/?ledger_id={int(lid)}", 10.0)
            except (OSError, asyncio.TimeoutError) as e:
                last = e
                continue
            if status == 200:
                return json.loads(body)[str(int(lid))]
            last = LookupError(f"{b}: HTTP {status}")
        raise last

    def ledger_line(self, lid: str, md: dict) -> str:
        """`ledger 0 (pulsar/…/healthcheck): CLOSED, last entry 2, ensembles 0: b2 b4 b3`."""
        owner = md.get("customMetadata", {}).get("pulsar/managed-ledger")
        try:
            owner = base64.b64decode(owner).decode() if owner else None
        except (binascii.Error, UnicodeDecodeError):
            pass
        parts = []
        for first, bookies in sorted(md.get("allEnsembles", {}).items(), key=lambda kv: int(kv[0])):
            names = [self.bookie_name(b.get("id", "?")) for b in bookies]
            parts.append(f"{first}: {' '.join(names)}")
        state = md.get("state")
        # an open ledger's metadata has no last entry yet (-1 until it is closed)
        end = "" if state == "OPEN" else f", last entry {md.get('lastEntryId')}"
        return f"ledger {lid}" + (f" ({owner})" if owner else "") + f": {state}{end}, ensembles {'; '.join(parts)}"

    def bookie_name(self, addr: str) -> str:
        """The bookie node at `host:port`, or the address as given where no node is there."""
        host, _, port = addr.rpartition(":")
        return (self.cluster.node_at(host, int(port), "bookie") if port.isdigit() else None) or addr

    async def _bookie_get(self, bookie: str, path: str, timeout: float) -> tuple[int, bytes]:
        return await http_request(*self.cluster.address(bookie, "bookie_admin"), path, timeout)
