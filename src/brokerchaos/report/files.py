"""Session outputs written next to the histories: results.csv, session_table.csv,
jumps.csv, duplicates.csv, lost.csv, summary.json. The logs stream from Spark row by row,
so a run with millions of jumps neither fills memory nor gets truncated."""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Optional

from ..analysis import outages, policy
from ..analysis.metrics import Analysis
from . import session_table
from .stats import merge, wilson

SEED_COLUMNS = [
    ("DedupEnabled", None), ("TestRun", None), ("SendCount", "send_count"), ("AckCount", "ack_count"),
    ("PosAckCount", "pos_ack_count"), ("NegAckCount", "neg_ack_count"), ("Received", "received"),
    ("NotReceived", "acked_missing"), ("ReceivedNoAck", "seed_received_no_ack"), ("MsgsWithDups", "msgs_with_dups"),
    ("DJF", "djf"), ("DJB", "djb"), ("JF", "jf"), ("JB", "jb"),
]
EXTRA_COLUMNS = [
    "run", "result", "unknown_count", "stowaways", "missing", "acked_missing_overwritten", "received_no_ack", "jf0",
    "received_after_nack",
    "received_after_unknown", "duplicate_deliveries", "stored_duplicates", "redeliveries", "out_of_order",
    "read_complete", "max_ack_gap_ms", "max_recv_gap_ms", "fault_outages_ms", "fault_nodes", "ack_p50_ms",
    "ack_p99_ms", "ack_p999_ms", "ack_max_ms", "latency_exact", "e2e_p50_ms", "e2e_p99_ms", "e2e_max_ms",
    "fault_recv_gaps_ms", "live_consumers", "live_recv_rows", "live_duplicates", "live_redeliveries",
    "result_why",
]
# every figure a check of the policy reads is a column (the seed's, or one of ours)
EXTRA_COLUMNS += [c.key for c in policy.CHECKS
                  if c.key not in EXTRA_COLUMNS and c.key not in {k for _, k in SEED_COLUMNS}]


JUMP_NAMES = {"JF": "JUMP FORWARDS", "JF0": "JUMP FORWARDS", "JB": "JUMP BACKWARDS", "DJF": "DUPLICATE JUMP FORWARDS",
              "DJB": "DUPLICATE JUMP BACKWARDS"}
# the dedup seed's order_output.txt: a duplicate jump starts a block of messages read again
SEED_LOG_NAMES = {**JUMP_NAMES, "DJF": "DUPLICATE BLOCK - JUMP FORWARDS", "DJB": "DUPLICATE BLOCK - JUMP BACKWARDS"}


def load_metas(root: Path) -> dict[str, dict]:
    """run.json sidecars written by `brokerchaos run` (scenario, fault precision); optional."""
    metas = {}
    for p in sorted(root.rglob("run.json")):
        try:
            m = json.loads(p.read_text())
            metas[m["run"]] = m
        except (OSError, ValueError, KeyError):
            continue
    return metas


def _csv_row(i: int, v: dict, meta: dict) -> dict:
    dedup = (meta.get("scenario") or {}).get("workload", {}).get("dedup")
    row = {"DedupEnabled": "" if dedup is None else str(dedup).lower(), "TestRun": i}
    for col, key in SEED_COLUMNS[2:]:
        row[col] = v[key]
    # the seed's clients count a send that timed out as a negative ack: its AckCount and
    # NegAckCount include what we call unknown (kept apart in unknown_count and the JSON)
    row["NegAckCount"] = v["neg_ack_count"] + v.get("unknown_count", 0)
    # the seed's reader counts a jump forward at its first read unless that is the first value
    row["JF"] = v["jf"] + v.get("jf0", 0)
    row["AckCount"] = v["pos_ack_count"] + row["NegAckCount"]
    lat = v.get("ack_latency_ms") or {}
    row.update({k: v.get(k) for k in EXTRA_COLUMNS if k in v})
    row["fault_outages_ms"] = " ".join("none" if o is None else f"{o:.1f}" for o in v["fault_outages_ms"])
    row["fault_nodes"] = " ".join(f["node"] or "" for f in v["faults"])
    for p in ("p50", "p99", "p999", "max"):
        row[f"ack_{p}_ms"] = lat.get(p)
    e2e = v.get("e2e_latency_ms") or {}
    for p in ("p50", "p99", "max"):
        row[f"e2e_{p}_ms"] = e2e.get(p)
    row["fault_recv_gaps_ms"] = " ".join("none" if g is None else f"{g:.1f}" for g in v.get("fault_recv_gaps_ms") or [])
    row["result_why"] = "; ".join(v.get("result_why") or [])
    return row


