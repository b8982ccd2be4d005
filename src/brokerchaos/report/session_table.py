"""The VerneMQ seed's per-run table (Seq_ix … Rxm), from the facts the analysis gives.

Presentation, not analysis: each column is a difference of two times or a node the
analysis found (docs/history-format.md defines them). `complete()` gives the verdicts with
the columns beside their own (copies: the analysis's are left as they are), in seconds; None
where a column does not apply or never ended (NA in the CSV).
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from ..analysis.verdicts import Verdict

# (CSV header, verdict key)
COLUMNS = [
    ("Run", "run"), ("Seq_ix", "seq_ix"), ("Killed node", "killed_node"), ("Stowaways", "stowaways"),
    ("Admitted", "received"), ("Duplicates", "duplicate_deliveries"), ("Missing", "missing"),
    ("Runtime", "runtime_s"), ("Txtime", "txtime_s"), ("Gaptime", "gaptime_s"), ("Downtime", "downtime_s"),
    ("tx_downtime", "tx_downtime_s"), ("rx_downtime", "rx_downtime_s"), ("Rx error", "rx_error"), ("Txm", "txm"),
    ("Rxm", "rxm"),
]


def rx_error(v: Verdict) -> Optional[str]:
    """The receiver's error, `nil` when it had none (the seed's Erlang client's word): the
    live consumers' read when there were any (they received through the fault, as the
    seed's Rx did), else the reader's. None when no read recorded how it ended."""
    status = v.get("live_read_status") or v.get("read_status")
    if status is None:
        return None
    errors = [s.split(":", 1)[1].strip() if s.startswith("incomplete:") else s
              for s in status.split("; ") if s != "complete" and not s.startswith("complete:")]
    return "; ".join(errors) or "nil"


def columns(v: Verdict) -> dict[str, Any]:
    """The table's own columns for one verdict."""
    f = v["facts"]
    digits = re.search(r"(\d+)$", v["run"])
    killed = f["fault_nodes"]

    def sec(a: Optional[int], b: Optional[int]) -> Optional[float]:
        return None if a is None or b is None else (b - a) / 1e9

    # a cluster not whole before the read was never whole again: a "ready" of one fault's
    # heal (the stream served) is no end of the downtime
    ready = None if v.get("not_whole") else f["t_ready"]
    hit = set(re.split(r"[,|]", killed)) if killed else set()
    outages = v["fault_outages_ms"]
    tx_down = None
    if f["txm"] is not None and f["txm"] in hit and outages and outages[0] is not None:
        tx_down = outages[0] / 1e3
    return {
        "seq_ix": int(digits.group(1)) if digits else f["position"],
        "killed_node": killed,
        "runtime_s": sec(f["t_first_send"], ready),
        "txtime_s": sec(f["t_first_send"], f["t_last_ack"]),
        "gaptime_s": sec(f["t_fault"], f["t_last_ack"]),
        "downtime_s": sec(f["t_fault"], ready),
        "tx_downtime_s": tx_down,
        "rx_downtime_s": None if f["rx_down_ns"] is None else f["rx_down_ns"] / 1e9,
        "rx_error": rx_error(v),
        "txm": f["txm"],
        "rxm": f["rxm"],
    }


def complete(verdicts: list[Verdict]) -> list[Verdict]:
    """Each verdict with the table's columns beside its own, a new dict."""
    return [{**v, **columns(v)} for v in verdicts]


def row(v: Verdict) -> list:
    """One verdict's row of the table (its columns computed when it has none yet)."""
    if "seq_ix" not in v:
        v = {**v, **columns(v)}
    out = []
    for _, key in COLUMNS:
        x = v.get(key)
        out.append("NA" if x is None else round(x, 3) if isinstance(x, float) else x)
    return out
