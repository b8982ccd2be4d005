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

from . import effect
from .base import Target
from .effect import INJECTED
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


def read_back(changes: list[dict], root: Path) -> int:
    """How many of the recorded changes the files hold now: each flipped byte read back as its
    `after`, each cut file at its recorded size."""
    held = 0
    for c in changes:
        f = root / c["file"]
        try:
            if "size" in c:
                held += f.stat().st_size == c["size"]
                continue
            with open(f, "rb") as fh:
                fh.seek(c["offset"])
                held += fh.read(1) == bytes([c["after"]])
        except OSError:
            continue
    return held


@FAULTS.register("corrupt")
class Corrupt(_Restarting):
    description = ("SIGKILL the target, then flip params.bits random bits in its data files or cut params.bytes off "
                   "the end of its last one (NATS: the stream's .blk files; Kafka: the topic's segment .log files; "
                   "Redis: the server's append-only files; RabbitMQ: the queue's Raft segments and WAL, or its "
                   "store), and start it again; run.json keeps each change (file, offset, bit)")
    family = "corrupt"
    example = {"bits": 64}
    observes = ("the target's process gone, the bytes recorded as changed read back changed before the restart "
                "(a file cut to its recorded size), and a new process running after it")
    Params = CorruptParams
    needs = frozenset({"corrupt", "kill", "start"})

    async def inject(self, target: Target) -> None:
        cluster = self.ctx.cluster
        self.effect["changes"] = {}
        self.hold(target.nodes)
        await kill(self, target.nodes)
        for n in target.nodes:
            files = cluster.data_files(n)
            self.effect["changes"][n] = corrupt_files(files, self.p.bits, self.p.bytes, self.ctx.rng,
                                                      cluster.datadir / n)
            self.effect.setdefault("read_back", {})[n] = read_back(self.effect["changes"][n], cluster.datadir / n)
            said = await asyncio.to_thread(cluster.check_data, n)
            if said is not None:  # the system's own check tool, before the node reads them
                self.effect.setdefault("check", {})[n] = said
            if not files:
                self.effect.setdefault("no_data_files", []).append(n)
        self.gone = await effect.exited(self, list(self.pids_before), self.pids_before)
        if self.p.down:
            await asyncio.sleep(self.p.down)
        await self.heal()

    gone: effect.Seen | None = None

    async def observe(self, stage: str):
        if stage != INJECTED:
            return None
        back = await effect.restarted(self, list(self.pids_before), self.pids_before, INJECTED)
        changed = {n: self.effect.get("read_back", {}).get(n, 0) for n in self.effect.get("changes", {})}
        none = [n for n, k in changed.items() if not k]
        checks = [f"; {n}'s own check: {c['said'][-1]}" for n, c in self.effect.get("check", {}).items() if c["said"]]
        what = effect.judge(not none, "changed: " + ", ".join(f"{n} {k} of {len(self.effect['changes'][n])}"
                                                             for n, k in changed.items())
                            + (f"; nothing changed on {', '.join(none)}" if none else "") + "".join(checks))
        return effect.combine([self.gone or effect.not_known("not looked at"), what, back])
