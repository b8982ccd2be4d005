"""A campaign: several scenarios, each a session, with one table across them.

The dedup seed's design is the example: the same fault with deduplication off (the
control) and on, N runs each, and one CSV whose rows say which was which. A `matrix` makes
the cells: every scenario file crossed with one labelled value of each axis (acks × fault ×
dedup, server version × fault), each value a set of the settings `brokerchaos run` takes
as flags. `--resume DIR` goes on in a campaign's directory: finished cells are kept as they
are, a cell cut short goes on from its next run, the rest run.
"""
from __future__ import annotations

import csv
import itertools
import json
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from . import validation as sc
from .analysis.policy import reported
from .errors import first_error
from .inputs import read_yaml
from .scenario import FLAG_PATHS

if TYPE_CHECKING:
    from .analysis.verdicts import Verdict


class CampaignSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(..., pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    scenarios: list[str] = Field(..., min_length=1, description="scenario files, relative to the campaign file")
    overrides: dict[str, Any] = Field(default_factory=dict,
                                      description="CLI-style settings applied to every scenario (runs, messages, …)")
    matrix: dict[str, dict[str, dict[str, Any]]] = Field(
        default_factory=dict, description="axis -> label -> settings: each scenario crossed with one label per axis")
    exclude: list[dict[str, str]] = Field(
        default_factory=list, description="cells left out: each entry axis -> label, a cell matching all of an "
                                          "entry's pairs is not run (a setting a server version does not have)")
    notes: str = Field("", description="shown at the top of the campaign's report: how to read it, what it cannot show")
    # cell name -> {axis: label}, and cell name -> the scenario file's own name
    _axes: dict[str, dict[str, str]] = PrivateAttr(default_factory=dict)
    _base: dict[str, str] = PrivateAttr(default_factory=dict)


# what a campaign may set: every `brokerchaos run` flag
SETTINGS = set(FLAG_PATHS) | {"fault", "option", "fault_param", "after_acks", "at_seconds"}
LISTS = ("option", "fault_param")  # KEY=VALUE lists: axes and overrides add to each other
LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.=-]{0,31}$")


def _merge(*layers: dict) -> dict:
    out: dict = {}
    for layer in layers:
        for k, v in layer.items():
            if v is None:
                continue
            if k in LISTS:
                out[k] = list(out.get(k) or []) + ([v] if isinstance(v, str) else list(v))
            else:
                out[k] = v
    return out


def _spec(doc) -> CampaignSpec:
    """The campaign file's model, its settings, axes, labels and exclusions checked."""
    if isinstance(doc, dict) and isinstance(doc.get("matrix"), dict):
        # YAML reads a label such as 0 or 1 as a number; a label is a name
        doc["matrix"] = {a: ({str(k): v for k, v in vals.items()} if isinstance(vals, dict) else vals)
                         for a, vals in doc["matrix"].items()}
        if isinstance(doc.get("exclude"), list):
            doc["exclude"] = [{str(a): str(lb) for a, lb in e.items()} if isinstance(e, dict) else e
                              for e in doc["exclude"]]
    try:
        spec = CampaignSpec.model_validate(doc or {})
    except ValidationError as e:
        raise sc.ScenarioError(first_error(e, what="campaign")) from None
    _check_settings("overrides", spec.overrides)
    for axis, values in spec.matrix.items():
        if not values:
            raise sc.ScenarioError(f"campaign field 'matrix.{axis}': an axis needs at least one value")
        for label, settings in values.items():
            if not LABEL.match(label):
                raise sc.ScenarioError(f"campaign field 'matrix.{axis}.{label}': a label is up to 32 letters, "
                                       f"digits, '_', '.', '=' or '-'")
            _check_settings(f"matrix.{axis}.{label}", settings)
    for i, entry in enumerate(spec.exclude):
        for axis, label in entry.items():
            if str(label) not in spec.matrix.get(axis, {}):
                raise sc.ScenarioError(f"campaign field 'exclude.{i}.{axis}': no such axis and label in the matrix")
    return spec


