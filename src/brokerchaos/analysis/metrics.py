"""Every verdict of a history, as Spark DataFrame expressions (no Python UDFs): the entry
point. The job is made of concerns (job.py, then planned.py: the rows that are not
messages, counts, ordering, windows, latency, availability, session facts), each a
function with explicit inputs returning a frozen result, in the order analyze() composes
them; a run's verdict is put together from them (assemble.py) and judged by the policy
(policy.py). What each count means is verdicts.py; how the work is cut, tuning.py and the
job's Plan.
docs/history-format.md defines each figure and tests/oracle.py re-implements them in plain
Python to check this one.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Optional

from pyspark.sql import DataFrame, SparkSession

from . import job, planned
from . import replicas as replica_reads
from .assemble import Parts, verdict
from .availability import ack_facts, pair_windows
from .frames import DEFAULT, MS, in_memory, read_history, with_previous
from .groups import skipped
from .latency import ranked_ack_latency
from .ordering import duplicate_returns
from .topics import attach, topic_view
from .tuning import Tuning

if TYPE_CHECKING:
    from .verdicts import Verdict

# what other parts and the tests take from here
__all__ = ["DEFAULT", "MS", "Analysis", "analyze", "read_history", "pair_windows", "duplicate_returns",
           "with_previous", "ack_facts", "ranked_ack_latency", "in_memory", "_in_memory"]
_in_memory = in_memory


# analyses ended in this process, whoever asked (a run, a session, a warm-up round): the
# warm-up's cap counts them all (warmup.py), as the JIT warms on each alike
_ended = 0


def ended() -> int:
    return _ended


@dataclass
class Analysis:
    verdicts: list[Verdict]
    jumps: DataFrame
    latency_exact: bool
    # the duplicate and loss logs' frames, built when first read: a run's own verdict never
    # reads them, and building them (empty ones included) was ~0.1 s of py4j calls per analysis
    build_duplicates: Callable[[], DataFrame]
    build_losses: Callable[[], DataFrame]
    meta: dict = field(default_factory=dict)
    # cached frames the logs read from; release() frees them
    kept: list = field(default_factory=list)
    # the consumer groups' skips log (None: no run had a skip), built when first read
    build_skips: Callable[[], Optional[DataFrame]] = lambda: None
    # the replicas' divergence log (replicas.py; None: no run read its replicas)
    divergence: Optional[DataFrame] = None

    @functools.cached_property
    def skips(self) -> Optional[DataFrame]:
        return self.build_skips()

    @functools.cached_property
    def duplicates(self) -> DataFrame:
        return self.build_duplicates()

    @functools.cached_property
    def losses(self) -> DataFrame:
        return self.build_losses()

    def release(self) -> None:
        """Free what the jump and duplicate logs were kept in; they are computed again from
        the history if read afterwards."""
        for d in self.kept:
            d.unpersist()
        self.kept.clear()


def analyze(spark: SparkSession, df: DataFrame, timing: bool = True, tuning: Tuning = DEFAULT) -> "Analysis":
    """Every verdict of every run in `df`.

    timing=False leaves out the time-based figures (latency percentiles, ack and receive
    gaps, outages): the seeds' own figures only, which need no per-message join.
    """
    small = in_memory(df, tuning)
    cache, clock = job.Cache(held=[small] if small is not None else []), job.Clock()
    try:
        parts = _concerns(spark, small if small is not None else df, timing, tuning, small is not None, cache, clock)
    except BaseException:
        for d in cache.kept:
            d.unpersist()
        raise
    finally:
        for d in cache.held:
            d.unpersist()
    frames = parts.counts.frames
    verdicts = [verdict(parts, run, i) for i, run in enumerate(sorted(frames), 1)]
    if parts.rows.topics:  # runs of several topics: the same verdicts per topic (topics.py)
        sub = analyze(spark, topic_view(spark, df, parts.rows.topics), timing, tuning)
        attach(verdicts, sub.verdicts)
        sub.release()
        clock.lap("per topic")
    # the runs whose acks carry their send time (format 1.4): the report's latency plot needs
    # no pairing for them either
    send_ns_runs = sorted(run for run, f in frames.items() if f["send_ns_acks"])
    rows = parts.rows
    skips = None
    if any(v.get("group_skips") for v in verdicts):
        def skips():
            return skipped(rows.checked, rows.members, rows.groups)
    global _ended
    _ended += 1
    return Analysis(verdicts, parts.ordering.jumps, parts.latency_exact, parts.counts.duplicates,
                    parts.counts.losses, meta={"seconds": clock.laps, "send_ns_runs": send_ns_runs},
                    kept=cache.kept, build_skips=skips or (lambda: None), divergence=parts.replicas.log)


def _concerns(spark: SparkSession, df: DataFrame, timing: bool, tuning: Tuning, small: bool, cache: job.Cache,
              clock: job.Clock) -> Parts:
    """The job's concerns in their order, each from what the ones before it returned."""
    rows = job.other_rows(spark, df)
    clock.lap("rows, nemesis")
    counts = job.count(rows, tuning, small, cache, clock)
    live = job.live_consumers(rows, clock)
    groups = job.consumer_groups(rows, counts, tuning, clock)
    plan = job.Plan.of(tuning, timing, small, counts, live, groups)
    ordering = planned.ordering(rows, counts, plan, cache, clock)
    windows = planned.windows(spark, rows, counts)
    lat = avail = None
    if timing:
        lat = planned.latency(rows, counts, plan, windows, clock)
        avail = planned.availability(rows, counts, plan, windows, lat, live, clock)
    facts = planned.facts(spark, rows, counts, plan, windows, clock)
    gout = planned.group_outages(rows, windows, plan, clock)
    txns = job.transactions(rows, counts, clock)
    reps = replica_reads.analyze(spark, rows.df, rows.replicas, rows.replica_ends, cache.keep)
    clock.lap("replicas")
    return Parts(rows, counts, live, plan, ordering, windows, lat, avail, facts, groups, gout, txns, reps)
