"""The availability concern: fault windows (a heal paired with its fault by window id), the
gaps between acks and between deliveries, and each window's outage: the fault to the ack
that ends the longest ack-free interval overlapping it."""
from __future__ import annotations

from typing import Optional

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from .frames import DEFAULT, local_table, only_runs, with_per_run, with_previous
from .latency import ack_latency_columns
from .tuning import Tuning


def gaps(rows: DataFrame, t: Tuning = DEFAULT, plain: bool = False) -> DataFrame:
    """Intervals between consecutive rows of a run in time: (run, gap_start, gap_end)."""
    g = with_previous(rows.select("run", "t_ns"), ["run"], "t_ns", "t_ns", t.time_bucket_ns, plain)
    return g.where(F.col("prev").isNotNull()).select(
        "run", F.col("prev").alias("gap_start"), F.col("t_ns").alias("gap_end")
    )


def bucket_gaps(rows: DataFrame, width: dict[str, int], t: Tuning = DEFAULT, plain: bool = False) -> DataFrame:
    """The gaps between consecutive non-empty time buckets of `width[run]` ns: exactly the
    run's gaps that are not inside one bucket (those are shorter than the width).

    Rows are summarised map-side into one (first, last) per bucket, so a run of millions
    of acks is a few hundred thousand buckets by the time anything is shuffled.
    """
    b = (
        with_per_run(rows.select("run", "t_ns"), width, "_w", inner=True, t=t)
        .withColumn("_tb", F.floor(F.col("t_ns") / F.col("_w")))
        .groupBy("run", "_tb")
        .agg(F.min("t_ns").alias("_lo"), F.max("t_ns").alias("_hi"))
    )
    g = with_previous(b, ["run"], "_tb", "_hi", 1 << 16, plain)
    return g.where(F.col("prev").isNotNull()).select(
        "run", F.col("prev").alias("gap_start"), F.col("_lo").alias("gap_end")
    )


class Windows:
    """The fault windows of an analysis, (run, w, t_fault, t_wend) each, and as a (small)
    DataFrame, built the first time a join needs it."""

    def __init__(self, spark: SparkSession, rows: list[tuple]) -> None:
        self.spark, self.rows = spark, rows
        self._df: Optional[DataFrame] = None

    @property
    def df(self) -> DataFrame:
        if self._df is None:
            self._df = local_table(self.spark, self.rows, "run string, w int, t_fault long, t_wend long")
        return self._df


def gap_facts(g: DataFrame, w: Optional[Windows], t: Tuning = DEFAULT) -> tuple[dict, dict]:
    """Longest gap per run, and per fault window (run, w) the (clipped length, end) of the
    longest gap overlapping it (of equal ones, the earliest)."""
    if w is not None and len(w.rows) <= t.per_run_literal:
        return _gap_facts_literal(g, w.rows)
    facts = g.groupBy("run").agg(
        F.lit(None).cast("int").alias("w"), F.max(F.col("gap_end") - F.col("gap_start")).alias("eff"),
        F.lit(None).cast("long").alias("end"))
    if w is not None:
        eff = F.col("gap_end") - F.greatest(F.col("gap_start"), F.col("t_fault"))
        o = (
            g.join(F.broadcast(w.df), "run")
            .where((F.col("gap_end") > F.col("t_fault")) & (F.col("gap_start") <= F.col("t_wend")))
            .groupBy("run", "w")
            # of equally long intervals, the earliest: max_by alone would pick any of them
            .agg(F.max(eff).alias("eff"), F.max_by("gap_end", F.struct(eff, -F.col("gap_end"))).alias("end"))
        )
        # one query for both: its two branches share their shuffles (exchange reuse), where
        # two queries would each compute the gaps
        facts = facts.unionByName(o)
    longest: dict = {}
    closed: dict = {}
    for r in facts.collect():
        if r["w"] is None:
            longest[r["run"]] = r["eff"]
        else:
            closed[(r["run"], r["w"])] = (r["eff"], r["end"])
    return longest, closed