def _cell(spec: CampaignSpec, fp: Path, where: str, base: str, combo: tuple, cli: dict):
    """One cell: the scenario file with the overrides, one label of each axis and the flags."""
    flags = _merge(spec.overrides, *[settings for _, _, settings in combo], cli)
    if combo:
        flags["name"] = "-".join([base] + [label for _, label, _ in combo])
    where += (", " + ", ".join(f"{a}={lb}" for a, lb, _ in combo) if combo else "")
    try:
        return sc.load(fp, flags)
    except sc.ScenarioError as e:
        raise sc.ScenarioError(f"campaign field '{where}): {e}") from None


def _check_settings(where: str, settings: dict) -> None:
    unknown = set(settings) - SETTINGS
    if unknown:
        raise sc.ScenarioError(f"campaign field '{where}.{sorted(unknown)[0]}': unknown setting "
                               f"(known: {', '.join(sorted(SETTINGS))})")


def load(path: str | Path, overrides: Optional[dict] = None) -> tuple[CampaignSpec, list]:
    """The campaign and every scenario (every cell) in it, all validated before anything runs."""
    p = Path(path)
    spec = _spec(read_yaml(p, "campaign file"))
    cli = {k: v for k, v in (overrides or {}).items() if v is not None}
    combos = [c for c in itertools.product(*[[(axis, label, settings) for label, settings in values.items()]
                                             for axis, values in spec.matrix.items()])
              if not any(all({a: lb for a, lb, _ in c}.get(a) == str(lb) for a, lb in e.items())
                         for e in spec.exclude)]
    scenarios = []
    for i, f in enumerate(spec.scenarios):
        fp = Path(f) if Path(f).is_absolute() or Path(f).exists() else p.parent / f
        try:
            base = sc.load(fp, _merge(spec.overrides, cli)).name
        except sc.ScenarioError as e:
            raise sc.ScenarioError(f"campaign field 'scenarios.{i}' ({f}): {e}") from None
        for combo in combos:
            s = _cell(spec, fp, f"scenarios.{i}' ({f}", base, combo, cli)
            scenarios.append(s)
            spec._axes[s.name] = {axis: label for axis, label, _ in combo}
            spec._base[s.name] = base
    names = [s.name for s in scenarios]
    if len(set(names)) != len(names):
        raise sc.ScenarioError("campaign field 'scenarios': two scenarios share a name")
    return spec, scenarios


CAMPAIGN_FILE = "campaign.json"


def check_resume(spec: CampaignSpec, scenarios: list, root: Path) -> None:
    """A campaign directory can be resumed by the campaign that made it, with the same cells."""
    try:
        made = json.loads((Path(root) / CAMPAIGN_FILE).read_text())
    except (OSError, ValueError):
        raise sc.ScenarioError(f"--resume: '{root}' is not a campaign directory (no readable {CAMPAIGN_FILE})") \
            from None
    if made.get("name") != spec.name or made.get("cells") != [s.name for s in scenarios]:
        raise sc.ScenarioError(f"--resume: '{root}' was made by campaign {made.get('name')!r} with cells "
                               f"{made.get('cells')}; this one has other cells")


def _sessions_of(root: Path, name: str) -> list[Path]:
    stamp = re.compile(re.escape(name) + r"-\d{8}T\d{6}Z$")
    return sorted(d for d in root.iterdir() if d.is_dir() and stamp.match(d.name))


