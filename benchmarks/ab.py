"""The same benchmark on two versions of the code, alternated in one sitting: is a change
slower than what it replaced? (a refactor's "not worse", measured on the same machine
minutes apart, not against a table written on another day).

    sudo .venv/bin/python benchmarks/ab.py --old REV [--new REV] [--rounds 2]
        [--analysis 10000000] [--turnaround 100000,1000] [--runs 5]

Each version is a git worktree in /tmp (made once, removed at the end) run with this
checkout's virtualenv, its own `src` first on PYTHONPATH. Per round, each version in turn:
- `--analysis N`: benchmarks/analysis.py's child (a JVM of its own: one analysis to warm
  it, then two of every verdict, the second reported) on one N-message history generated
  once;
- `--turnaround SIZES`: benchmarks/turnaround.py's sessions of the default scenario
  (`--runs` runs per size): the median verdict after the read, and the median analysis.
Prints one JSON line per measurement and, at the end, the medians and the new/old ratios.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def worktree(rev: str, where: Path) -> Path:
    d = where / rev.replace("/", "_")
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(d), rev], check=True,
                   capture_output=True)
    (d / ".venv").symlink_to(ROOT / ".venv")  # this checkout's interpreter and packages
    return d


def env_for(tree: Path) -> dict:
    return {**os.environ, "PYTHONPATH": str(tree / "src")}


def analysis(tree: Path, history: Path) -> dict:
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks/analysis.py"), "--child", "--dir", str(history)],
                         env=env_for(tree), capture_output=True, text=True, timeout=7200, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def turnaround(tree: Path, size: int, runs: int, out: Path) -> dict:
    """The session's medians, and the median of each step of the runs' analyses."""
    got = subprocess.run([sys.executable, str(tree / "benchmarks/turnaround.py"), "--runs", str(runs), "--sizes",
                          str(size), "--out", str(out)], env=env_for(tree), capture_output=True, text=True,
                         timeout=7200, check=True)
    doc = json.loads(got.stdout.strip().splitlines()[-1])
    steps: dict[str, list[float]] = {}
    for p in doc["per_run"]:
        for k, x in (p.get("analysis_steps_s") or {}).items():
            steps.setdefault(k, []).append(x)
    return {**doc["median"], "steps": {k: round(statistics.median(v), 3) for k, v in steps.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", required=True, help="the version to compare with (a git revision)")
    ap.add_argument("--new", default="HEAD")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--analysis", type=int, default=0, help="messages of the analysis benchmark's history (0: none)")
    ap.add_argument("--turnaround", default="", help="message counts of turnaround sessions, comma-separated")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    where = Path(tempfile.mkdtemp(prefix="bc-ab-"))
    trees = {"old": worktree(args.old, where), "new": worktree(args.new, where)}
    seen: dict[str, list[float]] = {}
    try:
        history = None
        if args.analysis:
            sys.path.insert(0, str(ROOT / "benchmarks"))
            from analysis import generate  # this checkout's generator, for both

            history = where / f"h{args.analysis}"
            generate(history, args.analysis)
        for r in range(args.rounds):
            for side, tree in trees.items():
                if history is not None:
                    a = analysis(tree, history)
                    seen.setdefault(f"{side} analysis_s", []).append(a["seconds"])
                    print(json.dumps({"round": r, "side": side, "analysis": a}), flush=True)
                for size in filter(None, args.turnaround.split(",")):
                    m = turnaround(tree, int(size), args.runs, where / f"t-{side}-{r}-{size}")
                    for k in ("verdict_after_read_s", "analysis_s"):
                        seen.setdefault(f"{side} {size} {k}", []).append(m[k])
                    print(json.dumps({"round": r, "side": side, "size": int(size), "median": m}), flush=True)
    finally:
        for tree in trees.values():
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True)
        shutil.rmtree(where, ignore_errors=True)
    med = {k: round(statistics.median(v), 3) for k, v in seen.items()}
    ratios = {k[4:]: round(med[k] / med["old" + k[3:]], 3)
              for k in med if k.startswith("new") and med.get("old" + k[3:])}
    print(json.dumps({"old": args.old, "new": args.new, "medians": med, "new_over_old": ratios}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
