"""The latency concern: ack latency (from the acks' own send time, format 1.4; else each
message's first send paired with its first ack) and end-to-end latency for runs read while
written; exact percentiles by sorting up to a size, and past it by ranks found through a
histogram of the latencies."""
from __future__ import annotations

import collections
import math
from typing import Optional

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from .frames import DEFAULT, MS, columns_once, local_table, with_per_run
from .tuning import Tuning

PERCENTILES = [0.5, 0.99, 0.999]


def _sorted_values(c):
    """The aggregate _exact_percentiles reads: every value of `c` in the group, sorted.

    Spark's own exact percentile() keeps a hash map of every distinct value, which for
    nanosecond latencies is one entry per message and several times slower than sorting
    the run's latencies once.
    """
    return F.sort_array(F.collect_list(c))


def _exact_percentiles(arr):
    """Exact percentiles of a sorted array column (`_sorted_values`, in a projection above
    its aggregate), linear interpolation between closest ranks (as numpy's default).

    Not in the aggregate itself: there the array expression is evaluated again at each of
    its ten uses, and each is a sort of the run's latencies (15% of a warm 100,000-message
    analysis's executor time, by the JVM's flight recorder; the latency step 0.2 -> 0.12 s).
    """
    n = F.size(arr)
    out = []
    for q in PERCENTILES:
        pos = F.lit(q) * (n - 1)
        lo = F.floor(pos).cast("int")
        hi = F.ceil(pos).cast("int")
        a = F.element_at(arr, lo + 1)
        b = F.element_at(arr, hi + 1)
        out.append(a + (b - a) * (pos - lo))
    return F.when(n > 0, F.array(*out))


def latency_table(df: DataFrame, live_runs: list[str], t: Tuning = DEFAULT) -> DataFrame:
    """Per message: when it was meant to go (its first send's intended time at a steady
    rate, else its first send), first ack and (for runs whose consumers read while
    producers sent) first receive."""
    ty = F.col("type")
    ts = F.col("t_ns")
    rows = ty.isin("send", "ack")
    if live_runs:
        rows = rows | ((ty == "recv") & F.col("_live"))
    return (
        with_per_run(df, dict.fromkeys(live_runs, 1), "_live", t=t)
        .withColumn("_live", F.col("_live").isNotNull())
        .where(rows)
        .groupBy("run", "producer", "value")
        .agg(
            F.min(F.when(ty == "send", F.coalesce(F.col("intended_ns"), ts))).alias("t_send"),
            F.min(F.when(ty == "ack", ts)).alias("t_ack"),
            (F.min(F.when(ty == "recv", ts)) if live_runs else F.lit(None).cast("long")).alias("t_recv"),
        )
    )


def ack_latency(acks: DataFrame) -> DataFrame:
    """latency_verdicts' figures (but end-to-end) of runs whose ack rows carry the time their
    latency counts from (`send_ns`, format 1.4): aggregates over the ack rows, per run, with
    nothing paired and no row moved (past sorted_latency_rows: ranked_ack_latency)."""
    aggs, out = ack_latency_columns()
    return acks.groupBy("run").agg(*aggs).select("run", *out)


@columns_once
def ack_latency_columns() -> tuple[list, list]:
    ack_lat = (F.col("t_ns") - F.col("send_ns")) / MS
    return ([_sorted_values(ack_lat).alias("_ack_s"), F.max(ack_lat).alias("_ack_max")],
            [_exact_percentiles(F.col("_ack_s")).alias("_ack_p"), F.col("_ack_max"),
             F.lit(None).cast("array<double>").alias("_e2e_p"), F.lit(None).cast("double").alias("_e2e_max")])


# A histogram bucket per 1/16 of an octave of latency in ns (~4.4% wide: ~650 buckets from
# 1 ns to an hour). floor(log2(x)·16) never decreases as x grows, so a bucket's values all
# lie between those of the buckets around it, and ranks can be counted across buckets.
_OCTAVE_PARTS = 16


# a bucket too large to sort is counted again in this many linear sub-buckets
_SPLIT = 1024


