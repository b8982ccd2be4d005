"""One analysis, concern by concern. Each concern is a function with explicit inputs that
returns a frozen result; nothing one step sets is read by another except through what it
returns. The order (analyze() in metrics.py): the rows that are not messages, the counts,
the live consumers, the plan (chosen once from the sizes those found), the ordering, the
fault windows, latency and availability (with timing), the session facts; then a verdict
per run from them all (assemble.py).

Here the concerns up to the plan; those that follow it (the ordering, the fault windows,
latency, availability, the session facts) in planned.py.

The concerns' Spark expressions are in counts.py, ordering.py, latency.py,
availability.py and facts.py; the frame helpers in frames.py.
"""
from __future__ import annotations

import collections
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from ..history.schema import ACKED, DROPS, EVIDENCE_TYPES, MESSAGE_TYPES, OBSERVER, OUTPUT, OWNER, TAKES
from . import replicas as replica_reads
from .counts import (
    block_rollup,
    duplicates,
    losses,
    lost_bits,
    lost_messages,
    message_blocks,
    message_counts,
    message_table,
    unplain_filter,
    unplain_rows,
    value_ranges,
)
from .facts import live_reader
from .frames import count_when, local_table
from .groups import Groups, analyze_groups
from .ordering import first_reads
from .transactions import analyze as analyze_txns
from .transactions import exactly_once
from .tuning import Tuning
from .verdicts import COUNT_KEYS


class Clock:
    """Seconds per step of an analysis (Analysis.meta["seconds"]), for benchmarks."""

    def __init__(self) -> None:
        self.t = time.perf_counter()
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = round(now - self.t, 3)
        self.t = now


@dataclass
class Cache:
    """What the job keeps in memory: `held` is freed when the job ends, `kept` stays cached
    for the logs until Analysis.release()."""

    held: list = field(default_factory=list)
    kept: list = field(default_factory=list)

    def hold(self, d: DataFrame) -> DataFrame:
        d = d.persist(StorageLevel.MEMORY_AND_DISK)
        self.held.append(d)
        return d

    def keep(self, d: DataFrame) -> DataFrame:
        d = d.persist(StorageLevel.MEMORY_AND_DISK)
        self.kept.append(d)
        return d


# -- the rows that are not messages ------------------------------------------------------------

@dataclass(frozen=True)
class Rows:
    """The history (the observers' and the group members' rows left out: their deliveries
    measure the consumer side, the end check is the others'), and the few rows that are not
    messages."""

    df: DataFrame
    obs_recv: Optional[DataFrame]  # the observers' recv rows
    nemesis: list[dict]  # fault and heal rows
    read_ends: dict[str, list]  # per run, each checking reader's read_end detail
    live_ends: dict[str, list]  # per run, each observer's
    observers: collections.Counter  # observers per run
    first_fault: dict[str, int]  # per run, its first fault's time
    checks: dict[str, dict] = field(default_factory=dict)  # per run, its last `check` row (value, detail)
    members: Optional[DataFrame] = None  # the group members' rows, their group as `g` (format 1.6)
    groups: list[tuple[str, str]] = field(default_factory=list)  # (run, group) of every group
    group_ends: dict[tuple[str, str], list] = field(default_factory=dict)  # per group, its members' read_end details
    taken: Optional[DataFrame] = None  # what groups took out of a queue, as one recv row per message and group
    outputs: Optional[DataFrame] = None  # the recv rows of the reads of consume-transform-produce groups' output
    output_ends: dict[str, list] = field(default_factory=dict)  # per run, each of those reads' read_end (or None)
    marks: list[dict] = field(default_factory=list)  # the owner and reconnect rows: the outages' parts (parts.py)
    topics: dict[str, list] = field(default_factory=dict)  # per run of several topics, the topics its reads name
    # per run, its effect, whole and mechanism rows in time order (format 1.9): the evidence
    # that it tested what it names (evidence.py)
    evidence: dict[str, list[dict]] = field(default_factory=dict)
    # the replica readers' recv rows, their node as `replica`, and per run each one's read_end (replicas.py)
    replicas: Optional[DataFrame] = None
    replica_ends: dict[str, dict] = field(default_factory=dict)

    @property
    def checked(self) -> DataFrame:
        """The rows the loss and duplicate counts judge: the history's, and what a group took
        out of the broker (a queue's acks naming their message: read from it, once each)."""
        return self.df if self.taken is None else self.df.unionByName(self.taken, allowMissingColumns=True)

    def recv(self) -> DataFrame:
        """Every recv row: the checking readers', the observers' and the group members'."""
        recv = self.df.where(F.col("type") == "recv")
        if self.obs_recv is not None:
            recv = recv.unionByName(self.obs_recv)
        if self.members is not None:
            recv = recv.unionByName(self.members.where(F.col("type") == "recv").drop("g"), allowMissingColumns=True)
        return recv

    def with_live(self) -> DataFrame:
        """The history with the observers' and the members' deliveries back in (end-to-end latency)."""
        d = self.df if self.obs_recv is None else self.df.unionByName(self.obs_recv)
        return d if self.members is None else d.unionByName(
            self.members.where(F.col("type") == "recv").drop("g"), allowMissingColumns=True)

    def acks(self) -> DataFrame:
        """The ack rows, for latency and the ack gaps. (Not kept in memory: at 10 M acks the
        cache cost 3.7 s to fill and spared 0.8 s of the two passes that read it.)"""
        return self.df.where(F.col("type") == "ack").select("run", "t_ns", "send_ns")


