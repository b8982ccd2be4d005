"""Where a session's time went, from its runs' run.json `phases`.

    .venv/bin/python benchmarks/phases.py RESULTS/SESSION-DIR
    sudo .venv/bin/brokerchaos run scenarios/nats-many-runs.yaml
    .venv/bin/python benchmarks/phases.py results/nats-many-runs-*

Prints one JSON line: the number of runs, the median, p95 and max of each phase (cluster
ready, write, read, the harness's own time = everything but write and read, the run's
analysis when it had one), the session's wall time and its end-of-session analysis (the
"Analysis: N runs in X s" line of output.txt). Target (issue 18): harness_s <= 1 s per run
on a reused NATS cluster, and the analysis of 1,000 runs x 1,000 messages <= 60 s.
"""
from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

KEYS = ("run_s", "cluster_ready_s", "write_s", "read_s", "harness_s", "analysis_s", "verdict_after_read_s")


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def summarise(d: Path) -> dict:
    metas = [json.loads(f.read_text()) for f in sorted(d.glob("run-*/run.json"))]
    phases = [m["phases"] for m in metas if "phases" in m]
    if not phases:
        raise SystemExit(f"{d}: no run.json with phases (a session of brokerchaos before issue 18?)")
    out: dict = {"session": str(d), "runs": len(phases)}
    reused = [p for m, p in zip(metas, phases) if str(m.get("cluster", "")).startswith("reused")]
    for name, rows in (("all", phases), ("reused_cluster", reused)):
        out[name] = {k: {"median": round(statistics.median(p[k] for p in rows if k in p), 3),
                         "p95": round(_pct([p[k] for p in rows if k in p], 0.95), 3),
                         "max": round(max(p[k] for p in rows if k in p), 3)}
                     for k in KEYS if rows and any(k in p for p in rows)}
    started = min(m["started"] for m in metas)
    finished = max(m.get("finished", m["started"]) for m in metas)
    out["runs_wall_s"] = round(finished - started, 1)
    m = re.search(r"Analysis: (\d+) runs in ([0-9.]+) s", (d / "output.txt").read_text()) \
        if (d / "output.txt").exists() else None
    out["session_analysis_s"] = float(m.group(2)) if m else None
    return out


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(json.dumps(summarise(Path(arg))))
