"""The `power-off` fault's lazy data directories, from the harness's side: a lazyfs process
per node (mounted over the node's data directory, its files kept in a backing directory
beside it), the power cut, and unmounting whatever a session left mounted.

The layer is a small Go program (lazyfs/, on go-fuse from the Go module proxy), built on
first use into the cache (`$BROKERCHAOS_CACHE/lazyfs/<hash of its source>`, else
~/.cache/brokerchaos/lazyfs/…); `make setup` builds it once. Its cost against plain disk is
in BENCHMARKS.md.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional

from . import gotool, process
from .cache import cache_dir
from .process import Proc

SOURCE = Path(__file__).with_name("lazyfs")
SOURCE_FILES = ("go.mod", "go.sum", "main.go", "layer.go", "node.go")
FSNAME = "bc-lazyfs"
BUILD_TIMEOUT_S = 600


class MountError(RuntimeError):
    pass


@functools.cache
def binary_path() -> Path:
    """Where the layer built from this source lives: a new source, a new path (hashed once
    per process: every mount asks)."""
    h = hashlib.sha256()
    for name in SOURCE_FILES:
        h.update(name.encode() + b"\0" + (SOURCE / name).read_bytes())
    return cache_dir("lazyfs") / h.hexdigest()[:16] / "lazyfs"


def build() -> Path:
    """The layer's binary, built once per source (go build; its modules from the proxy)."""
    out = binary_path()
    if out.exists():
        return out
    try:
        go = gotool.ensure()
    except gotool.GoError as e:
        raise MountError(f"the lazy layer needs Go to be built once: {e}") from None
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"lazyfs.{os.getpid()}.part")
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=readonly")
    try:
        r = subprocess.run([go, "build", "-trimpath", "-o", str(tmp), "."], cwd=SOURCE, env=env,
                           capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise MountError(f"building the lazy layer took over {BUILD_TIMEOUT_S}s (go build in {SOURCE})") from None
    if r.returncode != 0 or not tmp.exists():
        last = next((ln for ln in reversed(r.stderr.splitlines()) if ln.strip()), "no output")
        raise MountError(f"building the lazy layer failed (go build in {SOURCE}): {last[:240]}")
    os.replace(tmp, out)
    return out


def available() -> Optional[str]:
    """Why the layer cannot run here (None if it can)."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse (the kernel's FUSE)"
    if not shutil.which("fusermount3"):
        return "fusermount3 is missing: run `make setup` (Debian fuse3)"
    if not binary_path().exists() and gotool.find() is None:
        return "the lazy layer is not built and there is no Go to build it: run `make setup`"
    return None


def mounted_under(root: Path) -> list[str]:
    """Our layers' mount points at or below `root`, deepest first."""
    out = []
    try:
        with open("/proc/self/mounts") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    prefix = str(root).rstrip("/") + "/"
    for line in lines:
        parts = line.split()
        if len(parts) < 3 or parts[0] != FSNAME:
            continue
        where = parts[1].replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
        if where == str(root) or where.startswith(prefix):
            out.append(where)
    return sorted(out, key=len, reverse=True)


def unmount(where: str) -> None:
    """Lazily detached: a layer killed with SIGKILL leaves a mount that answers nothing."""
    for argv in (["fusermount3", "-u", "-z", where], ["umount", "-l", where]):
        try:
            if subprocess.run(argv, capture_output=True, timeout=30).returncode == 0:
                return
        except (OSError, subprocess.TimeoutExpired):
            continue
    if os.path.ismount(where):
        raise MountError(f"could not unmount {where}")


class LazyDisk:
    """One node's data directory on the layer: `mount()` before the node starts, `power_cut()`
    once the node is dead (the layer rolls back and unmounts), `unmount()` at teardown."""

    def __init__(self, mountpoint: Path, logdir: Path, spawn: Callable[[str, list[str]], Proc],
                 forget: Callable[[Proc], None]) -> None:
        self.mountpoint = mountpoint
        self.backing = mountpoint.with_name(mountpoint.name + ".disk")
        self.report = mountpoint.with_name(mountpoint.name + ".powercut.json")
        self.spawn = spawn
        self.forget = forget
        self.proc: Optional[Proc] = None
        self.name = f"{mountpoint.name}-lazyfs"
        self.log = logdir / f"{self.name}.log"
        # benchmarks/lazy_layer_ops.py's baselines only ("passthrough", "bare": not a
        # power-off layer, lazyfs/main.go); the harness never sets it
        self.bench_mode: Optional[str] = None

    def mount(self, timeout: float = 15.0) -> None:
        if self.proc is not None and self.proc.alive() and os.path.ismount(self.mountpoint):
            return
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        self._provisioned()
        self.report.unlink(missing_ok=True)
        argv = [str(build()), str(self.backing), str(self.mountpoint), str(self.report)]
        self.proc = self.spawn(self.name, argv + ([self.bench_mode] if self.bench_mode else []))
        deadline = time.monotonic() + timeout
        while not os.path.ismount(self.mountpoint):
            if not self.proc.alive():
                raise MountError(f"the lazy layer of {self.mountpoint.name} exited: {self._tail()}")
            if time.monotonic() > deadline:
                raise MountError(f"the lazy layer of {self.mountpoint.name} not mounted within {timeout:.0f}s; "
                                 f"see {self.log}")
            time.sleep(0.05)

    def _provisioned(self) -> None:
        """What the directory held before the layer first came over it (a storage format, a
        configuration: provisioning, long before any cut) moves beneath it, as durable; the
        mount would otherwise hide it."""
        if os.path.ismount(self.mountpoint):
            return
        for entry in sorted(self.mountpoint.iterdir()):
            if not (self.backing / entry.name).exists():
                os.replace(entry, self.backing / entry.name)

    def settle(self, timeout: float = 10.0) -> None:
        """Everything written so far counts as written back (the layer's SIGUSR2), done
        when the layer says so."""
        if self.proc is None or not self.proc.alive():
            return
        done = self.report.with_name(self.report.name + ".settled")
        done.unlink(missing_ok=True)
        process.send_signal(self.proc, signal.SIGUSR2)
        deadline = time.monotonic() + timeout
        while not done.exists():
            if time.monotonic() > deadline or not self.proc.alive():
                raise MountError(f"the lazy layer of {self.mountpoint.name} did not settle within {timeout:.0f}s; "
                                 f"see {self.log}")
            time.sleep(0.01)

    def power_cut(self, timeout: float = 30.0) -> dict:
        """What the cut dropped (the layer's account). The node must be dead already."""
        if self.proc is None or not self.proc.alive():
            raise MountError(f"no lazy layer runs under {self.mountpoint.name}")
        process.send_signal(self.proc, signal.SIGUSR1)
        if not process.wait_exit(self.proc, timeout):
            raise MountError(f"the lazy layer of {self.mountpoint.name} did not finish its power cut within "
                             f"{timeout:.0f}s; see {self.log}")
        self._done()
        try:
            return json.loads(self.report.read_text())
        except (OSError, ValueError) as e:
            raise MountError(f"the lazy layer of {self.mountpoint.name} left no account of its power cut ({e}); "
                             f"see {self.log}") from None

    def unmount(self) -> None:
        if self.proc is not None:
            process.terminate(self.proc, grace=10.0)  # SIGTERM: unmount, no rollback
            self._done()
        if os.path.ismount(self.mountpoint):
            unmount(str(self.mountpoint))

    def _done(self) -> None:
        if self.proc is not None:
            self.forget(self.proc)
            self.proc = None

    def _tail(self) -> str:
        try:
            return " | ".join(self.log.read_text(errors="replace").strip().splitlines()[-3:])[-300:]
        except OSError:
            return "no log"



def setup() -> int:
    """make setup: build the layer once (Go fetched first where the machine has none)."""
    try:
        print(f"lazy layer: {build()}")
    except MountError as e:
        print(e, file=sys.stderr)
        return 1
    return 0
