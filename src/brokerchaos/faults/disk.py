"""Disk faults: a power cut that loses what was not fsynced, and data files damaged while
their node is down (bits flipped, a tail cut off): Jepsen's LazyFS and bitflip experiments
on NATS 2.12.1, as fault actions."""
from __future__ import annotations

import asyncio
import os
import random
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .base import Target
from .process import _Restarting, kill
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
    Params = PowerOffParams
    needs = frozenset({"power", "start"})

    async def inject(self, target: Target) -> None:
        nodes = list(target.nodes)
        self.effect["power_cut"] = {}
        waves = [nodes] if not self.p.stagger else [[n] for n in nodes]
        t0 = self.effect_ns = time.monotonic_ns()  # in effect at the first cut
        for i, wave in enumerate(waves):
            if i:
                await asyncio.sleep(self.p.stagger)
            self.nodes.extend(wave)
            t = time.monotonic_ns()
            self.effect["power_cut"].update(await asyncio.to_thread(self.ctx.cluster.power_off, wave))
            if self.p.stagger:
                self.effect.setdefault("cut_after_ms", {}).update({n: round((t - t0) / 1e6, 1) for n in wave})
        self.effect["bytes_dropped"] = {n: sum(max(0, f.get("size_was", f.get("bytes", 0)) - f.get("size", 0))
                                               for f in d["files"]) for n, d in self.effect["power_cut"].items()}


class CorruptParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    bits: int = Field(0, ge=0, le=100_000, description="random bits to flip across the target's data files")
    bytes: int = Field(0, ge=0, le=1 << 30, description="bytes to cut off the end of the target's last data file")
    down: float = Field(0.0, ge=0, le=600, description="seconds to stay down before starting again")

    @model_validator(mode="after")
    def _one(self):
        if (self.bits > 0) == (self.bytes > 0):
            raise ValueError("give one of bits and bytes (a count above 0)")
        return self


def corrupt_files(files: list[Path], bits: int, cut: int, rng: random.Random, root: Path) -> list[dict]:
    """Flip `bits` bits, drawn uniformly over all bytes of `files`, or cut `cut` bytes off
    the last file. One record per change, enough to replay it: file (relative to `root`),
    offset, bit and the byte before and after; or the sizes before and after."""
    changes: list[dict] = []
    sizes = [(f, f.stat().st_size) for f in files]
    sizes = [(f, s) for f, s in sizes if s > 0]
    if not sizes:
        return changes
    if cut:
        f, size = sizes[-1]
        new = max(0, size - cut)
        os.truncate(f, new)
        return [{"file": str(f.relative_to(root)), "size_was": size, "size": new}]
    total = sum(s for _, s in sizes)
    for _ in range(bits):
        pos = rng.randrange(total)
        i = 0
        while pos >= sizes[i][1]:
            pos -= sizes[i][1]
            i += 1
        f = sizes[i][0]
        bit = rng.randrange(8)
        with open(f, "r+b") as fh:
            fh.seek(pos)
            before = fh.read(1)[0]
            after = before ^ (1 << bit)
            fh.seek(pos)
            fh.write(bytes([after]))
        changes.append({"file": str(f.relative_to(root)), "offset": pos, "bit": bit, "before": before,
                        "after": after})
    return changes


@FAULTS.register("corrupt")
class Corrupt(_Restarting):
    description = ("SIGKILL the target, then flip params.bits random bits in its data files or cut params.bytes off "
                   "the end of its last one (NATS: the stream's .blk files; Kafka: the topic's segment .log files), "
                   "and start it again; run.json keeps each change (file, offset, bit)")
    Params = CorruptParams
    needs = frozenset({"corrupt", "kill", "start"})

    async def inject(self, target: Target) -> None:
        cluster = self.ctx.cluster
        self.effect["changes"] = {}
        self.nodes.extend(target.nodes)
        await kill(self, target.nodes)
        for n in target.nodes:
            files = cluster.data_files(n)
            self.effect["changes"][n] = corrupt_files(files, self.p.bits, self.p.bytes, self.ctx.rng,
                                                      cluster.datadir / n)
            if not files:
                self.effect.setdefault("no_data_files", []).append(n)
        if self.p.down:
            await asyncio.sleep(self.p.down)
        await self.heal()