def run(spec: CampaignSpec, scenarios: list, out: Path, spark_master: Optional[str] = None,
        observer=None, resume: Optional[Path] = None, command: Optional[str] = None) -> dict:
    from .runner import ClusterPool, Observer

    say = (observer or Observer()).line
    if resume is not None:
        root = Path(resume)
        check_resume(spec, scenarios, root)
    else:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        root = Path(out) / f"{spec.name}-{stamp}"
        root.mkdir(parents=True, exist_ok=True)
        (root / CAMPAIGN_FILE).write_text(json.dumps(
            {"name": spec.name, "cells": [s.name for s in scenarios], "axes": spec._axes, "notes": spec.notes,
             "command": command}, indent=2))
    sessions = []
    by_session: list[tuple[str, list[dict]]] = []
    # a cluster whose last run left it whole serves the next line whose servers are
    # configured alike (runner/pool.py): a campaign over faults starts one cluster
    with ClusterPool():
        _lines(scenarios, root, resume, spark_master, observer, command, say, sessions, by_session)
    for x in sessions:
        x["axes"] = spec._axes.get(x["scenario"], {})
        x["base"] = spec._base.get(x["scenario"], x["scenario"])
    # across every window of every session (each session's own block has its schedules)
    dist = campaign_outages([v for _, vs in by_session for v in vs], spark_master)
    write(root, sessions, dist)
    from .report import campaign_html

    report = campaign_html.write_campaign(root, spec.name, sessions, dict(by_session), notes=spec.notes)
    return {"dir": root, "sessions": sessions, "outages": dist, "verdicts": by_session, "report": report}


def _lines(scenarios, root, resume, spark_master, observer, command, say, sessions, by_session) -> None:
    """Each line's session (or the one it left finished, when resuming), in order."""
    from .runner import Session

    for s in scenarios:
        there = _sessions_of(root, s.name) if resume is not None else []
        done = [d for d in there if (d / "summary.json").exists()]
        if done:
            doc = json.loads((done[-1] / "summary.json").read_text())
            say(f"\n=== {s.name}: finished in {done[-1].name}, kept ===")
            sessions.append({"scenario": s.name, "dir": done[-1].name, "summary": doc["summary"]})
            by_session.append((s.name, doc["runs"]))
            continue
        if there:
            say(f"\n=== {s.name}: cut short in {there[-1].name}, going on ===")
        result = Session(s, root, spark_master=spark_master, observer=observer,
                         resume=there[-1] if there else None, command=command).run()
        sessions.append({"scenario": s.name, "dir": result.dir.name, "summary": result.summary})
        by_session.append((s.name, result.verdicts))

def campaign_outages(verdicts: list[Verdict], spark_master: Optional[str] = None) -> dict:
    """The outage distributions across every window of a campaign's sessions."""
    from .analysis import outages, spark

    return outages.summary(spark.get_spark(spark_master), verdicts, {})


def write(root: Path, sessions: list[dict], outages: Optional[dict] = None) -> None:
    """campaign.csv: every session's results.csv rows, one Scenario column added; summary.json."""
    rows, header = [], None
    for s in sessions:
        f = root / s["dir"] / "results.csv"
        if not f.exists():
            continue
        with open(f, newline="") as fh:
            r = csv.DictReader(fh)
            if header is None:
                header = list(r.fieldnames or []) + ["Scenario"]
            for row in r:
                rows.append({**row, "Scenario": s["scenario"]})
    if header:
        with open(root / "results.csv", "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=header, extrasaction="ignore")
            w.writeheader()
            w.writerows(rows)
    doc: dict = {"sessions": sessions}
    if outages is not None:
        doc["outages"] = outages
    (root / "summary.json").write_text(json.dumps(doc, indent=2, default=str))


def table(sessions: list[dict]) -> str:
    """One line per session: its runs, result, and each check's runs violated of decided."""
    names = [c.name for c in reported([s["summary"].get("verdicts") for s in sessions])]
    lines = [f"{'scenario':<36} {'runs':>4}  {'result':<7} " + " ".join(f"{n:>{max(len(n), 7)}}" for n in names)]
    for s in sessions:
        su = s["summary"]
        k = {name: "{runs}/{of}".format(**(su.get("verdicts", {}).get(name) or {"runs": 0, "of": 0}))
             for name in names}
        lines.append(f"{s['scenario']:<36} {su.get('runs', 0):>4}  {su.get('result', '?').upper():<7} "
                     + " ".join(f"{k[n]:>{max(len(n), 7)}}" for n in names))
    return "\n".join(lines)