MEMBER_COLUMNS = ("run", "client", "seq", "t_ns", "type", "producer", "value", "offset", "detail", "partition",
                  "position")
# up to this many (run, client) pairs, the observers' and members' rows are picked by a
# filter of literals (a pass over the rows costs nothing more); past it, by a broadcast join
LITERAL_CLIENTS = 64


# joins (run, client) into one string: a control character, in no name the harness writes
_SEP = "\u0001"


def _is(pairs, column: str = "client") -> Column:
    """A row of one of these (run, client) pairs: its (run, client) looked up among them as
    one string (`isin`, a hash set past ten). Not an OR of a comparison per pair: every
    query of the analysis filters every row through it, and at 40 pairs (20 runs of a group
    of two) those comparisons were half the analysis's time (profile: docs/benchmarks/history.md)."""
    return F.concat_ws(_SEP, F.col("run"), F.col(column)).isin(sorted(f"{r}{_SEP}{c}" for r, c in pairs))


def _clients(spark: SparkSession, df: DataFrame, pairs: set, keep: bool = True) -> DataFrame:
    """The rows of these (run, client) pairs (keep), or every other row."""
    if len(pairs) <= LITERAL_CLIENTS:
        return df.where(_is(pairs) if keep else ~_is(pairs))
    who = F.broadcast(local_table(spark, sorted(pairs), "run string, client string"))
    return df.join(who, ["run", "client"], "inner" if keep else "left_anti")


def _group_of(member_of: dict) -> Column:
    """A member's row's group: one lookup per group (a session's runs name few), not a
    comparison per member."""
    by_group: dict[str, set] = {}
    for key, g in member_of.items():
        by_group.setdefault(g, set()).add(key)
    out = F.lit(None).cast("string")
    for g, pairs in sorted(by_group.items()):
        out = F.when(_is(pairs), F.lit(g)).otherwise(out)
    return out


def topics_read(small: list[dict]) -> dict[str, list]:
    """Per run of several topics (workload.topics), the topics its read_end rows name: each
    topic's reader ends with one (format 1.8)."""
    seen: dict[str, set] = {}
    for r in small:
        if r["type"] == "read_end" and r["topic"] is not None:
            seen.setdefault(r["run"], set()).add(r["topic"])
    return {run: sorted(ts, key=lambda t: (len(t), t)) for run, ts in seen.items() if len(ts) > 1}


# the run's own account of itself: the evidence that it tested what it names, and what the
# broker counted of its own drops (evidence.py)
SAID = (*EVIDENCE_TYPES, DROPS)


def _apart(small: list[dict]) -> tuple[list[dict], dict[str, list[dict]], list[dict]]:
    """The owner and reconnect marks; per run, its SAID rows in time order; and the rest."""
    marks = [r for r in small if r["type"] in (OWNER, "reconnect")]
    evidence: dict[str, list[dict]] = {}
    for r in sorted((r for r in small if r["type"] in SAID), key=lambda r: r["t_ns"]):
        evidence.setdefault(r["run"], []).append(r)
    return marks, evidence, [r for r in small if r["type"] not in (OWNER, "reconnect", *SAID)]


