"""A campaign: several scenarios, each a session, with one table across them.

The dedup seed's design is the example: the same fault with deduplication off (the
control) and on, N runs each, and one CSV whose rows say which was which.
"""
from __future__ import annotations

import csv
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from . import validation as sc
from .errors import first_error
from .scenario import FLAG_PATHS


class CampaignSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(..., pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    scenarios: list[str] = Field(..., min_length=1, description="scenario files, relative to the campaign file")
    overrides: dict[str, Any] = Field(default_factory=dict,
                                      description="CLI-style settings applied to every scenario (runs, messages, …)")


def load(path: str | Path, overrides: Optional[dict] = None) -> tuple[CampaignSpec, list]:
    """The campaign and every scenario in it, all validated before anything runs."""
    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text())
    except OSError as e:
        raise sc.ScenarioError(f"campaign file '{p}': {e.strerror}") from None
    except yaml.YAMLError as e:
        raise sc.ScenarioError(f"campaign file '{p}': invalid YAML ({str(e).splitlines()[0]})") from None
    try:
        spec = CampaignSpec.model_validate(doc or {})
    except ValidationError as e:
        raise sc.ScenarioError(first_error(e, what="campaign")) from None
    unknown = set(spec.overrides) - set(FLAG_PATHS)
    if unknown:
        raise sc.ScenarioError(f"campaign field 'overrides.{sorted(unknown)[0]}': unknown setting "
                               f"(known: {', '.join(sorted(FLAG_PATHS))})")
    flags = {**spec.overrides, **{k: v for k, v in (overrides or {}).items() if v is not None}}
    scenarios = []
    for i, f in enumerate(spec.scenarios):
        fp = Path(f) if Path(f).is_absolute() or Path(f).exists() else p.parent / f
        try:
            scenarios.append(sc.load(fp, flags))
        except sc.ScenarioError as e:
            raise sc.ScenarioError(f"campaign field 'scenarios.{i}' ({f}): {e}") from None
    names = [s.name for s in scenarios]
    if len(set(names)) != len(names):
        raise sc.ScenarioError("campaign field 'scenarios': two scenarios share a name")
    return spec, scenarios


def run(spec: CampaignSpec, scenarios: list, out: Path, spark_master: Optional[str] = None,
        observer=None) -> dict:
    from .runner import Session, campaign_outages

    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    root = Path(out) / f"{spec.name}-{stamp}"
    root.mkdir(parents=True, exist_ok=True)
    sessions = []
    by_session: list[tuple[str, list[dict]]] = []
    for s in scenarios:
        result = Session(s, root, spark_master=spark_master, observer=observer).run()
        sessions.append({"scenario": s.name, "dir": result.dir.name, "summary": result.summary})
        by_session.append((s.name, result.verdicts))
    # across every window of every session (each session's own block has its schedules)
    dist = campaign_outages([v for _, vs in by_session for v in vs], spark_master)
    write(root, sessions, dist)
    return {"dir": root, "sessions": sessions, "outages": dist, "verdicts": by_session}


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
    lines = [f"{'scenario':<36} {'runs':>4}  {'result':<7} {'acked loss':>10} {'duplicates':>10} {'reorder':>7}"]
    for s in sessions:
        su = s["summary"]
        k = {name: "{runs}/{of}".format(**(su.get("verdicts", {}).get(name) or {"runs": 0, "of": 0}))
             for name in ("acked loss", "duplicates", "reordering")}
        lines.append(f"{s['scenario']:<36} {su.get('runs', 0):>4}  {su.get('result', '?').upper():<7} "
                     f"{k['acked loss']:>10} {k['duplicates']:>10} {k['reordering']:>7}")
    return "\n".join(lines)
