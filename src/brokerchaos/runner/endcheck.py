"""A run's end check of the copies: once every fault is healed, what the cluster itself says
is short of copies (Pulsar with AutoRecovery: its under-replicated ledgers), asked again
until nothing is or the system's bound runs out. One `check` row in the history (value: how
many were short at the last look, null when the cluster could not be asked) is what the
analysis's under-replication verdict reads; run.json keeps the same."""
from __future__ import annotations

import asyncio
import time
from typing import Callable, Optional

from ..history import Recorder
from ..systems import Deployment
from .record import RunRecord

EVERY_S = 2.0
LOOK_TIMEOUT_S = 45.0


async def end_check(dep: Deployment, rec: RunRecord, nem_rec: Recorder, line: Callable[[str], None]) -> None:
    bound = dep.roles.copies_wait()
    if bound is None:
        return
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
    detail = describe(first, last, waited, error)
    nem_rec.record("check", value=None if last is None else len(last), detail=detail)
    rec.under_replicated, rec.end_check = last, detail
    line(f"End check: {detail}")


def describe(first: Optional[list[str]], last: Optional[list[str]], waited: float, error: Optional[str]) -> str:
    if last is None:
        return f"not known: the cluster never answered in {waited:.0f} s ({error})"
    seen = f"{len(first or [])} under-replicated at the first look"
    if not last:
        return f"replicated: none under-replicated after {waited:.1f} s ({seen})"
    shown = ", ".join(last[:20]) + (f" and {len(last) - 20} more" if len(last) > 20 else "")
    return f"under-replicated after {waited:.1f} s: {len(last)} ledger(s) ({shown}; {seen})"
