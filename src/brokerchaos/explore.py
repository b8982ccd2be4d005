"""`explore`: a search of the fault space for a violation nobody wrote down (issue 68).

From a base scenario (a file, or a system's defaults), each *schedule* is drawn from what the
system offers (fault_space.py: coverage first, seeded). Each schedule is a session of its own
on a cluster kept between them (runner/pool.py), judged by the verdict policy (or one
`--check`).

A schedule is *explored* when its runs were decided: one whose faults did not take effect
(the policy's evidence short: `policy.evidence_short`), whose read did not finish or whose
session could not run is tried but not explored, and said so. Every schedule and its outcome
is a line of `explore.jsonl`, written when its session ends, so an interrupted search resumes
where it stopped: the draws are a function of the seed, the schedule's number and the pairs
drawn before it, so the same ones come again. The search stops at the first violation (or the
`collect`-th), or when the budget (runs, or minutes) is spent; the coverage table counts each
(action, target, moment) tried and explored; each violation is written as a scenario to shrink.
"""
from __future__ import annotations

import dataclasses
import json
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator, Optional

from .bisect import FAILS, HOLDS, UNDECIDED, StopAtFailure
from .fault_space import Space, bare, cells, draw, drawn_so_far

EXPLORE_FILE, JOURNAL = "explore.json", "explore.jsonl"


class PolicyCheck:
    """The verdict policy as a check: a run the policy fails fails; a pass whose evidence
    is short (the fault did not do what it names, the cluster not whole) is undecided."""

    text = "the policy"

    def check(self, v) -> tuple[str, str]:
        from .analysis.policy import evidence_short

        if v["result"] == "fail":
            return "fail", "; ".join(v.get("result_why") or ["the policy fails it"])
        if v["result"] != "pass":
            return "undecided", "; ".join(v.get("result_why") or [v["result"]])
        short = evidence_short(v)
        return ("undecided", f"the run did not test what it names: {short}") if short else ("pass", "")


def judged(verdicts: list, check) -> dict:
    """A schedule's runs against the check."""
    failed, decided, why, unsure = 0, 0, [], []
    for v in verdicts:
        status, said = check.check(v)
        decided += status != "undecided"
        if status == "fail":
            failed += 1
            why.append(f"{v['run']}: {said}")
        elif status == "undecided":
            unsure.append(f"{v['run']}: {said}")
    outcome = FAILS if failed else (HOLDS if decided else UNDECIDED)
    return {"outcome": outcome, "runs": len(verdicts), "failed": failed, "decided": decided, "why": why,
            "undecided_why": unsure}


def read_journal(root: Path) -> list[dict]:
    path = root / JOURNAL
    if not path.exists():
        return []
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    out = []
    for n, line in enumerate(lines):
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if n != len(lines) - 1:  # only the last line can be cut short (a kill mid-write)
                raise
    return out


def _append(root: Path, entry: dict) -> None:
    import os

    with open(root / JOURNAL, "a") as f:
        f.write(json.dumps(entry) + "\n")
        f.flush()
        os.fsync(f.fileno())


def coverage(entries: list[dict]) -> list[dict]:
    """Each (action, target, moment) tried: how often, how often explored, how often failed."""
    tried, explored, failed = Counter(), Counter(), Counter()
    for e in entries:
        for c in map(tuple, e["cells"]):
            tried[c] += 1
            explored[c] += e["outcome"] != UNDECIDED
            failed[c] += e["outcome"] == FAILS
    return [{"action": a, "target": t, "moment": m, "tried": n, "explored": explored[(a, t, m)],
             "failed": failed[(a, t, m)]} for (a, t, m), n in sorted(tried.items())]


def schedules(doc: dict, space: Space, seed: int, entries: list[dict], messages: int,
              valid: Callable[[dict], bool]) -> Iterator[tuple[int, dict]]:
    """The schedules after the journal's `entries`, each drawn after the ones before it ended."""
    i = len(entries)
    while True:
        yield i, draw(doc, space, seed, i, messages, valid, drawn_so_far(entries))
        i += 1


@dataclass(frozen=True)
class Terms:
    """When a search stops: `collect` violations, `budget_runs` runs spent, `minutes` passed,
    or NOT_RUN_STOP schedules in a row whose session did not run; each schedule `runs_each` runs."""

    budget_runs: int = 20
    runs_each: int = 1
    minutes: Optional[float] = None
    collect: int = 1

    def stopped(self, entries: list[dict], started: float) -> str:
        """Why no further schedule starts, or ""."""
        if sum(e["outcome"] == FAILS for e in entries) >= self.collect:
            return f"{self.collect} violation{'s' * (self.collect > 1)} found"
        if sum(e["runs"] for e in entries) >= self.budget_runs:
            return f"the budget of {self.budget_runs} run{'s' * (self.budget_runs != 1)} was spent"
        if self.minutes is not None and time.monotonic() - started >= self.minutes * 60:
            return f"{self.minutes:g} minutes passed"
        if len(entries) >= NOT_RUN_STOP and all(e.get("not_run") for e in entries[-NOT_RUN_STOP:]):
            return f"the last {NOT_RUN_STOP} schedules' sessions did not run: {entries[-1]['not_run']}"
        return ""


NOT_RUN_STOP = 2  # schedules in a row whose cluster never served: the search stops, saying why


class NotRun(Exception):
    """A schedule's session that could not run (its cluster never served), and where it is."""

    def __init__(self, where: str, why: str) -> None:
        super().__init__(why)
        self.where, self.why = where, why


# a schedule run: (the scenario, its runs, the stopping rule) -> (its session's directory, verdicts)
SessionFn = Callable[[dict, int, StopAtFailure], tuple[str, list]]


