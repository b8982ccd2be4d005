"""Every verdict of a history, as Spark DataFrame expressions (no Python UDFs).

The building blocks are here; what each count means is verdicts.py (written once, evaluated
per message and over bit-set blocks); how the work is cut, tuning.py. `analyze()` runs the
concerns in turn — counts, ordering, availability, latency — on one job object.
docs/history-format.md defines each figure and tests/oracle.py re-implements them in plain
Python to check this one.
"""
from __future__ import annotations

import collections
import functools
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from ..history.schema import LATE_NS, MESSAGE_TYPES, OBSERVER, SCHEMA, read_finished
from .tuning import Tuning
from .policy import result_of
from .verdicts import COUNT_KEYS, JUMP_CLASSES, Verdict, count_columns_over_blocks, count_columns_per_message

# Spark's DDL for the history schema, derived so the two cannot drift apart.
_DDL = {"string": "string", "int64": "long"}
SPARK_SCHEMA = ", ".join(f"{f.name} {_DDL[str(f.type)]}" for f in SCHEMA)
PERCENTILES = [0.5, 0.99, 0.999]
MS = 1_000_000.0
DEFAULT = Tuning()


def _columns_once(build):
    """`build(*args)`'s columns, built once per Spark context and arguments.

    A Column is an immutable expression tree in the JVM, and building one from Python costs
    a py4j round trip per function and operator: the block summary's ~60 aggregates took
    90 ms of each analysis to build, the same every time. They are kept per context (a
    stopped session's JVM objects are gone; the context itself is the key, as an id could be
    a new context's) and per argument (the Tuning, a flag).
    """
    cache: dict = {}

    def get(*args):
        from pyspark import SparkContext

        key = (SparkContext._active_spark_context, args)
        if key not in cache:
            if len(cache) > 8:
                cache.clear()
            cache[key] = build(*args)
        return cache[key]

    return get


def read_history(spark: SparkSession, *paths: str) -> DataFrame:
    """Every `*.parquet` file at any depth below each path, in format v1."""
    return (
        spark.read.schema(SPARK_SCHEMA)
        .option("recursiveFileLookup", "true")
        .option("pathGlobFilter", "*.parquet")
        .parquet(*[str(p) for p in paths])
    )


def _count(cond) -> Any:
    return F.sum(F.when(cond, 1).otherwise(0))


def with_previous(df: DataFrame, keys: list[str], order: str, value: str, bucket: int,
                  plain: bool = False) -> DataFrame:
    """Adds `prev`: `value` of the previous row in `order` within `keys`.

    A plain lag() over Window.partitionBy(keys) puts a whole stream in one task; with one
    producer and one consumer that is one core. Instead the order is cut into buckets, lag()
    runs per bucket in parallel, and the first row of each bucket takes the last value of
    the previous non-empty bucket from a (small) per-bucket table. `plain`: the input is
    small (Tuning.plain_rows), and one lag() is one shuffle where buckets take three.
    """
    if plain:
        return df.withColumn("prev", F.lag(value).over(Window.partitionBy(*keys).orderBy(order)))
    d = df.withColumn("_b", F.floor(F.col(order) / F.lit(bucket)))
    w = Window.partitionBy(*keys, "_b").orderBy(order)
    d = d.withColumn("_lag", F.lag(value).over(w))
    last = d.groupBy(*keys, "_b").agg(F.max_by(value, order).alias("_last"))
    carry = last.withColumn(
        "_carry", F.lag("_last").over(Window.partitionBy(*keys).orderBy("_b"))
    ).drop("_last")
    return (
        d.join(carry, [*keys, "_b"])
        .withColumn("prev", F.coalesce(F.col("_lag"), F.col("_carry")))
        .drop("_lag", "_carry", "_b")
    )


def message_table(df: DataFrame) -> DataFrame:
    """One row per message identity (run, producer, value) with its outcomes and timings.

    recv rows whose payload was not ours have a null identity and land in one row that was
    never sent: they are stowaways, counted, not dropped.
    """
    t = F.col("type")
    ts = F.col("t_ns")
    return (
        df.where(t.isin(list(MESSAGE_TYPES)))
        .groupBy("run", "producer", "value")
        .agg(
            F.max((t == "send").cast("int")).alias("sent"),
            F.max((t == "ack").cast("int")).alias("acked"),
            F.max((t == "nack").cast("int")).alias("nacked"),
            F.max((t == "unknown").cast("int")).alias("unk"),
            F.sum((t == "recv").cast("long")).alias("recv_n"),
            # deliveries with an offset, how many distinct offsets, and how many distinct
            # (consumer, offset): a message at two offsets was stored twice; one a consumer
            # got twice at one offset was delivered twice
            F.sum(((t == "recv") & F.col("offset").isNotNull()).cast("long")).alias("recv_o"),
            F.size(F.collect_set(F.when(t == "recv", F.col("offset")))).alias("recv_od"),
            F.size(F.collect_set(F.when((t == "recv") & F.col("offset").isNotNull(),
                                        F.struct("client", "offset")))).alias("recv_cod"),
            F.min(F.when(t == "send", ts)).alias("t_send"),
            F.min(F.when(t == "ack", ts)).alias("t_ack"),
            F.min(F.when(t == "recv", ts)).alias("t_recv"),
        )
    )


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


def message_counts(m: DataFrame) -> DataFrame:
    """Per-run counts from the message table (one row per message)."""
    c = F.col
    return m.groupBy("run").agg(*count_columns_per_message(
        c("sent") == 1, c("acked") == 1, c("nacked") == 1, c("unk") == 1, c("recv_n"), c("recv_od"), c("recv_o"),
        c("recv_cod")))


def _blk(t: Tuning):
    return F.expr(f"shiftright(value, {t.block_bits})")


def _bit(t: Tuning):
    return F.expr(f"shiftleft(cast(1 as bigint), cast(value & {(1 << t.block_bits) - 1} as int))")


def _with_per_run(df: DataFrame, values: dict[str, int], name: str, inner: bool = False,
                  t: Tuning = DEFAULT) -> DataFrame:
    """`df` with a column `name` holding `values[run]`: null for other runs, or (`inner`)
    only the rows of the runs in `values`."""
    if not values:
        return df.where(F.lit(False)) if inner else df.withColumn(name, F.lit(None).cast("long"))
    if len(values) <= t.per_run_literal:
        pairs = [x for run, v in sorted(values.items()) for x in (F.lit(run), F.lit(v).cast("long"))]
        d = df.withColumn(name, F.try_element_at(F.create_map(*pairs), F.col("run")))
        return d.where(F.col(name).isNotNull()) if inner else d
    # a session of thousands of runs: a map literal that size cost 40 s per pass over 1 M
    # messages (each row's lookup walks the keys), and so did `isin`; a hash join costs
    # nothing
    table = df.sparkSession.createDataFrame(sorted(values.items()), f"_run string, {name} long")
    return df.join(F.broadcast(table), F.col("run") == F.col("_run"), "inner" if inner else "left").drop("_run")


def _only_runs(df: DataFrame, runs, t: Tuning) -> DataFrame:
    """The rows of these runs."""
    return _with_per_run(df, dict.fromkeys(runs, 0), "_keep", inner=True, t=t).drop("_keep")


