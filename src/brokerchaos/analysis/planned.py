"""The concerns that follow the plan (job.Plan): the ordering, the fault windows, latency
and availability (with timing), the session facts. Each a function with explicit inputs
returning a frozen result, as in job.py."""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Optional

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .availability import Windows, ack_facts, ack_gap_facts, fault_windows, gap_facts, gaps, outage
from .facts import session_facts
from .frames import only_runs
from .groups import outages as group_outage_gaps
from .job import Cache, Clock, Counts, Live, Plan, Rows
from .latency import ack_latency, latency_table, latency_verdicts, ranked_ack_latency
from .ordering import jump_counts, jumps

# -- ordering and windows -----------------------------------------------------------------------

@dataclass(frozen=True)
class Ordering:
    jumps: DataFrame  # the jump log, kept for the session's files
    per_run: dict[str, dict]  # per run, its jump counts


def ordering(rows: Rows, counts: Counts, plan: Plan, cache: Cache, clock: Clock) -> Ordering:
    partitioned = any(f.get("partitioned") for f in counts.frames.values())
    j = jumps(rows.df, counts.first, rereads=counts.first is not None, held=cache.held, tuning=plan.t,
              plain=plan.plain_reads, partitioned=partitioned)
    j = cache.keep(j)
    per_run = {r["run"]: r.asDict() for r in jump_counts(j).collect()}
    clock.lap("ordering")
    return Ordering(j, per_run)


@dataclass(frozen=True)
class FaultWindows:
    """(run, index, t_fault, t_window_end, node, detail, window id) per fault, and the same
    as a small DataFrame for joins (None without faults)."""

    rows: list[tuple]
    w: Optional[Windows]

    def of_run(self, run: str) -> list[tuple]:
        return [x for x in self.rows if x[0] == run]


def windows(spark: SparkSession, rows: Rows, counts: Counts) -> FaultWindows:
    wins = fault_windows(rows.nemesis, {k: f["t_end"] for k, f in counts.frames.items()})
    return FaultWindows(wins, Windows(spark, [(r, i, tf, te) for r, i, tf, te, *_ in wins]) if wins else None)


def group_outages(rows: Rows, fw: FaultWindows, plan: Plan, clock: Clock) -> dict[tuple, int]:
    """Each consumer group's outage per fault window: its longest partition without a
    delivery (groups.outages); none without groups, windows or timing."""
    if rows.members is None or fw.w is None or not plan.timing:
        return {}
    out = group_outage_gaps(rows.members, fw.w.df, plan.t, plan.plain_recv)
    clock.lap("consumer groups' outages")
    return out


# -- latency ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Latency:
    per_run: dict[str, dict]  # _ack_p, _ack_max, _e2e_p, _e2e_max per run
    exact: bool
    ack_gaps: Optional[tuple[dict, dict]] = None  # (longest, per window) when found with the latencies


def latency(rows: Rows, counts: Counts, plan: Plan, fw: FaultWindows, clock: Clock) -> Latency:
    """From the acks that carry their send time (format 1.4), an aggregate; else (older
    histories) and for end-to-end latency (runs read while written), each message's first
    send paired with its first ack and delivery."""
    by_acks = sorted(run for run, f in counts.frames.items() if f["send_ns_acks"] and run not in plan.live_runs)
    paired = sorted(set(counts.frames) - set(by_acks))
    windows = fw.w.rows if fw.w is not None else []
    if plan.latency_with_gaps(counts, by_acks, paired, len(windows)):
        lats, longest, closed = ack_facts(rows.acks(), windows)
        clock.lap("latency, ack gaps")
        return Latency(lats, True, (longest, closed))
    lats: dict[str, dict] = {}
    if by_acks:
        d = rows.acks()
        d = only_runs(d, by_acks, plan.t) if paired else d
        if plan.rows <= plan.t.sorted_latency_rows:
            lats.update({r["run"]: r.asDict() for r in ack_latency(d.where(F.col("send_ns").isNotNull())).collect()})
        else:
            lats.update(ranked_ack_latency(d, plan.t))
    if paired:
        both = rows.with_live()
        if by_acks:
            both = only_runs(both, paired, plan.t)
        lat = latency_verdicts(latency_table(both, plan.live_runs, plan.t), plan.exact)
        lats.update({r["run"]: r.asDict() for r in lat.collect()})
    clock.lap("latency")
    # exact, but where latencies are paired past exact_percentile_rows
    return Latency(lats, plan.exact or not paired)


