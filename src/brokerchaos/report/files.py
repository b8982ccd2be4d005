"""Session outputs written next to the histories: results.csv, session_table.csv,
jumps.csv, duplicates.csv, lost.csv, summary.json. The logs stream from Spark row by row,
so a run with millions of jumps neither fills memory nor gets truncated."""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from ..analysis import outages, policy
from ..analysis.verdicts import TOTAL, shown
from ..analysis.metrics import Analysis
from . import session_table
from .stats import merge, wilson

if TYPE_CHECKING:
    from ..analysis.verdicts import Verdict

SEED_COLUMNS = [
    ("DedupEnabled", None), ("TestRun", None), ("SendCount", "send_count"), ("AckCount", "ack_count"),
    ("PosAckCount", "pos_ack_count"), ("NegAckCount", "neg_ack_count"), ("Received", "received"),
    ("NotReceived", "acked_missing"), ("ReceivedNoAck", "seed_received_no_ack"), ("MsgsWithDups", "msgs_with_dups"),
    ("DJF", "djf"), ("DJB", "djb"), ("JF", "jf"), ("JB", "jb"),
]
# ours, after the seed's: (column, what it holds); docs/history-format.md defines each figure
EXTRA = (
    ("run", "the run's id"), ("result", "pass, fail or unknown (the policy: reference/verdicts.md)"),
    ("unknown_count", "sends whose outcome the client never learned"),
    ("stowaways", "messages read that no producer of the run sent"),
    ("missing", "messages sent and never read, whatever their outcome"),
    ("acked_missing_overwritten", "acked messages missing whose position the read found holding another"),
    ("received_no_ack", "messages read that were not acked, any number of times"),
    ("jf0", "jumps forwards at a stream's first read"), ("received_after_nack", "messages read after a nack"),
    ("received_after_unknown", "messages read whose outcome was unknown"),
    ("duplicate_deliveries", "deliveries beyond the first"),
    ("stored_duplicates", "messages stored twice (two offsets)"), ("redeliveries", "messages delivered again"),
    ("out_of_order", "messages read out of order"), ("read_complete", "the read finished"),
    ("max_ack_gap_ms", "the longest time without an ack"), ("max_recv_gap_ms", "the longest time without a read"),
    ("fault_outages_ms", "per fault window, from the fault to the next ack"),
    ("fault_nodes", "the nodes each window hit"), ("ack_p50_ms", "ack latency, median"),
    ("ack_p99_ms", "ack latency, 99th percentile"), ("ack_p999_ms", "ack latency, 99.9th percentile"),
    ("ack_max_ms", "ack latency, longest"), ("latency_exact", "the percentiles are exact (else approximate)"),
    ("e2e_p50_ms", "send to live delivery, median"), ("e2e_p99_ms", "send to live delivery, 99th percentile"),
    ("e2e_max_ms", "send to live delivery, longest"),
    ("fault_recv_gaps_ms", "per fault window, the live consumers' longest gap from the fault on"),
    ("live_consumers", "live consumers reading through the write"),
    ("live_recv_rows", "their deliveries"), ("live_duplicates", "their deliveries beyond the first"),
    ("live_redeliveries", "their messages delivered again"), ("result_why", "why the result is not a pass"),
)
EXTRA_COLUMNS = [c for c, _ in EXTRA]
# every figure a check of the policy reads is a column (the seed's, or one of ours)
EXTRA_COLUMNS += [c.key for c in policy.CHECKS
                  if c.key not in EXTRA_COLUMNS and c.key not in {k for _, k in SEED_COLUMNS}]


# each log the session writes as CSV: its columns and what each holds (the reference page
# reference/outputs.md is generated from these: docsite.outputs_page)
JUMPS_COLUMNS = (
    ("run", "the run"), ("consumer", "the reader (client) that saw the jump"),
    ("producer", "the producer whose sequence jumped"),
    ("class", "JF, JB, DJF or DJB (JF0: a jump forwards at a stream's first read); docs/history-format.md"),
    ("from", "the value read before it"), ("to", "the value read"), ("size", "the jump's size, as the seeds count it"),
    ("line", "the seed's own log line for it (order_output.txt: the same, numbered by run)"))
