"""What a fault's windows leave behind: each window's `fault` row and what run.json keeps of
it, the harness's looks at it (effect.py: at injection, while healing, once healed)
combined into its one `effect` row and `observed`, the `owner` rows of the roles watched
through it (owners.py), and a console line when a window failed or was not seen. The
nemesis moves each window along (window.py: its life, its looks); the book writes down what
the window leaves behind."""
from __future__ import annotations

import asyncio
import time
from typing import Callable, Optional

from ..history import Recorder
from ..history.schema import EFFECT
from .base import Fault, Target
from .effect import INJECTED, LOOK_S, Seen, combine, failed, look, not_known
from .owners import OwnerWatch
from .window import Window


class WindowBook:
    def __init__(self, rec: Recorder, line: Callable[[str], None], action: str, target: str,
                 owner_moves: Callable[[], dict[int, str]], own_windows: bool = False) -> None:
        self.rec = rec
        self.own_windows = own_windows  # the fault records its windows itself (a rolling restart)
        self.line = line
        self.label = f"{action} {target}"
        self.action = action
        self.target = target
        self.owner_moves = owner_moves
        # per window id, its `injected` look: taken beside the window, not in its time (a
        # probe across a cut takes a few hundred ms); the heal waits for it before undoing
        self._injected: dict[int, asyncio.Future] = {}

    def inject_failed(self, k: int, w: Window, e: Exception, state: dict) -> None:
        """An inject that raised: said on the console, in the window (and the fault's state,
        for its first window) and as the window's failed look."""
        w.failed(f"{type(e).__name__}: {e}")
        if k == 0:
            state["error"] = w.error
        self.line(f"Fault: {self.label} FAILED: {w.error}")
        w.looks.append(failed(f"inject: {w.error}"))

    def opened(self, k: int, w: Window, fault: Fault, target: Target, t_start: int, acks: int, state: dict) -> None:
        """The window is in effect: its fault row (unless the fault records its own windows),
        and what run.json keeps of it. At the moment the fault says it took effect, if it
        says (a kill: the signal, not the reaping of a JVM 50-100 ms later)."""
        t_eff = fault.effect_ns if fault.effect_ns is not None else time.monotonic_ns()
        if self.own_windows:
            t = self.rec.now()
        else:
            t = self.rec.record("fault", node=target.label(), detail=self.label, window=w.id,
                                t_ns=t_eff - self.rec.origin)
            self.rec.flush()
        w.took_effect(nodes=target.nodes, label=target.label(), groups=target.groups, acks=acks,
                      t_ms=round(t / 1e6, 3), delay_ms=round((t_eff - t_start) / 1e6, 3), effect=fault.effect)
        if k == 0:
            for key in ("nodes", "acks_at_effect", "t_ms", "delay_ms", "resolve_ms"):
                state[key] = getattr(w, key)
        self.line(f"Fault: {self.label} -> {target.label()} at ack {acks} "
                  f"({w.delay_ms:.0f} ms after the trigger)")

    def heal_row(self, w: Window, why: str) -> float:
        """The window's `heal` row, written at once; its time (ms on the history's clock)."""
        t = self.rec.record("heal", node=w.label, detail=f"{self.label} ({why})", window=w.id)
        self.rec.flush()
        return round(t / 1e6, 3)

    def record(self, type_: str, node: Optional[str], detail: Optional[str], window: Optional[int]) -> int:
        """A row of the nemesis's own, written at once (FaultContext.record, `ready`)."""
        t = self.rec.record(type_, node=node, detail=detail, window=window)
        self.rec.flush()
        return t

    def owner_watch(self, deployment, topics: int) -> OwnerWatch:
        """Each topic's owner watched through the write (owners.py), its `owner` rows here."""
        def record(type_: str, node, detail: str, window: int, topic: Optional[str], at_ns: int) -> int:
            t = self.rec.record(type_, node=node, detail=detail, window=window, topic=topic,
                                t_ns=at_ns - self.rec.origin)
            self.rec.flush()
            return t

        return OwnerWatch.of(deployment, topics, record)

    def look_injected(self, window: int, fault: Fault) -> None:
        """The `injected` look, started beside the window."""
        self._injected[window] = asyncio.ensure_future(look(fault, INJECTED))

    async def took_injected(self, w: Window) -> None:
        task = self._injected.pop(w.id, None)
        if task is not None:
            w.looks.append(await asyncio.shield(task))

    async def seen_once_looked(self, w: Window) -> None:
        await self.took_injected(w)
        self.seen(w)

    def seen(self, w: Window) -> None:
        """The window's effect, from its looks (effect.combine), written once: its `effect`
        row and `observed` in run.json; the console says so when it was not seen."""
        if w.observed is not None:
            return
        seen = combine(w.looks)
        if seen is None and not w.in_effect and w.error is None:
            # opened, never injected: the write ended while its target was being resolved
            seen = failed("never injected: the write ended before the fault landed")
        seen = seen or not_known(f"no look saw this window ({self.action} has none for what happened in it)")
        w.observed = {"state": seen.state, "evidence": seen.evidence}
        w.owner_moved = self.owner_moves().get(w.id) or w.owner_moved
        self.effect_row(w.id, w.label, seen)

    def effect_row(self, window: int, node: Optional[str], seen: Seen) -> None:
        detail = f"{seen.state}: {self.label}: {seen.evidence}"[:2000]
        self.rec.record(EFFECT, node=node or self.target, value=seen.value, detail=detail, window=window)
        self.rec.flush()
        if seen.state != "observed":
            self.line(f"Effect: {self.label}: {seen.detail()}")

    async def finish(self, windows: list[Window]) -> None:
        """Every window left without its effect row (the run ended in its middle) gets one;
        where the owner moved after a heal (a look after it), run.json says so too."""
        for w in windows:
            if w.id in self._injected:
                await asyncio.wait([self._injected[w.id]], timeout=LOOK_S + 1)
                if self._injected[w.id].done():
                    await self.took_injected(w)
            self.seen(w)
            w.owner_moved = self.owner_moves().get(w.id) or w.owner_moved
