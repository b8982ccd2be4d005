"""`explore`: a search of the fault space for a violation nobody wrote down (issue 68).

From a base scenario (a file, or a system's defaults), each *schedule* is drawn from what the
system offers: one to `max_faults` faults, each an action its local cluster supports (or one
of `--actions`) with that action's example settings, a target, a moment (the N-th ack, a
share of the write) and a window (healed after a few seconds, or before the read); faults
drawn at nearby moments overlap. Each schedule is a session of its own on a cluster kept
between them (runner/pool.py), judged by the verdict policy (or one `--check`).

A schedule is *explored* when its runs were decided: one whose faults did not take effect
(the policy's evidence short: `policy.evidence_short`) or whose read did not finish is tried
but not explored, and said so. Every schedule and its outcome is a line of `explore.jsonl`,
written when its session ends, so an interrupted search resumes where it stopped: the draws
are a function of the seed and the schedule's number, so the same ones come again. The search
stops at the first violation (or the `collect`-th), or when the budget (runs, or minutes) is
spent; the coverage table counts each (action, target, moment) tried and explored.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import random
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator, Optional

from .bisect import FAILS, HOLDS, UNDECIDED, StopAtFailure
from .errors import ScenarioError
from .faults import FAULTS, TARGETS
from .faults.base import supported
from .systems import SYSTEMS

EXPLORE_FILE, JOURNAL = "explore.json", "explore.jsonl"
# the targets a schedule draws from: roles every system has; a system's own (bookie,
# coordinator, consumer) come through --targets
TARGETS_DRAWN = ("leader", "follower", "followers", "random", "minority", "all", "client-node")
MOMENTS = (0.1, 0.3, 0.5, 0.7)  # the trigger: the ack at this share of the write
DURATIONS = (None, 2.0, 5.0, 10.0)  # seconds in effect; None: healed before the read
DRAWS = 200  # tries at a schedule the scenario's checks accept, before saying the space is empty


@dataclass(frozen=True)
class Space:
    """What schedules are drawn from."""

    actions: tuple[str, ...]
    targets: tuple[str, ...] = TARGETS_DRAWN
    moments: tuple[float, ...] = MOMENTS
    durations: tuple[Optional[float], ...] = DURATIONS
    max_faults: int = 2
    # settings drawn too (`--vary acks=1,all`): each a system option and its values
    vary: tuple[tuple[str, tuple], ...] = ()
    # actions the system offers that this base cannot run (not asked for by name): each with why
    left_out: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> dict:
        return {"actions": list(self.actions), "targets": list(self.targets), "moments": list(self.moments),
                "durations": list(self.durations), "max_faults": self.max_faults,
                "vary": {k: list(v) for k, v in self.vary}, "left_out": dict(self.left_out)}

    @classmethod
    def from_json(cls, d: dict) -> "Space":
        return cls(tuple(d["actions"]), tuple(d["targets"]), tuple(d["moments"]), tuple(d["durations"]),
                   d["max_faults"], tuple((k, tuple(v)) for k, v in (d.get("vary") or {}).items()),
                   tuple((d.get("left_out") or {}).items()))


def base_doc(spec: str) -> dict:
    """The scenario a search starts from: a file, or a system's name (its defaults)."""
    from .validation import load_document

    if spec in SYSTEMS:
        return {"name": f"explore-{spec}", "system": spec}
    return load_document(spec)


def offered(system: str) -> tuple[str, ...]:
    """The actions a local cluster of `system` supports, in a family (no `none`, no hooks)."""
    offers = SYSTEMS.get(system).local_capabilities()
    return tuple(n for n, c in FAULTS.items() if c.family is not None and supported(c, offers))


def vary_of(items: Optional[list[str]]) -> tuple[tuple[str, tuple], ...]:
    """`--vary KEY=V1,V2` (repeatable): a system option and the values drawn for it."""
    import yaml

    out = []
    for item in items or ():
        key, sep, values = item.partition("=")
        vals = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not key.strip() or len(vals) < 2:
            raise ScenarioError(f"--vary: {item!r}: give an option and two values or more, such as acks=1,all")
        out.append((key.strip(), tuple(yaml.safe_load(v) for v in vals)))
    return tuple(out)


