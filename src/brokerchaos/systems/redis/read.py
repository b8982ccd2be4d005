"""Reading the stream back: the end-of-run read (XRANGE from the start on the primary the
sentinels name) and the live consumer."""
from __future__ import annotations

import asyncio
import time
from typing import Optional

from ..base import Client, DeliverCallback
from ..consumer import LiveConsumer
from .conn import FIELD, abandon_after, aclose, client_for, entry_id


class RedisReader:
    """XRANGE over the whole stream, on the primary the sentinels name (or on `node`, a
    replica's own copy)."""

    def __init__(self, client: Client, name: str, node: Optional[str] = None) -> None:
        self.system = client
        self.name = name
        self.node = node

    async def read(self, deliver: DeliverCallback, idle: float) -> str:
        s = self.system
        deadline = time.monotonic() + idle
        addr = None if self.node is None else s.cluster.address(self.node)
        last = ""
        while addr is None:
            try:
                addr = await s.primary_addr()
            except Exception as e:
                last = f"{type(e).__name__}: {e}"
                if time.monotonic() > deadline:
                    return f"incomplete: no primary known for {idle:.0f}s ({last})"
                await asyncio.sleep(0.2)
        node = s.cluster.node_at(*addr)
        r = client_for(addr, timeout=idle)
        try:
            start = "-"
            while True:
                try:
                    entries = await r.xrange(s.stream_name, min=start, max="+", count=10_000)
                except Exception as e:
                    # Sentinel ends every normal client's connection when it reconfigures a
                    # node (CLIENT KILL TYPE normal after REPLICAOF, during a failover): the
                    # read goes on from where it was, on a new connection, within `idle`
                    if _killed(e) and time.monotonic() < deadline:
                        await asyncio.sleep(0.2)
                        continue
                    return f"incomplete: XRANGE on {node} failed: {type(e).__name__}: {e}"
                for eid, fields in entries:
                    deliver(fields.get(FIELD, b""), entry_id(eid), node)
                if len(entries) < 10_000:
                    return "complete"
                start = "(" + entry_id(entries[-1][0])
        finally:
            await aclose(r)


def _killed(e: Exception) -> bool:
    """The server ended the connection (a client kill), not a refused or failed command: it
    closes it ('closed by server') or, when the kill finds the ask unread, resets it."""
    said = str(e)
    return type(e).__name__ == "ConnectionError" and ("closed by server" in said or "reset by peer" in said)


class RedisConsumer(LiveConsumer):
    """XREAD BLOCK on the primary the sentinels name, after the last entry id it delivered;
    a failed or silent primary makes it ask the sentinels again (as a sentinel-aware client
    does). Streams read with XREAD have no acks."""

    def __init__(self, client: Client, name: str) -> None:
        super().__init__(client, name)
        self.last_id = "0-0"
        self.abandoned: set[asyncio.Task] = set()

    async def consume(self, deliver: DeliverCallback) -> None:
        s = self.system
        addr = await s.primary_addr()
        node = s.cluster.node_at(*addr)
        r = client_for(addr, timeout=3.0)
        try:
            while True:
                got = await abandon_after(r.xread({s.stream_name: self.last_id}, count=1000, block=1000), 4,
                                           self.abandoned)
                for _key, entries in got or []:
                    for eid, fields in entries:
                        self.last_id = entry_id(eid)
                        deliver(fields.get(FIELD, b""), self.last_id, node)
        finally:
            await aclose(r, self.abandoned)
