"""The counts concern: every count of verdicts.py's table, from bit-set blocks of 64 messages
(a plain block's counts are its bits' popcounts) and, for the blocks that are not plain,
message by message; the duplicate and loss logs, and what a read found where an acked
message should have been."""
from __future__ import annotations

import collections
import functools
from typing import Optional

from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..history.schema import LATE_NS, MESSAGE_TYPES
from .frames import DEFAULT, columns_once, count_when, with_per_run
from .tuning import Tuning
from .verdicts import count_columns_over_blocks, count_columns_per_message


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


def message_blocks(df: DataFrame, first_fault: dict[str, int], t: Tuning = DEFAULT) -> DataFrame:
    """Every row, summarised per (run, producer, block of 2**block_bits values): which values
    were sent, acked, nacked, unknown and received, as bit sets, how many recv rows, and
    the times the per-run figures need (rows without a message land in a null block).

    Every aggregate has a fixed-width buffer, so the history shrinks map-side to a few rows
    per block and type before anything is shuffled, where a per-message groupBy moves every
    row. Grouping by type first keeps the per-row work to unconditional min/max/bit_or.
    """
    typed = with_per_run(df, first_fault, "_tf", t=t).groupBy("run", "producer", _blk(t).alias("blk"), "type").agg(
        *_typed_columns(t))
    return typed.groupBy("run", "producer", "blk").agg(*_block_columns())


@columns_once
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
        # a read that names the partition it read from (ordering.by_partition)
        F.max(F.col("partition").isNotNull().cast("int")).alias("_pt"),
        # a transactional producer's rows (format 1.7): transactions.py looks at these runs only
        F.count("txn").alias("_tx"),
    ]


@columns_once
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
        F.coalesce(of("recv", "_pt", F.max), F.lit(0)).alias("pt"),
        F.coalesce(of(("ack", "nack", "unknown"), "_tx", F.sum), F.lit(0).cast("long")).alias("tx"),
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


@columns_once
def _rollup_columns() -> list:
    sets = {x: F.col(x) for x in "SANUR"}
    return [
        *count_columns_over_blocks(_plain_block(), sets, F.col("rn")),
        count_when(_unplain_block()).alias("_unplain"),
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
        (F.max("pt") > 0).alias("partitioned"),
        F.sum("tx").alias("txn_outcomes"),
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


def value_ranges(blocks: DataFrame, t: Tuning, which=None, no_identity: bool = True):
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


def lost_bits():
    c = F.col
    return c("S").bitwiseAND(c("A")).bitwiseAND(F.bitwise_not(c("R")))


def lost_messages(blocks: DataFrame, t: Tuning = DEFAULT) -> DataFrame:
    """(run, producer, value) of every acked message never received, read off the blocks'
    bit sets (sent, acked, not received) without going back to the history."""
    c = F.col
    lost = lost_bits()
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
