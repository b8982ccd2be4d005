"""The ordering concern: the seeds' jumps (JF, JB, DJF, DJB) in each reader's read order,
counted per run, and the duplicates log's returns to what a reader had read before.

Ordering holds per partition: where the checking readers say which partition of a topic
they read a message from (format 1.11), each (producer, partition) is a stream of its own,
and a value's place in it is its rank among the producer's values read from that partition
(a jump forward skips a value the partition holds, not one the producer sent elsewhere)."""
from __future__ import annotations

from typing import Optional

from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import Window
from pyspark.sql import functions as F

from .frames import DEFAULT, count_when, with_previous
from .tuning import Tuning
from .verdicts import JUMP_CLASSES


# joins a producer's name and a partition into the name of their stream (no name holds it)
PART_SEP = "\x1f"


def jumps(df: DataFrame, first: Optional[DataFrame] = None, rereads: bool = True,
          held: Optional[list] = None, tuning: Tuning = DEFAULT, plain: bool = False,
          partitioned: bool = False) -> DataFrame:
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
    Spark job where summarising stretches first takes four. `partitioned`: some reads name
    their partition (by_partition); `first` is then found again from the ranked reads.
    """
    if partitioned:
        rows, ranks = by_partition(df)
        return _unranked(jumps(rows, None, rereads, held, tuning, plain), ranks)
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
        # a stream's first read: a jump forward from "the value before the first" (0) when
        # it is not 1, as the seeds' readers count it; nothing otherwise
        F.when(p.isNull(), F.when(v > 1, F.lit("JF0")))
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
            F.coalesce(p, F.lit(0)).alias("from_value"),
            F.col("value").alias("to_value"),
            F.abs(v - F.coalesce(p, F.lit(0))).alias("size"),
            "seq",
        )
    )


def by_partition(df: DataFrame) -> tuple[DataFrame, DataFrame]:
    """The reads, those that name a partition as streams of their own: `producer` the
    producer's name and the partition's (PART_SEP between), `value` the value's rank among
    those read from that partition in the run; and the ranks (run, producer as the stream,
    `_orig` its producer, value, rank) to put the values back."""
    part = F.col("partition")
    recv = df.where((F.col("type") == "recv") & F.col("producer").isNotNull() & F.col("value").isNotNull())
    cols = ["run", "client", "seq", "type", "producer", "value"]
    placed = recv.where(part.isNotNull()).select(
        "run", "client", "seq", "type", F.concat_ws(PART_SEP, "producer", part).alias("producer"),
        F.col("producer").alias("_orig"), "value")
    ranks = placed.select("run", "producer", "_orig", "value").distinct().withColumn(
        "rank", F.row_number().over(Window.partitionBy("run", "producer").orderBy("value")))
    ranked = placed.join(ranks, ["run", "producer", "_orig", "value"]).select(
        *cols[:-1], F.col("rank").alias("value"))
    return recv.where(part.isNull()).select(*cols).unionByName(ranked), ranks


def _unranked(j: DataFrame, ranks: DataFrame) -> DataFrame:
    """The jumps of by_partition's streams told in their producers' names and values (the
    size too); the other streams' as they were."""
    def back(tag: str) -> DataFrame:
        return ranks.select(F.col("run").alias(f"_run{tag}"), F.col("producer").alias(f"_s{tag}"),
                            F.col("_orig").alias(f"_p{tag}"), F.col("rank").alias(f"_r{tag}"),
                            F.col("value").alias(f"_v{tag}"))

    c = F.col
    to, fr = back("t"), back("f")
    j = (j.join(to, (c("run") == c("_runt")) & (c("producer") == c("_st")) & (c("to_value") == c("_rt")), "left")
         .join(fr, (c("run") == c("_runf")) & (c("producer") == c("_sf")) & (c("from_value") == c("_rf")), "left"))
    frm, tov = F.coalesce(c("_vf"), c("from_value")), F.coalesce(c("_vt"), c("to_value"))
    return j.select("run", "consumer", F.coalesce(c("_pt"), c("producer")).alias("producer"), "class",
                    frm.alias("from_value"), tov.alias("to_value"), F.abs(tov - frm).alias("size"), "seq")


def first_reads(rows: DataFrame) -> DataFrame:
    """(run, client, producer, value, first_seq): when each stream first read each value."""
    return (
        rows.where((F.col("type") == "recv") & F.col("producer").isNotNull() & F.col("value").isNotNull())
        .groupBy("run", "client", "producer", "value")
        .agg(F.min("seq").alias("first_seq"))
    )


def jump_counts(j: DataFrame) -> DataFrame:
    c = F.col("class")
    return j.groupBy("run").agg(*[count_when(c == k).alias(k.lower()) for k in JUMP_CLASSES])


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
