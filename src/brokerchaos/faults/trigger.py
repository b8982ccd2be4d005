"""When a fault fires: on the N-th first ack (`after_acks`, the seeds' marker; the AckGate
counts them for every nemesis of the run) or a time after the write began (`at_seconds`),
then its seeded jitter; the schedule's windows count from that moment."""
from __future__ import annotations

import asyncio
import time

from ..scenario import TriggerSpec


class AckGate:
    """Counts first acks and wakes the nemeses waiting for the N-th one."""

    def __init__(self) -> None:
        self.acks = 0
        self._waiters: dict[int, list[tuple[asyncio.Event, list[int]]]] = {}

    def wait_for(self, n: int) -> tuple[asyncio.Event, list[int]]:
        ev = asyncio.Event()
        box = [0]
        if self.acks >= n:
            box[0] = time.monotonic_ns()
            ev.set()
        else:
            self._waiters.setdefault(n, []).append((ev, box))
        return ev, box

    def on_first_ack(self) -> None:
        self.acks += 1
        for ev, box in self._waiters.pop(self.acks, ()):
            box[0] = time.monotonic_ns()
            ev.set()


async def fired(trigger: TriggerSpec, gate: AckGate, t_begin: float, jitter_s: float) -> int:
    """The moment (monotonic ns) the trigger fired, its jitter added: the N-th first ack's,
    or `at_seconds` after `t_begin` (monotonic s)."""
    if trigger.after_acks is not None:
        ev, box = gate.wait_for(trigger.after_acks)
        await ev.wait()
        t = box[0]
    else:
        await asyncio.sleep(max(0.0, trigger.at_seconds - (time.monotonic() - t_begin)))
        t = time.monotonic_ns()
    return t + int(jitter_s * 1e9)
