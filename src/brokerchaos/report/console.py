"""What a person sees in the terminal: the seeds' result block per run and a summary table."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from ..analysis import policy

if TYPE_CHECKING:
    from ..analysis.verdicts import Verdict


def _ms(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:,.0f} ms" if x >= 10 else f"{x:.1f} ms"


def _lat(d: Optional[dict]) -> str:
    if not d:
        return "-"
    return f"p50 {d['p50']:.1f} / p99 {d['p99']:.1f} / p99.9 {d['p999']:.1f} / max {d['max']:.1f} ms"


def fault_lines(fault: dict) -> list[str]:
    if fault.get("action", "none") == "none":
        return []
    name = f"{fault['action']} {fault['target']}"
    windows = fault.get("windows") or []
    done = [w for w in windows if w.get("t_ms") is not None]
    if done:
        w = done[0]
        more = f"; {len(done)} windows" if len(done) > 1 else ""
        out = [f"Fault: {name} -> {w.get('label') or ', '.join(w['nodes'])}"
               f" (at ack {w.get('acks_at_effect')}, {w.get('delay_ms', 0):.1f} ms after the trigger{more})"]
        effect = {k: v for k, v in (w.get("effect") or {}).items() if k != "links_cut"}
        if effect:
            out.append("  effect: " + ", ".join(f"{k} {v}" for k, v in effect.items()))
        errors = [w.get("error") or w.get("heal_error") for w in windows if w.get("error") or w.get("heal_error")]
        if errors:
            out.append(f"  errors: {'; '.join(errors)}")
        return out
    if fault.get("nodes"):  # histories written before fault windows were recorded
        return [f"Fault: {name} -> {', '.join(fault['nodes'])} (at ack {fault.get('acks_at_effect')}, "
                f"{fault.get('delay_ms', 0):.1f} ms after the trigger)"]
    if fault.get("error"):
        return [f"Fault: {name} FAILED: {fault['error']}"]
    return [f"Fault: {name} never fired ({fault.get('why', 'trigger not reached')})"]


def run_block(v: Verdict, meta: Optional[dict] = None) -> str:
    meta = meta or {}
    lines = []
    for fault in meta.get("faults") or ([meta["fault"]] if meta.get("fault") else []):
        lines += fault_lines(fault)
    rows = _seed_rows(v) + _scoped_rows(v) + _timing_rows(v)
    if v.get("live_consumers"):
        rows.append(("Live consumers (observing)", f"{v['live_consumers']}: {v['live_recv_rows']:,} deliveries, "
                     f"{v['live_duplicates']:,} duplicates ({v['live_redeliveries']:,} redelivered), "
                     f"{v.get('live_read_status')}"))
    rows += _evidence_rows(v)
    if v.get("not_whole"):
        rows.append(("Downtime (fault to cluster whole)", "none: the cluster was not whole before the read"))
    elif v.get("downtime_s") is not None:
        rows.append(("Downtime (fault to cluster whole)", f"{v['downtime_s']:.1f} s"))
    if v.get("rx_downtime_s") is not None:
        rows.append(("Receiver gap in the fault", f"{v['rx_downtime_s']:.1f} s"))
    width = max(len(k) for k, _ in rows)
    lines += [f"{k + ':':<{width + 1}} {val}" for k, val in rows]
    if v["read_complete"] is False:
        lines.append(f"Read INCOMPLETE: {v['read_status']}  (missing messages are unproven, not lost)")
    if meta.get("write_stopped_early"):
        lines.append(f"Write phase stopped early: {meta['write_stopped_early']}")
    why = v.get("result_why") if v["result"] != "pass" else None
    lines.append(f"Result: {v['result'].upper()}" + (f"  ({'; '.join(why)})" if why else ""))
    return "\n".join(lines)


def _seed_rows(v: Verdict) -> list[tuple[str, object]]:
    """The seeds' own bookkeeping first (their programs' result block), ours beneath it."""
    rows = [
        ("Final send count", v["send_count"]),
        ("Final ack count", v["ack_count"]),
        ("Final positive ack count", v["pos_ack_count"]),
        ("Final negative ack count", v["neg_ack_count"]),
        ("Unknown outcome", v["unknown_count"]),
        ("Messages received", v["received"]),
        ("Acked messages missing", v["acked_missing"]),
    ]
    if v["acked_missing"]:
        rows.append(("  their position read holding another", v.get("acked_missing_overwritten", 0)))
    seed_rnoa = v.get("seed_received_no_ack", v["received_no_ack"])
    rows += [
        ("Non-acked messages received", seed_rnoa),
        ("  read any number of times", f"{v['received_no_ack']} (after a nack / after unknown: "
                                       f"{v['received_after_nack']} / {v['received_after_unknown']})"),
        ("Out-of-order", v["out_of_order"]),
        ("Duplicates", v["msgs_with_dups"]),
        ("  stored twice / redelivered", f"{v['stored_duplicates']} / {v['redeliveries']}"),
        ("JF / JB / DJF / DJB", f"{v['jf'] + v.get('jf0', 0)} / {v['jb']} / {v['djf']} / {v['djb']}"),
    ]
    if v.get("jf0"):
        rows.append(("  JF at a stream's first read", v["jf0"]))
    return rows + [("Stowaways", v["stowaways"])]


def _scoped_rows(v: Verdict) -> list[tuple[str, object]]:
    """The checks of what only some runs have (a consumer group, transactions, an
    exactly-once output), those this run has, from the policy's table: each with its figure
    and, where it is not a pass, its judgement."""
    rows = []
    for c in policy.CHECKS:
        if c.scope not in policy.SCOPED:
            continue
        judged = c.judge(v)
        if judged != policy.NA:
            rows.append((c.name[:1].upper() + c.name[1:], f"{c.count(v)}" + ("" if judged == policy.PASS
                                                                              else f" ({judged})")))
    return rows


def _timing_rows(v: Verdict) -> list[tuple[str, object]]:
    """Gaps, outages and latency (none under --no-timing)."""
    if not v.get("timing", True):
        return [("Gaps, outages, latency", "not computed (--no-timing)")]
    rows = [
        ("Longest ack gap", _ms(v["max_ack_gap_ms"])),
        ("Outage per fault",
         ", ".join("no ack after fault" if o is None else _ms(o) for o in v["fault_outages_ms"]) or "-"),
        ("Ack gap per fault",
         ", ".join("-" if o is None else _ms(o) for o in v.get("fault_ack_gaps_ms") or []) or "-"),
        ("Ack latency", _lat(v["ack_latency_ms"])),
    ]
    if v.get("e2e_latency_ms") is not None:
        rows.append(("End-to-end latency", _lat(v["e2e_latency_ms"])))
    if any(g is not None for g in v.get("fault_recv_gaps_ms") or []):
        rows.append(("Consumer gap per fault",
                     ", ".join("-" if g is None else _ms(g) for g in v["fault_recv_gaps_ms"])))
    return rows + _parts_rows(v)


def _evidence_rows(v: Verdict) -> list[tuple[str, str]]:
    """What the harness saw the faults do, whether the cluster was whole before the read, what
    the broker counted of its own drops, and the mechanisms the scenario requires (history
    format 1.9, 1.10)."""
    rows = []
    effects = v.get("effects") or []
    if effects:
        seen = [e for e in effects if e["state"] == "observed"]
        rows.append(("Fault effect", effects[0]["detail"] if len(effects) == 1 else
                     f"observed in {len(seen)} of {len(effects)} windows"
                     + "".join(f"; window {e['window']}: {e['detail']}" for e in effects if e["state"] != "observed")))
    if v.get("whole_detail"):
        rows.append(("Cluster before the read", v["whole_detail"]))
    if v.get("broker_drops"):
        rows.append(("Dropped, the broker counted", v["broker_drops"]))
    for m in v.get("mechanisms") or []:
        rows.append((f"Required: {m['name']}", ("occurred: " if m["occurred"] else "DID NOT OCCUR: ") + m["evidence"]))
    return rows


def summary_table(verdicts: list[Verdict], metas: dict[str, dict]) -> str:
    head = ["run", "fault on", "sent", "acked", "neg", "unk", "recv", "acked_missing", "dups", "ooo", "outage",
            "result"]
    body = []
    for v in verdicts:
        m = metas.get(v["run"]) or {}
        hit = sorted({n for f in (m.get("faults") or [m.get("fault") or {}])
                      for w in (f.get("windows") or [f]) for n in (w.get("nodes") or [])})
        outs = [o for o in v["fault_outages_ms"] if o is not None]
        body.append([
            v["run"], ",".join(hit) or "-", v["send_count"], v["pos_ack_count"],
            v["neg_ack_count"], v["unknown_count"], v["received"], v["acked_missing"],
            v["msgs_with_dups"], v["out_of_order"], _ms(max(outs)) if outs else "-", v["result"].upper(),
        ])
    cells = [head] + [[str(c) for c in r] for r in body]
    widths = [max(len(r[i]) for r in cells) for i in range(len(head))]
    out = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


def summary_lines(summary: dict) -> str:
    n = summary["results"]
    lines = [f"Session result: {summary['result'].upper()}  ({summary['runs']} runs: "
             f"{n['pass']} pass, {n['fail']} fail, {n['unknown']} unknown)"]
    width = max([18] + [len(name) for name in summary["verdicts"]])
    for name, s in summary["verdicts"].items():
        lo, hi = s["wilson95"]
        ci = "-" if lo is None else f"{100 * lo:.1f}%..{100 * hi:.1f}%"
        lines.append(f"  runs with {name:<{width}} {s['runs']:>5} of {s['of']:<5} (95% CI {ci})")
    if summary.get("incomplete_runs"):
        lines.append(f"  cut short (harness stopped during the run): {', '.join(summary['incomplete_runs'])}")
    lines += outage_lines(summary.get("outages"))
    return "\n".join(lines)


def soak_line(kept: dict[str, dict]) -> str:
    """A soak's progress: runs finished so far, and how often each verdict failed, with its
    95% Wilson interval."""
    from .files import summarize

    if not kept:
        return "Soak: no run finished yet"
    su = summarize(list(kept.values()))
    parts = []
    for name, s in su["verdicts"].items():
        lo, hi = s["wilson95"]
        ci = "-" if lo is None else f"{100 * lo:.1f}–{100 * hi:.1f}%"
        parts.append(f"{name} {s['runs']}/{s['of']} ({ci})")
    return f"Soak: {su['runs']} runs finished; " + "; ".join(parts)


def outage_lines(o: dict | None) -> list[str]:
    """The outage distributions of a session or campaign (summary.json's `outages`)."""
    if not o:
        return []
    out = []
    for side in ("producer", "consumer"):
        d = o.get(side) or {}
        if not d.get("count"):
            continue
        unended = f", {d['unended']} never ended" if d.get("unended") else ""
        out.append(f"  {side} outages ({d['count']} windows{unended}): p50 {_ms(d['p50'])} / p90 {_ms(d['p90'])} / "
                   f"p99 {_ms(d['p99'])} / max {_ms(d['max'])}")
    for name, steps in (o.get("schedules") or {}).items():
        near = [f"{s['step_ms']:g}:{s['outages']}" for s in steps if s["outages"]]
        if near:
            out.append(f"  producer outages near the {name} back-off steps (within ±{steps[0]['within_ms']:g} ms, "
                       f"and its jitter; ms:windows): {' '.join(near)}")
    return out


CONSOLE_TOPICS = 8  # topics given a line each


def _parts_rows(v: Verdict) -> list[tuple[str, str]]:
    """Each outage's parts (analysis/parts.py), and per topic its verdict and outages."""
    rows = []
    for i, p in enumerate(v.get("outage_parts") or [], 1):
        if p is not None:
            rows.append((f"Outage {i} in parts", _parts(p)))
    topics = list((v.get("topics") or {}).items())
    for t, x in topics[:CONSOLE_TOPICS]:
        outs = ", ".join("no ack after fault" if o is None else _ms(o) for o in x.get("fault_ack_gaps_ms") or [])
        parts = "; ".join(_parts(p) for p in x.get("outage_parts") or [] if p is not None)
        rows.append((f"Topic {t}", f"{x['result'].upper()}, acked missing {x['acked_missing']:,}, duplicated "
                     f"{x['msgs_with_dups']:,}, outage {outs or '-'}" + (f" ({parts})" if parts else "")))
    if len(topics) > CONSOLE_TOPICS:
        bad = [t for t, x in topics if x["result"] != "pass"]
        rows.append((f"{len(topics) - CONSOLE_TOPICS} more topics",
                     "see verdicts.json" + (f"; not passing: {', '.join(bad)}" if bad else "")))
    return rows


def _parts(p: dict) -> str:
    text = ", ".join(f"{k} {_ms(p[k + '_ms'])}" for k in ("detect", "serve", "reconnect", "resume")
                     if p[k + "_ms"] or k == "resume")
    return text + (f", from {_ms(p['starts_ms'])} after the fault" if p.get("starts_ms") else "")