def other_rows(spark: SparkSession, df: DataFrame) -> Rows:
    """Faults, heals, read ends, observers' and members' subscribes: a handful of rows, collected."""
    small = [r.asDict() for r in df.where(F.col("type").isin("fault", "heal", "read_end", "subscribe", "check",
                                                             OWNER, "reconnect", *SAID))
             .select("run", "client", "t_ns", "type", "node", "value", "detail", "window", "group", "topic").collect()]
    marks, evidence, small = _apart(small)
    observers = {(r["run"], r["client"]) for r in small if r["type"] == "subscribe" and r["detail"] == OBSERVER
                 and r["group"] is None}
    outputs = {(r["run"], r["client"]) for r in small if r["type"] == "subscribe" and r["group"] is not None
               and r["detail"] == OUTPUT}
    member_of = {(r["run"], r["client"]): r["group"] for r in small if r["type"] == "subscribe"
                 and r["group"] is not None and (r["run"], r["client"]) not in outputs}
    takes = sorted({(r["run"], r["group"]) for r in small if r["type"] == "subscribe" and r["group"] is not None
                    and (r["detail"] or "").endswith(TAKES)})
    observers -= set(member_of)
    replica_of = replica_reads.readers(small)
    read_ends: dict[str, list] = {}
    live_ends: dict[str, list] = {}
    group_ends: dict[tuple[str, str], list] = {}
    output_end = {(r["run"], r["client"]): r["detail"] for r in small if r["type"] == "read_end"
                  and (r["run"], r["client"]) in outputs}
    output_ends: dict[str, list] = {}
    for key in sorted(outputs):  # each output read's read_end (None: it has none)
        output_ends.setdefault(key[0], []).append(output_end.get(key))
    for r in small:
        if r["type"] == "read_end":
            key = (r["run"], r["client"])
            if key in outputs or key in replica_of:
                continue
            if key in member_of:
                group_ends.setdefault((r["run"], member_of[key]), []).append(r["detail"])
                continue
            ends = live_ends if key in observers else read_ends
            ends.setdefault(r["run"], []).append(r["detail"])
    obs_recv = members = None
    if observers:
        obs_recv = _clients(spark, df, observers).where(F.col("type") == "recv")
    if member_of:
        # what the group verdicts, the consumer outage and end-to-end latency read of them
        members = _clients(spark, df, set(member_of)).select(*MEMBER_COLUMNS)
        members = members.withColumn("g", _group_of(member_of)) if len(member_of) <= LITERAL_CLIENTS else \
            members.join(F.broadcast(local_table(spark, sorted((r, c, g) for (r, c), g in member_of.items()),
                                                            "run string, client string, g string")), ["run", "client"])
    out_recv = _clients(spark, df, outputs).where(F.col("type") == "recv") if outputs else None
    reps = replica_reads.labelled(spark, _clients(spark, df, set(replica_of)).where(F.col("type") == "recv"),
                                  replica_of) if replica_of else None
    if observers or member_of or outputs or replica_of:
        df = _clients(spark, df, observers | set(member_of) | outputs | set(replica_of), keep=False)
    nemesis = [r for r in small if r["type"] in ("fault", "heal")]
    first_fault: dict[str, int] = {}
    for r in nemesis:
        if r["type"] == "fault":
            first_fault[r["run"]] = min(r["t_ns"], first_fault.get(r["run"], r["t_ns"]))
    checks = {r["run"]: r for r in sorted((r for r in small if r["type"] == "check"), key=lambda r: r["t_ns"])}
    return Rows(df, obs_recv, nemesis, read_ends, live_ends, collections.Counter(run for run, _ in observers),
                first_fault, checks, members, sorted(set((r, g) for (r, _), g in member_of.items())), group_ends,
                taken(members, takes) if takes else None, out_recv, output_ends, marks, topics_read(small), evidence,
                reps, replica_reads.ends(small, replica_of))


def taken(members: DataFrame, takes: list[tuple[str, str]]) -> DataFrame:
    """The messages the groups that take (run, group: a subscribe detail ending `; takes`) took
    out of the broker: their members' acks that name a message (a queue's, format 1.6), one
    recv row per message and group (its client the group's name), at the first of them."""
    named = ((F.col("type") == "commit") & (F.col("detail") == ACKED)
             & F.col("producer").isNotNull() & F.col("value").isNotNull())
    if len(takes) <= LITERAL_CLIENTS:
        acks = members.where(_is(takes, "g") & named)
    else:  # a soak's thousands of runs: a broadcast join, as _clients picks
        who = F.broadcast(local_table(members.sparkSession, takes, "run string, g string"))
        acks = members.where(named).join(who, ["run", "g"])
    return (acks.groupBy("run", "g", "producer", "value")
            .agg(F.min("t_ns").alias("t_ns"), F.min("seq").alias("seq"))
            .select("run", F.col("g").alias("client"), "seq", "t_ns", F.lit("recv").alias("type"), "producer",
                    "value"))