def message_blocks(df: DataFrame, first_fault: dict[str, int], t: Tuning = DEFAULT) -> DataFrame:
    """Every row, summarised per (run, producer, block of 2**block_bits values): which values
    were sent, acked, nacked, unknown and received, as bit sets, how many recv rows, and
    the times the per-run figures need (rows without a message land in a null block).

    Every aggregate has a fixed-width buffer, so the history shrinks map-side to a few rows
    per block and type before anything is shuffled, where a per-message groupBy moves every
    row. Grouping by type first keeps the per-row work to unconditional min/max/bit_or.
    """
    typed = _with_per_run(df, first_fault, "_tf", t=t).groupBy("run", "producer", _blk(t).alias("blk"), "type").agg(
        *_typed_columns(t))
    return typed.groupBy("run", "producer", "blk").agg(*_block_columns())


@_columns_once
def _typed_columns(t: Tuning) -> list:
    ts = F.col("t_ns")
    tf = F.col("_tf")
    node = F.col("node").isNotNull()
    return [
        F.bit_or(_bit(t)).alias("_B"), F.count(F.lit(1)).alias("_n"),
        F.min(ts).alias("_lo"), F.max(ts).alias("_hi"),
        # where the transmitter/receiver was: the time of its last event with a node up to
        # the first fault, and of its first; the node itself is looked up afterwards
        F.max(F.when(node & (ts <= tf), ts)).alias("_nf"), F.min(F.when(node, ts)).alias("_n0"),
        F.min(F.when(ts >= tf, ts)).alias("_af"), F.count("send_ns").alias("_sn"),
        # a steady rate's sends that went out late, and the longest lag (sends alone have
        # an intended time)
        F.count(F.when(ts - F.col("intended_ns") > LATE_NS, 1)).alias("_late"),
        F.max(ts - F.col("intended_ns")).alias("_lag"),
    ]


@_columns_once
def _block_columns() -> list:
    ty_ = F.col("type")

    def bits(ty: str):
        return F.coalesce(F.bit_or(F.when(ty_ == ty, F.col("_B"))), F.lit(0).cast("long"))

    def of(ty, col: str, agg):
        return agg(F.when(ty_.isin(*ty) if isinstance(ty, tuple) else ty_ == ty, F.col(col)))

    return [
        bits("send").alias("S"), bits("ack").alias("A"), bits("nack").alias("N"),
        bits("unknown").alias("U"), bits("recv").alias("R"),
        F.coalesce(of("recv", "_n", F.sum), F.lit(0).cast("long")).alias("rn"),
        F.coalesce(of(tuple(MESSAGE_TYPES), "_n", F.sum), F.lit(0).cast("long")).alias("mrows"),
        F.sum("_n").alias("rows"),
        F.coalesce(of("ack", "_sn", F.sum), F.lit(0).cast("long")).alias("sn"),
        F.max("_hi").alias("t_end"),
        of("send", "_lo", F.min).alias("t_first_send"),
        of("send", "_hi", F.max).alias("t_last_send"),
        of("ack", "_lo", F.min).alias("t_first_ack"),
        of("ack", "_hi", F.max).alias("t_last_ack"),
        F.coalesce(of("ack", "_n", F.sum), F.lit(0).cast("long")).alias("acks"),
        of(("send", "ack", "nack", "unknown"), "_hi", F.max).alias("t_write_end"),
        of("recv", "_lo", F.min).alias("t_first_recv"),
        of("send", "_nf", F.max).alias("t_txm_f"),
        of("send", "_n0", F.min).alias("t_txm_0"),
        of("recv", "_nf", F.max).alias("t_rxm_f"),
        of("recv", "_n0", F.min).alias("t_rxm_0"),
        of("ready", "_af", F.min).alias("t_ready"),
        F.coalesce(of("send", "_late", F.sum), F.lit(0).cast("long")).alias("late"),
        of("send", "_lag", F.max).alias("lag"),
    ]


def _plain_block():
    """A block whose messages need no closer look: each received value was received once
    and was sent, and the identity is whole. Its counts follow from the bit sets alone."""
    return (F.col("producer").isNotNull() & F.col("blk").isNotNull()
            & (F.col("rn") == F.bit_count("R")) & (F.col("R").bitwiseAND(F.bitwise_not("S")) == 0))


def _unplain_block():
    return ~_plain_block() & (F.col("mrows") > 0)


def block_rollup(blocks: DataFrame) -> DataFrame:
    """Per run: the counts over the plain blocks, how many blocks were not plain, and the
    run's times."""
    return blocks.groupBy("run").agg(*_rollup_columns())


@_columns_once
def _rollup_columns() -> list:
    sets = {x: F.col(x) for x in "SANUR"}
    return [
        *count_columns_over_blocks(_plain_block(), sets, F.col("rn")),
        _count(_unplain_block()).alias("_unplain"),
        F.sum("rn").alias("recv_rows"),
        F.max("t_end").alias("t_end"),
        *[F.min(k).alias(k) for k in ("t_first_send", "t_first_ack", "t_first_recv", "t_txm_0", "t_rxm_0",
                                      "t_ready")],
        *[F.max(k).alias(k) for k in ("t_last_send", "t_last_ack", "t_write_end", "t_txm_f", "t_rxm_f")],
        F.sum("acks").alias("acks"),
        F.sum("rows").alias("rows"),
        F.sum("sn").alias("send_ns_acks"),
        F.sum("late").alias("late"),
        F.max("lag").alias("lag"),
    ]


def unplain_rows(df: DataFrame, blocks: DataFrame, broadcast: bool, t: Tuning = DEFAULT) -> DataFrame:
    """The message rows of the blocks that are not plain (rows without an identity among them)."""
    c = F.col
    rows = df.where(c("type").isin(list(MESSAGE_TYPES))).withColumn("blk", _blk(t))
    keys = blocks.where(_unplain_block()).select(c("run").alias("_r"), c("producer").alias("_p"),
                                                 c("blk").alias("_k"))
    on = (c("run") == c("_r")) & c("producer").eqNullSafe(c("_p")) & c("blk").eqNullSafe(c("_k"))
    return rows.join(F.broadcast(keys) if broadcast else keys, on, "left_semi").drop("blk")


def _ranges(ks) -> list[list[int]]:
    """Consecutive block numbers as [first, last + 1) ranges."""
    out: list[list[int]] = []
    for k in sorted(ks):
        if out and out[-1][1] == k:
            out[-1][1] = k + 1
        else:
            out.append([k, k + 1])
    return out


def _value_ranges(blocks: DataFrame, t: Tuning, which=None, no_identity: bool = True):
    """A filter on `value` the Parquet reader can use to skip row groups and pages: the
    value ranges of the blocks `which` selects (default: those that are not plain), or
    (`no_identity`) rows without an identity; None when those are more than t.value_ranges
    ranges."""
    which = _unplain_block() if which is None else which
    ranges = _ranges({r["blk"] for r in blocks.where(which & F.col("blk").isNotNull()).select("blk").collect()})
    if len(ranges) > t.value_ranges:
        return None
    cond = (F.col("value").isNull() | F.col("producer").isNull()) if no_identity else F.lit(False)
    for lo, hi in ranges:
        cond = cond | F.col("value").between(lo << t.block_bits, (hi << t.block_bits) - 1)
    return cond