def search(doc: dict, space: Space, check, seed: int, terms: Terms, root: Path, session: SessionFn,
           command: Optional[str] = None) -> dict:
    """The search in `root`: the journal's schedules first (a resumed search), then schedules
    drawn and run through `session` until `terms` stop it; each journalled as it ends."""
    from . import validation as sc

    head = {"scenario": doc.get("name", "explore"), "system": doc["system"], "seed": seed, "check": check.text,
            "space": space.to_json(), **dataclasses.asdict(terms), "command": command, "base": doc}
    entries = read_journal(root)
    if not entries:  # the search's own terms first: a search killed before its end resumes from them
        (root / EXPLORE_FILE).write_text(json.dumps({**head, "schedules": [], "stopped": "still running"},
                                                    indent=2, default=str))
    messages = sc.build(doc).workload.messages
    started = time.monotonic()
    for i, cand in schedules(doc, space, seed, entries, messages, sc.accepts):
        stopped = terms.stopped(entries, started)
        if stopped:
            break
        runs = min(terms.runs_each, terms.budget_runs - sum(e["runs"] for e in entries))
        try:
            where, verdicts = session(cand, runs, StopAtFailure(check, f"schedule {i + 1}", runs))
            outcome = judged(verdicts, check)
        except NotRun as e:  # charged to the budget: its time was spent
            where, outcome = e.where, {**judged([], check), "runs": runs, "not_run": e.why,
                                       "undecided_why": [f"the session did not run: {e.why}"]}
        entry = {"i": i + 1, "faults": cand["faults"], "cells": cells(cand, messages),
                 "drawn": {k: cand["options"][k] for k, _ in space.vary}, "dir": where, **outcome}
        _append(root, entry)
        entries.append(entry)
    return _written(root, head, entries, stopped)


def run(doc: dict, space: Space, check, seed: int, terms: Terms, out: Path, resume: Optional[Path] = None,
        spark_master: Optional[str] = None, observer=None, command: Optional[str] = None) -> dict:
    """The search on real runs: each schedule a session under `out/explore-<name>-<stamp>/`
    (or `resume`), on clusters kept between them."""
    from . import validation as sc
    from .runner import ClusterPool, Session

    name = doc.get("name", "explore")
    root = Path(resume) if resume else Path(out) / f"explore-{name}-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}"
    root.mkdir(parents=True, exist_ok=True)

    from .sandbox import SandboxError
    from .systems import SystemError_

    def session(cand: dict, runs: int, stop: StopAtFailure) -> tuple[str, list]:
        s = Session(sc.build(cand, {"runs": runs}), root, spark_master=spark_master, observer=observer,
                    report=True, stop_when=stop)
        try:
            result = s.run()
        except (SystemError_, SandboxError) as e:
            raise NotRun(s.dir.name, str(e)) from None
        return result.dir.name, result.verdicts

    with ClusterPool.open_or_new():
        return search(doc, space, check, seed, terms, root, session, command)


def _written(root: Path, head: dict, entries: list[dict], stopped: str) -> dict:
    found = {**head, "schedules": entries, "stopped": stopped, "coverage": coverage(entries),
             "violations": [e for e in entries if e["outcome"] == FAILS],
             "runs": sum(e["runs"] for e in entries),
             "explored": sum(e["outcome"] != UNDECIDED for e in entries)}
    found["violation_files"] = [str(_reproducer(root, head, v)) for v in found["violations"]]  # each to shrink
    if found["violation_files"]:
        found["violation_file"] = found["violation_files"][0]
    found["said"] = (f"{len(entries)} schedules tried ({found['explored']} explored, {found['runs']} runs), "
                     f"{len(found['violations'])} failed {head['check']}; stopped: {stopped}")
    (root / EXPLORE_FILE).write_text(json.dumps(found, indent=2, default=str))
    from .report.explore_html import write as write_page

    write_page(root / "report.html", found)
    found["dir"] = root
    return found


def _reproducer(root: Path, head: dict, v: dict) -> Path:
    """Violation `v` as a plain scenario file: the base with the schedule's faults and draws."""
    import yaml

    reproducer = {**bare(head["base"]), "name": f"{head['scenario']}-x{v['i']:03d}"[:64], "faults": v["faults"]}
    if v.get("drawn"):
        reproducer["options"] = {**(reproducer.get("options") or {}), **v["drawn"]}
    path = root / f"violation-{v['i']:03d}.yaml"
    path.write_text(f"# schedule {v['i']} of `brokerchaos explore` (seed {head['seed']}) failed "
                    f"{head['check']}: {v['why'][0] if v['why'] else ''}\n"
                    f"# cut it down: brokerchaos shrink {path}\n" + yaml.safe_dump(reproducer, sort_keys=False))
    return path


def table(found: dict) -> str:
    """One line per schedule, then the coverage by action."""
    lines = [f"{'#':<4} {'faults':<58} {'failed':>6}  outcome"]
    for e in found["schedules"]:
        what = " + ".join(f"{a} {t} @{m}" for a, t, m in e["cells"]) + "".join(
            f" [{k}={v}]" for k, v in (e.get("drawn") or {}).items())
        lines.append(f"{e['i']:<4} {what[:58]:<58} {e['failed']:>3}/{e['decided']:<2}  {e['outcome']}")
    by = Counter()
    for c in found["coverage"]:
        by[c["action"]] += c["explored"]
    lines.append("explored per action: " + ", ".join(f"{a} {n}" for a, n in sorted(by.items())))
    return "\n".join(lines + [found["said"]])
