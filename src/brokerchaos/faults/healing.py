"""A nemesis's heal as a task of its own (nemesis.py): one at a time, never cut short, bounded,
and how far it has gone for the read.

A heal under way is never cut short: the runner cancels a nemesis whose write phase ended,
and a heal cancelled in its middle would leave the window open and the node down with nobody
left to heal it. The heal runs as its own task; a cancelled caller leaves it to finish, and
the next caller waits for it. A heal may let the read begin before it ends (a staged return
with `read_after`: Fault.readable); the nodes it has not started yet are then held down on
purpose, and the teardown waits for its end.
"""
from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, Optional

from .base import Fault


class Healing:
    def __init__(self) -> None:
        self.future: Optional[asyncio.Future] = None
        self.fault: Optional[Fault] = None  # the fault being healed (held, readable)

    @property
    def under_way(self) -> bool:
        return self.future is not None and not self.future.done()

    def begin(self, heal: Callable[[], Awaitable[None]]) -> None:
        """Start a heal as its own task (none may be under way)."""
        self.future = asyncio.ensure_future(heal())

    async def run(self, heal: Callable[[], Awaitable[None]]) -> None:
        """Wait for a heal under way, then run this one to its end."""
        while self.under_way:
            await asyncio.shield(self.future)
        self.begin(heal)
        await asyncio.shield(self.future)

    async def wait(self) -> None:
        """Wait for a heal whose caller was cancelled (each step of a heal is bounded)."""
        while self.under_way:
            await asyncio.gather(asyncio.shield(self.future), return_exceptions=True)

    def readable(self) -> bool:
        """A heal is under way and has gone as far as the read needs (Fault.readable)."""
        gate = self.fault.readable if self.fault is not None else None
        return self.under_way and gate is not None and gate.is_set()

    async def wait_readable(self) -> None:
        """Wait for a heal under way until the read may begin: its end, or that point."""
        while self.under_way and not self.readable():
            await asyncio.wait([self.future], timeout=0.2)

    async def done_or_readable(self, task: asyncio.Task) -> None:
        """Wait until the nemesis's task is done or its heal lets the read begin."""
        while not task.done() and not self.readable():
            await asyncio.wait([task], timeout=0.2)

    def held(self) -> list[str]:
        """The nodes a heal under way has not started yet."""
        return self.fault.held_down() if self.under_way and self.fault is not None else []


class HealTimeout(Exception):
    pass


async def undone(fault: Fault) -> Optional[str]:
    """The fault's heal, bounded (bounded); why it failed, or None."""
    try:
        await bounded(fault.heal(), fault.heal_bound())
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return None


async def bounded(heal, bound: float) -> None:
    """The heal, stopped where it stands once `bound` seconds pass: a heal that never returns
    (a node that never starts, a hook that hangs) fails within its bound, and says so."""
    task = asyncio.ensure_future(heal)
    done, _ = await asyncio.wait([task], timeout=bound)
    if not done:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise HealTimeout(f"the heal did not return within {bound:.0f} s; stopped there")
    task.result()
