"""Clock faults: a node's wall clock moved for the processes the harness started there
(sandbox/clock.py, libfaketime). Timeouts, leases and time-based retention read clocks;
Jepsen runs jumps and strobes. Where it reaches (the JVMs) and where it cannot (Go's NATS,
Redis) is each cluster's `clock` capability."""
from __future__ import annotations

import asyncio
import time
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..sandbox.clock import SEEN_WITHIN_S
from ..systems.base import CLOCK
from . import effect
from .base import Fault, Target
from .effect import HEALED, INJECTED
from .registry import FAULTS

TEN_YEARS_S = 10 * 365 * 86_400


class ClockParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    offset: int = Field(
        ..., ge=-TEN_YEARS_S, le=TEN_YEARS_S,
        description="seconds the target's wall clock jumps (negative: back); e.g. 691200, eight days, past "
                    "Kafka's default 7-day retention")
    strobe: Optional[float] = Field(
        None, ge=2 * SEEN_WITHIN_S, le=3600,
        description="seconds between flips: the clock jumps by offset and back again, over and over, until the "
                    "heal (default: one jump, held until the heal)")

    @field_validator("offset")
    @classmethod
    def _moves(cls, v: int) -> int:
        if v == 0:
            raise ValueError("0 moves nothing")
        return v


@FAULTS.register("clock")
class Clock(Fault):
    description = ("jump the target's wall clock by params.offset seconds (or strobe it back and forth) for "
                   "the processes the harness started there; monotonic clocks stay true, as under an NTP step; "
                   "heal sets it true again. Seen by each process within two seconds (libfaketime)")
    family = "clock"
    example = {"offset": 3600}
    observes = ("each target's process saying its wall clock is off by the offset (to the second) during the "
                "window and true after the heal; not known where the system cannot say its clock")
    Params = ClockParams
    needs = frozenset({CLOCK})

    async def observe(self, stage: str):
        said = self.effect.get("seen_offset_s" if stage == INJECTED else "seen_after_heal_s")
        if stage not in (INJECTED, HEALED) or said is None:
            return None
        want = self.p.offset if stage == INJECTED else 0
        if all(v is None for v in said.values()):
            return effect.not_known(f"set {want:+d} s on {', '.join(said)}; its processes cannot say their clocks")
        off = {n: v for n, v in said.items() if v is not None and abs(v - want) > 2}
        words = ", ".join(f"{n} says {v:+d} s" if v is not None else f"{n} cannot say" for n, v in said.items())
        return effect.judge(not off, f"{words} (set {want:+d} s)", stage)

    _strobe: Optional[asyncio.Task] = None

    async def inject(self, target: Target) -> None:
        self._set(target.nodes, self.p.offset)
        self.effect_ns = time.monotonic_ns()
        self.nodes.extend(target.nodes)
        self.effect.update(offset_s=self.p.offset, seen_within_s=SEEN_WITHIN_S, true_at=round(time.time(), 3))
        if self.p.strobe:
            self.effect["flips"] = 0
            self._strobe = asyncio.ensure_future(self._flip(list(target.nodes)))
        self.effect["seen_offset_s"] = await self._seen(target.nodes)

    def inject_bound(self, n_nodes: int) -> float:
        return SEEN_WITHIN_S + 1 + n_nodes * 6.0

    async def _seen(self, nodes: list[str]) -> dict:
        """Per node, how far its process's own clock is from true time once it has had time to
        reread its file (to the second; None: the system cannot be asked, or did not say)."""
        await asyncio.sleep(SEEN_WITHIN_S + 0.5)
        out = {}
        for n in nodes:
            try:
                said = await asyncio.to_thread(self.ctx.cluster.clock_of, n)
            except Exception:  # the node is down (another fault): not known
                said = None
            out[n] = None if said is None else round(said - time.time())
        return out

    def _set(self, nodes: list[str], seconds: int) -> None:
        for n in nodes:
            self.ctx.cluster.set_clock(n, seconds)

    async def _flip(self, nodes: list[str]) -> None:
        moved = True
        while True:
            await asyncio.sleep(self.p.strobe)
            moved = not moved
            self._set(nodes, self.p.offset if moved else 0)
            self.effect["flips"] += 1

    async def heal(self) -> None:
        if self._strobe is not None:
            self._strobe.cancel()
            await asyncio.gather(self._strobe, return_exceptions=True)
            self._strobe = None
        if self.nodes:
            self._set(self.nodes, 0)
            self.effect["true_again_at"] = round(time.time(), 3)
            self.effect["seen_after_heal_s"] = await self._seen(self.nodes)
        self.nodes.clear()