# -- availability -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Availability:
    max_ack_gap: dict[str, Optional[int]]  # per run, ns
    outages: dict[tuple, Optional[int]]  # per (run, window index): fault to the ack that ended it
    ack_gaps: dict[tuple, Optional[int]]  # per (run, window index): its longest ack-free interval
    max_recv_gap: dict[str, int] = field(default_factory=dict)
    recv_gaps: dict[tuple, int] = field(default_factory=dict)  # per window: the consumers' longest gap


def availability(rows: Rows, counts: Counts, plan: Plan, fw: FaultWindows, lat: Latency, live: Live,
                 clock: Clock) -> Availability:
    """Ack gaps, the outage of each fault window, and the longest delivery gap of the
    consumers that read while a fault was in effect."""
    if lat.ack_gaps is not None:
        max_ack_gap, closed = lat.ack_gaps
    else:
        max_ack_gap, closed = ack_gap_facts(rows.acks(), counts.frames, fw.w, plan.t)
        clock.lap("ack gaps")
    outages: dict[tuple, Optional[int]] = {}
    ack_gaps: dict[tuple, Optional[int]] = {}
    for run, i, tf, te, *_ in fw.rows:
        f = counts.frames[run]
        outages[(run, i)] = outage(tf, te, closed.get((run, i)), f["t_last_ack"], f["t_write_end"])
        # the outage's own length: the longest ack-free interval, from the fault on
        ack_gaps[(run, i)] = None if outages[(run, i)] is None else closed[(run, i)][0]
    recv = _reading_across(rows, counts, plan, fw, live)
    if recv is None:
        return Availability(max_ack_gap, outages, ack_gaps)
    rg = gaps(recv, plan.t, plan.plain_recv).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        max_recv_gap, rclosed = gap_facts(rg, fw.w, plan.t)
    finally:
        rg.unpersist()
    clock.lap("receive gaps")
    # the consumer side of each window: its longest delivery gap from the fault on
    return Availability(max_ack_gap, outages, ack_gaps, max_recv_gap, {k: eff for k, (eff, _) in rclosed.items()})


def checked_by(counts: Counts, run: str, t: int) -> bool:
    """A checking reader (not an observer) of `run` had received something by `t`."""
    first = counts.frames[run]["t_first_recv"]
    return first is not None and first <= t


def _reading_across(rows: Rows, counts: Counts, plan: Plan, fw: FaultWindows, live: Live) -> Optional[DataFrame]:
    """The deliveries of the consumers that read across a fault window (they received before
    its end and after its start: one that received nothing inside it is the outage this is
    about), as (run, client, t_ns); None when no consumer did (the seeds' read at the end)."""
    if not any(plan.first_recv.get(run) is not None and plan.first_recv[run] <= te for run, i, tf, te, *_ in fw.rows):
        return None
    if (any(checked_by(counts, run, te) for run, i, tf, te, *_ in fw.rows) or len(live.spans) > plan.t.per_run_literal
            or rows.members is not None):
        recv = rows.recv().select("run", "client", "t_ns")
        across = (
            recv.groupBy("run", "client").agg(F.min("t_ns").alias("_lo"), F.max("t_ns").alias("_hi"))
            .join(F.broadcast(fw.w.df), "run")
            .where((F.col("_lo") <= F.col("t_wend")) & (F.col("_hi") >= F.col("t_fault")))
            .select("run", "client")
            .distinct()
        )
        return recv.join(F.broadcast(across), ["run", "client"])
    # only observers read during the windows (the checking readers began after them), and
    # live_consumers() has their spans: the few that qualify, as literals (a query and a
    # broadcast less)
    across = sorted({(run, c) for (run, c), (lo, hi) in live.spans.items()
                     for r, i, tf, te, *_ in fw.rows if r == run and lo <= te and hi >= tf})
    if not across:
        return None
    recv = rows.obs_recv.where(functools.reduce(
        lambda a, b: a | b, [(F.col("run") == run) & (F.col("client") == c) for run, c in across]))
    return recv.select("run", "client", "t_ns")


# -- the seed's table ---------------------------------------------------------------------------

def facts(spark: SparkSession, rows: Rows, counts: Counts, plan: Plan, fw: FaultWindows,
          clock: Clock) -> dict[str, dict]:
    """The session facts (facts.py). The receiver's gap is the checking readers' (rows.df
    has no observer's rows): a run whose only reader during the window was an observer has
    none, and no query for it (1.3-1.5 s of a live-consumer run's analysis on two slow cores)."""
    first = [x for x in fw.rows if plan.timing and x[1] == 0 and checked_by(counts, x[0], x[3])]
    out = session_facts(spark, rows.df, first, counts.frames, plan.t, plan.plain_reads)
    clock.lap("session facts")
    return out
