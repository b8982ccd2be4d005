"""The power-off layer's cost per request, without a broker: small appends with an fsync
after each (what a broker with an fsync before every ack does), and without, on plain disk
and through the layer (sandbox/lazyfs/), from 1 and 4 threads. Needs root and /dev/fuse.

    benchmarks/lazy_layer_ops.py [--ops N] [--size BYTES]

Prints one Markdown table: operations per second and the layer's share of plain disk's.
lazy_disk.py measures the same layer under a NATS cluster's write.
"""
from __future__ import annotations

import argparse
import os
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
    args = ap.parse_args()
    why = mounts.available()
    if why or os.geteuid() != 0:
        print(f"cannot mount the layer here: {why or 'needs root'}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bc-layer-bench-") as tmp:
        root = Path(tmp)
        (root / "plain").mkdir()
        procs = []
        disk = mounts.LazyDisk(root / "lazy", root, lambda n, argv: procs.append(
            process.spawn(n, argv, None, root / f"{n}.log")) or procs[-1], lambda p: None)
        disk.mount()
        rows = ["| appends | threads | plain disk ops/s | layer ops/s | layer ÷ plain |", "|---|---|---|---|---|"]
        try:
            for sync, label in ((True, "each fsynced"), (False, "no fsync")):
                for threads in (1, 4):
                    n = args.ops if sync else args.ops * 10
                    plain = rate(root / "plain", n, threads, sync, args.size)
                    lazy = rate(disk.mountpoint, n, threads, sync, args.size)
                    rows.append(f"| {label} | {threads} | {plain:,.0f} | {lazy:,.0f} | {lazy / plain:.2f} |")
        finally:
            disk.unmount()
    print(f"{args.size}-byte appends, {args.ops:,} per thread with fsync ({args.ops * 10:,} without)")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
