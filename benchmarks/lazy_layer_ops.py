"""The power-off layer's cost per request, without a broker: small appends with an fsync
after each (what a broker with an fsync before every ack does), and without, on plain disk
and through the layer (sandbox/lazyfs/), from 1 and 4 threads. Needs root and /dev/fuse.

    benchmarks/lazy_layer_ops.py [--ops N] [--size BYTES] [--profile FILE]

Prints one Markdown table: operations per second on plain disk; through go-fuse's own
loopback (`passthrough`: its files handed to the kernel's FUSE passthrough, writes never
reaching the daemon); through the layer's code seeing every write and fsync but keeping
nothing (`bare`: FUSE's round trips without the undo log); and through the layer; each
against plain disk, and the layer against `bare` (what its undo log costs). --profile
writes the layer's pprof CPU profile (LAZYFS_CPUPROFILE) and prints its top functions
(`go tool pprof -top`).
lazy_disk.py measures the same layer under a NATS cluster's write.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from brokerchaos.sandbox import mounts, process


def rate(d: Path, ops: int, threads: int, sync: bool, size: int) -> float:
    def work(i: int) -> None:
        fd = os.open(d / f"f{threads}-{int(sync)}-{i}", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        buf = b"x" * size
        try:
            for _ in range(ops):
                os.write(fd, buf)
                if sync:
                    os.fsync(fd)
        finally:
            os.close(fd)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return threads * ops / (time.perf_counter() - t0)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=int, default=3000, help="appends per thread with an fsync (x10 without)")
    ap.add_argument("--size", type=int, default=300, help="bytes per append")
    ap.add_argument("--profile", help="write the layer's CPU profile here and print its top functions")
    args = ap.parse_args()
    why = mounts.available()
    if why or os.geteuid() != 0:
        print(f"cannot mount the layer here: {why or 'needs root'}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bc-layer-bench-") as tmp:
        root = Path(tmp)
        (root / "plain").mkdir()
        procs = []
        disks = {}
        prof = {"LAZYFS_CPUPROFILE": os.path.abspath(args.profile)} if args.profile else {}
        for name, env in (("passthrough", {}), ("bare", {}), ("lazy", prof)):
            os.environ.update(env)  # the layer's process inherits it when mounted
            disks[name] = mounts.LazyDisk(root / name, root, lambda n, argv: procs.append(
                process.spawn(n, argv, None, root / f"{n}.log")) or procs[-1], lambda p: None)
            disks[name].bench_mode = None if name == "lazy" else name
            disks[name].mount()
            for k in env:
                os.environ.pop(k)
        rows = ["| appends | threads | plain disk ops/s | passthrough ops/s | bare ops/s | layer ops/s "
                "| passthrough ÷ plain | bare ÷ plain | layer ÷ plain | layer ÷ bare |",
                "|---|---|---|---|---|---|---|---|---|---|"]
        try:
            for sync, label in ((True, "each fsynced"), (False, "no fsync")):
                for threads in (1, 4):
                    n = args.ops if sync else args.ops * 10
                    plain = rate(root / "plain", n, threads, sync, args.size)
                    got = {k: rate(d.mountpoint, n, threads, sync, args.size) for k, d in disks.items()}
                    p, b, lz = got["passthrough"], got["bare"], got["lazy"]
                    rows.append(f"| {label} | {threads} | {plain:,.0f} | {p:,.0f} | {b:,.0f} | {lz:,.0f} | "
                                f"{p / plain:.2f} | {b / plain:.2f} | {lz / plain:.2f} | {lz / b:.2f} |")
        finally:
            for d in disks.values():
                d.unmount()
    print(f"{args.size}-byte appends, {args.ops:,} per thread with fsync ({args.ops * 10:,} without)")
    print("\n".join(rows))
    if args.profile:
        binary = mounts.build()
        top = subprocess.run(["go", "tool", "pprof", "-top", "-nodecount=25", str(binary), args.profile],
                             capture_output=True, text=True, timeout=120)
        print(top.stdout or top.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
