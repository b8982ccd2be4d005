"""A run's verdict, put together from what each concern of the job returned (job.py, planned.py): the
counts, the ordering, the windows, latency and availability, the live consumers and the
session facts. No Spark here: every figure is already computed."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from ..history.schema import LEFT, read_finished
from .frames import MS
from .evidence import figures as evidence_figures
from .groups import GROUP_KEYS, Groups
from .job import Counts, Live, Plan, Rows
from .planned import Availability, FaultWindows, Latency, Ordering
from .latency import pct
from .parts import marks_of, split
from .policy import reasons, result_of
from .replicas import Replicas
from .transactions import EOS_NONE, TXN_KEYS
from .verdicts import COUNT_KEYS, JUMP_CLASSES, Verdict


@dataclass(frozen=True)
class Parts:
    """Everything the concerns found, for every run."""

    rows: Rows
    counts: Counts
    live: Live
    plan: Plan
    ordering: Ordering
    windows: FaultWindows
    latency: Optional[Latency]  # None with timing off
    availability: Optional[Availability]
    facts: dict[str, dict]
    groups: Groups = Groups()
    group_outages: dict = field(default_factory=dict)  # (run, group, window index) -> ns
    txns: dict = field(default_factory=dict)  # per run with transactions, its TXN_KEYS
    replicas: Replicas = Replicas({})  # per run that read its replicas one by one, their figures

    @property
    def latency_exact(self) -> bool:
        return self.latency.exact if self.latency is not None else self.plan.exact


def verdict(p: Parts, run: str, position: int) -> Verdict:
    """Every figure of one run, and its result by the policy."""
    f = p.counts.frames[run]
    v: dict[str, Any] = {"run": run, **_counts(p, run), **_read(p, run)}
    run_windows = p.windows.of_run(run)
    v.update(_timing(p, run, run_windows))
    # a steady rate's sends that went out late (the producer was held back: in-flight
    # bound, stalled client), and the longest lag; null without a rate
    lagged = p.plan.timing and f["lag"] is not None
    v["late_sends"] = int(f["late"]) if lagged else None
    v["max_send_lag_ms"] = f["lag"] / MS if lagged else None
    v.update(_live(p, run))
    v.update(_groups(p, run, [i for _, i, *_ in run_windows]))
    v.update(_end_check(p, run))
    v.update({**dict.fromkeys(TXN_KEYS, 0), **EOS_NONE, **p.txns.get(run, {})})
    v.update(p.replicas.of(run))
    v["latency_exact"] = p.latency_exact
    v["timing"] = p.plan.timing
    v["topics"] = {}  # a run of several topics: each one's verdicts (topics.py attaches them)
    v.update(evidence_figures(p.rows.evidence.get(run, []), v))
    v["result"] = result_of(v)
    v["result_why"] = reasons(v)
    v["facts"] = _facts(p, run, position, run_windows)
    return v


def _counts(p: Parts, run: str) -> dict[str, Any]:
    m = p.counts.msgs.get(run, {})
    v = {k: int(m.get(k) or 0) for k in COUNT_KEYS}
    v["acked_missing_overwritten"] = int(m.get("acked_missing_overwritten") or 0)
    v["ack_count"] = v["pos_ack_count"] + v["neg_ack_count"]
    jc = p.ordering.per_run.get(run, {})
    for k in JUMP_CLASSES:
        v[k.lower()] = int(jc.get(k.lower()) or 0)
    v["out_of_order"] = v["jb"]
    return v


def _read(p: Parts, run: str) -> dict[str, Any]:
    ends = p.rows.read_ends.get(run)
    return {"read_complete": None if not ends else all(read_finished(e) for e in ends),
            "read_status": None if not ends else "; ".join(sorted(set(ends))),
            "recv_rows": int(p.counts.frames[run]["recv_rows"])}


def _ms(x: Optional[int]) -> Optional[float]:
    return None if x is None else x / MS


def _timing(p: Parts, run: str, run_windows: list) -> dict[str, Any]:
    """Gaps, each window's outage and gaps, latency (None everywhere with timing off)."""
    a = p.availability or Availability({}, {}, {})
    lat = (p.latency.per_run if p.latency is not None else {}).get(run) or {}
    idx = [i for _, i, *_ in run_windows]
    return {
        "max_ack_gap_ms": _ms(a.max_ack_gap.get(run)),
        "max_recv_gap_ms": _ms(a.max_recv_gap.get(run)),
        "faults": [{"t_ms": tf / MS, "until_ms": te / MS, "node": node, "detail": detail, "window": wid}
                   for _, _, tf, te, node, detail, wid in run_windows],
        "fault_outages_ms": [_ms(a.outages.get((run, i))) for i in idx],
        # each outage (its ack-free interval) in parts (parts.py) that add up to it; a run of several topics
        # has them per topic (its own outage is over every topic's acks)
        "outage_parts": [None if run in p.rows.topics else
                         split(tf, a.outages.get((run, i)), marks_of(p.rows.marks, run, wid, tf),
                               a.ack_gaps.get((run, i)))
                         for _, i, tf, _, _, _, wid in run_windows],
        "fault_ack_gaps_ms": [_ms(a.ack_gaps.get((run, i))) for i in idx],
        "fault_recv_gaps_ms": [_ms(a.recv_gaps.get((run, i))) for i in idx],
        "ack_latency_ms": pct(lat.get("_ack_p"), lat.get("_ack_max")),
        "e2e_latency_ms": pct(lat.get("_e2e_p"), lat.get("_e2e_max")) if run in p.plan.live_runs else None,
    }


