"""When a fault fires: on the N-th first ack (`after_acks`, the seeds' marker; the AckGate
counts them for every nemesis of the run), a time after the write began (`at_seconds`) or
after a consumer group's member began to hold its work (`member_holding`), and not before
an earlier fault healed (`after_fault`); then its seeded jitter. The schedule's windows
count from that moment."""
from __future__ import annotations

import asyncio
import random
import time
from typing import Awaitable, Callable, Optional

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


async def fired(trigger: TriggerSpec, gate: AckGate, t_begin: float, jitter_s: float,
                group: Callable[[], object] = lambda: None,
                healed: Optional[Callable[[int], Awaitable[None]]] = None) -> int:
    """The moment (monotonic ns) the trigger fired, its jitter added: the N-th first ack's,
    `at_seconds` after `t_begin` (monotonic s), or `member_holding` s after the group's
    holding member began to hold; with `after_fault`, not before that fault healed."""
    t = time.monotonic_ns()
    if trigger.after_acks is not None:
        ev, box = gate.wait_for(trigger.after_acks)
        await ev.wait()
        t = box[0]
    elif trigger.at_seconds is not None:
        await asyncio.sleep(max(0.0, trigger.at_seconds - (time.monotonic() - t_begin)))
        t = time.monotonic_ns()
    elif trigger.member_holding is not None:
        t = await group().holding() + int(trigger.member_holding * 1e9)
    if trigger.after_fault is not None:
        await healed(trigger.after_fault - 1)
        t = max(t, time.monotonic_ns())
    return t + int(jitter_s * 1e9)


def not_reached(trigger: TriggerSpec, gate: AckGate, ended: Callable[[int], asyncio.Event]) -> str:
    """A trigger not reached when the write ended, with what it was still waiting for."""
    why = [f"acks: {gate.acks}"]
    if trigger.member_holding is not None:
        why.append("no member of the group held its work")
    if trigger.after_fault is not None and not ended(trigger.after_fault - 1).is_set():
        why.append(f"fault {trigger.after_fault} still under way")
    return f"trigger not reached ({'; '.join(why)})"


def jitter_of(trigger: TriggerSpec, rng: random.Random) -> float:
    """The trigger's further delay, seconds, drawn with `rng` (the seed's)."""
    return rng.uniform(0, trigger.jitter) if trigger.jitter else 0.0
