"""The evidence that a run tested what it names (history format 1.9), as verdict figures:
each fault window's effect as the harness saw it (`effect` rows), the cluster whole before the
read (`whole`), and the mechanisms the scenario requires (`mechanism` rows; those the run
leaves to the analysis judged here from the messages' own figures); and what the broker
counted of its own drops (`drops`, 1.10). No Spark: a handful of rows, collected with the
other rows that are not messages (job.other_rows)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from ..history.schema import DROPS, EFFECT, EFFECT_STATES, MECHANISM, WHOLE

if TYPE_CHECKING:
    from .verdicts import Verdict

OBSERVED, NOT_KNOWN = EFFECT_STATES[0], EFFECT_STATES[-1]
# a required mechanism whose row leaves it to the analysis: the verdict figure that shows it
MECHANISM_FIGURES = {"duplicates": "msgs_with_dups", "unknown-outcomes": "unknown_count"}


def state_of(detail: Optional[str]) -> str:
    """An effect row's state: the first words of its detail (`not observed: kill leader: …`)."""
    head = (detail or "").split(":", 1)[0]
    return head if head in EFFECT_STATES else NOT_KNOWN


def figures(rows: list[dict], counts: dict[str, Any]) -> dict[str, Any]:
    """The evidence figures of one run from its evidence rows (time order) and its counts."""
    effects = [{"window": r["window"], "node": r["node"], "state": state_of(r["detail"]), "detail": r["detail"]}
               for r in rows if r["type"] == EFFECT]
    whole = [r for r in rows if r["type"] == WHOLE]
    mechanisms = [_mechanism(r, counts) for r in rows if r["type"] == MECHANISM]
    drops = [r for r in rows if r["type"] == DROPS]
    return {
        "effects": effects,
        "faults_not_in_effect": sum(e["state"] not in (OBSERVED, NOT_KNOWN) for e in effects) if effects else None,
        "effects_not_known": sum(e["state"] == NOT_KNOWN for e in effects) if effects else None,
        # a row whose value is null says the cluster could not be asked: not shown whole
        "not_whole": None if not whole else (1 if whole[-1]["value"] is None else int(whole[-1]["value"])),
        "whole_detail": whole[-1]["detail"] if whole else None,
        "mechanisms": mechanisms,
        "mechanisms_missing": sum(not m["occurred"] for m in mechanisms) if mechanisms else None,
        # what the broker counted of its own drops over the run (format 1.10): not evidence of
        # the fault, but of where a loss went
        "broker_dropped": None if not drops or drops[-1]["value"] is None else int(drops[-1]["value"]),
        "broker_drops": drops[-1]["detail"] if drops else None,
    }


def _mechanism(r: dict, counts: dict[str, Any]) -> dict:
    name, _, evidence = (r["detail"] or "").partition(": ")
    if r["value"] is not None:
        return {"name": name, "occurred": bool(r["value"]), "evidence": evidence}
    key = MECHANISM_FIGURES.get(name)
    if key is None:
        return {"name": name, "occurred": False, "evidence": "no figure of the analysis shows it"}
    n = int(counts.get(key) or 0)
    return {"name": name, "occurred": n > 0, "evidence": f"{key} {n}"}


def words(v: Verdict) -> dict[str, str]:
    """What each evidence figure that is short says, in words (the result's reasons)."""
    out = {}
    bad = [e for e in v.get("effects") or [] if e["state"] not in (OBSERVED, NOT_KNOWN)]
    if bad:
        out["faults_not_in_effect"] = "; ".join(f"window {e['window']}: {e['detail']}" for e in bad)
    if v.get("not_whole"):
        out["not_whole"] = v.get("whole_detail") or "not whole"
    missing = [m for m in v.get("mechanisms") or [] if not m["occurred"]]
    if missing:
        out["mechanisms_missing"] = "the mechanism under test did not occur: " + "; ".join(
            f"{m['name']} ({m['evidence']})" for m in missing)
    return out