DUPLICATES_COLUMNS = (
    ("run", "the run"), ("producer", "the producer"), ("value", "the message (its sequence number)"),
    ("deliveries", "how many times the reads got it"), ("seen_at", "the offsets or positions it was read at"))
LOST_COLUMNS = (
    ("run", "the run"), ("producer", "the producer"), ("value", "the acknowledged message the read never found"),
    ("acked_at", "the offset or position its ack named"), ("acked_by", "the node that acked it"),
    ("first_ack_ms", "its first ack, ms after the run's origin"),
    ("read_there", "what the read found at that position (another message: overwritten), if anything"))
SKIPS_COLUMNS = (
    ("run", "the run"), ("group", "the consumer group"), ("producer", "the producer"),
    ("value", "the message no member processed"), ("stored_at", "where the read found it stored"),
    ("committed_past", "the first commit of its partition past it"))
DIVERGENCE_COLUMNS = (
    ("run", "the run"),
    ("kind", "`position`: two replicas hold different messages there; `acked on some`: an acked message some "
             "replicas hold and others do not; `acked on none`: an acked message on no replica"),
    ("partition", "the partition (empty: a stream of one)"), ("offset", "the position in the replicas' copies"),
    ("producer", "the producer (empty for a position)"), ("value", "the message (empty for a position)"),
    ("nodes", "the replicas holding it (for a position: each replica and the message it holds there)"),
    ("missing_on", "the replicas whose finished read did not have it"))
CSV_LOGS = {"jumps.csv": JUMPS_COLUMNS, "duplicates.csv": DUPLICATES_COLUMNS, "lost.csv": LOST_COLUMNS,
            "skips.csv": SKIPS_COLUMNS, "divergence.csv": DIVERGENCE_COLUMNS}


def _header(columns: tuple) -> list[str]:
    return [c for c, _ in columns]


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


def _csv_row(i: int, v: Verdict, meta: dict) -> dict:
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


# the figures summary.json sums over the session's runs (`totals`): those the verdict marks TOTAL
TOTALS = shown(TOTAL)


def summarize(verdicts: list[Verdict]) -> dict:
    """The session's results, its totals, and each check's rate (analysis/policy.py)."""
    out = policy.rates(verdicts, wilson)
    totals = {key: sum(v[key] for v in verdicts) for key in TOTALS}
    results = {r: sum(1 for v in verdicts if v["result"] == r) for r in ("pass", "fail", "unknown")}
    return {"runs": len(verdicts), "result": merge([v["result"] for v in verdicts]), "results": results,
            "totals": totals, "verdicts": out}