def ranked_ack_latency(acks: DataFrame, t: Tuning = DEFAULT) -> dict[str, dict]:
    """ack_latency's figures per run, exact at any size, with no run's latencies in one list.

    One pass counts each run's ack latencies (of the rows in `acks` that carry `send_ns`)
    per log-scale bucket; the ranks a percentile interpolates between (floor and ceiling of
    q·(n−1), as _exact_percentiles) fall in a few buckets, and only those are read again:
    sorted when they hold up to `t.rank_bucket_rows` values, else counted again in linear
    sub-buckets. A rank at a bucket's first or last value, or in a bucket of one value, is
    its min or max and needs no further pass. Past 6 M rows this replaced percentile_approx,
    which was not exact and whose sketches cost more than these passes (10 M messages:
    5.7 s against 3.9).
    """
    lats = acks.select("run", (F.col("t_ns") - F.col("send_ns")).alias("lat")).where(F.col("lat").isNotNull())
    out: dict[str, dict] = {}
    need: dict[tuple, list] = {}  # (run, lo, hi) -> [values in it, {rank within it: rank in the run}]
    size: dict[str, int] = {}
    for run, bs in _log_buckets(lats).items():
        size[run] = n = sum(x[1] for x in bs)
        out[run] = {"_ack_p": None, "_ack_max": bs[-1][3] / MS, "_e2e_p": None, "_e2e_max": None}
        _place(need, run, [(c, lo, hi) for _, c, lo, hi in bs], {r: r for r in _ranks(n)})
    value = _values_at_ranks(lats, need, t)
    for run, n in size.items():
        out[run]["_ack_p"] = _interpolated(value, run, n)
    return out


def _log_buckets(lats: DataFrame) -> dict[str, list]:
    """Per run, its latencies' log-scale buckets in order: (bucket, count, min, max)."""
    lat = F.col("lat")
    b = F.when(lat > 0, F.floor(F.log2(lat) * _OCTAVE_PARTS)).otherwise(F.lit(-1)).cast("long")
    hist = lats.groupBy("run", b.alias("b")).agg(F.count(F.lit(1)).alias("n"), F.min(lat).alias("lo"),
                                                 F.max(lat).alias("hi"))
    buckets: dict[str, list] = collections.defaultdict(list)
    for r in hist.collect():
        buckets[r["run"]].append((r["b"], r["n"], r["lo"], r["hi"]))
    return {run: sorted(bs) for run, bs in buckets.items()}


def _values_at_ranks(lats: DataFrame, need: dict, t: Tuning) -> dict[tuple, int]:
    """(run, rank) -> the latency at that rank, for every rank `need` places in a bucket: a
    bucket's first or last value is its min or max; the rest read again, sorted or split."""
    value: dict[tuple, int] = {}
    while need:
        sort, split = [], []
        for (run, lo, hi), (c, ks) in need.items():
            for k, r in ks.items():
                if lo == hi or k == 0:
                    value[(run, r)] = lo
                elif k == c - 1:
                    value[(run, r)] = hi
            rest = {k: r for k, r in ks.items() if (run, r) not in value}
            if rest:
                (sort if c <= t.rank_bucket_rows else split).append((run, lo, hi, rest))
        need = {}
        if sort:
            value.update(_sorted_ranks(lats, sort))
        if split:
            need = _split_buckets(lats, split)
    return value


def _interpolated(value: dict[tuple, int], run: str, n: int) -> list[float]:
    """The run's PERCENTILES, ms, each between the values at the floor and ceiling of q·(n−1)."""
    p = []
    for q in PERCENTILES:
        pos = q * (n - 1)
        lo, hi = math.floor(pos), math.ceil(pos)
        a, b = value[(run, lo)] / MS, value[(run, hi)] / MS
        p.append(a + (b - a) * (pos - lo))
    return p


def _ranks(n: int) -> set[int]:
    return {r for q in PERCENTILES for r in (math.floor(q * (n - 1)), math.ceil(q * (n - 1)))}


