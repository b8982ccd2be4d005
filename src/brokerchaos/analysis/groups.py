"""Consumer groups (format 1.6): what a group's members processed, held against what the
store holds. A member is a client whose `subscribe` row names a group; its rows are kept out
of the other verdicts (job.other_rows) and come here. Every figure is per (run, group) and
summed per run; docs/history-format.md ("Consumer groups") defines each, tests/oracle.py
implements them again.

- skips: messages the checking read found (sent in the run, stored) that no member of the
  group processed: from the counts' bit-set blocks (S & R) and the group's own (`done`), so the
  cost is one pass over the group's rows and a join of blocks;
- duplicates, split by cause: only the blocks where a member's rows outnumber the values
  they processed are looked at message by message;
- nonmonotonic: a member's position in a partition not past its previous one, with no
  assignment of that partition between the two;
- commits backwards: a successful commit below one made before it in the group's partition.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from ..history.schema import ACKED, COMMIT_OK
from .counts import _bit, _blk  # the same blocks of values as the run's counts
from .frames import count_when, local_table, with_previous
from .tuning import Tuning

# what an assignment row stands for among a member's positions: below any position, so the
# first delivery after it is never a step back
_ASSIGNED = -(1 << 62)

GROUP_KEYS = ("group_recv_rows", "group_skips", "group_duplicates", "group_dup_stored", "group_dup_handover",
              "group_dup_same", "group_nonmonotonic", "group_commits", "group_commit_failures",
              "group_commit_backwards")


@dataclass(frozen=True)
class Groups:
    """Per (run, group) its figures (GROUP_KEYS), and per run its first delivery to a member."""

    per_group: dict[tuple[str, str], dict] = field(default_factory=dict)
    t_first: dict[str, int] = field(default_factory=dict)
    rows: int = 0  # the members' recv rows

    def of_run(self, run: str) -> dict[str, dict]:
        return {g: x for (r, g), x in sorted(self.per_group.items()) if r == run}


def group_blocks(recv: DataFrame, t: Tuning) -> DataFrame:
    """Per (run, g, producer, block): the values the group processed (`done`, a bit set), its
    rows for them (gn) and its first (t0); the rows without an identity in a null block."""
    ident = F.col("producer").isNotNull() & F.col("value").isNotNull()
    return recv.groupBy("run", "g", F.when(ident, F.col("producer")).alias("producer"),
                        F.when(ident, _blk(t)).alias("blk")).agg(
        F.coalesce(F.bit_or(F.when(ident, _bit(t))), F.lit(0).cast("long")).alias("done"),
        F.count(F.lit(1)).alias("gn"), F.min("t_ns").alias("t0"))


def skips(blocks: DataFrame, gblocks: DataFrame, groups: DataFrame) -> DataFrame:
    """Per (run, g): the values the checking read found and the run sent (S & R) that the
    group never processed. `groups` is (run, g) of every group: a group that processed
    nothing skipped everything."""
    stored = blocks.where(F.col("producer").isNotNull() & F.col("blk").isNotNull()).select(
        "run", "producer", "blk", F.col("S").bitwiseAND(F.col("R")).alias("SR")).where(F.col("SR") != 0)
    per = (stored.join(F.broadcast(groups), "run")
           .join(gblocks.select("run", "g", "producer", "blk", "done"), ["run", "g", "producer", "blk"], "left"))
    left = F.col("SR").bitwiseAND(F.bitwise_not(F.coalesce(F.col("done"), F.lit(0).cast("long"))))
    return per.groupBy("run", "g").agg(F.sum(F.bit_count(left)).alias("group_skips"))


def duplicates(recv: DataFrame, gblocks: DataFrame, t: Tuning) -> Optional[DataFrame]:
    """Per (run, g): messages processed more than once, split by cause (module docstring);
    None when no block has more rows than values (nothing processed twice)."""
    again = gblocks.where(F.col("blk").isNotNull() & (F.col("gn") > F.bit_count("done"))).select(
        "run", "g", "producer", "blk")
    if again.isEmpty():
        return None
    rows = recv.where(F.col("producer").isNotNull() & F.col("value").isNotNull()).withColumn("blk", _blk(t))
    rows = rows.join(F.broadcast(again), ["run", "g", "producer", "blk"])
    at = rows.groupBy("run", "g", "producer", "value", "offset").agg(
        F.count(F.lit(1)).alias("n"), F.count_distinct("client").alias("k"))
    has = F.col("offset").isNotNull()
    per_msg = at.groupBy("run", "g", "producer", "value").agg(
        F.sum("n").alias("n"), count_when(has).alias("od"),
        F.sum(F.when(has, F.col("k") - 1).otherwise(0)).alias("ho"),
        F.sum(F.when(has, F.col("n") - F.col("k")).otherwise(0)).alias("same"))
    return per_msg.groupBy("run", "g").agg(
        F.sum(F.col("n") - 1).alias("group_duplicates"),
        F.sum(F.greatest(F.col("od") - 1, F.lit(0))).alias("group_dup_stored"),
        F.sum("ho").alias("group_dup_handover"), F.sum("same").alias("group_dup_same"))


def nonmonotonic(members: DataFrame, t: Tuning, plain: bool) -> DataFrame:
    """Per (run, g): deliveries at a position not past the member's previous one in the same
    partition, with no assignment of that partition to it in between."""
    ty = F.col("type")
    d = members.where(F.col("partition").isNotNull()
                      & (((ty == "recv") & F.col("position").isNotNull()) | (ty == "assign")))
    d = d.withColumn("_p", F.when(ty == "assign", F.lit(_ASSIGNED)).otherwise(F.col("position")))
    d = with_previous(d, ["run", "client", "partition"], "seq", "_p", t.seq_bucket, plain)
    back = (ty == "recv") & (F.col("prev") > F.lit(_ASSIGNED)) & (F.col("_p") <= F.col("prev"))
    return d.groupBy("run", "g").agg(count_when(back).alias("group_nonmonotonic"))


def commits(members: DataFrame) -> DataFrame:
    """Per (run, g): commits, failed commits, and successful commits of a position below the
    highest one made before them in the same partition (by time; ties by client and seq).
    One message's ack (`acked`) succeeds without being a position (MQTT's has none)."""
    c = members.where(F.col("type") == "commit")
    placed = F.col("position").isNotNull() & F.col("partition").isNotNull()
    ok = (F.col("detail") == COMMIT_OK) & placed
    w = (Window.partitionBy("run", "g", "partition").orderBy("t_ns", "client", "seq")
         .rowsBetween(Window.unboundedPreceding, -1))
    c = c.withColumn("_before", F.max(F.when(ok, F.col("position"))).over(w))
    return c.groupBy("run", "g").agg(
        F.count(F.lit(1)).alias("group_commits"),
        count_when(~(ok | (F.col("detail") == ACKED))).alias("group_commit_failures"),
        count_when(ok & (F.col("position") < F.col("_before"))).alias("group_commit_backwards"))


def outages(members: DataFrame, windows: DataFrame, t: Tuning, plain: bool) -> dict[tuple, int]:
    """Per (run, group, window): the longest interval a partition of the group went without a
    delivery, overlapping the fault window, counted from the fault on (ns). `windows` is
    (run, w, t_fault, t_wend)."""
    d = members.where((F.col("type") == "recv") & F.col("partition").isNotNull()).select(
        "run", "g", "partition", "t_ns")
    d = with_previous(d, ["run", "g", "partition"], "t_ns", "t_ns", t.time_bucket_ns, plain)
    over = (d.where(F.col("prev").isNotNull()).join(F.broadcast(windows), "run")
            .where((F.col("t_ns") > F.col("t_fault")) & (F.col("prev") <= F.col("t_wend"))))
    eff = F.col("t_ns") - F.greatest(F.col("prev"), F.col("t_fault"))
    return {(r["run"], r["g"], r["w"]): r["gap"] for r in over.groupBy("run", "g", "w").agg(F.max(eff).alias("gap"))
            .collect()}


def _where_found():
    """A checking read's row as skips.csv's `stored_at` names it: its offset, else `taken` (what
    the group itself took out of a queue), else `read by <reader>`."""
    c = F.col
    return (F.when(c("offset").isNotNull(), c("offset")).when(c("client") == c("g"), F.lit("taken"))
            .otherwise(F.concat(F.lit("read by "), c("client"))))


def skipped(checked: DataFrame, members: DataFrame, groups: list[tuple[str, str]]) -> DataFrame:
    """The skips log (skips.csv): each (run, group, message) skipped, where the checking read
    found it (`stored_at`: its offsets; `taken` where a group took it out of a queue), and the
    first successful commit of that partition past it (`committed_past`: `member@ms position`),
    where the offset reads `partition:position` (Kafka's), else the first ack that named it
    (`member@ms acked`: a queue's member acked it and never processed it)."""
    spark = members.sparkSession
    c = F.col
    ident = c("producer").isNotNull() & c("value").isNotNull()
    sent = checked.where((c("type") == "send") & ident).select("run", "producer", "value").distinct()
    stored = (checked.where((c("type") == "recv") & ident).select("run", "client", "producer", "value", "offset")
              .join(sent, ["run", "producer", "value"], "left_semi"))
    done = members.where((c("type") == "recv") & ident).select("run", "g", "producer", "value").distinct()
    gdf = F.broadcast(local_table(spark, groups, "run string, g string"))
    skips = (stored.join(gdf, "run").join(done, ["run", "g", "producer", "value"], "left_anti")
             .groupBy("run", "g", "producer", "value")
             .agg(F.concat_ws(" ", F.array_sort(F.collect_set(_where_found()))
                              ).alias("stored_at"),
                  F.min("offset").alias("_at")))
    at = F.regexp_extract("_at", r"^(\d+):(\d+)$", 1)
    skips = skips.withColumn("_part", F.when(at != "", at)).withColumn(
        "_pos", F.regexp_extract("_at", r"^(\d+):(\d+)$", 2).cast("long"))
    ok = members.where((c("type") == "commit") & (c("detail") == COMMIT_OK) & c("position").isNotNull()).select(
        "run", "g", c("partition").alias("_part"), c("position").alias("_cpos"), c("client").alias("_by"),
        c("t_ns").alias("_t"))
    past = (skips.join(ok, ["run", "g", "_part"]).where(c("_cpos") > c("_pos"))
            .groupBy("run", "g", "producer", "value")
            .agg(F.min_by(F.format_string("%s@%.1fms %d", c("_by"), c("_t") / 1e6, c("_cpos")), c("_t"))
                 .alias("committed_past")))
    acked = (members.where((c("type") == "commit") & (c("detail") == ACKED) & ident)
             .groupBy("run", "g", "producer", "value")
             .agg(F.min_by(F.format_string("%s@%.1fms acked", c("client"), c("t_ns") / 1e6), c("t_ns"))
                  .alias("_acked")))
    return (skips.join(past, ["run", "g", "producer", "value"], "left")
            .join(acked, ["run", "g", "producer", "value"], "left")
            .select("run", c("g").alias("group"), "producer", "value", "stored_at",
                    F.coalesce("committed_past", "_acked").alias("committed_past")))


def analyze_groups(members: DataFrame, groups: list[tuple[str, str]], blocks: DataFrame, t: Tuning,
                   plain: bool) -> Groups:
    """Every group figure. `members`: the members' rows with their group as `g`; `groups`:
    (run, group) of each group; `blocks`: the counts' bit-set blocks."""
    spark = members.sparkSession
    gdf = local_table(spark, groups, "run string, g string")
    recv = members.where(F.col("type") == "recv")
    gblocks = group_blocks(recv, t).persist()
    try:
        per = {key: dict.fromkeys(GROUP_KEYS, 0) for key in groups}
        firsts: dict[str, int] = {}
        for r in gblocks.groupBy("run", "g").agg(F.sum("gn").alias("n"), F.min("t0").alias("t0")).collect():
            per[(r["run"], r["g"])]["group_recv_rows"] = r["n"]
            firsts[r["run"]] = min(r["t0"], firsts.get(r["run"], r["t0"]))
        parts = [skips(blocks, gblocks, gdf), nonmonotonic(members, t, plain), commits(members)]
        dup = duplicates(recv, gblocks, t)
        if dup is not None:
            parts.append(dup)
        for d in parts:
            for r in d.collect():
                x = per.get((r["run"], r["g"]))
                if x is not None:
                    x.update({k: int(v or 0) for k, v in r.asDict().items() if k in GROUP_KEYS})
    finally:
        gblocks.unpersist()
    return Groups(per, firsts, sum(x["group_recv_rows"] for x in per.values()))
