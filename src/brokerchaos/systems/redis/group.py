"""A Redis Streams consumer group's member (`workload.group`, kind `stream`), in a process of
its own (workload/group.py): XREADGROUP on the primary the sentinels name, as one consumer
(its client name) of the group `<stream>-<group>`, created at the stream's start.

- `commit: after`: each entry XACKed once it is processed; one a member took and never acked
  stays in the group's pending entries list under that member's name, and another member
  takes it over with XAUTOCLAIM once it has been idle `session_timeout_ms`: a redelivery;
- `before`: the entries of a batch XACKed before the batch is processed: a member killed with
  a batch in hand has acked what it never processed, and nobody gets it again;
- `auto`: XREADGROUP NOACK: an entry is done once it is delivered.

Acks are one entry's each (commit rows with detail `acked`, `cumulative=False`); an XACK
that finds the entry no longer pending (another member acked it first, or the group was
lost in a failover) is a failed one. The stream is one partition (`0`); a delivery's
position is its entry id `ms-seq` as one number, ms * 10^6 + seq (order kept while fewer
than a million entries share a millisecond), its offset the id itself.

After a failover the member finds the new primary through the sentinels and goes on there;
the group's state (last delivered id, pending entries) reaches the replicas asynchronously,
so what the old primary had not passed on is delivered again, or, if the group itself had
not reached the new primary, the group is created again at the start (everything again).
"""
from __future__ import annotations

import asyncio
import time
from typing import Optional

from ..consumer import GroupEnd
from .conn import FIELD, abandon_after, aclose, client_for, entry_id

BATCH = 100
CLAIM_EVERY_S = 1.0
BLOCK_MS = 500
SEQ_SPAN = 1_000_000
PARTITION = "0"


def position(eid: str) -> int:
    """An entry id `ms-seq` as one number that sorts as the ids do."""
    ms, _, seq = eid.partition("-")
    return int(ms) * SEQ_SPAN + int(seq or 0)


class RedisGroupMember:
    def __init__(self, client, name: str, spec, events) -> None:
        self.client = client
        self.name = name
        self.spec = spec
        self.events = events
        self.stream = client.stream_name
        self.group = f"{client.stream_name}-{spec.name}"
        self.abandoned: set[asyncio.Task] = set()
        self.last_error: Optional[str] = None
        self.cursor = "0-0"  # XAUTOCLAIM's, through the pending entries and round again
        self.claim_at = 0.0

    def _failed(self, e: BaseException) -> str:
        self.last_error = f"{type(e).__name__}: {e}"[:200]
        return self.last_error

    async def _call(self, coro, timeout: float = 4.0):
        return await abandon_after(coro, timeout, self.abandoned)

    async def _connect(self, finishing, idle: float):
        """A connection to the primary the sentinels name, the group there (created at the
        stream's start unless it exists). Tries until it works or, once finishing, `idle` s."""
        since = time.monotonic()
        while True:
            r = None
            try:
                r = client_for(await self.client.primary_addr(), timeout=3.0)
                try:
                    await self._call(r.xgroup_create(self.stream, self.group, id="0", mkstream=True))
                except Exception as e:
                    if "BUSYGROUP" not in str(e):
                        raise
                return r
            except Exception as e:
                self._failed(e)
                if r is not None:
                    await aclose(r, self.abandoned)
                if finishing.is_set() and time.monotonic() - since > idle:
                    raise ConnectionError(f"no primary to read from for {idle:.0f}s ({self.last_error})") from None
                await asyncio.sleep(0.5)

    async def _fetch(self, r) -> list:
        """What the group hands this member: entries idle past the session taken over from
        other members (at most once a second), else new ones."""
        now = time.monotonic()
        if self.spec.commit != "auto" and now >= self.claim_at:
            self.claim_at = now + CLAIM_EVERY_S
            got = await self._call(r.xautoclaim(self.stream, self.group, self.name, self.spec.session_timeout_ms,
                                                start_id=self.cursor, count=BATCH))
            self.cursor = entry_id(got[0])
            claimed = [(eid, f) for eid, f in got[1] if f is not None]
            if claimed:
                return claimed
        got = await self._call(r.xreadgroup(self.group, self.name, {self.stream: ">"}, count=BATCH, block=BLOCK_MS,
                                            noack=self.spec.commit == "auto"))
        return [e for _key, entries in got or [] for e in entries]

    async def _ack(self, r, ids: list[str]) -> None:
        try:
            pipe = r.pipeline(transaction=False)
            for eid in ids:
                pipe.xack(self.stream, self.group, eid)
            res = await self._call(pipe.execute())
        except Exception as e:
            why = self._failed(e)
            res = [why] * len(ids)
        for eid, n in zip(ids, res):
            err = None if n == 1 else ("not pending" if n == 0 else str(n))
            self.events.commit(PARTITION, position(eid), err, cumulative=False)

    async def _handle(self, r, entries: list) -> None:
        ids = [entry_id(eid) for eid, _f in entries]
        if self.spec.commit == "before":
            await self._ack(r, ids)
        for eid, (_raw, fields) in zip(ids, entries):
            self.events.process(fields.get(FIELD, b""), PARTITION, position(eid), eid)
            if self.spec.commit == "after":
                await self._ack(r, [eid])

    async def _caught_up(self, r) -> Optional[str]:
        """None when the group has been handed the stream's last entry and none awaits an
        ack, else why not."""
        try:
            groups = await self._call(r.xinfo_groups(self.stream))
            last = entry_id((await self._call(r.xinfo_stream(self.stream)))["last-generated-id"])
        except Exception as e:
            return self._failed(e)
        mine = [g for g in groups if entry_id(g["name"]) == self.group]
        if not mine:
            return f"the group {self.group} is not on the primary"
        delivered, pending = entry_id(mine[0]["last-delivered-id"]), int(mine[0]["pending"])
        if position(delivered) < position(last) or pending:
            return f"delivered up to {delivered} of {last}, {pending} pending"
        return None

    async def _run(self, finishing, idle: float) -> str:
        r = await self._connect(finishing, idle)
        end = GroupEnd(idle)
        try:
            while True:
                try:
                    entries = await self._fetch(r)
                    if entries:
                        end.got()
                        await self._handle(r, entries)
                except Exception as e:  # the primary gone or failed over: the sentinels again
                    self._failed(e)
                    await aclose(r, self.abandoned)
                    r = await self._connect(finishing, idle)
                    continue
                if not finishing.is_set() or entries:
                    continue
                detail = end.check(await self._caught_up(r), self.last_error)
                if detail is not None:
                    return detail
        finally:
            await aclose(r, self.abandoned)

    def run(self, finishing, idle: float) -> str:
        return asyncio.run(self._run(finishing, idle))

    def close(self) -> None:
        """Nothing left open: run() closed its connection."""