def _skips(analysis: Analysis, out: Path) -> None:
    """skips.csv: each message a consumer group skipped, where the read found it stored and
    the first commit past it (analysis/groups.py)."""
    with open(out / "skips.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(_header(SKIPS_COLUMNS))
        if analysis.skips is not None:
            for r in analysis.skips.orderBy("run", "group", "producer", "value").toLocalIterator():
                w.writerow([r["run"], r["group"], r["producer"], r["value"], r["stored_at"], r["committed_past"]])


def _results(verdicts: list[Verdict], metas: dict, out: Path) -> None:
    """results.csv (the seeds' columns, then ours) and session_table.csv."""
    cols = [c for c, _ in SEED_COLUMNS] + EXTRA_COLUMNS
    with open(out / "results.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for i, v in enumerate(verdicts, 1):
            w.writerow(_csv_row(i, v, metas.get(v["run"], {})))
    with open(out / "session_table.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow([c for c, _ in session_table.COLUMNS])
        for v in verdicts:
            w.writerow(session_table.row(v))


def _jumps(analysis: Analysis, index: dict, out: Path) -> None:
    """jumps.csv, and order_output.txt in the seed's own words."""
    with open(out / "jumps.csv", "w", newline="") as fh, open(out / "order_output.txt", "w") as order:
        w = csv.writer(fh)
        w.writerow(_header(JUMPS_COLUMNS))
        for r in analysis.jumps.orderBy("run", "consumer", "seq").toLocalIterator():
            w.writerow([r["run"], r["consumer"], r["producer"], r["class"], r["from_value"], r["to_value"], r["size"],
                        f"{r['to_value']} {JUMP_NAMES[r['class']]} {r['size']} ({r['from_value']} -> {r['to_value']})"])
            order.write(f"Test run: {index.get(r['run'], r['run'])} {SEED_LOG_NAMES[r['class']]} {r['size']} "
                        f"({r['from_value']} -> {r['to_value']})\n")


def _duplicates(analysis: Analysis, index: dict, history, out: Path) -> None:
    """duplicates.txt (the Pulsar seed's log of a reader going back) and duplicates.csv."""
    with open(out / "duplicates.txt", "w") as fh:
        fh.write("run|last_msg_id|last_value|curr_msg_id|curr_value\n")
        # a Spark job only when some reader went back to what it had read
        if history is not None and any(v["djb"] for v in analysis.verdicts):
            from ..analysis.metrics import duplicate_returns

            for r in duplicate_returns(history, analysis.jumps).orderBy("run", "client", "seq").toLocalIterator():
                ids = ["" if x is None else x for x in (r["last_msg_id"], r["curr_msg_id"])]
                fh.write(f"{index.get(r['run'], r['run'])}|{ids[0]}|{r['last_value']}|{ids[1]}|{r['curr_value']}\n")
    with open(out / "duplicates.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(_header(DUPLICATES_COLUMNS))
        for r in analysis.duplicates.orderBy("run", "producer", "value").toLocalIterator():
            w.writerow([r["run"], r["producer"], r["value"], r["deliveries"], r["offsets"]])


def _lost(analysis: Analysis, out: Path) -> None:
    with open(out / "lost.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(_header(LOST_COLUMNS))
        if analysis.losses is not None:
            for r in analysis.losses.orderBy("run", "producer", "value").toLocalIterator():
                w.writerow([r["run"], r["producer"], r["value"], r["acked_at"], r["acked_by"],
                            r["first_ack_ns"] / 1e6, r["read_there"]])


def _divergence(log, out: Path) -> None:
    """divergence.csv: the runs that read their replicas one by one, what the copies disagree on."""
    with open(out / "divergence.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(_header(DIVERGENCE_COLUMNS))
        for r in log.orderBy("run", "kind", "partition", "producer", "value", "offset").toLocalIterator():
            w.writerow([r[c] for c, _ in DIVERGENCE_COLUMNS])


def write_session(analysis: Analysis, out: Path, metas: Optional[dict] = None,
                  schedules: Optional[dict[str, list[outages.Step]]] = None, history=None,
                  extra: Optional[dict] = None) -> dict:
    """Every session output; `schedules` are the back-off steps the clients followed
    (runner.backoff_schedules), for the outage block of summary.json; `history` (the
    session's events) for the Pulsar seed's duplicates log; `extra`: facts of the session
    summary.json keeps beside the verdicts' (why it stopped early)."""
    out.mkdir(parents=True, exist_ok=True)
    metas = metas if metas is not None else load_metas(out)
    verdicts = session_table.complete(analysis.verdicts)  # summary.json's runs keep the table's columns
    _results(verdicts, metas, out)
    index = {v["run"]: i for i, v in enumerate(verdicts, 1)}
    _jumps(analysis, index, out)
    _duplicates(analysis, index, history, out)
    _lost(analysis, out)
    if any(v.get("groups") for v in verdicts):
        _skips(analysis, out)
    if getattr(analysis, "divergence", None) is not None:
        _divergence(analysis.divergence, out)
    summary = summarize(verdicts)
    # runs the harness was killed in (a resumed soak): reported, whatever their history holds
    summary["incomplete_runs"] = sorted(r for r, m in metas.items() if m.get("status") == "incomplete")
    summary["outages"] = outages.summary(analysis.jumps.sparkSession, verdicts, schedules or {})
    summary.update(extra or {})
    (out / "summary.json").write_text(json.dumps({"summary": summary, "runs": verdicts}, indent=2, default=str))
    return summary
