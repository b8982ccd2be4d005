"""The replicas read one by one (format 1.12): what each node's copy of the stream holds,
against the other copies and against what was acked.

A replica reader is a client whose `subscribe` row says `replica` and names its node; its
`recv` rows are what that node's copy holds, at the positions (`offset`) the copy gives, and
its `read_end` whether it read that copy to the end. Its rows are out of every other verdict
(job.other_rows): the end read's figures are the end read's alone. The figures, per run
with replica reads (docs/history-format.md, "Replicas"):

- `diverged_positions`: positions (partition, offset) at which two replicas hold different
  messages, whatever else they read;
- `diverged_acked`: acked messages held by some replicas whose read finished and not by
  another finished one that read the same partition (in a stream of one partition: every
  finished replica);
- `replicas_diverged`: the two summed;
- `acked_on_no_replica`: acked messages on no replica's copy at all: lost by the broker,
  not by a read.

The divergence log (`divergence.csv`) has a row per diverged position or message and per
acked message on no replica, with the nodes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ..history.schema import REPLICA, read_finished
from .frames import local_table

# the figures of a run without replica reads (replica_reads 0: outside the replica checks)
NO_REPLICAS = {"replica_reads": 0, "replica_reads_complete": None, "replica_status": None,
               "diverged_positions": None, "diverged_acked": None, "replicas_diverged": None,
               "acked_on_no_replica": None}
POSITION, ACKED_SOME, ACKED_NONE = "position", "acked on some", "acked on none"


def readers(small: list[dict]) -> dict[tuple[str, str], str]:
    """(run, client) -> node of every replica reader (its subscribe row's detail `replica`)."""
    return {(r["run"], r["client"]): r["node"] or "?" for r in small
            if r["type"] == "subscribe" and r["detail"] == REPLICA and r["group"] is None}


def ends(small: list[dict], of: dict[tuple[str, str], str]) -> dict[str, dict[str, Optional[str]]]:
    """Per run, each replica reader's node and its read_end detail (None: it wrote none)."""
    out: dict[str, dict[str, Optional[str]]] = {}
    for (run, _), node in sorted(of.items()):
        out.setdefault(run, {})[node] = None
    for r in small:
        if r["type"] == "read_end" and (r["run"], r["client"]) in of:
            out[r["run"]][of[(r["run"], r["client"])]] = r["detail"]
    return out


def labelled(spark: SparkSession, recv: DataFrame, of: dict[tuple[str, str], str]) -> DataFrame:
    """The replica readers' recv rows with their node as `replica` and the partition as a
    string ("" for a stream of one)."""
    who = F.broadcast(local_table(spark, sorted((r, c, n) for (r, c), n in of.items()),
                                            "run string, client string, replica string"))
    return (recv.join(who, ["run", "client"])
            .select("run", "replica", F.coalesce("partition", F.lit("")).alias("partition"), "offset", "producer",
                    "value"))


@dataclass(frozen=True)
class Replicas:
    """Per run with replica reads its figures (the module docstring); `log` the divergence
    log's rows (None: no run read its replicas)."""

    per_run: dict[str, dict]
    log: Optional[DataFrame] = None

    def of(self, run: str) -> dict:
        return self.per_run.get(run, NO_REPLICAS)


def analyze(spark: SparkSession, history: DataFrame, replicas: Optional[DataFrame],
            replica_ends: dict[str, dict[str, Optional[str]]], keep=lambda d: d) -> Replicas:
    """The replica figures of every run that read its replicas (`history`: the other rows).
    `keep` caches the divergence log, read for the counts and again for the CSV and the report."""
    if replicas is None:
        return Replicas({})
    done = sorted((run, n) for run, e in replica_ends.items() for n, d in e.items() if d and read_finished(d))
    acked = (history.where((F.col("type") == "ack") & F.col("run").isin(sorted(replica_ends)))
             .select("run", "producer", "value").distinct())
    log = keep(_positions(replicas).unionByName(_acked_on_some(spark, replicas, acked, done)).unionByName(
        _acked_on_none(replicas, acked)))
    counts = {(r["run"], r["kind"]): r["n"] for r in log.groupBy("run", "kind").agg(F.count("*").alias("n")).collect()}
    per_run = {}
    for run, e in replica_ends.items():
        n = {k: int(counts.get((run, k), 0)) for k in (POSITION, ACKED_SOME, ACKED_NONE)}
        per_run[run] = {"replica_reads": len(e),
                        "replica_reads_complete": all(d is not None and read_finished(d) for d in e.values()),
                        "replica_status": "; ".join(f"{node}: {d or 'no read_end'}" for node, d in sorted(e.items())),
                        "diverged_positions": n[POSITION], "diverged_acked": n[ACKED_SOME],
                        "replicas_diverged": n[POSITION] + n[ACKED_SOME], "acked_on_no_replica": n[ACKED_NONE]}
    return Replicas(per_run, log)


def _held(c) -> F.Column:
    return F.concat_ws(" ", c("replica"), F.concat_ws(":", c("producer"), c("value").cast("string")))


def _positions(r: DataFrame) -> DataFrame:
    """Positions at which two replicas hold different messages: each copy's message named
    (`nodes`: "n1 p1:5; n2 p1:7")."""
    c = F.col
    return (r.where(c("offset").isNotNull()).groupBy("run", "partition", "offset")
            .agg(F.size(F.collect_set(F.struct("producer", "value"))).alias("k"),
                 F.array_join(F.sort_array(F.collect_set(_held(c))), "; ").alias("nodes"))
            .where(c("k") > 1)
            .select("run", F.lit(POSITION).alias("kind"), "partition", "offset",
                    F.lit(None).cast("string").alias("producer"), F.lit(None).cast("long").alias("value"), "nodes",
                    F.lit(None).cast("string").alias("missing_on")))


def _acked_on_some(spark: SparkSession, r: DataFrame, acked: DataFrame, done: list[tuple[str, str]]) -> DataFrame:
    """Acked messages some finished replicas hold and another finished one that read the
    same partition (in a stream of one: any finished one) does not."""
    if not done:
        return local_table(spark, [], _LOG_SCHEMA)
    fin = F.broadcast(local_table(spark, done, "run string, replica string"))
    rd = r.join(fin, ["run", "replica"])
    whole: dict[str, list[str]] = {}  # per run, every finished replica: what a stream of one partition should be on
    for run, n in done:
        whole.setdefault(run, []).append(n)
    should = [(x["run"], x["partition"], whole[x["run"]] if x["partition"] == "" else sorted(x["ns"]))
              for x in rd.groupBy("run", "partition").agg(F.collect_set("replica").alias("ns")).collect()]
    expected = F.broadcast(local_table(spark, should, "run string, partition string, should array<string>"))
    held = (rd.join(acked, ["run", "producer", "value"]).groupBy("run", "partition", "producer", "value")
            .agg(F.sort_array(F.collect_set("replica")).alias("on"), F.min("offset").alias("offset")))
    return (held.join(expected, ["run", "partition"])
            .withColumn("missing", F.array_except("should", "on")).where(F.size("missing") > 0)
            .select("run", F.lit(ACKED_SOME).alias("kind"), "partition", "offset", "producer", "value",
                    F.array_join("on", " ").alias("nodes"), F.array_join("missing", " ").alias("missing_on")))


def _acked_on_none(r: DataFrame, acked: DataFrame) -> DataFrame:
    """Acked messages no replica's read returned."""
    return (acked.join(r.select("run", "producer", "value").distinct(), ["run", "producer", "value"], "left_anti")
            .select("run", F.lit(ACKED_NONE).alias("kind"), F.lit(None).cast("string").alias("partition"),
                    F.lit(None).cast("string").alias("offset"), "producer", "value",
                    F.lit(None).cast("string").alias("nodes"), F.lit("every replica").alias("missing_on")))


_LOG_SCHEMA = ("run string, kind string, partition string, offset string, producer string, value long, "
               "nodes string, missing_on string")
