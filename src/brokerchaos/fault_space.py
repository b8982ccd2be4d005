"""The fault space `explore` draws from (issue 68): the actions a system's local cluster
supports (or `--actions`) x targets x trigger moments x windows, settings drawn with them
(`--vary`), and the draws themselves: schedule i of a seed, coverage first (a fault's
(action, target) one of the pairs drawn least so far), each a scenario the harness runs.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import random
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Optional

from .errors import ScenarioError
from .faults import FAULTS, TARGETS
from .faults.base import supported
from .systems import SYSTEMS

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


def _fault(pair: tuple[str, str], space: Space, rng: random.Random, messages: int) -> dict:
    action, target = pair
    cls = FAULTS.get(action)
    f = {"action": action, "target": target,
         "trigger": {"after_acks": max(1, int(messages * rng.choice(space.moments)))}}
    params = cls.example_for(target)
    if params:
        f["params"] = params
    duration = rng.choice(space.durations) if cls.recoverable else None
    if duration is not None:
        f["duration"] = duration
    return f


def bare(doc: dict) -> dict:
    """A copy of `doc` without its faults."""
    return {key: v for key, v in copy.deepcopy(doc).items() if key not in ("fault", "faults")}


_PAIRS: dict = {}


def pairs(doc: dict, space: Space, messages: int, valid: Callable[[dict], bool]) -> list[tuple[str, str]]:
    """The (action, target) pairs of the space this base runs as a fault alone; none that
    destroys stored data on every node (no system keeps what every copy lost)."""
    key = (json.dumps(doc, sort_keys=True, default=str), space.actions, space.targets, messages, valid)
    if key not in _PAIRS:
        trigger = {"after_acks": max(1, messages // 2)}

        def alone(a: str, t: str) -> dict:
            return {**bare(doc), "faults": [{"action": a, "target": t, "trigger": trigger,
                                              "params": FAULTS.get(a).example_for(t)}]}
        _PAIRS[key] = [(a, t) for a in space.actions for t in space.targets
                       if not (t == "all" and FAULTS.get(a).destroys_data) and valid(alone(a, t))]
    return _PAIRS[key]


def drawn_so_far(entries: list[dict]) -> Counter:
    """How often each (action, target) was drawn by the schedules journalled."""
    return Counter((a, t) for e in entries for a, t, _ in e["cells"])


def _pick(rng: random.Random, among: list[tuple[str, str]], seen: Counter) -> tuple[str, str]:
    low = min(seen[p] for p in among)
    return rng.choice([p for p in among if seen[p] == low])


def draw(doc: dict, space: Space, seed: int, i: int, messages: int, valid: Callable[[dict], bool],
         seen: Optional[Counter] = None) -> dict:
    """Schedule `i` of the search seeded `seed` (a write of `messages`): the base scenario with
    its faults drawn, the first of up to DRAWS draws its checks accept (the same every time for
    the same `seen`). Coverage first: each fault's (action, target) is one of the pairs drawn
    least so far (`seen`, the journal's, then this schedule's own), so every pair the base runs
    alone comes once before any comes twice; its moment and window are drawn at random."""
    rng = random.Random(f"{seed}:{i}")
    among = pairs(doc, space, messages, valid)
    if not among:
        raise ScenarioError(f"no fault of the space is one {doc['system']} can run: widen --actions or --targets")
    for _ in range(DRAWS):
        k = rng.randint(1, space.max_faults)
        cand, drawn = bare(doc), Counter(seen or ())
        cand["faults"] = []
        for _ in range(k):
            pair = _pick(rng, among, drawn)
            drawn[pair] += 1
            cand["faults"].append(_fault(pair, space, rng, messages))
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
        sc.build({**bare(doc),
                  "fault": {"action": action, "target": targets[0], "params": cls.example_for(targets[0])}})
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
