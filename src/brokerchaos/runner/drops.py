"""What the broker itself counted of what it dropped on purpose over a run (Roles.drop_counts:
VerneMQ's full session queues and inter-node buffer), asked when the write starts and again
once the read is over: one `drops` row (history format 1.10), its value the messages dropped
in between (null: the broker could not be asked), its detail each counter. A loss the broker
counted is then told apart from one it did not. A node that restarted in between (its counters
start again from 0) is counted from its restart, and the detail says so."""
from __future__ import annotations

import asyncio
from typing import Callable, Optional

from ..history import Recorder
from ..history.schema import DROPS
from .record import RunRecord

LOOK_S = 15.0

Counts = dict[str, dict[str, tuple[int, str]]]  # node -> counter -> (count, unit)


class DropCount:
    def __init__(self, roles) -> None:
        self.roles = roles
        self.started = False
        self.before: Optional[Counts] = None
        self.error: Optional[str] = None

    async def start(self) -> None:
        """The counters at the write's start; nothing more where the system keeps none."""
        try:
            self.before = await asyncio.wait_for(self.roles.drop_counts(), LOOK_S)
        except LookupError:
            return
        except Exception as e:  # asked again at the end: counted from each node's start then
            self.error = f"{type(e).__name__}: {e}"[:200]
        self.started = True

    async def record(self, nem_rec: Recorder, rec: RunRecord, line: Callable[[str], None]) -> None:
        if not self.started:
            return
        self.started = False
        try:
            after = await asyncio.wait_for(self.roles.drop_counts(), LOOK_S)
        except Exception as e:
            detail = f"not known: the broker's counters could not be read ({type(e).__name__}: {e})"[:500]
            nem_rec.record(DROPS, value=None, detail=detail)
            rec.drops = {"messages": None, "detail": detail}
            return
        value, detail = difference(self.before, after, self.error)
        nem_rec.record(DROPS, value=value, detail=detail[:2000])
        rec.drops = {"messages": value, "detail": detail}
        if value:
            line(f"Drops: the broker counted {detail}")


def difference(before: Optional[Counts], after: Counts, error: Optional[str] = None) -> tuple[int, str]:
    """(messages dropped, each counter in words) between two readings of every node's counters."""
    totals: dict[str, list] = {}
    notes = []
    if before is None:
        notes.append(f"counted from each node's start: not read at the write's start ({error})")
    for node, counters in sorted(after.items()):
        was = (before or {}).get(node, {})
        for name, (count, unit) in sorted(counters.items()):
            start = was.get(name, (0, unit))[0]
            if count < start:
                notes.append(f"{node} restarted: {name} counted from its restart")
                start = 0
            totals.setdefault(name, [0, unit])[0] += count - start
    said = ", ".join(f"{name} {n} {unit}" for name, (n, unit) in totals.items()) or "no counter"
    value = sum(n for n, unit in totals.values() if unit == "messages")
    return value, said + (f" ({'; '.join(notes)})" if notes else "")