def space_of(doc: dict, actions: Optional[list[str]] = None, targets: Optional[list[str]] = None,
             max_faults: int = 2, vary: tuple = ()) -> Space:
    """The space for `doc`'s system; `actions`/`targets` narrow or name it (each checked), and
    `vary` adds settings to draw (each value checked as the scenario it makes)."""
    from . import validation as sc

    have = offered(doc["system"])
    for a in actions or ():
        if a not in FAULTS.names():
            raise ScenarioError(f"--actions: no fault action {a!r} (see `brokerchaos faults`)")
        if a not in have:
            raise ScenarioError(f"--actions: {doc['system']} does not offer {a!r} (offers {', '.join(have)})")
    for t in targets or ():
        if t not in TARGETS.names():
            raise ScenarioError(f"--targets: no target {t!r} (see `brokerchaos faults`)")
    if not 1 <= max_faults <= 5:
        raise ScenarioError("--max-faults: from 1 to 5")
    for key, values in vary:
        for v in values:
            try:
                sc.build({**doc, "options": {**(doc.get("options") or {}), key: v}})
            except ScenarioError as e:
                raise ScenarioError(f"--vary: {key}={v}: {e}") from None
    return Space(tuple(actions or have), tuple(targets or TARGETS_DRAWN), max_faults=max_faults, vary=vary)


def _fault(space: Space, rng: random.Random, messages: int) -> dict:
    action = rng.choice(space.actions)
    cls = FAULTS.get(action)
    f = {"action": action, "target": rng.choice(space.targets),
         "trigger": {"after_acks": max(1, int(messages * rng.choice(space.moments)))}}
    if cls.example:
        f["params"] = copy.deepcopy(cls.example)
    duration = rng.choice(space.durations) if cls.recoverable else None
    if duration is not None:
        f["duration"] = duration
    return f


def draw(doc: dict, space: Space, seed: int, i: int, messages: int, valid: Callable[[dict], bool]) -> dict:
    """Schedule `i` of the search seeded `seed` (a write of `messages`): the base scenario with
    its faults drawn, the first of up to DRAWS draws its checks accept (the same every time)."""
    rng = random.Random(f"{seed}:{i}")
    for _ in range(DRAWS):
        k = rng.randint(1, space.max_faults)
        cand = {key: v for key, v in copy.deepcopy(doc).items() if key not in ("fault", "faults")}
        cand["faults"] = [_fault(space, rng, messages) for _ in range(k)]
        if space.vary:
            cand["options"] = {**(cand.get("options") or {}), **{key: rng.choice(v) for key, v in space.vary}}
        cand["name"] = f"{doc.get('name', 'explore')}-x{i + 1:03d}"[:64]
        if valid(cand):
            return cand
    raise ScenarioError(f"no schedule of {DRAWS} drawn is one {doc['system']} can run: widen --actions or --targets")


def why_not(doc: dict, action: str, targets: tuple[str, ...]) -> str:
    """Why no target of `targets` runs `action` on this base: the scenario check's own words
    for the first."""
    from . import validation as sc

    cls = FAULTS.get(action)
    try:
        sc.build({**{k: v for k, v in doc.items() if k not in ("fault", "faults")},
                  "fault": {"action": action, "target": targets[0], "params": copy.deepcopy(cls.example)}})
    except ScenarioError as e:
        return str(e).split(": ", 1)[-1]
    return f"no target of {', '.join(targets)}"


def runnable(doc: dict, space: Space, seed: int, messages: int, named: bool) -> tuple[Space, list[dict]]:
    """Each action's first schedule alone (what the machine must offer for it): an action no
    target runs on this base is refused when `named` (--actions), else left out and said."""
    from . import validation as sc

    firsts, left = [], []
    for a in space.actions:
        try:
            firsts.append(draw(doc, Space((a,), space.targets, max_faults=1), seed, 0, messages, sc.accepts))
        except ScenarioError:
            why = why_not(doc, a, space.targets)
            if named:
                raise ScenarioError(f"--actions: {a}: not on this scenario: {why}") from None
            left.append((a, why))
    if not firsts:
        raise ScenarioError("explore: no action this system offers runs on this scenario: "
                            + "; ".join(f"{a}: {w}" for a, w in left))
    kept = tuple(a for a in space.actions if a not in dict(left))
    return dataclasses.replace(space, actions=kept, left_out=space.left_out + tuple(left)), firsts


