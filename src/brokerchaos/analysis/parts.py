"""Each outage taken apart: where the time from a fault to the ack that ended its outage
went. Three marks may fall inside it:

- `detect`: the roles' first answer about the topic that differs from the one before the
  fault (the nemesis's `owner` row `changed: …`: another owner, or none);
- `serve`: the first answer after it with the topic served again (`owner` row `serving`);
- `reconnect`: the client library's own reconnect (its `reconnect` row, format 1.2).

The outage taken apart is the window's longest ack-free interval, from the fault on (or
from where it began, if later). The marks seen are put in time order, and the time up to
each is its part: the wait for the cluster to notice, for the new owner, for the client;
from the last mark to the first ack that ended the outage is `resume`. The parts add up to
the outage by construction. A
mark the history lacks (the roles were not watched, the library has no reconnect
callback, the answer never changed) is named in `unseen`, its part 0. A mark up to LATE_NS
after the outage's end counts at the end (a look at the roles is timed from when it was
asked, and answers within a second: faults/owners.py); a later one belongs to something
after this outage (a leader moved back when its node returned) and is named in `after`.
"""
from __future__ import annotations

from typing import Optional

PARTS = ("detect", "serve", "reconnect", "resume")
LATE_NS = 500_000_000


def marks_of(rows: list[dict], run: str, window: Optional[int], t_fault_ns: int) -> dict[str, Optional[int]]:
    """The first time of each mark in `rows` (owner and reconnect rows of the analysis) for
    one run's fault window: owner rows of that window, reconnect rows after the fault."""
    own = [r for r in rows if r["run"] == run]
    first = {}
    for name, pick in (("detect", lambda r: r["type"] == "owner" and (r["detail"] or "").startswith("changed")),
                       ("serve", lambda r: r["type"] == "owner" and (r["detail"] or "").startswith("serving"))):
        ts = [r["t_ns"] for r in own if pick(r) and r["window"] == window]
        first[name] = min(ts) if ts else None
    ts = [r["t_ns"] for r in own if r["type"] == "reconnect" and r["t_ns"] >= t_fault_ns]
    first["reconnect"] = min(ts) if ts else None
    return first


def split(t_fault_ns: int, outage_ns: Optional[int], marks: dict[str, Optional[int]],
          gap_ns: Optional[int] = None) -> Optional[dict]:
    """The parts of one outage (ms) that add up to it; None for an outage that never ended.

    `outage_ns` runs from the fault to the ack that ended the window's longest ack-free
    interval; `gap_ns` is that interval counted from the fault on (fault_ack_gaps_ms, the
    outage of summary.json's distributions). The parts take apart the interval: where it
    began after the fault (acks went on for a while: a lame-duck server handing over
    before it sheds its clients, or no real disruption and the longest gap a blip late in
    a long window), the time before it is no outage (`starts_ms` says how long), and a
    mark before it (`before`) takes no part of it."""
    if outage_ns is None:
        return None
    end = t_fault_ns + outage_ns
    start = prev = end - min(outage_ns, gap_ns if gap_ns is not None else outage_ns)
    out: dict = {f"{p}_ms": 0.0 for p in PARTS}
    seen = sorted((m, name) for name, m in marks.items() if m is not None and m <= end + LATE_NS)
    for m, name in seen:
        at = min(max(m, prev), end)
        out[f"{name}_ms"] += (at - prev) / 1e6
        prev = at
    out["resume_ms"] = (end - prev) / 1e6
    out["outage_ms"] = (end - start) / 1e6
    out["starts_ms"] = (start - t_fault_ns) / 1e6
    out["before"] = [name for m, name in seen if m < start]
    out["order"] = [name for _, name in seen]
    out["unseen"] = [p for p in PARTS[:-1] if marks.get(p) is None]
    out["after"] = [name for name, m in marks.items() if m is not None and m > end + LATE_NS]
    out["dominant"] = max(PARTS, key=lambda p: out[f"{p}_ms"])
    return out
