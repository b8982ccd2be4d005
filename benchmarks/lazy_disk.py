"""What the power-off layer costs: the write rate of the same NATS session with the nodes'
data directories on plain disk and on the lazy FUSE layer (sandbox/lazyfs/, Go), with
JetStream's default sync_interval and with `always` (an fsync before every ack).

    benchmarks/lazy_disk.py [--messages N] [--runs R] [--version 2.12.1] [--out DIR]

The layer is only mounted when a scenario uses `power-off`; here the power-off is set to
fire at 3,600 s, after the write has ended, so the layer is there for the whole write and
never cuts. Prints one Markdown table: acked messages per second of write phase (median of
the runs), and the layer's rate as a share of the plain disk's.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def session(out: Path, name: str, args, lazy: bool, sync: str) -> list[float]:
    doc = {
        "name": name, "system": "nats", "runs": args.runs,
        "cluster": {"nodes": 3, "replicas": 3, "version": args.version},
        "workload": {"messages": args.messages, "in_flight": 10_000},
        "options": {"sync_interval": sync},
        "fault": ({"action": "power-off", "target": "leader", "trigger": {"at_seconds": 3600}} if lazy
                  else {"action": "none"}),
    }
    path = out / f"{name}.json"
    path.write_text(json.dumps(doc))
    subprocess.run([sys.executable, "-m", "brokerchaos.cli", "run", str(path), "--out", str(out)],
                   stdout=subprocess.DEVNULL, check=False, timeout=3600)
    rates = []
    for rj in sorted(out.glob(f"{name}-*/run-*/run.json")):
        meta = json.loads(rj.read_text())
        v = [json.loads(x) for x in (rj.parent.parent / "verdicts.jsonl").read_text().splitlines()]
        acked = next(x["pos_ack_count"] for x in v if x["run"] == meta["run"])
        rates.append(acked / meta["write_s"])
    return rates


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--version", default="2.12.1")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="bc-lazy-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    rows = ["| sync_interval | plain disk msg/s | lazy layer msg/s | layer ÷ plain |", "|---|---|---|---|"]
    for sync in ("default", "always"):
        plain = statistics.median(session(out, f"plain-{sync}", args, False, sync))
        lazy = statistics.median(session(out, f"lazy-{sync}", args, True, sync))
        rows.append(f"| {sync} | {plain:,.0f} | {lazy:,.0f} | {lazy / plain:.2f} |")
    print(f"nats-server {args.version}, 3 nodes, R3, {args.messages:,} messages, 10,000 in flight, "
          f"median of {args.runs} runs; sessions in {out}")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
