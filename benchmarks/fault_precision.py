"""Fault precision: how long after its trigger each fault was in effect.

    benchmarks/fault_precision.py RESULTS_DIR [...]      # summarise sessions already run
    benchmarks/fault_precision.py --run OUT              # one short NATS run per action, then summarise
    benchmarks/fault_precision.py --run OUT --system kafka --actions kill,restart,partition --target client-node

Reads every run.json below the given directories (written by `brokerchaos run`) and
prints, per action, the distribution of `delay_ms` (trigger -> fault in effect) over all
fault windows, and of `resolve_ms` (trigger -> target known). The target is 100 ms. A kill
is in effect at its signal; `exit_ms` (signal -> every process gone) is shown apart.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ACTIONS = {
    "kill": [], "stop": [], "pause": [], "restart": [],
    "partition": [], "isolate": [], "isolate-from": ["from=peers"], "bridge": [],
    "loss": ["probability=0.2"], "delay": ["delay_ms=50"], "bandwidth": ["rate=5mbit"], "tcp-kill": [],
}


def windows(dirs: list[Path]):
    for d in dirs:
        for rj in sorted(d.rglob("run.json")):
            meta = json.loads(rj.read_text())
            for f in meta.get("faults") or []:
                for w in f.get("windows") or []:
                    if w.get("delay_ms") is not None:
                        yield f["action"], w


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def summarise(dirs: list[Path]) -> str:
    by: dict[str, list[dict]] = {}
    for action, w in windows(dirs):
        by.setdefault(action, []).append(w)
    lines = ["| action | windows | delay p50 | delay p95 | delay max | target lookup p50 | action begun p50 / max "
             "| within 100 ms "
             "| from the view (confirmed / stale / unanswered) | roles_before from the background look "
             "| exit after the signal p50 / max |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for action in sorted(by):
        ws = by[action]
        d = [w["delay_ms"] for w in ws]
        r = [w["resolve_ms"] for w in ws if w.get("resolve_ms") is not None]
        ok = sum(1 for x in d if x <= 100)
        viewed = [w for w in ws if w.get("target_by") == "view"]
        conf = [sum(1 for w in viewed if w.get("target_confirmed") is v) for v in (True, False, None)]
        looked = sum(1 for w in ws if w.get("roles_before_age_ms") is not None)
        ex = [w["effect"]["exit_ms"] for w in ws if (w.get("effect") or {}).get("exit_ms") is not None]
        exits = f"{pct(ex, .5):.0f} / {max(ex):.0f} ms" if ex else "-"
        at = [w["inject_at_ms"] for w in ws if w.get("inject_at_ms") is not None]
        begun = f"{pct(at, .5):.0f} / {max(at):.0f} ms" if at else "-"
        lines.append(f"| {action} | {len(ws)} | {pct(d, .5):.0f} ms | {pct(d, .95):.0f} ms | {max(d):.0f} ms | "
                     f"{pct(r, .5):.0f} ms | {begun} | {ok} of {len(ws)} | "
                     f"{len(viewed)} ({' / '.join(map(str, conf))}) | {looked} | {exits} |")
    every = [w["delay_ms"] for _, w in windows(dirs)]
    if every:
        lines.append(f"\nAll {len(every)} windows: p50 {pct(every, .5):.0f} ms, p99 {pct(every, .99):.0f} ms, "
                     f"max {max(every):.0f} ms; {sum(1 for x in every if x <= 100)} within 100 ms")
    return "\n".join(lines)


def run_all(out: Path, system: str, actions: list[str], target: str) -> None:
    for action in actions:
        params = ACTIONS[action]
        cmd = [sys.executable, "-m", "brokerchaos.cli", "run", "--name", f"precision-{system}-{action}-{target}",
               "--out", str(out), "--system", system,
               "--runs", "2", "--messages", "30000", "--in-flight", "5000", "--retries", "60",
               "--fault", f"{action}-{target}", "--after-acks", "10000", "--duration", "3"]
        for p in params:
            cmd += ["--fault-param", p]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        print(f"{system} {action}: exit {r.returncode}", file=sys.stderr)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("dirs", nargs="*", type=Path)
    ap.add_argument("--run", type=Path, help="first run one short session per action into this directory")
    ap.add_argument("--system", default="nats", help="the system of those sessions (default nats)")
    ap.add_argument("--target", default="leader", help="the faults' target (default leader; client-node, n1, ...)")
    ap.add_argument("--actions", default=",".join(ACTIONS),
                    help=f"comma-separated actions of those sessions (default all: {','.join(ACTIONS)})")
    a = ap.parse_args()
    actions = [x for x in a.actions.split(",") if x]
    unknown = [x for x in actions if x not in ACTIONS]
    if unknown:
        ap.error(f"--actions: unknown {', '.join(unknown)} (known: {', '.join(ACTIONS)})")
    dirs = list(a.dirs)
    if a.run:
        run_all(a.run, a.system, actions, a.target)
        dirs.append(a.run)
    if not dirs:
        ap.error("give result directories or --run OUT")
    print(summarise(dirs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