def cells(cand: dict, messages: int) -> list[tuple[str, str, str]]:
    """The (action, target, moment) each fault of a schedule covers."""
    return [(f["action"], f["target"], f"{f['trigger']['after_acks'] / messages:.0%}") for f in cand["faults"]]


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


def schedules(doc: dict, space: Space, seed: int, start: int, messages: int,
              valid: Callable[[dict], bool]) -> Iterator[tuple[int, dict]]:
    i = start
    while True:
        yield i, draw(doc, space, seed, i, messages, valid)
        i += 1


@dataclass(frozen=True)
class Terms:
    """When a search stops: `collect` violations, `budget_runs` runs spent, `minutes` passed;
    each schedule `runs_each` runs."""

    budget_runs: int = 20
    runs_each: int = 1
    minutes: Optional[float] = None
    collect: int = 1

    def stopped(self, entries: list[dict], started: float) -> str:
        """Why no further schedule starts, or ""."""
        if sum(e["outcome"] == FAILS for e in entries) >= self.collect:
            return f"{self.collect} violation{'s' * (self.collect > 1)} found"
        if sum(e["runs"] for e in entries) >= self.budget_runs:
            return f"the budget of {self.budget_runs} runs was spent"
        if self.minutes is not None and time.monotonic() - started >= self.minutes * 60:
            return f"{self.minutes:g} minutes passed"
        return ""


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
    for i, cand in schedules(doc, space, seed, len(entries), messages, sc.accepts):
        stopped = terms.stopped(entries, started)
        if stopped:
            break
        runs = min(terms.runs_each, terms.budget_runs - sum(e["runs"] for e in entries))
        where, verdicts = session(cand, runs, StopAtFailure(check, f"schedule {i + 1}", runs))
        entry = {"i": i + 1, "faults": cand["faults"], "cells": cells(cand, messages),
                 "drawn": {k: cand["options"][k] for k, _ in space.vary}, "dir": where, **judged(verdicts, check)}
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

    def session(cand: dict, runs: int, stop: StopAtFailure) -> tuple[str, list]:
        result = Session(sc.build(cand, {"runs": runs}), root, spark_master=spark_master, observer=observer,
                         report=True, stop_when=stop).run()
        return result.dir.name, result.verdicts

    with ClusterPool.open_or_new():
        return search(doc, space, check, seed, terms, root, session, command)


def _written(root: Path, head: dict, entries: list[dict], stopped: str) -> dict:
    found = {**head, "schedules": entries, "stopped": stopped, "coverage": coverage(entries),
             "violations": [e for e in entries if e["outcome"] == FAILS],
             "runs": sum(e["runs"] for e in entries),
             "explored": sum(e["outcome"] != UNDECIDED for e in entries)}
    first = found["violations"][0] if found["violations"] else None
    if first is not None:
        reproducer = {**{k: v for k, v in head["base"].items() if k not in ("fault", "faults")},
                      "name": f"{head['scenario']}-x{first['i']:03d}"[:64], "faults": first["faults"]}
        if first.get("drawn"):
            reproducer["options"] = {**(reproducer.get("options") or {}), **first["drawn"]}
        path = root / f"violation-{first['i']:03d}.yaml"
        import yaml

        path.write_text(f"# schedule {first['i']} of `brokerchaos explore` (seed {head['seed']}) failed "
                        f"{head['check']}: {first['why'][0] if first['why'] else ''}\n"
                        f"# cut it down: brokerchaos shrink {path}\n" + yaml.safe_dump(reproducer, sort_keys=False))
        found["violation_file"] = str(path)
    found["said"] = (f"{len(entries)} schedules tried ({found['explored']} explored, {found['runs']} runs), "
                     f"{len(found['violations'])} failed {head['check']}; stopped: {stopped}")
    (root / EXPLORE_FILE).write_text(json.dumps(found, indent=2, default=str))
    from .report.explore_html import write as write_page

    write_page(root / "report.html", found)
    found["dir"] = root
    return found


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
