"""Shrinking a failing scenario (issue 68): from a scenario whose runs fail a check, the
smallest scenario that still fails it — fewer faults, shorter windows, earlier triggers,
fewer messages, fewer nodes — found by trying smaller ones and keeping each that still fails.

Why not Hypothesis's shrinker: it shrinks the choice sequence a test function drew, by
running the function hundreds of times in one process; a candidate here is a session of
real runs of a minute each, whose failure is a rate, not a yes or no. What fits is delta
debugging (Zeller's ddmin) over the scenario's faults — halves first, then single faults —
and halving of each number that sizes a fault or the write, greedily: the first candidate
that still fails becomes the scenario, and the search starts over from it.

A candidate *still fails* when a probe of it fails the check (bisect's stopping rule: its
first failing run decides; `runs` runs that pass it decide it holds; a run it cannot decide
— the fault not in effect, the read not finished — is replaced and never counted, so a
schedule whose faults did not take effect is not explored). How many runs make a hold
believable depends on how often the original failed: `runs_to_see` is enough to see a
failure, with 95% confidence, from a candidate failing at half the original's rate.

Everything here works on the scenario's document (the dict its YAML holds), so that the
reproducer is written back as a plain scenario file. The search is given its probe, so it
is free of runs (tests/test_shrink.py); `run` gives it a session per candidate, in one
cluster pool, between a measure of the original's rate and one of the reproducer's.
"""
from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator, Optional

import yaml

from .bisect import FAILS, HOLDS, UNDECIDED, StopAtFailure
from .report.stats import wilson

MIN_DURATION_S = 1.0  # a fault window shorter than this is not tried
MIN_MESSAGES = 1_000  # nor a write of fewer messages
MOST_RUNS = 50  # a probe's passing runs, however rarely the original failed


def runs_to_see(failed: int, runs: int, share: float = 0.5, confidence: float = 0.95) -> int:
    """Runs of a candidate that show at least one failure with `confidence` if it fails at
    `share` of the rate the original did (`failed` of `runs`); at most MOST_RUNS."""
    if runs <= 0 or failed <= 0:
        return MOST_RUNS
    p = min(1.0, share * failed / runs)
    if p >= 1.0:
        return 1
    return max(1, min(MOST_RUNS, math.ceil(math.log(1 - confidence) / math.log(1 - p))))


def faults_of(doc: dict) -> list[dict]:
    """The scenario's faults, one list whichever key holds them (`fault` or `faults`)."""
    if doc.get("faults"):
        return list(doc["faults"])
    return [doc["fault"]] if doc.get("fault") else []


def with_faults(doc: dict, keep: list[int]) -> dict:
    """The scenario with only the faults at positions `keep` (0-based, in order): a trigger
    `after_fault` names the kept fault's new position, and is dropped with the fault it named."""
    old = faults_of(doc)
    where = {i: n for n, i in enumerate(keep)}
    out = {k: v for k, v in copy.deepcopy(doc).items() if k not in ("fault", "faults")}
    faults = []
    for i in keep:
        f = copy.deepcopy(old[i])
        trig = dict(f.get("trigger") or {})
        after = trig.get("after_fault")
        if after is not None:
            if after - 1 in where:
                trig["after_fault"] = where[after - 1] + 1
            else:
                trig.pop("after_fault")
                if not trig:
                    trig = {"at_seconds": 0}
            f["trigger"] = trig
        faults.append(f)
    if len(faults) == 1:
        out["fault"] = faults[0]
    elif faults:
        out["faults"] = faults
    return out


def _without(n: int) -> Iterator[tuple[str, list[int]]]:
    """ddmin's subsets of n faults: the complement of each chunk, the chunks halving down to one."""
    size = n // 2
    while size >= 1:
        for lo in range(0, n, size):
            hi = min(n, lo + size)
            gone = f"fault {lo + 1}" if hi - lo == 1 else f"faults {lo + 1}-{hi}"
            yield f"without {gone}", [i for i in range(n) if not lo <= i < hi]
        size //= 2


def _halved(x: float, least: float) -> Optional[float]:
    """Half of x, not below `least`; None when x is already there."""
    if x is None or x <= least:
        return None
    h = max(least, x / 2)
    return int(h) if isinstance(x, int) else round(h, 1)


