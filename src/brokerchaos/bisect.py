"""`bisect`: one scenario across the releases of its server, to the release where a check's
verdict changes ("which release fixed, or broke, what we saw?").

The releases come in order (`--versions A..B`: those the system's registry lists between
the two, both included; or a list `A,B,C` as given). Each release probed is a session of
the scenario on it (`cluster.version`), with a stopping rule: the first run the check
fails decides the release *fails*; `--runs` runs that all pass it decide it *holds*; a run
the check cannot decide (a read that did not finish, a cluster that did not come back, a
fault not in effect) is said with its reason and another run takes its place, up to
`--runs` more; a release still short of `--runs` decided runs is *undecided*, and the
search says so instead of guessing. Both ends are probed
first; when they differ, the release between them is halved until two neighbours differ:
the last release where the check fails and the first where it holds (or the reverse, when
a release broke it). Every release probed keeps its session (its report linked), and the
search's account is `bisect.json` and `report.html` beside them.

A probe finds a rate only as well as its runs allow: `--runs 5` holding is 0 of 5, a 95%
Wilson interval of 0–43%; a rarely failing release needs more runs to be told from one
that never fails (the table shows each interval).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from .errors import ScenarioError
from .report import expect
from .report.stats import wilson
from .systems import SYSTEMS
from .systems.releases import parse

if TYPE_CHECKING:
    from .scenario import Scenario

FAILS, HOLDS, UNDECIDED = "fails", "holds", "undecided"
SERVER, CLIENT = "server", "client"  # what --over walks: cluster.version, or options.client_version
BISECT_FILE = "bisect.json"


@dataclass
class Probe:
    """One release's runs: how many the check failed, of how many it decided."""

    version: str
    runs: int = 0
    violated: int = 0
    decided: int = 0
    dir: str = ""
    why: list[str] = field(default_factory=list)  # the check's words for each run that failed it
    wanted: int = 0  # decided runs that make it hold (0: every run it had)
    unsure: list[str] = field(default_factory=list)  # why each run it could not decide was not

    @property
    def outcome(self) -> str:
        if self.violated:
            return FAILS
        return HOLDS if self.decided and self.decided >= (self.wanted or self.runs) else UNDECIDED

    def to_json(self) -> dict:
        lo, hi = wilson(self.violated, self.decided)
        return {"version": self.version, "runs": self.runs, "violated": self.violated, "decided": self.decided,
                "outcome": self.outcome, "wilson95": [lo, hi], "dir": self.dir, "why": self.why,
                "undecided_why": self.unsure}


def versions_of(load: Callable[[str], "Scenario"], spec: str, fetch: bool = True, of: str = SERVER) -> list[str]:
    """The releases `--versions` names, oldest first: `A..B` from the system's list (of its
    servers, or of its client with `of` client), or `A,B,C`; each one checked as the
    scenario it will run (`load(version)`: a setting a release refuses is one line before
    anything starts)."""
    if ".." in spec:
        a, _, b = spec.partition("..")
        ends = [parse(x.strip()) for x in (a, b)]
        if None in ends or None in (ends[0][2], ends[1][2]):
            raise ScenarioError(f"--versions: {spec!r}: give two releases such as 2.10.21..2.10.24")
        first = load(a.strip())
        listed = SYSTEMS.get(first.system).releases(first, fetch, of)
        if not listed:
            raise ScenarioError(f"--versions: {first.system} cannot list its {of} releases here; name them: A,B,C")
        lo, hi = sorted(ends)
        out = [v for v in listed if lo <= parse(v) <= hi]
    else:
        out = [x.strip() for x in spec.split(",") if x.strip()]
        if any(parse(v) is None or parse(v)[2] is None for v in out):
            raise ScenarioError(f"--versions: {spec!r}: releases are X.Y.Z, separated by commas")
        out = sorted(dict.fromkeys(out), key=parse)
    if len(out) < 2:
        raise ScenarioError(f"--versions: {spec!r} names {len(out)} release(s) here; a bisect needs two or more")
    for v in out:
        try:
            load(v)
        except ScenarioError as e:
            raise ScenarioError(f"--versions: {v}: {e}") from None
    return out


def check_of(text: str) -> expect.Expectation:
    """The one expectation `--check` names (any of --expect's, e.g. no-loss, no-duplicates)."""
    try:
        exps = expect.parse(text)
    except expect.ExpectError as e:
        raise ScenarioError(str(e).replace("--expect", "--check")) from None
    if len(exps) != 1:
        raise ScenarioError(f"--check: one check, not {len(exps)} ({text!r})")
    return exps[0]


def overrides(version: str, of: str = SERVER) -> dict:
    """The flags that put a scenario on one release: its servers', or its client's."""
    return {"server_version": version} if of == SERVER else {"option": [f"client_version={version}"]}


def on_release(scenario: "Scenario", version: str, runs: int) -> "Scenario":
    """The scenario as one probe runs it (already on its release): its runs, its own name."""
    return scenario.model_copy(update={"runs": runs, "name": f"{scenario.name}-{version}"})