def _gap_facts_literal(g: DataFrame, windows: list[tuple]) -> tuple[dict, dict]:
    """gap_facts for a few windows: each window two conditional aggregates of one grouping
    by run, its bounds literals. A run's own analysis has one or two windows; the join and
    union of the general form cost it a third of a second more than this (a broadcast, a
    second pass over the gaps, which a small history's one partition does not share)."""
    longest: dict = {}
    closed: dict = {}
    for r in g.groupBy("run").agg(*_window_gap_aggs(windows)).collect():
        _read_gap_aggs(r, windows, longest, closed)
    return longest, closed


def _window_gap_aggs(windows: list[tuple], gap_start=None, gap_end=None) -> list:
    """_gap_facts_literal's aggregates over rows that carry a gap (`gap_start` null: none)."""
    gap_end = F.col("gap_end") if gap_end is None else gap_end
    gap_start = F.col("gap_start") if gap_start is None else gap_start
    aggs = [F.max(gap_end - gap_start).alias("eff")]
    for k, (run, _, tf, te) in enumerate(windows):
        inside = (F.col("run") == run) & (gap_end > tf) & (gap_start <= te)
        eff = gap_end - F.greatest(gap_start, F.lit(tf))
        aggs += [F.max(F.when(inside, eff)).alias(f"_e{k}"),
                 # of equally long intervals, the earliest (max_by skips the null orderings)
                 F.max_by(gap_end, F.when(inside, F.struct(eff, -gap_end))).alias(f"_x{k}")]
    return aggs


def _read_gap_aggs(r, windows: list[tuple], longest: dict, closed: dict) -> None:
    longest[r["run"]] = r["eff"]
    for k, (run, i, *_) in enumerate(windows):
        if run == r["run"] and r[f"_e{k}"] is not None:
            closed[(run, i)] = (r[f"_e{k}"], r[f"_x{k}"])


def ack_facts(acks: DataFrame, windows: list[tuple]) -> tuple[dict, dict, dict]:
    """ack_latency's figures and the plain ack gaps' gap_facts in one query: one lag() per
    run (its shuffle by run also groups the aggregate, which then needs none), the latencies
    sorted and the gaps' maxima in the same grouping. For a run's own analysis (few acks,
    few windows): two queries over the same ack rows took 0.26 s warm, this one 0.17."""
    prev = F.lag("t_ns").over(Window.partitionBy("run").orderBy("t_ns"))
    aggs, out = ack_latency_columns()
    gap = _window_gap_aggs(windows, gap_start=F.col("_prev"), gap_end=F.col("t_ns"))
    q = (acks.withColumn("_prev", prev).groupBy("run").agg(*aggs, *gap)
         .select("run", *out, *[F.col(c) for c in ("eff", *[f"_{x}{k}" for k in range(len(windows)) for x in "ex"])]))
    lats: dict = {}
    longest: dict = {}
    closed: dict = {}
    for r in q.collect():
        d = r.asDict()
        lats[r["run"]] = {k: d[k] for k in ("_ack_p", "_ack_max", "_e2e_p", "_e2e_max")}
        _read_gap_aggs(r, windows, longest, closed)
    return lats, longest, closed