def unplain_filter(blocks: DataFrame, t: Tuning):
    """The message rows of the blocks that are not plain, as a filter of literals (no join),
    or None when their value ranges are more than t.value_ranges.

    A row without a whole identity (no producer, or no value) is always in such a block; the
    others are named by run, producer and value range. The Parquet reader skips the row
    groups and pages the filter rules out. What it replaces, a semi-join with the block
    summary's keys, cost a 100,000-message run's closer look ~0.4 s more for a few dozen
    blocks (a job to broadcast the keys, the join of every row scanned).
    """
    c = F.col
    keys = (blocks.where(_unplain_block() & c("producer").isNotNull() & c("blk").isNotNull())
            .select("run", "producer", "blk").collect())
    by: dict[tuple, list] = collections.defaultdict(list)
    for r in keys:
        by[(r["run"], r["producer"])].append(r["blk"])
    ranges = {k: _ranges(bs) for k, bs in by.items()}
    if sum(len(x) for x in ranges.values()) > t.value_ranges:
        return None
    cond = c("producer").isNull() | c("value").isNull()
    for (run, producer), rs in sorted(ranges.items()):
        within = functools.reduce(lambda a, b: a | b, [c("value").between(lo << t.block_bits, (hi << t.block_bits) - 1)
                                                       for lo, hi in rs])
        cond = cond | ((c("run") == run) & (c("producer") == producer) & within)
    return c("type").isin(list(MESSAGE_TYPES)) & cond


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
        _with_per_run(df, dict.fromkeys(live_runs, 1), "_live", t=t)
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
    aggs, out = _ack_latency_columns()
    return acks.groupBy("run").agg(*aggs).select("run", *out)


@_columns_once
def _ack_latency_columns() -> tuple[list, list]:
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
    lat = F.col("lat")
    b = F.when(lat > 0, F.floor(F.log2(lat) * _OCTAVE_PARTS)).otherwise(F.lit(-1)).cast("long")
    hist = lats.groupBy("run", b.alias("b")).agg(F.count(F.lit(1)).alias("n"), F.min(lat).alias("lo"),
                                                 F.max(lat).alias("hi"))
    out: dict[str, dict] = {}
    buckets: dict[str, list] = collections.defaultdict(list)
    for r in hist.collect():
        out.setdefault(r["run"], {"_ack_p": None, "_ack_max": None, "_e2e_p": None, "_e2e_max": None})
        buckets[r["run"]].append((r["b"], r["n"], r["lo"], r["hi"]))
    # (run, lo, hi) -> [values in it, {rank within it: rank in the run}]
    need: dict[tuple, list] = {}
    size: dict[str, int] = {}
    for run, bs in buckets.items():
        bs.sort()
        size[run] = n = sum(x[1] for x in bs)
        out[run]["_ack_max"] = bs[-1][3] / MS
        _place(need, run, [(c, lo, hi) for _, c, lo, hi in bs], {r: r for r in _ranks(n)})
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
    for run, n in size.items():
        p = []
        for q in PERCENTILES:
            pos = q * (n - 1)
            lo, hi = math.floor(pos), math.ceil(pos)
            a, b_ = value[(run, lo)] / MS, value[(run, hi)] / MS
            p.append(a + (b_ - a) * (pos - lo))
        out[run]["_ack_p"] = p
    return out


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
    iv = lats.sparkSession.createDataFrame([(run, lo, hi) for run, lo, hi, _ in parts],
                                           "run string, lo long, hi long")
    return lats.join(F.broadcast(iv), "run").where(F.col("lat").between(F.col("lo"), F.col("hi")))