def summarize(verdicts: list[dict]) -> dict:
    """The session's results, its totals, and each check's rate (analysis/policy.py)."""
    out = policy.rates(verdicts, wilson)
    totals = {}
    for key in ("send_count", "pos_ack_count", "neg_ack_count", "unknown_count", "received", "acked_missing",
                "acked_missing_overwritten", "missing", "received_no_ack", "msgs_with_dups", "duplicate_deliveries",
                "stored_duplicates", "redeliveries", "stowaways", "jf", "jb", "djf", "djb"):
        totals[key] = sum(v[key] for v in verdicts)
    results = {r: sum(1 for v in verdicts if v["result"] == r) for r in ("pass", "fail", "unknown")}
    return {"runs": len(verdicts), "result": merge([v["result"] for v in verdicts]), "results": results,
            "totals": totals, "verdicts": out}


def _skips(analysis: Analysis, out: Path) -> None:
    """skips.csv: each message a consumer group skipped, where the read found it stored and
    the first commit past it (analysis/groups.py)."""
    with open(out / "skips.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["run", "group", "producer", "value", "stored_at", "committed_past"])
        if analysis.skips is not None:
            for r in analysis.skips.orderBy("run", "group", "producer", "value").toLocalIterator():
                w.writerow([r["run"], r["group"], r["producer"], r["value"], r["stored_at"], r["committed_past"]])


def write_session(analysis: Analysis, out: Path, metas: Optional[dict] = None,
                  schedules: Optional[dict[str, list[float]]] = None, history=None,
                  extra: Optional[dict] = None) -> dict:
    """Every session output; `schedules` are the back-off steps the clients followed
    (runner.backoff_schedules), for the outage block of summary.json; `history` (the
    session's events) for the Pulsar seed's duplicates log; `extra`: facts of the session
    summary.json keeps beside the verdicts' (why it stopped early)."""
    out.mkdir(parents=True, exist_ok=True)
    metas = metas if metas is not None else load_metas(out)
    verdicts = analysis.verdicts
    cols = [c for c, _ in SEED_COLUMNS] + EXTRA_COLUMNS
    with open(out / "results.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for i, v in enumerate(verdicts, 1):
            w.writerow(_csv_row(i, v, metas.get(v["run"], {})))
    with open(out / "session_table.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow([c for c, _ in session_table.COLUMNS])
        for v in session_table.complete(verdicts):
            w.writerow(session_table.row(v))
    index = {v["run"]: i for i, v in enumerate(verdicts, 1)}
    with open(out / "jumps.csv", "w", newline="") as fh, open(out / "order_output.txt", "w") as order:
        w = csv.writer(fh)
        w.writerow(["run", "consumer", "producer", "class", "from", "to", "size", "line"])
        for r in analysis.jumps.orderBy("run", "consumer", "seq").toLocalIterator():
            w.writerow([r["run"], r["consumer"], r["producer"], r["class"], r["from_value"], r["to_value"], r["size"],
                        f"{r['to_value']} {JUMP_NAMES[r['class']]} {r['size']} ({r['from_value']} -> {r['to_value']})"])
            order.write(f"Test run: {index.get(r['run'], r['run'])} {SEED_LOG_NAMES[r['class']]} {r['size']} "
                        f"({r['from_value']} -> {r['to_value']})\n")
    with open(out / "duplicates.txt", "w") as fh:
        fh.write("run|last_msg_id|last_value|curr_msg_id|curr_value\n")
        # a Spark job only when some reader went back to what it had read
        if history is not None and any(v["djb"] for v in verdicts):
            from ..analysis.metrics import duplicate_returns

            for r in duplicate_returns(history, analysis.jumps).orderBy("run", "client", "seq").toLocalIterator():
                ids = ["" if x is None else x for x in (r["last_msg_id"], r["curr_msg_id"])]
                fh.write(f"{index.get(r['run'], r['run'])}|{ids[0]}|{r['last_value']}|{ids[1]}|{r['curr_value']}\n")
    with open(out / "duplicates.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["run", "producer", "value", "deliveries", "seen_at"])
        for r in analysis.duplicates.orderBy("run", "producer", "value").toLocalIterator():
            w.writerow([r["run"], r["producer"], r["value"], r["deliveries"], r["offsets"]])
    with open(out / "lost.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["run", "producer", "value", "acked_at", "acked_by", "first_ack_ms", "read_there"])
        if analysis.losses is not None:
            for r in analysis.losses.orderBy("run", "producer", "value").toLocalIterator():
                w.writerow([r["run"], r["producer"], r["value"], r["acked_at"], r["acked_by"],
                            r["first_ack_ns"] / 1e6, r["read_there"]])
    if any(v.get("groups") for v in verdicts):
        _skips(analysis, out)
    summary = summarize(verdicts)
    # runs the harness was killed in (a resumed soak): reported, whatever their history holds
    summary["incomplete_runs"] = sorted(r for r, m in metas.items() if m.get("status") == "incomplete")
    summary["outages"] = outages.summary(analysis.jumps.sparkSession, verdicts, schedules or {})
    summary.update(extra or {})
    (out / "summary.json").write_text(json.dumps({"summary": summary, "runs": verdicts}, indent=2, default=str))
    return summary
