"""Files damaged while their node is down: bits flipped or the newest writes lost (`corrupt`,
Jepsen's bitflip experiments on NATS 2.12.1), or one file cut short (`truncate`, Jepsen's
file truncation). The cluster names a node's files, data (the stream's messages) or
metadata (the cluster's own state: Raft snapshots, cookies, manifests), and says which it
preallocates: there the written end, not the file's size, is what a cut and the bits
measure from (a preallocated tail is zeros no replay reads)."""
from __future__ import annotations

import asyncio
import fnmatch
import os
import random
from pathlib import Path
from typing import Callable, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..systems.base import REPAIR
from . import effect
from .base import Target
from .effect import INJECTED
from .process import _Restarting, kill
from .registry import FAULTS

CHUNK = 1 << 16
Which = Literal["data", "metadata"]


def written_size(f: Path, preallocated: bool) -> int:
    """A file's size, or for a preallocated one the end of its last byte that is not zero."""
    size = f.stat().st_size
    if not preallocated:
        return size
    with open(f, "rb") as fh:
        end = size
        while end > 0:
            start = max(0, end - CHUNK)
            fh.seek(start)
            chunk = fh.read(end - start).rstrip(b"\0")
            if chunk:
                return start + len(chunk)
            end = start
    return 0


def corrupt_files(files: list[Path], bits: int, cut: int, rng: random.Random, root: Path,
                  preallocated: Callable[[Path], bool] = lambda f: False) -> list[dict]:
    """Flip `bits` bits, drawn uniformly over the written bytes of `files`, or lose `cut`
    bytes off the end of the last (cut short; a preallocated file keeps its size, the bytes
    zeroed). One record per change, enough to replay it: file (relative to `root`), offset,
    bit and the byte before and after; or the written sizes before and after."""
    sizes = [(f, written_size(f, preallocated(f))) for f in files]
    sizes = [(f, s) for f, s in sizes if s > 0]
    if not sizes:
        return []
    if cut:
        f, size = sizes[-1]
        return [_cut(f, size, max(0, size - cut), root, zero=preallocated(f))]
    total = sum(s for _, s in sizes)
    return [_flip(sizes, rng.randrange(total), rng.randrange(8), root) for _ in range(bits)]


def _cut(f: Path, size: int, new: int, root: Path, zero: bool) -> dict:
    if zero:
        with open(f, "r+b") as fh:
            fh.seek(new)
            fh.write(b"\0" * (size - new))
    else:
        os.truncate(f, new)
    return {"file": str(f.relative_to(root)), "size_was": size, "size": new, **({"zeroed": True} if zero else {})}


def _flip(sizes: list[tuple[Path, int]], pos: int, bit: int, root: Path) -> dict:
    i = 0
    while pos >= sizes[i][1]:
        pos -= sizes[i][1]
        i += 1
    f = sizes[i][0]
    with open(f, "r+b") as fh:
        fh.seek(pos)
        before = fh.read(1)[0]
        after = before ^ (1 << bit)
        fh.seek(pos)
        fh.write(bytes([after]))
    return {"file": str(f.relative_to(root)), "offset": pos, "bit": bit, "before": before, "after": after}


def matching(files: list[Path], name: Optional[str], root: Path) -> list[Path]:
    """The files whose name or path (relative to `root`) matches the glob `name` (all: None)."""
    return [f for f in files if name is None or fnmatch.fnmatch(f.name, name)
            or fnmatch.fnmatch(str(f.relative_to(root)), name)]


def truncate_file(files: list[Path], cut: int, root: Path,
                  preallocated: Callable[[Path], bool] = lambda f: False) -> list[dict]:
    """Cut the newest of `files` to `cut` bytes short of its written end: the file is
    shorter, as a file system that lost the last extents of a file says after a crash."""
    if not files:
        return []
    f = files[-1]
    size = written_size(f, preallocated(f))
    return [_cut(f, size, max(0, size - cut), root, zero=False)]


def read_back(changes: list[dict], root: Path) -> int:
    """How many of the recorded changes the files hold now: each flipped byte read back as its
    `after`, each cut file at its recorded size (a zeroed tail: written no further)."""
    held = 0
    for c in changes:
        f = root / c["file"]
        try:
            if "zeroed" in c:
                held += written_size(f, True) <= c["size"]
            elif "size" in c:
                held += f.stat().st_size == c["size"]
            else:
                with open(f, "rb") as fh:
                    fh.seek(c["offset"])
                    held += fh.read(1) == bytes([c["after"]])
        except OSError:
            continue
    return held


class CorruptParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    bits: int = Field(0, ge=0, le=100_000, description="random bits to flip across the target's files")
    bytes: int = Field(0, ge=0, le=1 << 30, description="bytes lost off the written end of the target's newest file")
    file: Optional[str] = Field(None, description="a glob on a file's name or its path in the node's directory: "
                                                  "only the files matching it (default: all of params.files)")
    files: Which = Field("data", description="data: the files holding the stream's messages; metadata: the "
                                             "cluster's own state (NATS: $SYS's Raft groups; Kafka: the metadata "
                                             "log or ZooKeeper's; BookKeeper: the cookies; Redis: the AOF manifest; "
                                             "RabbitMQ: Mnesia's tables)")
    repair: bool = Field(False, description="run the system's own repair tool on the files before the restart "
                                            "(Redis: redis-check-aof --fix)")
    down: float = Field(0.0, ge=0, le=600, description="seconds to stay down before starting again")

    @model_validator(mode="after")
    def _one(self):
        if (self.bits > 0) == (self.bytes > 0):
            raise ValueError("give one of bits and bytes (a count above 0)")
        return self


class TruncateParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    bytes: int = Field(..., ge=1, le=1 << 30, description="bytes cut off the written end of the newest file chosen")
    file: Optional[str] = CorruptParams.model_fields["file"]
    files: Which = CorruptParams.model_fields["files"]
    repair: bool = CorruptParams.model_fields["repair"]
    down: float = CorruptParams.model_fields["down"]


@FAULTS.register("corrupt")
class Corrupt(_Restarting):
    description = ("SIGKILL the target, then flip params.bits random bits in its files or lose params.bytes off "
                   "the end of its newest one (params.files data: NATS the stream's .blk files, Kafka the topic's "
                   "segments, Redis the append-only files, RabbitMQ the queues' Raft segments, WAL and store, "
                   "Pulsar a bookie's journal and entry logs; or metadata), and start it again; run.json keeps "
                   "each change (file, offset, bit)")
    family = "corrupt"
    example = {"bits": 64}
    destroys_data = True
    observes = ("the target's process gone, the bytes recorded as changed read back changed before the restart "
                "(a file cut to its recorded size), the system's own check where it has one, and a new process "
                "running after it")
    Params = CorruptParams
    needs = frozenset({"corrupt", "kill", "start"})

    needs_by_param = {REPAIR: "repair"}

    @classmethod
    def needs_for(cls, params) -> frozenset[str]:
        return cls.needs | ({REPAIR} if params.repair else set())

    def damage(self, files: list[Path], root: Path) -> list[dict]:
        return corrupt_files(files, self.p.bits, self.p.bytes, self.ctx.rng, root, self.ctx.cluster.preallocates)

    async def inject(self, target: Target) -> None:
        cluster = self.ctx.cluster
        self.effect["changes"] = {}
        self.hold(target.nodes)
        await kill(self, target.nodes)
        for n in target.nodes:
            root = cluster.datadir / n
            files = matching(cluster.metadata_files(n) if self.p.files == "metadata" else cluster.data_files(n),
                             self.p.file, root)
            self.effect["changes"][n] = self.damage(files, root)
            self.effect.setdefault("read_back", {})[n] = read_back(self.effect["changes"][n], root)
            await self._check(n)
            if not files:
                self.effect.setdefault(f"no_{self.p.files}_files", []).append(n)
        self.gone = await effect.exited(self, list(self.pids_before), self.pids_before)
        if self.p.down:
            await asyncio.sleep(self.p.down)
        await self.heal()

    async def _check(self, n: str) -> None:
        """The system's own check tool on the damaged files, before the node reads them, and
        its repair (params.repair) with a check after it."""
        cluster = self.ctx.cluster
        said = await asyncio.to_thread(cluster.check_data, n)
        if said is not None:
            self.effect.setdefault("check", {})[n] = said
        if self.p.repair:
            self.effect.setdefault("repair", {})[n] = await asyncio.to_thread(cluster.repair_data, n)
            self.effect.setdefault("check_after_repair", {})[n] = await asyncio.to_thread(cluster.check_data, n)

    gone: effect.Seen | None = None

    async def observe(self, stage: str):
        if stage != INJECTED:
            return None
        back = await effect.restarted(self, list(self.pids_before), self.pids_before, INJECTED)
        changed = {n: self.effect.get("read_back", {}).get(n, 0) for n in self.effect.get("changes", {})}
        none = [n for n, k in changed.items() if not k]
        said = [f"; {n}'s own check: {c['said'][-1]}" for n, c in self.effect.get("check", {}).items() if c["said"]]
        said += [f"; {n} repaired: {c['said'][-1]}" for n, c in self.effect.get("repair", {}).items()
                 if c and c["said"]]
        what = effect.judge(not none, "changed: " + ", ".join(f"{n} {k} of {len(self.effect['changes'][n])}"
                                                             for n, k in changed.items())
                            + (f"; nothing changed on {', '.join(none)}" if none else "") + "".join(said))
        return effect.combine([self.gone or effect.not_known("not looked at"), what, back])


@FAULTS.register("truncate")
class Truncate(Corrupt):
    description = ("SIGKILL the target, cut its newest file (params.files: data or metadata, as `corrupt` names "
                   "them; params.file: of those matching a glob) params.bytes short of its written end, and start it "
                   "again; run.json keeps the file and its sizes")
    family = "corrupt"
    example = {"bytes": 4096}
    observes = ("the target's process gone, the file at its recorded size before the restart, the system's own "
                "check where it has one, and a new process running after it")
    Params = TruncateParams

    def damage(self, files: list[Path], root: Path) -> list[dict]:
        return truncate_file(files, self.p.bytes, root, self.ctx.cluster.preallocates)