def _live(p: Parts, run: str) -> dict[str, Any]:
    live = p.live.per_run.get(run, {})
    ends = p.rows.live_ends.get(run)
    return {"live_consumers": p.rows.observers.get(run, 0), "live_recv_rows": int(live.get("rows") or 0),
            "live_duplicates": int(live.get("duplicates") or 0),
            "live_redeliveries": int(live.get("redeliveries") or 0),
            "live_read_status": None if not ends else "; ".join(sorted(set(ends)))}


def _groups(p: Parts, run: str, idx: list[int]) -> dict[str, Any]:
    """The consumer groups' figures (groups.py), summed over the run's groups and per group;
    a group's read finished when each of its members' did (those that left aside); its outage per fault window (None
    where no partition had a delivery after the fault, or with timing off), and the run's:
    the longest of its groups'."""
    per = {g: dict(x) for g, x in p.groups.of_run(run).items()}
    timing = p.plan.timing
    for g, x in per.items():
        ends = [e for e in p.rows.group_ends.get((run, g)) or [] if e != LEFT]  # who left speaks for nobody
        x["read_complete"] = None if not ends else all(read_finished(e) for e in ends)
        x["read_status"] = None if not ends else "; ".join(sorted(set(ends)))
        x["outages_ms"] = [_ms(p.group_outages.get((run, g, i))) if timing else None for i in idx]
    out: dict[str, Any] = {k: sum(x[k] for x in per.values()) for k in GROUP_KEYS}
    out["group_outage_ms"] = [max((x["outages_ms"][j] for x in per.values() if x["outages_ms"][j] is not None),
                                  default=None) for j in range(len(idx))] if per else []
    done = [x["read_complete"] for x in per.values()]
    out["groups"] = len(per)
    out["group_read_complete"] = None if not per or None in done else all(done)
    out["consumer_groups"] = per
    return out


def _end_check(p: Parts, run: str) -> dict[str, Any]:
    """The cluster's own account of its copies after the run (the last `check` row): how
    many stored units were short of copies (None: no check, or it could not be asked)."""
    row = p.rows.checks.get(run)
    return {"under_replicated": None if row is None or row["value"] is None else int(row["value"]),
            "end_check": None if row is None else row["detail"]}


def _facts(p: Parts, run: str, position: int, run_windows: list) -> dict[str, Any]:
    """What the VerneMQ seed's per-run table is computed from (report/session_table.py):
    where the transmitter and receiver were at the first fault (else at their first
    event), and the times that bound the run and its first fault."""
    f, facts = p.counts.frames[run], p.facts.get(run, {})
    first = run_windows[0] if run_windows else None
    return {
        "position": position,
        "t_first_send": f.get("t_first_send"),
        "t_last_ack": f.get("t_last_ack"),
        "t_fault": first[2] if first else None,
        "fault_nodes": first[4] if first else None,
        "t_ready": facts.get("t_ready") if first else None,
        "txm": (facts.get("txm_f") or facts.get("txm_0")) if first else facts.get("txm_0"),
        "rxm": (facts.get("rxm_f") or facts.get("rxm_0")) if first else facts.get("rxm_0"),
        "rx_down_ns": facts.get("rx_down"),
    }
