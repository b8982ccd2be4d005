"""A power cut that loses what was not fsynced (Jepsen's LazyFS experiments on NATS 2.12.1, as
a fault action); files damaged while their node is down are faults/corrupt.py's."""
from __future__ import annotations

import asyncio
import time

from pydantic import BaseModel, ConfigDict, Field

from . import effect
from .base import Target
from .effect import INJECTED
from .process import _Restarting
from .registry import FAULTS


class PowerOffParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    stagger: float = Field(
        0.0, ge=0, le=600,
        description="seconds between the cuts of the target's nodes, one after the other in the target's order "
                    "(0: all at once); they come back together at the heal, each with what it had synced by its "
                    "own cut (Jepsen's split-brain shape)")
    setup_synced: bool = Field(
        False,
        description="what the cluster wrote before the run's write began (its set-up: metadata, feature flags, "
                    "the stream's creation) counts as synced, as on a cluster in service longer than the OS keeps "
                    "dirty pages; default: only what the servers fsynced counts, setup included (Jepsen's LazyFS)")


@FAULTS.register("power-off")
class PowerOff(_Restarting):
    description = ("power cut: SIGKILL the target (`all`: every node at once; params.stagger: one after another) "
                   "and drop every write it had not fsynced (its data directory sits on a layer that holds them "
                   "apart); heal remounts and starts it again")
    family = "power-off"
    observes = ("the target's processes gone at the cut, what the layer dropped (files and bytes; nothing "
                "unsynced said as such), and after the heal new processes running")
    Params = PowerOffParams
    needs = frozenset({"power", "start"})

    @classmethod
    def before_write(cls, params: PowerOffParams, cluster) -> None:
        if params.setup_synced:
            cluster.settle()  # the set-up written back, as in a cluster in service

    async def observe(self, stage: str):
        seen = await super().observe(stage)
        if stage != INJECTED or seen is None:
            return seen
        dropped = self.effect.get("bytes_dropped") or {}
        cuts = self.effect.get("power_cut") or {}
        words = [f"{n}: keeps no data" if d.get("keeps_no_data") else
                 f"{n}: {dropped.get(n, 0):,} unsynced bytes dropped from {len(d.get('files') or [])} files"
                 if dropped.get(n) else f"{n}: nothing unsynced to drop" for n, d in cuts.items()]
        return effect.combine([seen, effect.observed("; ".join(words))])

    async def inject(self, target: Target) -> None:
        nodes = list(target.nodes)
        self.effect["power_cut"] = {}
        waves = [nodes] if not self.p.stagger else [[n] for n in nodes]
        t0 = self.effect_ns = time.monotonic_ns()  # in effect at the first cut
        for i, wave in enumerate(waves):
            if i:
                await asyncio.sleep(self.p.stagger)
            self.hold(wave)
            t = time.monotonic_ns()
            self.effect["power_cut"].update(await asyncio.to_thread(self.ctx.cluster.power_off, wave))
            if self.p.stagger:
                self.effect.setdefault("cut_after_ms", {}).update({n: round((t - t0) / 1e6, 1) for n in wave})
        self.effect["bytes_dropped"] = {n: sum(max(0, f.get("size_was", f.get("bytes", 0)) - f.get("size", 0))
                                               for f in d["files"]) for n, d in self.effect["power_cut"].items()}
