"""Transactions (format 1.7): what a transactional producer's outcomes say, held against
what the checking read found. A message of a transaction names it (`txn`) on its outcome
row, whose type is the transaction's outcome. docs/history-format.md ("Transactions")
defines each figure; tests/oracle.py implements them again.

A transaction (run, producer, txn) is *committed* when one of its outcome rows is an `ack`,
else *aborted* when one is a `nack`, else *unknown*.
- aborted reads: messages of aborted transactions the checking read found (a
  read_committed reader must never be handed them);
- torn transactions: committed ones the read found in part (some of their messages, not all);
- offset conflicts: offsets at which two different messages were seen, by the producers'
  reports (`ack`, `nack`) or the checking read, in a run with transactions;
- nonmonotonic reads: reads at a partition's offset (`<partition>:<offset>`, Kafka's) not
  past the one the same reader read before it in that partition, in a run with transactions;
- interleaved transactions: reads of a message of a producer's transaction after the same
  reader read, in the same partition, a message of a later transaction of that producer
  (its transactions end one before the next begins: the log may not mix them, KAFKA-17754's
  shape).
Only the runs with a `txn` on an outcome row are looked at (the counts say which): a history
without transactions costs nothing here.

Exactly once (`exactly_once`): what a consume-transform-produce group wrote to its output,
as the end read of that output found it (clients whose subscribe detail is `output`), held
against the producers' outcomes of the input:
- eos duplicates: messages the output holds more often than the input does (as the checking
  read found it: its distinct offsets, at least one): a message stored twice in the input
  (a plain producer's resend) is rightly copied twice;
- eos missing: acked messages the output lacks (decided once the output's read, the group's
  and the checking read finished);
- eos nacked: messages in the output whose every outcome was a nack (an aborted transaction's
  message, passed on by a read_committed consumer).
"""
from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from ..history.schema import read_finished
from .frames import count_when

TXN_KEYS = ("txns", "txns_committed", "txns_aborted", "txns_unknown", "aborted_reads", "torn_txns",
            "offset_conflicts", "nonmonotonic_reads", "interleaved_txns")
_MSG = ["run", "producer", "value"]


def analyze(checked: DataFrame, runs: list[str]) -> dict[str, dict]:
    """Per run with transactions, TXN_KEYS; {} for a history without any. `runs`: those
    whose outcome rows name a transaction (the counts found them: no job of its own)."""
    if not runs:
        return {}
    checked = checked.where(F.col("run").isin(runs))
    t = F.col("type")
    outcome = F.col("txn").isNotNull() & t.isin("ack", "nack", "unknown")
    recv = (t == "recv") & F.col("value").isNotNull()
    # a message's outcomes and whether the read found it, from one grouping of both kinds of row
    msgs = checked.where(outcome | recv).groupBy(*_MSG).agg(
        F.max(F.when(outcome, F.col("txn"))).alias("txn"), F.max((t == "ack").cast("int")).alias("a"),
        F.max((t == "nack").cast("int")).alias("n"), F.max(recv.cast("int")).alias("r")).where(F.col("txn").isNotNull())
    txns = msgs.groupBy("run", "producer", "txn").agg(
        F.max("a").alias("a"), F.max("n").alias("n"), F.count(F.lit(1)).alias("size"), F.sum("r").alias("read"))
    committed, aborted = F.col("a") == 1, (F.col("a") == 0) & (F.col("n") == 1)
    per = {r["run"]: r.asDict() for r in txns.groupBy("run").agg(
        F.count(F.lit(1)).alias("txns"), count_when(committed).alias("txns_committed"),
        count_when(aborted).alias("txns_aborted"), count_when(~committed & ~aborted).alias("txns_unknown"),
        F.sum(F.when(aborted, F.col("read")).otherwise(0)).alias("aborted_reads"),
        count_when(committed & (F.col("read") > 0) & (F.col("read") < F.col("size"))).alias("torn_txns"),
    ).collect()}
    if not per:
        return {}
    conflicts = _offset_conflicts(checked)
    backwards, mixed = _out_of_order(checked, msgs)
    for run, x in per.items():
        x.pop("run", None)
        x["offset_conflicts"] = conflicts.get(run, 0)
        x["nonmonotonic_reads"] = backwards.get(run, 0)
        x["interleaved_txns"] = mixed.get(run, 0)
    return {run: {k: int(x[k] or 0) for k in TXN_KEYS} for run, x in per.items()}


def _offset_conflicts(rows: DataFrame) -> dict[str, int]:
    """Per run, the offsets holding two different messages."""
    t = F.col("type")
    seen = rows.where(F.col("offset").isNotNull() & t.isin("ack", "nack", "recv"))
    # two different messages at an offset: its least and greatest (producer, value) differ
    # (one aggregation; a distinct count is two, with a shuffle of every row between them)
    m = F.struct(*_MSG[1:])
    at = seen.groupBy("run", "offset").agg(F.min(m).alias("lo"), F.max(m).alias("hi"))
    return {r["run"]: int(r["n"]) for r in at.where(~F.col("lo").eqNullSafe(F.col("hi"))).groupBy("run").agg(
        F.count(F.lit(1)).alias("n")).collect()}