def _sorted_ranks(lats: DataFrame, parts: list[tuple]) -> dict[tuple, int]:
    """The values at the wanted ranks of each (run, lo, hi, {rank within: rank in run})."""
    ks = lats.sparkSession.createDataFrame([(run, lo, k) for run, lo, _, ks in parts for k in ks],
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


def jumps(df: DataFrame, first: Optional[DataFrame] = None, rereads: bool = True,
          held: Optional[list] = None, tuning: Tuning = DEFAULT, plain: bool = False) -> DataFrame:
    """Every ordering jump: one row per (consumer, producer) stream deviation, seeds' classes.

    A stream mostly reads consecutive values at consecutive seqs: such a stretch has one
    `value - seq` and no jump inside it, so it is summarised map-side into one unit (first
    seq, first and last value) and only unit starts are compared with what came before.
    Rows of a stream that does not read like that (interleaved producers, reorders) are
    units of one row each, which is the plain row-by-row walk.

    `first`: (run, client, producer, value, first_seq) for at least every value a stream
    read more than once (by default from every read); `rereads=False` says no value was
    read twice. `held` collects what was persisted, for the caller to release. `plain`:
    few reads (Tuning.plain_rows), walked row by row in one lag() per stream, which is one
    Spark job where summarising stretches first takes four.
    """
    t = F.col("type")
    keys = ["run", "client", "producer"]
    # a stretch is also cut every 2**stretch_bits seqs, so that one value - seq shared by
    # two stretches far apart (a block read out of place in between) costs a look at the
    # rows of one cut, not of the whole stream
    r = df.where((t == "recv") & F.col("producer").isNotNull() & F.col("value").isNotNull()).select(
        *keys, "seq", "value", (F.col("value") - F.col("seq")).alias("_d"),
        F.expr(f"shiftright(seq, {tuning.stretch_bits})").alias("_c"),
    )
    gk = [*keys, "_d", "_c"]
    if plain:
        return _classify(with_previous(r.select(*keys, "seq", "value", F.col("value").alias("last")), keys, "seq",
                                       "last", tuning.seq_bucket, plain=True), first, rereads, df)
    g = r.groupBy(*gk).agg(
        F.min("seq").alias("_s0"), F.max("seq").alias("_s1"), F.count(F.lit(1)).alias("_n"),
        F.min("value").alias("_v0"), F.max("value").alias("_v1"),
    )
    # every seq from first to last is this group's: the client read nothing else in between
    stretch = F.col("_n") == F.col("_s1") - F.col("_s0") + 1
    n_loose = None
    if held is not None:
        # a look at the (small) group table decides whether and how rows are read again
        g = g.persist(StorageLevel.MEMORY_AND_DISK)
        held.append(g)
        n_loose = g.where(~stretch).count()
    units = g.where(stretch).select(*keys, F.col("_s0").alias("seq"), F.col("_v0").alias("value"),
                                    F.col("_v1").alias("last"))
    if n_loose != 0:
        loose_keys = g.where(~stretch).select(*gk)
        if n_loose is not None and n_loose <= tuning.broadcast_blocks:
            loose_keys = F.broadcast(loose_keys)
        loose = r.join(loose_keys, gk, "left_semi").select(*keys, "seq", "value", F.col("value").alias("last"))
        units = units.unionByName(loose)
    if held is not None:
        # with_previous reads its input twice (lag per bucket, carry between buckets)
        units = units.persist(StorageLevel.MEMORY_AND_DISK)
        held.append(units)
    return _classify(with_previous(units, keys, "seq", "last", tuning.seq_bucket), first, rereads, df)


def _classify(u: DataFrame, first: Optional[DataFrame], rereads: bool, df: DataFrame) -> DataFrame:
    """The jumps among units that know the value read before them (`prev`)."""
    keys = ["run", "client", "producer"]
    if rereads:
        u = u.join(first if first is not None else first_reads(df), [*keys, "value"], "left")
        dup = F.col("first_seq").isNotNull() & (F.col("seq") > F.col("first_seq"))
    else:
        dup = F.lit(False)
    v, p = F.col("value"), F.col("prev")
    cls = (
        F.when(p.isNull(), F.lit(None))
        .when(v > p + 1, F.when(dup, "DJF").otherwise("JF"))
        .when(v <= p, F.when(dup, "DJB").otherwise("JB"))
    )
    return (
        u.withColumn("class", cls)
        .where(F.col("class").isNotNull())
        .select(
            "run",
            F.col("client").alias("consumer"),
            "producer",
            "class",
            F.col("prev").alias("from_value"),
            F.col("value").alias("to_value"),
            F.abs(v - p).alias("size"),
            "seq",
        )
    )


def first_reads(rows: DataFrame) -> DataFrame:
    """(run, client, producer, value, first_seq): when each stream first read each value."""
    return (
        rows.where((F.col("type") == "recv") & F.col("producer").isNotNull() & F.col("value").isNotNull())
        .groupBy("run", "client", "producer", "value")
        .agg(F.min("seq").alias("first_seq"))
    )


def jump_counts(j: DataFrame) -> DataFrame:
    c = F.col("class")
    return j.groupBy("run").agg(*[_count(c == k).alias(k.lower()) for k in JUMP_CLASSES])


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
        _with_per_run(rows.select("run", "t_ns"), width, "_w", inner=True, t=t)
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
            self._df = self.spark.createDataFrame(self.rows, "run string, w int, t_fault long, t_wend long")
        return self._df


def _gap_facts(g: DataFrame, w: Optional[Windows], t: Tuning = DEFAULT) -> tuple[dict, dict]:
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
    """_gap_facts for a few windows: each window two conditional aggregates of one grouping
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
    """ack_latency's figures and the plain ack gaps' _gap_facts in one query: one lag() per
    run (its shuffle by run also groups the aggregate, which then needs none), the latencies
    sorted and the gaps' maxima in the same grouping. For a run's own analysis (few acks,
    few windows): two queries over the same ack rows took 0.26 s warm, this one 0.17."""
    prev = F.lag("t_ns").over(Window.partitionBy("run").orderBy("t_ns"))
    aggs, out = _ack_latency_columns()
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
    """`_gap_facts` of the ack gaps (`acks`: the ack rows), from time buckets where that is exact.

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
        return _gap_facts(gaps(acks, tuning, plain=True), w, tuning)
    # up to plain_rows buckets, paired by one lag() (one shuffle): at 10 M acks (625,000
    # buckets) 0.4 s against 2.6 s for the buckets of buckets
    plain = n_acks // tuning.bucket_acks <= tuning.plain_rows
    longest, closed = _gap_facts(bucket_gaps(acks, width, tuning, plain), w, tuning)
    walk = {run for run, wd in width.items() if longest.get(run) is None or longest[run] < wd}
    walk |= {run for (run, _), (eff, _) in closed.items() if eff < width[run]}
    if w is not None:
        # a window no bucket gap overlaps may still hold gaps inside a bucket
        walk |= {run for run, i, *_ in w.rows if run in width and (run, i) not in closed}
    if walk:
        l2, c2 = _gap_facts(gaps(_only_runs(acks, walk, tuning), tuning), w, tuning)
        for run in walk:
            longest.pop(run, None)
        closed = {k: v for k, v in closed.items() if k[0] not in walk}
        longest.update(l2)
        closed.update({k: v for k, v in c2.items() if k[0] in walk})
    return longest, closed


def duplicates(df: DataFrame) -> DataFrame:
    """Messages delivered more than once, with every (consumer, offset) they were seen at."""
    t = F.col("type")
    r = df.where((t == "recv") & F.col("value").isNotNull())
    seen = F.sort_array(F.collect_list(F.struct("client", "seq", "offset")))
    return (
        r.groupBy("run", "producer", "value")
        .agg(F.count(F.lit(1)).alias("deliveries"), seen.alias("_seen"))
        .where(F.col("deliveries") > 1)
        .select(
            "run",
            "producer",
            "value",
            "deliveries",
            F.concat_ws(" ", F.transform("_seen", lambda s: F.concat_ws("@", s["client"], s["offset"]))).alias(
                "offsets"
            ),
        )
    )


def duplicate_returns(df: DataFrame, jumps: DataFrame) -> DataFrame:
    """The Pulsar seed's duplicates log: each time a reader went back to a value it had read
    before (a DJB), the message id and value it had just read and those it read then.

    The DJB rows are few (one per duplicated block), so the two look-ups are joins of the
    deliveries with a small table: the current row by its position, the previous one as the
    last read of `from_value` before it.
    """
    djb = jumps.where(F.col("class") == "DJB").select(
        "run", F.col("consumer").alias("client"), "producer", "seq", "from_value", F.col("to_value").alias("value"))
    recv = df.where(F.col("type") == "recv").select("run", "client", "producer", "seq", "value", "offset")
    curr = recv.join(djb, ["run", "client", "producer", "seq", "value"]).select(
        "run", "client", "producer", "seq", "value", "from_value", F.col("offset").alias("curr_offset"))
    before = (
        recv.alias("r").join(
            djb.alias("d"),
            (F.col("r.run") == F.col("d.run")) & (F.col("r.client") == F.col("d.client"))
            & (F.col("r.producer").eqNullSafe(F.col("d.producer"))) & (F.col("r.value") == F.col("d.from_value"))
            & (F.col("r.seq") < F.col("d.seq")))
        .groupBy(F.col("d.run").alias("run"), F.col("d.client").alias("client"), F.col("d.producer").alias("producer"),
                 F.col("d.seq").alias("seq"))
        .agg(F.max_by(F.col("r.offset"), F.col("r.seq")).alias("last_offset"))
    )
    return curr.join(before, ["run", "client", "producer", "seq"], "left").select(
        "run", "client", "producer", "seq", F.col("last_offset").alias("last_msg_id"),
        F.col("from_value").alias("last_value"), F.col("curr_offset").alias("curr_msg_id"),
        F.col("value").alias("curr_value"))


def _lost_bits():
    c = F.col
    return c("S").bitwiseAND(c("A")).bitwiseAND(F.bitwise_not(c("R")))


def lost_messages(blocks: DataFrame, t: Tuning = DEFAULT) -> DataFrame:
    """(run, producer, value) of every acked message never received, read off the blocks'
    bit sets (sent, acked, not received) without going back to the history."""
    c = F.col
    lost = _lost_bits()
    i = F.explode(F.sequence(F.lit(0), F.lit((1 << t.block_bits) - 1)))
    return (
        blocks.where(c("producer").isNotNull() & c("blk").isNotNull() & (lost != 0))
        .select("run", "producer", "blk", lost.alias("_L"))
        .select("run", "producer", "blk", "_L", i.alias("_i"))
        .where(c("_L").bitwiseAND(F.expr("shiftleft(cast(1 as bigint), _i)")) != 0)
        .select("run", "producer", (F.shiftleft(c("blk"), t.block_bits) + c("_i")).alias("value"))
    )


def losses(df: DataFrame, lost: DataFrame, broadcast: bool, held: Optional[list] = None,
           near=None) -> DataFrame:
    """The `lost` messages with the positions their acks named (`acked_at`) and the messages
    the read found at those positions (`read_there`, `producer:value`, `?` for a row without
    an identity). A lost message whose position holds another message was not merely left
    unread: the broker gave its place to something else (an overwrite, or a replica that
    diverged from the one that acked)."""
    t, key = F.col("type"), ["run", "producer", "value"]

    def small(x):
        return F.broadcast(x) if broadcast else x

    acks = (
        df.where((t == "ack") & F.col("value").isNotNull() & (F.lit(True) if near is None else near))
        .select(*key, "offset", "t_ns", "node")
        .join(small(lost), key, "left_semi")
    )
    if held is not None:
        # read twice below: once for the positions to look up, once to join what is there
        acks = acks.persist(StorageLevel.MEMORY_AND_DISK)
        held.append(acks)
    at = acks.where(F.col("offset").isNotNull()).select("run", "offset").distinct()
    ident = F.concat_ws(":", F.coalesce(F.col("producer"), F.lit("?")),
                        F.coalesce(F.col("value").cast("string"), F.lit("?")))
    there = (
        df.where((t == "recv") & F.col("offset").isNotNull())
        .join(small(at), ["run", "offset"], "left_semi")
        .groupBy("run", "offset").agg(F.collect_set(ident).alias("_there"))
    )
    return (
        acks.join(there, ["run", "offset"], "left")
        .groupBy(*key)
        .agg(
            F.sort_array(F.collect_set("offset")).alias("_at"),
            F.min("t_ns").alias("first_ack_ns"),
            F.sort_array(F.collect_set("node")).alias("_by"),
            F.sort_array(F.array_distinct(F.flatten(F.collect_list(
                F.coalesce("_there", F.array().cast("array<string>")))))).alias("_there"),
        )
        .select(*key, F.concat_ws(" ", "_at").alias("acked_at"), "first_ack_ns",
                F.concat_ws(" ", "_by").alias("acked_by"),
                F.concat_ws(" ", "_there").alias("read_there"), (F.size("_there") > 0).alias("overwritten"))
    )


@dataclass
class Analysis:
    verdicts: list[dict]
    jumps: DataFrame
    latency_exact: bool
    # the duplicate and loss logs' frames, built when first read: a run's own verdict never
    # reads them, and building them (empty ones included) was ~0.1 s of py4j calls per analysis
    build_duplicates: Callable[[], DataFrame]
    build_losses: Callable[[], DataFrame]
    meta: dict = field(default_factory=dict)
    # cached frames the logs read from; release() frees them
    kept: list = field(default_factory=list)

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


def _fault_windows(nemesis: list, ends: dict[str, int]) -> list[tuple]:
    """(run, index, t_fault, t_window_end, node, detail, window id) per fault (see pair_windows)."""
    by_run: dict[str, list] = {}
    for row in nemesis:
        by_run.setdefault(row["run"], []).append(row)
    out = []
    for run, rows in by_run.items():
        for i, (tf, te, f) in enumerate(pair_windows(rows, ends.get(run, max(r["t_ns"] for r in rows)))):
            out.append((run, i, tf, te, f["node"], f["detail"], f.get("window")))
    return out


def _outage(t_fault: int, t_wend: int, closed: Optional[tuple], t_last_ack: Optional[int],
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


def _session_facts(spark: SparkSession, df: DataFrame, windows: list, frames: dict[str, dict],
                   tuning: Tuning, plain: bool = False) -> dict[str, dict]:
    """What the VerneMQ seed's per-run table needs beyond the verdicts, per run: the node
    the transmitter/receiver was on at the first fault (else at its first event), the
    first `ready` after that fault, and the receiver's longest delivery gap in its window.

    The times of those events come with the block summaries; here the rows at those times
    are looked up for their node (by a filter on a handful of times, or a broadcast join on
    the (run, time) pairs when they are many).
    """
    t, ts = F.col("type"), F.col("t_ns")
    out: dict[str, dict] = {run: {"t_ready": f["t_ready"]} for run, f in frames.items()}
    want = [(run, kind, f[f"t_{kind}"]) for run, f in frames.items()
            for kind in ("txm_f", "txm_0", "rxm_f", "rxm_0") if f[f"t_{kind}"] is not None]
    if want:
        times = sorted({tm for _, _, tm in want})
        rows = df.where(t.isin("send", "recv") & F.col("node").isNotNull())
        if len(times) <= tuning.value_ranges:
            # a few times: a filter the Parquet reader skips row groups with, and enough (the
            # rows of other runs at the same times are left out below)
            rows = rows.where(ts.isin(times))
        else:
            at = spark.createDataFrame(sorted({(run, tm) for run, _, tm in want}), "run string, t_ns long")
            rows = rows.join(F.broadcast(at), ["run", "t_ns"])
        rows = rows.select("run", "t_ns", "type", "client", "seq", "node").collect()
        for run, kind, tm in want:
            ty = "send" if kind.startswith("tx") else "recv"
            cands = sorted((r["client"], r["seq"], r["node"]) for r in rows
                           if r["run"] == run and r["t_ns"] == tm and r["type"] == ty)
            if cands:
                out[run][kind] = (cands[-1] if kind.endswith("_f") else cands[0])[2]
    first = [(r, tf, te) for r, i, tf, te, *_ in windows if i == 0]
    if first:
        w0 = spark.createDataFrame(first, "run string, t_fault long, t_wend long")
        # the receivers already reading when the fault's window closed (a consumer that only
        # reads after the write phase has no row by then and costs nothing here)
        recv = df.where(t == "recv").select("run", "client", "t_ns")
        reading = (
            recv.join(F.broadcast(w0), "run")
            .where(ts <= F.col("t_wend"))
            .select("run", "client")
            .distinct()
        )
        recv_gaps = gaps(recv.join(F.broadcast(reading), ["run", "client"]), tuning, plain)
        eff = F.col("gap_end") - F.greatest(F.col("gap_start"), F.col("t_fault"))
        rx = (
            recv_gaps.join(F.broadcast(w0), "run")
            .where((F.col("gap_end") > F.col("t_fault")) & (F.col("gap_start") <= F.col("t_wend")))
            .groupBy("run").agg(F.max(eff).alias("rx_down"))
        )
        for r in rx.collect():
            out.setdefault(r["run"], {})["rx_down"] = r["rx_down"]
    return out


def _pct(arr: Optional[list], mx: Optional[float]) -> Optional[dict]:
    if arr is None or mx is None:
        return None
    return {"p50": arr[0], "p99": arr[1], "p999": arr[2], "max": mx}


def _live_reader(f: dict, t_first_observed: Optional[int] = None) -> bool:
    """A consumer read while producers were still sending (end-to-end latency means something)."""
    first = min((t for t in (f["t_first_recv"], t_first_observed) if t is not None), default=None)
    return first is not None and f["t_last_send"] is not None and first < f["t_last_send"]


class _Clock:
    """Seconds per step of an analysis (Analysis.meta["seconds"]), for benchmarks."""

    def __init__(self) -> None:
        self.t = time.perf_counter()
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = round(now - self.t, 3)
        self.t = now


class _Job:
    """One analysis, concern by concern. `held` is freed when the job ends; `kept` stays
    cached for the logs until Analysis.release()."""

    def __init__(self, spark: SparkSession, df: DataFrame, timing: bool, tuning: Tuning, small: bool = False) -> None:
        self.spark, self.df, self.timing, self.t = spark, df, timing, tuning
        # the history is in memory, one partition (_in_memory), freed when the job ends
        self.small = small
        self.clock = _Clock()
        self.held: list[DataFrame] = [df] if small else []
        self.kept: list[DataFrame] = []
        self.dups = lambda: duplicates(df.where(F.lit(False)))
        self.lost = None
        self.jumps = None
        self.msgs: dict[str, dict] = {}
        self.jc: dict[str, dict] = {}
        self.lats: dict[str, dict] = {}
        self.max_ack_gap: dict = {}
        # (longest, closed) of the ack gaps when latency() found them with the latencies
        self.ack_gap_facts: Optional[tuple[dict, dict]] = None
        self.max_recv_gap: dict[str, int] = {}
        self.outages: dict[tuple, Optional[int]] = {}
        self.ack_gaps: dict[tuple, Optional[int]] = {}
        self.recv_gaps: dict[tuple, int] = {}
        self.session: dict[str, dict] = {}
        self.live: dict[str, dict] = {}

    def nemesis(self) -> None:
        """The few rows that are not messages: faults, heals, read ends, observers' subscribes."""
        small = [r.asDict() for r in self.df.where(F.col("type").isin("fault", "heal", "read_end", "subscribe"))
                 .select("run", "client", "t_ns", "type", "node", "detail", "window").collect()]
        observers = {(r["run"], r["client"]) for r in small if r["type"] == "subscribe" and r["detail"] == OBSERVER}
        self.nemesis_rows = [r for r in small if r["type"] in ("fault", "heal")]
        self.read_ends: dict[str, list] = {}
        self.live_ends: dict[str, list] = {}
        for r in small:
            if r["type"] == "read_end":
                ends = self.live_ends if (r["run"], r["client"]) in observers else self.read_ends
                ends.setdefault(r["run"], []).append(r["detail"])
        self.observers = collections.Counter(run for run, _ in observers)
        self.obs_recv = None
        if observers:
            # an observer's deliveries measure the consumer side; the end check is the others'
            who = F.broadcast(self.spark.createDataFrame(sorted(observers), "run string, client string"))
            self.obs_recv = self.df.join(who, ["run", "client"]).where(F.col("type") == "recv")
            self.df = self.df.join(who, ["run", "client"], "left_anti")
        self.first_fault: dict[str, int] = {}
        for r in self.nemesis_rows:
            if r["type"] == "fault":
                self.first_fault[r["run"]] = min(r["t_ns"], self.first_fault.get(r["run"], r["t_ns"]))
        self.clock.lap("rows, nemesis")

    def counts(self) -> None:
        """Every count: from the blocks' bit sets, and message by message for the blocks that
        are not plain; then, where acked messages are missing, what the read found instead."""
        df, t = self.df, self.t
        blocks = message_blocks(df, self.first_fault, t)
        if not self.small:
            # read again by the closer look and the losses: in a small history, a pass over the
            # rows in memory costs less than the cache (the common run reads them once)
            blocks = blocks.persist(StorageLevel.MEMORY_AND_DISK)
            self.held.append(blocks)
        self.frames = {r["run"]: r.asDict() for r in block_rollup(blocks).collect()}
        self.msgs = {run: dict(f) for run, f in self.frames.items()}
        self.recv_rows = sum(f["recv_rows"] or 0 for f in self.frames.values())
        self.clock.lap("blocks")
        unplain = sum(f["_unplain"] for f in self.frames.values())
        self.first = None
        if unplain:
            if self.small:
                # rows in memory: every message looked at costs less than choosing the blocks'
                # (a join with the block summary, which a small history does not keep), and
                # its counts replace the plain blocks' instead of adding to them
                rows = df.where(F.col("type").isin(list(MESSAGE_TYPES)))
                for m in self.msgs.values():
                    m.update({k: 0 for k in COUNT_KEYS})
            else:
                exact = unplain_filter(blocks, t) if unplain <= 100_000 else None
                if exact is not None:
                    rows = df.where(exact)
                else:
                    rows = unplain_rows(df, blocks, unplain <= t.broadcast_blocks, t)
                    # the filter skips Parquet row groups
                    near = _value_ranges(blocks, t) if unplain <= 100_000 else None
                    if near is not None:
                        rows = rows.where(near)
                rows = rows.persist(StorageLevel.MEMORY_AND_DISK)
                self.kept.append(rows)
            # a message read twice is in a block that is not plain: these rows hold every one
            self.dups = lambda: duplicates(rows)
            for r in message_counts(message_table(rows)).collect():
                m = self.msgs.setdefault(r["run"], {k: 0 for k in COUNT_KEYS})
                for k in COUNT_KEYS:
                    m[k] = (m.get(k) or 0) + (r[k] or 0)
            self.first = first_reads(rows)
            self.clock.lap("blocks looked at closely")
        n_lost = sum(m.get("acked_missing") or 0 for m in self.msgs.values())
        if not n_lost:
            self.lost = lambda: losses(df.where(F.lit(False)), lost_messages(blocks, t).where(F.lit(False)), True)
            return
        ids = lost_messages(blocks, t)
        # worth two passes when it happens: which acked messages, and what the read found
        # where the broker said it had stored them
        near = (_value_ranges(blocks, t, _lost_bits() != 0, no_identity=False)
                if n_lost <= 100_000 and not self.small else None)
        lost = losses(df, ids, n_lost <= t.broadcast_lost, self.held, near).persist(StorageLevel.MEMORY_AND_DISK)
        self.kept.append(lost)
        self.lost = lambda: lost
        for r in lost.groupBy("run").agg(_count(F.col("overwritten")).alias("n")).collect():
            self.msgs[r["run"]]["acked_missing_overwritten"] = r["n"]
        self.clock.lap("losses")

    def ordering(self) -> None:
        j = jumps(self.df, self.first, rereads=self.first is not None, held=self.held, tuning=self.t,
                  plain=self.recv_rows <= self.t.plain_rows)
        self.jumps = j.persist(StorageLevel.MEMORY_AND_DISK)
        self.kept.append(self.jumps)
        self.jc = {r["run"]: r.asDict() for r in jump_counts(self.jumps).collect()}
        self.clock.lap("ordering")

    def windows(self) -> None:
        self.windows_ = _fault_windows(self.nemesis_rows, {k: f["t_end"] for k, f in self.frames.items()})
        self.w = None
        if self.windows_:
            self.w = Windows(self.spark, [(r, i, tf, te) for r, i, tf, te, *_ in self.windows_])
        self.live_runs = sorted(run for run, f in self.frames.items()
                                if _live_reader(f, self.live.get(run, {}).get("t_first")))
        # the history's rows (the observers' deliveries included): up to a limit, latency
        # percentiles are exact
        live_rows = sum(x["rows"] for x in self.live.values())
        self.rows = sum(f["rows"] or 0 for f in self.frames.values()) + live_rows
        self.exact = self.latency_exact = self.rows <= self.t.exact_percentile_rows
        # the first delivery of each run, to any consumer: one that starts after a fault
        # window has closed read nothing across it
        self.first_recv = {run: min((x for x in (f["t_first_recv"], self.live.get(run, {}).get("t_first"))
                                     if x is not None), default=None) for run, f in self.frames.items()}
        self.plain_recv = self.recv_rows + live_rows <= self.t.plain_rows

    def live_consumers(self) -> None:
        """What the observers received: rows, duplicates (a message again to the same
        observer) and of those the redeliveries (at the same offset), per run; and when the
        first arrived."""
        self.live = {}
        # each observer's first and last delivery: which of them read across a fault window
        self.obs_spans: dict[tuple[str, str], tuple[int, int]] = {}
        if self.obs_recv is None:
            return
        per = (self.obs_recv.groupBy("run", "client")
               .agg(F.count(F.lit(1)).alias("n"),
                    F.count(F.when(F.col("producer").isNotNull() & F.col("value").isNotNull(), 1)).alias("nv"),
                    F.count_distinct("producer", "value").alias("nd"),
                    F.count(F.when(F.col("producer").isNotNull() & F.col("value").isNotNull()
                                   & F.col("offset").isNotNull(), 1)).alias("nvo"),
                    F.count_distinct("producer", "value", "offset").alias("ndo"), F.min("t_ns").alias("t0"),
                    F.max("t_ns").alias("t1")))
        for r in per.collect():
            self.obs_spans[(r["run"], r["client"])] = (r["t0"], r["t1"])
            x = self.live.setdefault(r["run"], {"run": r["run"], "rows": 0, "duplicates": 0, "redeliveries": 0,
                                                "t_first": r["t0"]})
            x["rows"] += r["n"]
            x["duplicates"] += r["nv"] - r["nd"]
            x["redeliveries"] += r["nvo"] - r["ndo"]
            x["t_first"] = min(x["t_first"], r["t0"])
        self.clock.lap("live consumers")

    def _recv(self) -> DataFrame:
        """Every recv row: the checking readers' and the observers'."""
        recv = self.df.where(F.col("type") == "recv")
        return recv if self.obs_recv is None else recv.unionByName(self.obs_recv)

    def _acks(self) -> DataFrame:
        """The ack rows, for latency and the ack gaps. (Not kept in memory: at 10 M acks the
        cache cost 3.7 s to fill and spared 0.8 s of the two passes that read it.)"""
        return self.df.where(F.col("type") == "ack").select("run", "t_ns", "send_ns")

    def latency(self) -> None:
        """From the acks that carry their send time (format 1.4), an aggregate; else (older
        histories) and for end-to-end latency (runs read while written), each message's
        first send paired with its first ack and delivery."""
        by_acks = sorted(run for run, f in self.frames.items() if f["send_ns_acks"] and run not in self.live_runs)
        paired = sorted(set(self.frames) - set(by_acks))
        n_acks = sum(f["acks"] or 0 for f in self.frames.values())
        windows = self.w.rows if self.w is not None else []
        if (by_acks and not paired and self.rows <= self.t.sorted_latency_rows and n_acks <= self.t.plain_rows
                and len(windows) <= self.t.per_run_literal):
            # a run's own analysis, mostly: its ack gaps come with its latencies (availability)
            lats, longest, closed = ack_facts(self._acks(), windows)
            self.lats.update(lats)
            self.ack_gap_facts = (longest, closed)
            self.latency_exact = True
            self.clock.lap("latency, ack gaps")
            return
        if by_acks:
            d = self._acks()
            d = _only_runs(d, by_acks, self.t) if paired else d
            if self.rows <= self.t.sorted_latency_rows:
                d = d.where(F.col("send_ns").isNotNull())
                self.lats.update({r["run"]: r.asDict() for r in ack_latency(d).collect()})
            else:
                self.lats.update(ranked_ack_latency(d, self.t))
        # exact, but where latencies are paired past exact_percentile_rows
        self.latency_exact = self.exact or not paired
        if paired:
            rows = self.df if self.obs_recv is None else self.df.unionByName(self.obs_recv)
            if by_acks:
                rows = _only_runs(rows, paired, self.t)
            lat = latency_verdicts(latency_table(rows, self.live_runs, self.t), self.exact)
            self.lats.update({r["run"]: r.asDict() for r in lat.collect()})
        self.clock.lap("latency")

    def availability(self) -> None:
        """Ack gaps, the outage of each fault window, and the longest delivery gap of the
        consumers that read while a fault was in effect."""
        if self.ack_gap_facts is not None:
            self.max_ack_gap, closed = self.ack_gap_facts
        else:
            self.max_ack_gap, closed = ack_gap_facts(self._acks(), self.frames, self.w, self.t)
            self.clock.lap("ack gaps")
        if not self.windows_:
            return
        for run, i, tf, te, *_ in self.windows_:
            f = self.frames[run]
            self.outages[(run, i)] = _outage(tf, te, closed.get((run, i)), f["t_last_ack"], f["t_write_end"])
            # the outage's own length: the longest ack-free interval, from the fault on
            self.ack_gaps[(run, i)] = None if self.outages[(run, i)] is None else closed[(run, i)][0]
        if not any(self.first_recv.get(run) is not None and self.first_recv[run] <= te
                   for run, i, tf, te, *_ in self.windows_):
            return  # every read began after the faults' windows (the seeds' read at the end)
        # a consumer reading across a window: it received before its end and after its start
        # (one that received nothing inside it is the outage this is about)
        if (any(self._checked_by(run, te) for run, i, tf, te, *_ in self.windows_)
                or len(self.obs_spans) > self.t.per_run_literal):
            recv = self._recv().select("run", "client", "t_ns")
            live = (
                recv.groupBy("run", "client").agg(F.min("t_ns").alias("_lo"), F.max("t_ns").alias("_hi"))
                .join(F.broadcast(self.w.df), "run")
                .where((F.col("_lo") <= F.col("t_wend")) & (F.col("_hi") >= F.col("t_fault")))
                .select("run", "client")
                .distinct()
            )
            recv = recv.join(F.broadcast(live), ["run", "client"])
        else:
            # only observers read during the windows (the checking readers began after them),
            # and live_consumers() has their spans: the few that qualify, as literals (a
            # query and a broadcast less)
            live = sorted({(run, c) for (run, c), (lo, hi) in self.obs_spans.items()
                           for r, i, tf, te, *_ in self.windows_ if r == run and lo <= te and hi >= tf})
            if not live:
                return
            recv = self.obs_recv.where(functools.reduce(
                lambda a, b: a | b, [(F.col("run") == run) & (F.col("client") == c) for run, c in live]))
            recv = recv.select("run", "client", "t_ns")
        rg = gaps(recv, self.t, self.plain_recv).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            self.max_recv_gap, rclosed = _gap_facts(rg, self.w, self.t)
        finally:
            rg.unpersist()
        # the consumer side of each window: its longest delivery gap from the fault on
        self.recv_gaps = {k: eff for k, (eff, _) in rclosed.items()}
        self.clock.lap("receive gaps")

    def _checked_by(self, run: str, t: int) -> bool:
        """A checking reader (not an observer) of `run` had received something by `t`."""
        first = self.frames[run]["t_first_recv"]
        return first is not None and first <= t

    def session_facts(self) -> None:
        # the receiver's gap is the checking readers' (self.df has no observer's rows): a run
        # whose only reader during the window was an observer has none, and no query for it
        # (1.3-1.5 s of a live-consumer run's analysis on two slow cores)
        windows = [x for x in self.windows_ if self.timing and x[1] == 0 and self._checked_by(x[0], x[3])]
        self.session = _session_facts(self.spark, self.df, windows, self.frames, self.t,
                                      self.recv_rows <= self.t.plain_rows)
        self.clock.lap("session facts")

    def verdict(self, run: str, position: int) -> Verdict:
        f, m = self.frames[run], self.msgs.get(run, {})
        lat = self.lats.get(run) or {}
        v: dict[str, Any] = {"run": run}
        for k in COUNT_KEYS:
            v[k] = int(m.get(k) or 0)
        v["acked_missing_overwritten"] = int(m.get("acked_missing_overwritten") or 0)
        v["ack_count"] = v["pos_ack_count"] + v["neg_ack_count"]
        counts = self.jc.get(run, {})
        for k in JUMP_CLASSES:
            v[k.lower()] = int(counts.get(k.lower()) or 0)
        v["out_of_order"] = v["jb"]
        ends = self.read_ends.get(run)
        v["read_complete"] = None if not ends else all(read_finished(e) for e in ends)
        v["read_status"] = None if not ends else "; ".join(sorted(set(ends)))
        v["recv_rows"] = int(f["recv_rows"])
        g = self.max_ack_gap.get(run)
        v["max_ack_gap_ms"] = None if g is None else g / MS
        g = self.max_recv_gap.get(run)
        v["max_recv_gap_ms"] = None if g is None else g / MS
        run_windows = [x for x in self.windows_ if x[0] == run]
        v["faults"] = [{"t_ms": tf / MS, "until_ms": te / MS, "node": node, "detail": detail, "window": wid}
                       for _, _, tf, te, node, detail, wid in run_windows]
        v["fault_outages_ms"] = [None if self.outages.get((run, i)) is None else self.outages[(run, i)] / MS
                                 for _, i, *_ in run_windows]
        v["fault_ack_gaps_ms"] = [None if self.ack_gaps.get((run, i)) is None else self.ack_gaps[(run, i)] / MS
                                  for _, i, *_ in run_windows]
        v["fault_recv_gaps_ms"] = [None if self.recv_gaps.get((run, i)) is None else self.recv_gaps[(run, i)] / MS
                                   for _, i, *_ in run_windows]
        v["ack_latency_ms"] = _pct(lat.get("_ack_p"), lat.get("_ack_max"))
        v["e2e_latency_ms"] = _pct(lat.get("_e2e_p"), lat.get("_e2e_max")) if run in self.live_runs else None
        # a steady rate's sends that went out late (the producer was held back: in-flight
        # bound, stalled client), and the longest lag; null without a rate
        lagged = self.timing and f["lag"] is not None
        v["late_sends"] = int(f["late"]) if lagged else None
        v["max_send_lag_ms"] = f["lag"] / MS if lagged else None
        live = self.live.get(run, {})
        v["live_consumers"] = self.observers.get(run, 0)
        v["live_recv_rows"] = int(live.get("rows") or 0)
        v["live_duplicates"] = int(live.get("duplicates") or 0)
        v["live_redeliveries"] = int(live.get("redeliveries") or 0)
        ends = self.live_ends.get(run)
        v["live_read_status"] = None if not ends else "; ".join(sorted(set(ends)))
        v["latency_exact"] = self.latency_exact
        v["timing"] = self.timing
        v["result"] = result_of(v)
        v["facts"] = self._facts(run, position, run_windows)
        return v

    def _facts(self, run: str, position: int, run_windows: list) -> dict[str, Any]:
        """What the VerneMQ seed's per-run table is computed from (report/session_table.py):
        where the transmitter and receiver were at the first fault (else at their first
        event), and the times that bound the run and its first fault."""
        f, facts = self.frames[run], self.session.get(run, {})
        first = run_windows[0] if run_windows else None
        return {
            "position": position,
            "t_first_send": f.get("t_first_send"),
            "t_last_ack": f.get("t_last_ack"),
            "t_fault": first[2] if first else None,
            "fault_nodes": first[4] if first else None,
            "t_ready": facts.get("t_ready") if first else None,
            "txm": (facts.get("txm_f") or facts.get("txm_0")) if first else facts.get("txm_0"),
            "rxm": (facts.get("rxm_f") or facts.get("rxm_0")) if first else facts.get("rxm_0"),
            "rx_down_ns": facts.get("rx_down"),
        }


def _in_memory(df: DataFrame, t: Tuning) -> Optional[DataFrame]:
    """A small history (Tuning.small_bytes) as one cached partition, else None.

    coalesce(1), unlike repartition(1), says its output is a single partition, so the
    planner adds no exchange for any grouping, window or join above it: every query of the
    analysis is one stage of one task over rows already in memory. The size is the scan's
    own estimate (the files' bytes), known without a job.
    """
    jdf = getattr(df, "_jdf", None)
    if jdf is None:  # a Spark Connect session: the plain path is as exact
        return None
    # a Scala BigInt: py4j hands over a number or an object, by version; both print as one
    size = int(str(jdf.queryExecution().optimizedPlan().stats().sizeInBytes()))
    if size > t.small_bytes:
        return None
    return df.coalesce(1).persist(StorageLevel.MEMORY_ONLY)


def analyze(spark: SparkSession, df: DataFrame, timing: bool = True, tuning: Tuning = DEFAULT) -> "Analysis":
    """Every verdict of every run in `df`.

    timing=False leaves out the time-based figures (latency percentiles, ack and receive
    gaps, outages): the seeds' own figures only, which need no per-message join.
    """
    small = _in_memory(df, tuning)
    job = _Job(spark, small if small is not None else df, timing, tuning, small=small is not None)
    try:
        job.nemesis()
        job.counts()
        job.ordering()
        job.live_consumers()
        job.windows()
        if timing:
            job.latency()
            job.availability()
        job.session_facts()
    except BaseException:
        for d in job.kept:
            d.unpersist()
        raise
    finally:
        for d in job.held:
            d.unpersist()
    verdicts = [job.verdict(run, i) for i, run in enumerate(sorted(job.frames), 1)]
    # the runs whose acks carry their send time (format 1.4): the report's latency plot needs
    # no pairing for them either
    send_ns_runs = sorted(run for run, f in job.frames.items() if f["send_ns_acks"])
    return Analysis(verdicts, job.jumps, job.latency_exact, job.dups, job.lost,
                    meta={"seconds": job.clock.laps, "send_ns_runs": send_ns_runs}, kept=job.kept)