def candidates(doc: dict) -> Iterator[tuple[str, dict]]:
    """Smaller scenarios than `doc`, the largest cut first, each with what was cut."""
    faults = faults_of(doc)
    if len(faults) > 1:
        seen = set()
        for what, keep in _without(len(faults)):
            if keep and tuple(keep) not in seen:
                seen.add(tuple(keep))
                yield what, with_faults(doc, keep)
    for i, f in enumerate(faults):
        for what, g in _smaller_fault(f):
            new = with_faults(doc, list(range(len(faults))))
            if "faults" in new:
                new["faults"][i] = g
            else:
                new["fault"] = g
            yield f"fault {i + 1}: {what}", new
    w = doc.get("workload") or {}
    m = _halved(w.get("messages"), MIN_MESSAGES)
    if m is not None:
        yield f"messages {w['messages']} -> {m}", _fewer_messages(doc, m / w["messages"])
    nodes = (doc.get("cluster") or {}).get("nodes")
    if nodes and nodes > 1:
        new = copy.deepcopy(doc)
        new["cluster"]["nodes"] = nodes - 1
        yield f"nodes {nodes} -> {nodes - 1}", new


def _smaller_fault(f: dict) -> Iterator[tuple[str, dict]]:
    """One fault made smaller one way at a time: a window without repeats, a shorter window,
    an earlier trigger."""
    if f.get("repeat"):
        g = copy.deepcopy(f)
        g.pop("repeat")
        yield "one window", g
    d = _halved(f.get("duration"), MIN_DURATION_S)
    if d is not None:
        g = copy.deepcopy(f)
        g["duration"] = d
        yield f"duration {f['duration']} -> {d}", g
    trig = f.get("trigger") or {}
    for key, least in (("after_acks", 1), ("at_seconds", 0.5)):
        t = _halved(trig.get(key), least)
        if t is not None:
            g = copy.deepcopy(f)
            g["trigger"] = {**trig, key: t}
            yield f"{key} {trig[key]} -> {t}", g


def _fewer_messages(doc: dict, share: float) -> dict:
    """The write cut to `share`, each ack trigger with it (the fault fires at the same point
    of the write, not after it)."""
    new = copy.deepcopy(doc)
    new["workload"]["messages"] = max(MIN_MESSAGES, int(new["workload"]["messages"] * share))
    for f in faults_of(new):
        trig = f.get("trigger") or {}
        if trig.get("after_acks"):
            trig["after_acks"] = max(1, int(trig["after_acks"] * share))
    return new


@dataclass
class Step:
    """One candidate probed: what was cut, and what its runs said."""

    cut: str
    outcome: str
    failed: int
    decided: int
    dir: str = ""

    def to_json(self) -> dict:
        return {"cut": self.cut, "outcome": self.outcome, "failed": self.failed, "decided": self.decided,
                "dir": self.dir}


@dataclass
class Shrunk:
    doc: dict  # the smallest scenario that still failed
    steps: list[Step] = field(default_factory=list)
    runs: int = 0  # every run the search made
    stopped: str = ""  # why it ended

    @property
    def kept(self) -> list[str]:
        return [s.cut for s in self.steps if s.outcome == FAILS]


ProbeFn = Callable[[dict, int], tuple[str, int, int, int, str]]  # -> (outcome, failed, decided, runs, dir)


def shrink(doc: dict, probe: ProbeFn, failed: int, runs: int, budget: int,
           valid: Callable[[dict], bool] = lambda d: True) -> Shrunk:
    """Greedy delta debugging from `doc`, which failed `failed` of `runs` decided runs:
    each candidate `valid` accepts is probed for up to `runs_to_see` decided runs; the first
    that fails replaces the scenario; ends when no candidate fails or `budget` runs are spent
    (a candidate that passed the fewer runs the budget left is undecided, not held)."""
    out = Shrunk(copy.deepcopy(doc))
    want = runs_to_see(failed, runs)
    # a pass tries each cut once: one that held is not tried again within the pass, though
    # the scenario around it has changed since (a trigger moved); the next pass tries it again
    held: set[str] = set()
    kept_in_pass = False
    while True:
        for cut, cand in candidates(out.doc):
            if cut in held or not valid(cand):
                continue
            if out.runs >= budget:
                out.stopped = f"the budget of {budget} run{'s' * (budget != 1)} was spent"
                return out
            outcome, f, decided, n, where = probe(cand, min(want, budget - out.runs))
            if outcome == HOLDS and decided < want:  # passed the runs the budget left: not enough
                outcome = UNDECIDED
            out.runs += n
            out.steps.append(Step(cut, outcome, f, decided, where))
            if outcome == FAILS:
                out.doc, kept_in_pass = cand, True
                break
            held.add(cut)
        else:
            if not kept_in_pass:
                out.stopped = "no smaller scenario fails"
                return out
            held, kept_in_pass = set(), False


# -- on real runs: a session per candidate ----------------------------------------------------

