"""What every user of `brokerchaos run` waits for: a run's verdict after its read.

    sudo .venv/bin/python benchmarks/turnaround.py [--runs 5] [--out /tmp/brokerchaos-turnaround]

Runs the default scenario (`scenarios/nats-kill-leader.yaml`: 3-node NATS, the leader killed
at the 20,000th ack) as `brokerchaos run` does, with 100,000 and with 1,000 messages per run,
then reads each run's phase times from its run.json (`phases`: cluster ready, write, read,
the harness's own time, the run's analysis, and the read's end to the verdict on the
screen) and prints one JSON line per size with the medians and every run's figures.
Targets (issue 18): a 100,000-message run's verdict <= 1.5 s after its read, a 1,000-message
run's <= 1 s (median of the runs, warm session).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KEYS = ("verdict_after_read_s", "analysis_s", "write_s", "read_s", "harness_s", "cluster_ready_s", "run_s")


def session(out: Path, runs: int, messages: int) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    cmd = [str(ROOT / ".venv/bin/brokerchaos"), "run", str(ROOT / "scenarios/nats-kill-leader.yaml"),
           "--runs", str(runs), "--messages", str(messages), "--verdicts", "each", "--out", str(out)]
    if messages < 20_000:
        cmd += ["--after-acks", str(messages // 5)]
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=3600)
    if r.returncode not in (0, 3, 4):
        raise SystemExit(f"brokerchaos run failed ({r.returncode}): {r.stderr[-2000:]}")
    (d,) = sorted(p for p in out.iterdir() if p.is_dir())[-1:]
    per_run = [json.loads(f.read_text())["phases"] for f in sorted(d.glob("run-*/run.json"))]
    med = {k: round(statistics.median(p[k] for p in per_run if k in p), 3) for k in KEYS
           if any(k in p for p in per_run)}
    return {"messages": messages, "runs": runs, "median": med, "per_run": per_run, "dir": str(d)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", default="/tmp/brokerchaos-turnaround")
    ap.add_argument("--sizes", default="100000,1000", help="messages per run, comma-separated")
    args = ap.parse_args()
    for n in (int(x) for x in args.sizes.split(",")):
        print(json.dumps(session(Path(args.out) / str(n), args.runs, n)), flush=True)


if __name__ == "__main__":
    sys.exit(main())