def _out_of_order(rows: DataFrame, msgs: DataFrame) -> tuple[dict[str, int], dict[str, int]]:
    """Per run, the nonmonotonic reads and the interleaved transactions, from one shuffle of
    the reads (by run, reader and partition: `<partition>:<offset>`, one partition where the
    offset has another form).
    - nonmonotonic: a read whose offset is not past the same reader's read before it in that
      partition (in the reader's own order, `seq`);
    - interleaved: a read of a message whose transaction is earlier than one the same reader
      read before it in the partition from the same producer. A producer's transactions hold
      its values in send order, so the latest transaction read so far is the one of the
      highest value read so far: the window finds the few reads below it, and only those are
      looked up (none: the messages are not grouped again)."""
    off = F.col("offset")
    kafka = off.rlike(r"^[0-9]+:[0-9]+$")
    reads = rows.where(F.col("type") == "recv").select(
        "run", "client", "seq", "producer", "value",
        F.when(kafka, F.split(off, ":")[0]).otherwise(F.lit("")).alias("p"),
        F.when(kafka, F.split(off, ":")[1].cast("long")).alias("o"))
    # the second window's keys hold the first's: one exchange serves both
    at = Window.partitionBy("run", "client", "p")
    mine = Window.partitionBy("run", "client", "p", "producer").orderBy("seq").rowsBetween(
        Window.unboundedPreceding, -1)
    marked = reads.withColumn("before", F.lag("o").over(at.orderBy("seq"))) \
        .withColumn("hi", F.max("value").over(mine)).where((F.col("o") <= F.col("before"))
                                                           | (F.col("value") < F.col("hi"))).cache()
    try:
        backwards = {r["run"]: int(r["n"]) for r in marked.where(F.col("o") <= F.col("before")).groupBy("run").agg(
            F.count(F.lit(1)).alias("n")).collect()}
        below = marked.where(F.col("value") < F.col("hi"))
        mixed = _interleaved(below, msgs) if below.take(1) else {}
    finally:
        marked.unpersist()
    return backwards, mixed


def _interleaved(below: DataFrame, msgs: DataFrame) -> dict[str, int]:
    """Per run, the reads below the highest value read whose transaction is the earlier."""
    txn = msgs.select(*_MSG, "txn")
    late = below.join(txn, _MSG).join(
        txn.select("run", "producer", F.col("value").alias("hi"), F.col("txn").alias("hi_txn")),
        ["run", "producer", "hi"]).where(F.col("txn") < F.col("hi_txn"))
    return {r["run"]: int(r["n"]) for r in late.groupBy("run").agg(F.count(F.lit(1)).alias("n")).collect()}


EOS_KEYS = ("eos_outputs", "eos_recv_rows", "eos_duplicates", "eos_missing", "eos_nacked")
EOS_NONE = {**dict.fromkeys(EOS_KEYS, 0), "eos_read_complete": None}


def exactly_once(checked: DataFrame, outputs: DataFrame, ends: dict[str, list]) -> dict[str, dict]:
    """Per run with an output read (`ends`: each such read's read_end detail or None), the
    exactly-once figures (module docstring) and whether those reads finished."""
    t, runs = F.col("type"), sorted(ends)
    got = outputs.where(F.col("value").isNotNull()).groupBy(*_MSG).agg(F.count(F.lit(1)).alias("k"))
    told = checked.where(F.col("run").isin(runs) & t.isin("ack", "nack", "unknown")).groupBy(*_MSG).agg(
        F.max((t == "ack").cast("int")).alias("a"), F.max((t == "nack").cast("int")).alias("n"),
        F.max((t == "unknown").cast("int")).alias("u"))
    stored = checked.where(F.col("run").isin(runs) & (t == "recv") & F.col("value").isNotNull()).groupBy(*_MSG) \
        .agg(F.countDistinct("offset").alias("s"))
    both = told.join(got, _MSG, "full_outer").join(stored, _MSG, "left")
    k, a = F.coalesce("k", F.lit(0)), F.coalesce("a", F.lit(0))
    per = {r["run"]: r.asDict() for r in both.groupBy("run").agg(
        F.sum(k).alias("eos_recv_rows"), count_when(k > F.greatest(F.lit(1), F.coalesce("s", F.lit(0)))).alias(
            "eos_duplicates"),
        count_when((a == 1) & (k == 0)).alias("eos_missing"),
        count_when((k > 0) & (a == 0) & (F.coalesce("u", F.lit(0)) == 0) & (F.col("n") == 1)).alias("eos_nacked"),
    ).collect()}
    out = {}
    for run in runs:
        x = per.get(run, {})
        out[run] = {**{key: int(x.get(key) or 0) for key in EOS_KEYS}, "eos_outputs": len(ends[run]),
                    "eos_read_complete": all(e is not None and read_finished(e) for e in ends[run])}
    return out
