"""Clock skew: a node's wall clock running fast or slow, where the `clock` action jumps it.
Leases, timeouts and time-based expiry that read the wall clock drift apart from the other
nodes' at the rate, as on a host whose oscillator or NTP slew is off (Jepsen's `clock`
nemesis skews as well as bumps and strobes).

The node's clock file (sandbox/clock.py) is moved on by `rate` seconds per true second,
from the inject until the heal sets it true; each process rereads it about once a second,
so its clock runs at 1 + rate over any span of a few seconds, in steps of one reread (a
slow clock's steps go back). Where it reaches is the cluster's `clock` capability's."""
from __future__ import annotations

import asyncio
import time
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..sandbox.clock import REREAD_S, SEEN_WITHIN_S
from . import effect
from .base import Target
from .clock import Clock
from .effect import INJECTED
from .registry import FAULTS

# how often the drift is written: a process sees the latest at its next reread
STEP_S = REREAD_S / 4
# the drift the look waits for between its two readings, and the readings' tolerance: a JVM
# says its clock to the second, at a moment within a reread of the file's
GROWS_S, SLACK_S = 3.0, 1.5
LAG_S = SEEN_WITHIN_S + 1.0


class SkewParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rate: float = Field(
        ..., ge=-0.9, le=100,
        description="seconds the target's wall clock gains per true second, until the heal: 0.5 runs it at 1.5x "
                    "(30 s a minute ahead), -0.5 at half speed (falling behind); at least 0.05 either way")

    @field_validator("rate")
    @classmethod
    def _drifts(cls, v: float) -> float:
        if abs(v) < 0.05:
            raise ValueError("a drift under 0.05 s a second is not told apart from a process's reread within a run")
        return v


def drift_seen(rate: float, readings: list[dict]) -> tuple[Optional[bool], str]:
    """Whether the readings show a clock drifting at `rate`: each reading is, per node,
    `{"after_s": seconds since the drift began, when it answered, "said_s": its clock minus
    true time, or None}`. Every offset a node said is within SLACK_S of the drift at most
    LAG_S before it answered (a reread, and the time it took to answer), and it grew (or
    fell) from its first reading to its last. None: no node could say."""
    nodes = list(readings[0]) if readings else []
    words, bad = [], []
    for n in nodes:
        said = [(r[n]["after_s"], r[n]["said_s"]) for r in readings]
        if any(s is None for _, s in said):
            words.append(f"{n} cannot say")
            continue
        near = all(min(rate * (t - LAG_S), rate * t) - SLACK_S <= s <= max(rate * (t - LAG_S), rate * t) + SLACK_S
                   for t, s in said)
        if not (near and (said[-1][1] - said[0][1]) * rate > 0):
            bad.append(n)
        words.append(f"{n} says " + " then ".join(f"{s:+.0f} s at {t:.0f} s" for t, s in said))
    if len(words) == sum(w.endswith("cannot say") for w in words):
        return None, "; ".join(words) or "no reading"
    tail = f"; not drifting so: {', '.join(bad)})" if bad else ")"
    return not bad, "; ".join(words) + f" (drift {rate:+g} s a second" + tail


@FAULTS.register("skew")
class Skew(Clock):
    description = ("run the target's wall clock fast or slow, params.rate seconds gained (negative: lost) per "
                   "second, for the processes the harness started there, until the heal sets it true; monotonic "
                   "clocks stay true. Each process follows within two seconds (libfaketime)")
    family = "clock"
    example = {"rate": 0.5}
    observes = (f"each target's process saying its wall clock is off by the drift so far (to the second), twice, "
                f"{GROWS_S:g} s of drift apart, the second further off; and true after the heal; not known where "
                "the system cannot say its clock")
    Params = SkewParams

    _drifting: Optional[asyncio.Task] = None

    def _span_s(self) -> float:
        return max(GROWS_S / abs(self.p.rate), 2 * SEEN_WITHIN_S)

    def inject_bound(self, n_nodes: int) -> float:
        return SEEN_WITHIN_S + 1 + self._span_s() + 2 * n_nodes * 6.0

    async def inject(self, target: Target) -> None:
        self.nodes.extend(target.nodes)
        t0 = time.monotonic()
        self.effect_ns = time.monotonic_ns()
        self.effect.update(rate=self.p.rate, seen_within_s=SEEN_WITHIN_S, true_at=round(time.time(), 3))
        self._drifting = asyncio.ensure_future(self._drift(list(target.nodes), t0))
        await asyncio.sleep(SEEN_WITHIN_S + 0.5)
        first = await self._reading(target.nodes, t0)
        await asyncio.sleep(self._span_s())
        self.effect["readings"] = [first, await self._reading(target.nodes, t0)]

    async def _drift(self, nodes: list[str], t0: float) -> None:
        while True:
            self.effect["drift_s"] = round(self.p.rate * (time.monotonic() - t0), 3)
            self._set(nodes, self.effect["drift_s"])
            await asyncio.sleep(STEP_S)

    async def _reading(self, nodes: list[str], t0: float) -> dict:
        """Per node, what its process says its clock is off by, and when it said it (seconds
        since the drift began)."""
        out = {}
        for n in nodes:
            try:
                clock = await asyncio.to_thread(self.ctx.cluster.clock_of, n)
            except Exception:  # the node is down (another fault): it cannot say
                clock = None
            out[n] = {"after_s": round(time.monotonic() - t0, 2),
                      "said_s": None if clock is None else round(clock - time.time(), 1)}
        return out

    async def observe(self, stage: str):
        if stage != INJECTED:
            return await super().observe(stage)
        if "readings" not in self.effect:
            return None
        ok, words = drift_seen(self.p.rate, self.effect["readings"])
        return effect.not_known(words) if ok is None else effect.judge(ok, words, stage)

    async def heal(self) -> None:
        if self._drifting is not None:
            self._drifting.cancel()
            await asyncio.gather(self._drifting, return_exceptions=True)
            self._drifting = None
        await super().heal()
