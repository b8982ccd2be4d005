"""A run's end check of the copies: once every fault is healed, what the cluster itself says
is short of copies (Pulsar with AutoRecovery: its under-replicated ledgers), asked again
until nothing is or the system's bound runs out. One `check` row in the history (value: how
many were short at the last look, null when the cluster could not be asked) is what the
analysis's under-replication verdict reads; run.json keeps the same. From the write's start to
the check, the same question is asked in the background (CopiesWatch): a repair finished
before the first look (a loaded machine's slow restart and read) still leaves its trace."""
from __future__ import annotations

import asyncio
import time
from typing import Callable, Optional

from ..history import Recorder
from ..systems import Deployment
from ..systems.runtime import cancel_all
from .record import RunRecord

EVERY_S = 2.0
LOOK_TIMEOUT_S = 45.0
CHANGES_KEPT = 200  # the watch's timeline: a soak's run asks a few hundred times at most


class CopiesWatch:
    """What the cluster says is short of copies, asked every EVERY_S from the write's start
    until the end check: the most it named at one look, when it first named any, and each
    change of how many it named ([ms, count], ms on the run's clock): when a repair began and
    ended against the fault's windows (the Pulsar seed's ledger AutoRecovery could not copy
    while a bookie of a Qa 1 ensemble was down). Nothing is asked where the system keeps no
    such account."""

    def __init__(self, dep: Deployment, origin_ns: int) -> None:
        self.dep, self.origin = dep, origin_ns
        self.looks, self.most, self.first_ms = 0, 0, None
        self.changes: list[list] = []
        self.task: Optional[asyncio.Task] = None

    def _saw(self, short: int) -> None:
        self.looks += 1
        self.most = max(self.most, short)
        now = round((time.monotonic_ns() - self.origin) / 1e6, 3)
        if short and self.first_ms is None:
            self.first_ms = now
        if (self.changes[-1][1] if self.changes else 0) != short and len(self.changes) < CHANGES_KEPT:
            self.changes.append([now, short])

    def start(self) -> None:
        if self.dep.roles.copies_wait() is not None:
            self.task = asyncio.ensure_future(self._watch())

    async def _watch(self) -> None:
        while True:
            try:
                self._saw(len(await asyncio.wait_for(self.dep.roles.under_replicated(), LOOK_TIMEOUT_S)))
            except Exception:  # not asked this time (a bookie down, no auditor yet)
                pass
            await asyncio.sleep(EVERY_S)

    async def stop(self) -> Optional[dict]:
        task, self.task = self.task, None
        if task is None:
            return None
        await cancel_all([task])
        return {"looks": self.looks, "most": self.most, "first_ms": self.first_ms, "changes": self.changes}


async def end_check(dep: Deployment, rec: RunRecord, nem_rec: Recorder, line: Callable[[str], None],
                    watch: Optional[CopiesWatch] = None) -> None:
    bound = dep.roles.copies_wait()
    if bound is None:
        return
    rec.copies_during = await watch.stop() if watch is not None else None
    t0 = time.monotonic()
    first: Optional[list[str]] = None
    last: Optional[list[str]] = None
    error = None
    while True:
        try:
            last = await asyncio.wait_for(dep.roles.under_replicated(), LOOK_TIMEOUT_S)
            first = last if first is None else first
        except Exception as e:  # the cluster could not be asked this time: ask again
            error = f"{type(e).__name__}: {e}"
        waited = time.monotonic() - t0
        if last == [] or waited >= bound:
            break
        await asyncio.sleep(min(EVERY_S, bound - waited))
    detail = describe(first, last, waited, error, rec.copies_during)
    if last:
        detail += await what_is_short(dep, last)
    nem_rec.record("check", value=None if last is None else len(last), detail=detail)
    rec.under_replicated, rec.end_check = last, detail
    line(f"End check: {detail}")


async def what_is_short(dep: Deployment, ids: list[str]) -> str:
    """The system's own account of what is still short, appended to the check's detail."""
    try:
        lines = await asyncio.wait_for(dep.roles.short_of_copies(ids), LOOK_TIMEOUT_S)
    except Exception as e:  # the detail is for the reader; the count stands without it
        return f"; not described ({type(e).__name__}: {e})"
    return "".join(f"; {x}" for x in lines)


def describe(first: Optional[list[str]], last: Optional[list[str]], waited: float, error: Optional[str],
             during: Optional[dict] = None) -> str:
    if last is None:
        return f"not known: the cluster never answered in {waited:.0f} s ({error})"
    seen = f"{len(first or [])} under-replicated at the first look"
    if during and during["looks"]:
        seen += f"; during the run at most {during['most']}" + (
            f", first named at {during['first_ms'] / 1e3:.1f} s" if during["first_ms"] is not None else "")
    if not last:
        return f"replicated: none under-replicated after {waited:.1f} s ({seen})"
    shown = ", ".join(last[:20]) + (f" and {len(last) - 20} more" if len(last) > 20 else "")
    return f"under-replicated after {waited:.1f} s: {len(last)} ledger(s) ({shown}; {seen})"