def ack_gap_facts(acks: DataFrame, frames: dict[str, dict], w: Optional[Windows],
                  tuning: Tuning = DEFAULT) -> tuple[dict, dict]:
    """`gap_facts` of the ack gaps (`acks`: the ack rows), from time buckets where that is exact.

    A bucket holds about `bucket_acks` acks. Gaps inside one are shorter than its width, so
    when the longest gap between buckets (and the longest one overlapping each fault
    window) is at least the width, it is the answer; the runs where it is not (acks
    evenly spread, no pause anywhere) are walked ack by ack.
    """
    width = {}
    for run, f in frames.items():
        if f["acks"] and f["acks"] > 1:
            span = f["t_last_ack"] - f["t_first_ack"]
            width[run] = max(1, span * tuning.bucket_acks // (f["acks"] - 1))
    if not width:
        return {}, {}
    n_acks = sum(f["acks"] or 0 for f in frames.values())
    if n_acks <= tuning.plain_rows:
        # few acks: paired one by one, exact at once
        return gap_facts(gaps(acks, tuning, plain=True), w, tuning)
    # up to plain_rows buckets, paired by one lag() (one shuffle): at 10 M acks (625,000
    # buckets) 0.4 s against 2.6 s for the buckets of buckets
    plain = n_acks // tuning.bucket_acks <= tuning.plain_rows
    longest, closed = gap_facts(bucket_gaps(acks, width, tuning, plain), w, tuning)
    walk = {run for run, wd in width.items() if longest.get(run) is None or longest[run] < wd}
    walk |= {run for (run, _), (eff, _) in closed.items() if eff < width[run]}
    if w is not None:
        # a window no bucket gap overlaps may still hold gaps inside a bucket
        walk |= {run for run, i, *_ in w.rows if run in width and (run, i) not in closed}
    if walk:
        l2, c2 = gap_facts(gaps(only_runs(acks, walk, tuning), tuning), w, tuning)
        for run in walk:
            longest.pop(run, None)
        closed = {k: v for k, v in closed.items() if k[0] not in walk}
        longest.update(l2)
        closed.update({k: v for k, v in c2.items() if k[0] in walk})
    return longest, closed


def _action(detail: Optional[str]) -> Optional[str]:
    return detail.split()[0] if detail and detail.split() else None


def pair_windows(rows: list[dict], t_end: int) -> list[tuple[int, int, dict]]:
    """(t_fault, t_window_end, fault row) per fault, in time order.

    A heal ends the fault of the same `window` id. Rows without one (histories before format
    1.1) fall back to the old rule among themselves: a heal ends the open faults of its
    action (first word of `detail`), or every open one if none matches. Unhealed faults last
    to `t_end`.
    """
    rows = sorted(rows, key=lambda r: (r["t_ns"], r["type"] != "fault"))
    open_: list[dict] = []
    ends: dict[int, int] = {}
    for r in rows:
        if r["type"] == "fault":
            open_.append(r)
            continue
        if r.get("window") is not None:
            match = [f for f in open_ if f.get("window") == r["window"]]
        else:
            old = [f for f in open_ if f.get("window") is None]
            match = [f for f in old if _action(f["detail"]) == _action(r["detail"])] or old
        for f in match:
            ends[id(f)] = r["t_ns"]
            open_.remove(f)
    faults = [r for r in rows if r["type"] == "fault"]
    return [(f["t_ns"], ends.get(id(f), t_end), f) for f in faults]


def fault_windows(nemesis: list, ends: dict[str, int]) -> list[tuple]:
    """(run, index, t_fault, t_window_end, node, detail, window id) per fault (see pair_windows)."""
    by_run: dict[str, list] = {}
    for row in nemesis:
        by_run.setdefault(row["run"], []).append(row)
    out = []
    for run, rows in by_run.items():
        for i, (tf, te, f) in enumerate(pair_windows(rows, ends.get(run, max(r["t_ns"] for r in rows)))):
            out.append((run, i, tf, te, f["node"], f["detail"], f.get("window")))
    return out


def outage(t_fault: int, t_wend: int, closed: Optional[tuple], t_last_ack: Optional[int],
            t_write_end: Optional[int]) -> Optional[int]:
    """Fault to the ack that ends the longest ack-free interval overlapping the window.

    `closed` is (length, end) of the longest interval between two acks, clipped at the
    fault. After the run's last ack, producers may still have been trying (sends, nacks,
    timeouts) until `t_write_end` with no ack to end it: when that interval overlaps the
    window and is the longest, the outage never ended (None).
    """
    open_len = None
    if t_write_end is not None and (t_last_ack is None or t_last_ack <= t_wend):
        open_len = t_write_end - max(t_last_ack if t_last_ack is not None else t_fault, t_fault)
    if closed is None:
        return None
    if open_len is not None and open_len > closed[0]:
        return None
    return closed[1] - t_fault