# -- counts ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Counts:
    frames: dict[str, dict]  # per run, its blocks' rollup (times, sizes, plain counts)
    msgs: dict[str, dict]  # per run, every count
    recv_rows: int
    first: Optional[DataFrame]  # each message's first read, where some block is not plain
    duplicates: Callable[[], DataFrame]  # the duplicates log, built when first read
    losses: Callable[[], DataFrame]  # the loss log, built when first read
    blocks: Optional[DataFrame] = None  # the bit-set blocks (the groups' skips read them)


def count(rows: Rows, t: Tuning, small: bool, cache: Cache, clock: Clock) -> Counts:
    """Every count: from the blocks' bit sets, and message by message for the blocks that
    are not plain; then, where acked messages are missing, what the read found instead."""
    df = rows.checked
    blocks = message_blocks(df, rows.first_fault, t)
    if not small:
        # read again by the closer look and the losses: in a small history, a pass over the
        # rows in memory costs less than the cache (the common run reads them once)
        blocks = cache.hold(blocks)
    frames = {r["run"]: r.asDict() for r in block_rollup(blocks).collect()}
    msgs = {run: dict(f) for run, f in frames.items()}
    clock.lap("blocks")
    unplain = sum(f["_unplain"] for f in frames.values())
    first, dups = None, (lambda: duplicates(df.where(F.lit(False))))
    if unplain:
        looked = _closer_look(df, blocks, unplain, t, small, cache, msgs)
        # a message read twice is in a block that is not plain: these rows hold every one
        first, dups = first_reads(looked), (lambda: duplicates(looked))
        clock.lap("blocks looked at closely")
    lost = _losses(df, blocks, msgs, t, small, cache)
    if lost is not None:
        clock.lap("losses")
    return Counts(frames, msgs, sum(f["recv_rows"] or 0 for f in frames.values()), first, dups,
                  lost or (lambda: losses(df.where(F.lit(False)),
                                          lost_messages(blocks, t).where(F.lit(False)), True)), blocks)


def _closer_look(df: DataFrame, blocks: DataFrame, unplain: int, t: Tuning, small: bool, cache: Cache,
                 msgs: dict[str, dict]) -> DataFrame:
    """The rows of the blocks that are not plain, counted message by message into `msgs`;
    returns those rows."""
    if small:
        # rows in memory: every message looked at costs less than choosing the blocks' (a
        # join with the block summary, which a small history does not keep), and its counts
        # replace the plain blocks' instead of adding to them
        rows = df.where(F.col("type").isin(list(MESSAGE_TYPES)))
        for m in msgs.values():
            m.update({k: 0 for k in COUNT_KEYS})
    else:
        exact = unplain_filter(blocks, t) if unplain <= 100_000 else None
        if exact is not None:
            rows = df.where(exact)
        else:
            rows = unplain_rows(df, blocks, unplain <= t.broadcast_blocks, t)
            near = value_ranges(blocks, t) if unplain <= 100_000 else None  # the filter skips row groups
            if near is not None:
                rows = rows.where(near)
        rows = cache.keep(rows)
    for r in message_counts(message_table(rows)).collect():
        m = msgs.setdefault(r["run"], {k: 0 for k in COUNT_KEYS})
        for k in COUNT_KEYS:
            m[k] = (m.get(k) or 0) + (r[k] or 0)
    return rows


def _losses(df: DataFrame, blocks: DataFrame, msgs: dict[str, dict], t: Tuning, small: bool,
            cache: Cache) -> Optional[Callable[[], DataFrame]]:
    """Where acked messages are missing, which ones and what the read found where the broker
    said it had stored them (their `acked_missing_overwritten` into `msgs`); None if none is."""
    n_lost = sum(m.get("acked_missing") or 0 for m in msgs.values())
    if not n_lost:
        return None
    ids = lost_messages(blocks, t)
    near = value_ranges(blocks, t, lost_bits() != 0, no_identity=False) if n_lost <= 100_000 and not small else None
    lost = cache.keep(losses(df, ids, n_lost <= t.broadcast_lost, cache.held, near))
    for r in lost.groupBy("run").agg(count_when(F.col("overwritten")).alias("n")).collect():
        msgs[r["run"]]["acked_missing_overwritten"] = r["n"]
    return lambda: lost


# -- the live consumers ------------------------------------------------------------------------

@dataclass(frozen=True)
class Live:
    """What the observers received, per run: rows, duplicates (a message again to the same
    observer), redeliveries (at the same offset), when the first arrived; and each
    observer's first and last delivery (which of them read across a fault window)."""

    per_run: dict[str, dict]
    spans: dict[tuple[str, str], tuple[int, int]]