def search(versions: list[str], look: Callable[[str], Probe]) -> dict:
    """The ends, then halves, until two neighbours differ; what was found, in words too."""
    probes: dict[str, Probe] = {}

    def at(i: int) -> Probe:
        if versions[i] not in probes:
            probes[versions[i]] = look(versions[i])
        return probes[versions[i]]

    lo, hi = 0, len(versions) - 1
    first, last = at(lo), at(hi)
    found: dict = {"probes": probes}
    if UNDECIDED in (first.outcome, last.outcome):
        return {**found, "boundary": None, "said": f"{(first if first.outcome == UNDECIDED else last).version}: "
                "undecided, so no boundary can be searched for"}
    if first.outcome == last.outcome:
        return {**found, "boundary": None, "said": f"the check {first.outcome} on both ends "
                f"({versions[lo]} and {versions[hi]}): no change between them that these runs can see"}
    while hi - lo > 1:
        mid = (lo + hi) // 2
        m = at(mid)
        if m.outcome == UNDECIDED:
            return {**found, "boundary": None, "said": f"{m.version}: undecided; the change lies between "
                    f"{versions[lo]} and {versions[hi]}"}
        lo, hi = (mid, hi) if m.outcome == first.outcome else (lo, mid)
    fixed = first.outcome == FAILS
    b = {"before": versions[lo], "after": versions[hi], "direction": "fixed" if fixed else "broke"}
    said = (f"fails on {versions[lo]} and holds from {versions[hi]} (fixed)" if fixed else
            f"holds on {versions[lo]} and fails from {versions[hi]} (broke)")
    return {**found, "boundary": b, "said": said}


@dataclass
class StopAtFailure:
    """A probe's stopping rule: its first run the check fails decides the release, and so do
    `wanted` runs it decided; NONE_DECIDED runs with none decided leave it undecided (a value,
    not a closure: a session on another Python client release takes it to its own interpreter)."""

    check: expect.Expectation
    version: str
    wanted: int
    decided: int = 0
    seen: int = 0

    def __call__(self, v) -> Optional[str]:
        status, why = self.check.check(v)
        if status == "fail":
            return f"{self.check.text} fails ({why}): {self.version} fails"
        self.seen += 1
        self.decided += status != "undecided"
        if self.decided >= self.wanted:
            return f"{self.decided} runs decided: {self.version} holds"
        if not self.decided and self.seen >= NONE_DECIDED:
            return f"{self.seen} runs and none decided (the last: {why}): {self.version} undecided"
        return None


# runs in a row the check could not decide, none before them, after which a probe gives up:
# a fault that never takes effect on this scenario (an election with nothing to move) will not
# take effect at the fourth run either, and each run costs a minute
NONE_DECIDED = 3


def probe(scenario: "Scenario", version: str, check: expect.Expectation, runs: int, root: Path,
          spark_master: Optional[str], observer) -> Probe:
    """One release: a session stopped at the first run the check fails or at `runs` runs it
    decided; a run it cannot decide is replaced by another, up to `runs` more. A release whose
    session could not run (its cluster never served) is undecided, with the error as why."""
    from .runner import Session
    from .sandbox import SandboxError
    from .systems import SystemError_

    s = on_release(scenario, version, 2 * runs)
    session = Session(s, root, spark_master=spark_master, observer=observer, report=True,
                      stop_when=StopAtFailure(check, version, runs))
    try:
        result = session.run()
    except (SystemError_, SandboxError) as e:  # its cluster never served: undecided, and why
        return Probe(version, dir=session.dir.name, wanted=runs, unsure=[f"the session did not run: {e}"])
    p = Probe(version, dir=result.dir.name, wanted=runs)
    for v in result.verdicts:
        status, why = check.check(v)
        p.runs += 1
        p.decided += status != "undecided"
        if status == "fail":
            p.violated += 1
            p.why.append(f"{v['run']}: {why}")
        elif status == "undecided":
            p.unsure.append(f"{v['run']}: {why}")
    return p


def run(on: dict[str, "Scenario"], check: expect.Expectation, runs: int, out: Path, of: str = SERVER,
        spark_master: Optional[str] = None, observer=None, command: Optional[str] = None) -> dict:
    """`on`: the scenario on each release of the list, oldest first."""
    from .runner import ClusterPool

    versions = list(on)
    first = on[versions[0]]
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    root = Path(out) / f"bisect-{first.name}-{stamp}"
    root.mkdir(parents=True, exist_ok=True)
    with ClusterPool.open_or_new():
        found = search(versions, lambda v: probe(on[v], v, check, runs, root, spark_master, observer))
    doc = {"scenario": first.name, "system": first.system, "over": of, "check": check.text,
           "runs_per_release": runs, "versions": versions, "command": command, "boundary": found["boundary"],
           "said": found["said"],
           "probes": [found["probes"][v].to_json() for v in versions if v in found["probes"]]}
    (root / BISECT_FILE).write_text(json.dumps(doc, indent=2))
    from .report import bisect_html

    doc["report"] = str(bisect_html.write(root, doc))
    doc["dir"] = root
    return doc


def table(doc: dict) -> str:
    """One line per release of the list: probed or not, and what its runs said."""
    lines = [f"{'release':<12} {'runs':>4}  {'failed':>6}  {'95% interval':<13} verdict"]
    probed = {p["version"]: p for p in doc["probes"]}
    for v in doc["versions"]:
        p = probed.get(v)
        if p is None:
            lines.append(f"{v:<12} {'':>4}  {'':>6}  {'':<13} not probed")
            continue
        lo, hi = p["wilson95"]
        ci = f"{lo:.0%}–{hi:.0%}" if lo is not None else "-"
        lines.append(f"{v:<12} {p['runs']:>4}  {p['violated']:>3}/{p['decided']:<2}  {ci:<13} {p['outcome']}")
        lines += [f"{'':<12} undecided {w}" for w in p.get("undecided_why", [])]
    return "\n".join(lines + [f"{doc['check']}: {doc['said']}"])
