"""Outage distributions across the fault windows of a session or a campaign.

One window gives one producer outage (its longest ack-free interval, from the fault on:
`fault_ack_gaps_ms`) and, where a consumer read during it, one consumer outage
(`fault_recv_gaps_ms`). Across hundreds of windows their distribution shows what one
longest gap hides: steps at the client's reconnect and resend back-off (the Pulsar
availability seed's 100, 300, 700, 1500 ms). The per-window figures come from the
histories (metrics.py); the distributions are two small Spark aggregations over them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Optional, Union

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from .frames import local_table
from .parts import PARTS

if TYPE_CHECKING:
    from .verdicts import Verdict

BUCKET_MS = 100  # histogram buckets: fine enough to show the back-off's steps
STEP_TOLERANCE_MS = 50.0
QUANTILES = (0.5, 0.9, 0.99)


def distribution(spark: SparkSession, values: Iterable[Optional[float]]) -> dict:
    """count, the windows whose outage never ended (`unended`, null values), exact
    p50/p90/p99 (linear interpolation between ranks, as numpy), max, and a histogram of
    `BUCKET_MS` buckets ([lower bound ms, windows], empty buckets left out)."""
    return distributions(spark, {"": values})[""]


def _empty(vals: list) -> dict:
    return {"windows": len(vals), "unended": sum(1 for v in vals if v is None), "count": 0,
            "p50": None, "p90": None, "p99": None, "max": None, "bucket_ms": BUCKET_MS, "histogram": []}


def distributions(spark: SparkSession, series: dict[str, Iterable[Optional[float]]]) -> dict[str, dict]:
    """distribution() of each named series, all in two Spark jobs (one for the figures, one
    for the histograms): a session's summary has a dozen series of a few values each, and
    two jobs for each of them were ~5 s of every session's end."""
    lists = {name: list(vals) for name, vals in series.items()}
    out = {name: _empty(vals) for name, vals in lists.items()}
    rows = [(name, float(v)) for name, vals in lists.items() for v in vals if v is not None]
    if not rows:
        return out
    df = local_table(spark, rows, "name string, ms double")
    # percentile (not percentile_approx): exact, and these are a few thousand rows at most
    stats = df.groupBy("name").agg(F.count("ms").alias("n"), F.percentile("ms", list(QUANTILES)).alias("q"),
                                   F.max("ms").alias("mx")).collect()
    for r in stats:
        out[r["name"]].update(count=r["n"], max=r["mx"],
                              **{f"p{round(q * 100)}": x for q, x in zip(QUANTILES, r["q"])})
    hist = (df.groupBy("name", (F.floor(F.col("ms") / BUCKET_MS) * BUCKET_MS).cast("long").alias("lo"))
            .count().orderBy("name", "lo").collect())
    for r in hist:
        out[r["name"]]["histogram"].append([r["lo"], r["count"]])
    return out


def resend_steps(retry_backoff: float, retry_backoff_max: float, retries: int,
                 upto_ms: float = 10_000.0) -> list[float]:
    """When the harness's resends of a failed message go out, in ms after the failure: the
    back-off doubles from `retry_backoff` to `retry_backoff_max` (producer.py), summed."""
    steps, t, attempt = [], 0.0, 2
    while attempt <= retries + 1 and retry_backoff > 0:
        t += min(retry_backoff * 2 ** (attempt - 2), retry_backoff_max) * 1000
        if t > upto_ms:
            break
        steps.append(round(t, 3))
        attempt += 1
    return steps


Step = Union[float, tuple[float, float, float]]  # a step, or (step, earliest, latest) with its jitter


def jittered(steps: Iterable[float], jitter: tuple[float, float]) -> list[Step]:
    """A client's back-off steps (summed delays, ms) with the jitter of every delay after the
    first (fractions: the Pulsar C++ client's -10% is (-0.1, 0)): (step, earliest, latest)."""
    steps = list(steps)
    if not steps or jitter == (0.0, 0.0):
        return steps
    first = steps[0]
    return [(s, round(first + (1 + jitter[0]) * (s - first), 3), round(first + (1 + jitter[1]) * (s - first), 3))
            for s in steps]


def near_steps(steps: list[Step], values: Iterable[Optional[float]], tol: float = STEP_TOLERANCE_MS) -> list[dict]:
    """For each step, how many outages lie within ±tol ms of it; of a jittered step, from tol
    before its earliest to tol after its latest (`from_ms`, `to_ms`)."""
    vals = [v for v in values if v is not None]
    out = []
    for step in steps:
        s, lo, hi = step if isinstance(step, tuple) else (step, step, step)
        out.append({"step_ms": s, "within_ms": tol, "from_ms": lo - tol, "to_ms": hi + tol,
                    "outages": sum(1 for v in vals if lo - tol <= v <= hi + tol)})
    return out


def summary(spark: SparkSession, verdicts: list[Verdict], schedules: dict[str, list[Step]]) -> dict:
    """The `outages` block of summary.json: producer and consumer distributions, and each
    back-off schedule (name -> steps in ms) with the producer outages near its steps."""
    prod = [g for v in verdicts for g in (v.get("fault_ack_gaps_ms") or [])]
    # a window no consumer read through has no consumer outage: left out, not counted as 0
    cons = [g for v in verdicts for g in (v.get("fault_recv_gaps_ms") or []) if g is not None]
    per_topic = [x for v in verdicts for x in (v.get("topics") or {}).values()]
    parts = [p for x in (per_topic or verdicts) for p in (x.get("outage_parts") or []) if p is not None]
    series = {"producer": prod, "consumer": cons, **{f"part {p}": [x[f"{p}_ms"] for x in parts] for p in PARTS}}
    tprod = [g for x in per_topic for g in (x.get("fault_ack_gaps_ms") or [])]
    if per_topic:  # workload.topics: one outage per window and topic
        series["topics"] = tprod
    d = distributions(spark, series)
    out = {
        "producer": d["producer"],
        "consumer": d["consumer"],
        "schedules": {name: near_steps(steps, prod) for name, steps in schedules.items()},
    }
    if per_topic:
        out["topics"] = {"producer": d["topics"],
                         "schedules": {name: near_steps(steps, tprod) for name, steps in schedules.items()}}
    out["parts"] = parts_summary(parts, {p: d[f"part {p}"] for p in PARTS})
    return out


def parts_summary(parts: list[dict], dists: dict[str, dict]) -> dict:
    """The outages' parts (parts.py) across windows (and topics): each part's distribution
    (`dists`, by part), how often each dominated, and how often each mark was seen."""
    return {"outages": len(parts),
            "dominant": {p: sum(1 for x in parts if x["dominant"] == p) for p in PARTS},
            "seen": {p: sum(1 for x in parts if p in x["order"]) for p in PARTS[:-1]},
            **dists}