def live_consumers(rows: Rows, clock: Clock) -> Live:
    if rows.obs_recv is None:
        return Live({}, {})
    has_id = F.col("producer").isNotNull() & F.col("value").isNotNull()
    per = (rows.obs_recv.groupBy("run", "client")
           .agg(F.count(F.lit(1)).alias("n"), F.count(F.when(has_id, 1)).alias("nv"),
                F.count_distinct("producer", "value").alias("nd"),
                F.count(F.when(has_id & F.col("offset").isNotNull(), 1)).alias("nvo"),
                F.count_distinct("producer", "value", "offset").alias("ndo"), F.min("t_ns").alias("t0"),
                F.max("t_ns").alias("t1")))
    live: dict[str, dict] = {}
    spans = {}
    for r in per.collect():
        spans[(r["run"], r["client"])] = (r["t0"], r["t1"])
        x = live.setdefault(r["run"], {"run": r["run"], "rows": 0, "duplicates": 0, "redeliveries": 0,
                                       "t_first": r["t0"]})
        x["rows"] += r["n"]
        x["duplicates"] += r["nv"] - r["nd"]
        x["redeliveries"] += r["nvo"] - r["ndo"]
        x["t_first"] = min(x["t_first"], r["t0"])
    clock.lap("live consumers")
    return Live(live, spans)


# -- consumer groups ----------------------------------------------------------------------------

def consumer_groups(rows: Rows, counts: Counts, t: Tuning, clock: Clock) -> Groups:
    """What each consumer group processed, against what the checking read found (groups.py).
    `rows.members` is read once per figure, from the files: the members' own files, picked by
    a filter the Parquet reader pushes down, cost less than a copy in memory (1 M members'
    rows: 3.1 s without the copy, 4.2 s with it, benchmarks/groups.py)."""
    if rows.members is None:
        return Groups()
    out = analyze_groups(rows.members, rows.groups, counts.blocks, t, counts.recv_rows <= t.plain_rows)
    clock.lap("consumer groups")
    return out


# -- transactions -------------------------------------------------------------------------------

def transactions(rows: Rows, counts: Counts, clock: Clock) -> dict[str, dict]:
    """Per run with transactions (format 1.7), its figures (transactions.py)."""
    out = analyze_txns(rows.checked, sorted(run for run, f in counts.frames.items() if f["txn_outcomes"]))
    if rows.outputs is not None:
        for run, x in exactly_once(rows.checked, rows.outputs, rows.output_ends).items():
            out.setdefault(run, {}).update(x)
    clock.lap("transactions")
    return out


# -- the plan: chosen once, from the sizes ------------------------------------------------------

@dataclass(frozen=True)
class Plan:
    """How the rest of the job is cut, decided once from what the counts and the observers
    found: the history's size against the tuning's limits, and which runs were read while
    written."""

    t: Tuning
    timing: bool
    small: bool  # the history is in memory, one partition
    rows: int  # the history's rows, the observers' deliveries included
    exact: bool  # latency percentiles sorted exactly, at this size
    plain_recv: bool  # deliveries few enough to be paired by one lag()
    plain_reads: bool  # the checking readers' deliveries, likewise
    live_runs: list[str]  # runs read while written: end-to-end latency means something
    first_recv: dict[str, Optional[int]]  # per run, its first delivery to any consumer

    @classmethod
    def of(cls, t: Tuning, timing: bool, small: bool, counts: Counts, live: Live,
           groups: Optional[Groups] = None) -> "Plan":
        groups = groups or Groups()
        live_rows = sum(x["rows"] for x in live.per_run.values()) + groups.rows
        rows = sum(f["rows"] or 0 for f in counts.frames.values()) + live_rows

        def first_live(run: str) -> Optional[int]:
            return min((x for x in (live.per_run.get(run, {}).get("t_first"), groups.t_first.get(run))
                        if x is not None), default=None)

        first_recv = {run: min((x for x in (f["t_first_recv"], first_live(run)) if x is not None), default=None)
                      for run, f in counts.frames.items()}
        live_runs = sorted(run for run, f in counts.frames.items() if live_reader(f, first_live(run)))
        return cls(t, timing, small, rows, rows <= t.exact_percentile_rows,
                   counts.recv_rows + live_rows <= t.plain_rows, counts.recv_rows <= t.plain_rows, live_runs,
                   first_recv)

    def latency_with_gaps(self, counts: Counts, by_acks: list[str], paired: list[str], n_windows: int) -> bool:
        """A run's own analysis, mostly: its ack gaps come with its latencies, one query."""
        n_acks = sum(f["acks"] or 0 for f in counts.frames.values())
        return bool(by_acks and not paired and self.rows <= self.t.sorted_latency_rows
                    and n_acks <= self.t.plain_rows and n_windows <= self.t.per_run_literal)