SHRINK_FILE = "shrink.json"
REPRODUCER = "reproducer.yaml"


def _judged(result, check) -> tuple[int, int, list[str]]:
    """A session's runs against the check: (failed, decided, why each failed)."""
    failed = decided = 0
    why = []
    for v in result.verdicts:
        status, said = check.check(v)
        decided += status != "undecided"
        if status == "fail":
            failed += 1
            why.append(f"{v['run']}: {said}")
    return failed, decided, why


def run(doc: dict, check, runs: int, budget: int, out: Path, spark_master: Optional[str] = None,
        observer=None, command: Optional[str] = None) -> dict:
    """The original's rate (`runs` runs), the search (`budget` runs at most), the reproducer's
    rate (`runs` runs): each a session under `out/shrink-<name>-<stamp>/`, clusters kept
    between them (a candidate whose servers are the same takes the one before's)."""
    from . import validation as sc
    from .runner import ClusterPool, Session

    name = doc.get("name", "scenario")
    root = Path(out) / f"shrink-{name}-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}"
    root.mkdir(parents=True, exist_ok=True)
    count = [0]

    def session(d: dict, label: str, n: int, stop=None):
        s = sc.build(d, {"runs": n, "name": f"{name}-{label}"[:64]})
        return Session(s, root, spark_master=spark_master, observer=observer, report=True, stop_when=stop).run()

    def probe(cand: dict, want: int):
        count[0] += 1
        result = session(cand, f"step{count[0]}", 2 * want, StopAtFailure(check, f"step {count[0]}", want))
        failed, decided, _ = _judged(result, check)
        outcome = FAILS if failed else (HOLDS if decided >= want else UNDECIDED)
        return outcome, failed, decided, len(result.verdicts), result.dir.name

    with ClusterPool.open_or_new():
        first = session(doc, "original", runs)
        failed, decided, why = _judged(first, check)
        found = {"scenario": name, "check": check.text, "runs": runs, "budget": budget, "command": command,
                 "original": {"failed": failed, "decided": decided, "dir": first.dir.name, "why": why}}
        if not failed:
            found["said"] = f"the original did not fail {check.text} in {decided} decided runs: nothing to shrink"
            return _written(root, found, None)
        shrunk = shrink(doc, probe, failed, decided, budget, sc.accepts)
        last = session(shrunk.doc, "reproducer", runs)
        f2, d2, why2 = _judged(last, check)
    found.update({"steps": [s.to_json() for s in shrunk.steps], "search_runs": shrunk.runs,
                  "stopped": shrunk.stopped, "kept": shrunk.kept,
                  "reproducer": {"failed": f2, "decided": d2, "dir": last.dir.name, "why": why2,
                                 "wilson95": list(wilson(f2, d2))},
                  "said": f"{len(shrunk.kept)} cuts kept, {shrunk.runs} runs (stopped: {shrunk.stopped}); "
                          f"the reproducer failed {f2} of {d2} decided runs"})
    return _written(root, found, shrunk.doc)


def _written(root: Path, found: dict, reproducer: Optional[dict]) -> dict:
    """shrink.json, and the reproducer as a plain scenario file with its rate and replay command."""
    if reproducer is not None:
        r = found["reproducer"]
        lo, hi = r["wilson95"]
        rate = f"{r['failed']} of {r['decided']}" + (f" (95% interval {lo:.0%}-{hi:.0%})" if lo is not None else "")
        head = (f"# shrunk from {found['scenario']} by `brokerchaos shrink` ({found['check']}): it failed {rate} runs\n"
                f"# replay: brokerchaos run {root / REPRODUCER} --runs {found['runs']} --expect {found['check']}\n")
        (root / REPRODUCER).write_text(head + yaml.safe_dump(reproducer, sort_keys=False))
        found["reproducer"]["file"] = str(root / REPRODUCER)
    (root / SHRINK_FILE).write_text(json.dumps(found, indent=2))
    found["dir"] = root
    return found


def table(found: dict) -> str:
    """One line per candidate probed: what was cut, its runs, kept or not."""
    lines = [f"{'':<4} {'cut':<44} {'failed':>6}  outcome"]
    o = found["original"]
    lines.append(f"{'':<4} {'(the original)':<44} {o['failed']:>3}/{o['decided']:<2}")
    for i, s in enumerate(found.get("steps", []), 1):
        lines.append(f"{i:<4} {s['cut'][:44]:<44} {s['failed']:>3}/{s['decided']:<2}  "
                     f"{'kept' if s['outcome'] == FAILS else s['outcome']}")
    return "\n".join(lines + [found["said"]])