def _place(need: dict, run: str, parts: list[tuple], ranks: dict[int, int]) -> None:
    """Each of `ranks` (rank within the parts -> rank in the run) into the part, (count, lo,
    hi) in order, that holds it."""
    cum = 0
    for c, lo, hi in parts:
        for k, r in ranks.items():
            if cum <= k < cum + c:
                need.setdefault((run, lo, hi), [c, {}])[1][k - cum] = r
        cum += c


def _intervals(lats: DataFrame, parts: list[tuple]) -> DataFrame:
    iv = local_table(lats.sparkSession, [(run, lo, hi) for run, lo, hi, _ in parts],
                                           "run string, lo long, hi long")
    return lats.join(F.broadcast(iv), "run").where(F.col("lat").between(F.col("lo"), F.col("hi")))


def _sorted_ranks(lats: DataFrame, parts: list[tuple]) -> dict[tuple, int]:
    """The values at the wanted ranks of each (run, lo, hi, {rank within: rank in run})."""
    ks = local_table(lats.sparkSession, [(run, lo, k) for run, lo, _, ks in parts for k in ks],
                                           "run string, lo long, k int")
    got = (_intervals(lats, parts).groupBy("run", "lo").agg(F.sort_array(F.collect_list("lat")).alias("_a"))
           .join(F.broadcast(ks), ["run", "lo"])
           .select("run", "lo", "k", F.element_at("_a", F.col("k") + 1).alias("v")))
    where = {(run, lo): ks for run, lo, _, ks in parts}
    return {(r["run"], where[(r["run"], r["lo"])][r["k"]]): r["v"] for r in got.collect()}


def _split_buckets(lats: DataFrame, parts: list[tuple]) -> dict[tuple, list]:
    """Each (run, lo, hi, ranks) counted again in _SPLIT linear sub-buckets: the next `need`."""
    lat, lo, hi = F.col("lat"), F.col("lo"), F.col("hi")
    sb = F.floor((lat - lo) * _SPLIT / (hi - lo + 1))
    h = _intervals(lats, parts).groupBy("run", "lo", sb.alias("sb")).agg(
        F.count(F.lit(1)).alias("n"), F.min("lat").alias("slo"), F.max("lat").alias("shi"))
    subs: dict[tuple, list] = collections.defaultdict(list)
    for r in h.collect():
        subs[(r["run"], r["lo"])].append((r["sb"], r["n"], r["slo"], r["shi"]))
    need: dict[tuple, list] = {}
    for run, lo_, _, ks in parts:
        _place(need, run, [(c, a, b) for _, c, a, b in sorted(subs[(run, lo_)])], ks)
    return need


def latency_verdicts(lat: DataFrame, exact: bool) -> DataFrame:
    s = F.col("t_send")
    ack_lat = F.when(s.isNotNull(), (F.col("t_ack") - s) / MS)
    e2e_lat = F.when(s.isNotNull(), (F.col("t_recv") - s) / MS)
    if not exact:
        pct = lambda c: F.percentile_approx(c, PERCENTILES, 10_000)  # noqa: E731
        return lat.groupBy("run").agg(
            pct(ack_lat).alias("_ack_p"), F.max(ack_lat).alias("_ack_max"),
            pct(e2e_lat).alias("_e2e_p"), F.max(e2e_lat).alias("_e2e_max"))
    return lat.groupBy("run").agg(
        _sorted_values(ack_lat).alias("_ack_s"), F.max(ack_lat).alias("_ack_max"),
        _sorted_values(e2e_lat).alias("_e2e_s"), F.max(e2e_lat).alias("_e2e_max"),
    ).select("run", _exact_percentiles(F.col("_ack_s")).alias("_ack_p"), "_ack_max",
             _exact_percentiles(F.col("_e2e_s")).alias("_e2e_p"), "_e2e_max")


def pct(arr: Optional[list], mx: Optional[float]) -> Optional[dict]:
    if arr is None or mx is None:
        return None
    return {"p50": arr[0], "p99": arr[1], "p999": arr[2], "max": mx}
