"""What the HTML report draws, aggregated from the histories: never a message per point.

A run of millions of messages is a few hundred 100 ms buckets per event type, a few hundred
latency buckets, and (for runs with losses or jumps) a thousand read-position buckets plus
the first rows of its jump and loss logs. The page stays a few MB whatever the session's size.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from ..history.schema import MESSAGE_TYPES, OBSERVER, REPLICA
from .frames import local_table

BUCKET_NS = 100_000_000
# points on a value-against-read-position plot, per (consumer, producer) stream
POSITIONS = 1000
# jump and loss rows kept per run (the plot's markers and the table under it)
FIRST_ROWS = 500
EVENT_TYPES = ("fault", "heal", "ready", "disconnect", "reconnect", "read_end", "subscribe", "check", "assign",
               "revoke")


@dataclass
class RunTimeline:
    # per type: (bucket start ns, count, first t_ns, last t_ns), buckets in time order
    counts: dict[str, list[tuple[int, int, int, int]]] = field(default_factory=dict)
    # (bucket start ns, p50 ms, p99 ms, max ms, acks) by ack time
    latency: list[tuple[int, float, float, float, int]] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    # (consumer, producer) -> [(first seq, min value, max value)] in read order
    positions: dict[tuple, list[tuple[int, int, int]]] = field(default_factory=dict)
    jumps: list[dict] = field(default_factory=list)
    lost: list[dict] = field(default_factory=list)
    # consumer groups (format 1.6): (group, member) -> [(bucket start ns, messages processed)];
    # per group, [(bucket start ns, messages processed for the first time)]; the first skips
    group_recv: dict[tuple, list[tuple[int, int]]] = field(default_factory=dict)
    group_done: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    skips: list[dict] = field(default_factory=list)
    # the replicas read one by one (format 1.12): the first rows of the divergence log
    diverged: list[dict] = field(default_factory=list)

    @property
    def t0(self) -> Optional[int]:
        """The run's first send: the zero of its time axis."""
        first = [b[2] for ty in ("send", "ack") for b in self.counts.get(ty, [])[:1]]
        return min(first) if first else None

    def longest_gap(self, ty: str = "ack") -> Optional[tuple[int, int]]:
        """(start, end) of the longest interval without a `ty` row between two of them.
        Exact when it is longer than a bucket: such a gap always spans buckets."""
        b = self.counts.get(ty) or []
        best = None
        for prev, nxt in zip(b, b[1:]):
            if best is None or nxt[2] - prev[3] > best[1] - best[0]:
                best = (prev[3], nxt[2])
        return best


def _first_rows(d: DataFrame, order: list[str], n: int) -> list[dict]:
    w = Window.partitionBy("run").orderBy(*order)
    return [r.asDict() for r in d.withColumn("_i", F.row_number().over(w)).where(F.col("_i") <= n)
            .drop("_i").collect()]


def _groups(spark: SparkSession, df: DataFrame, out: dict[str, RunTimeline], skips: Optional[DataFrame]) -> None:
    """Each consumer group's deliveries per member and 100 ms, and its first processing of
    each message per 100 ms (the report's lag: acks so far − messages processed so far)."""
    members = sorted({(run, e["client"], e["group"]) for run, tl in out.items() for e in tl.events
                      if e["type"] == "subscribe" and e.get("group") is not None})
    if not members:
        return
    who = F.broadcast(local_table(spark, members, "run string, client string, g string"))
    recv = df.where(F.col("type") == "recv").join(who, ["run", "client"])
    b = F.floor(F.col("t_ns") / F.lit(BUCKET_NS)).cast("long").alias("b")
    for r in recv.groupBy("run", "g", "client", b).count().orderBy("run", "g", "client", "b").collect():
        out[r["run"]].group_recv.setdefault((r["g"], r["client"]), []).append((r["b"] * BUCKET_NS, r["count"]))
    first = recv.where(F.col("value").isNotNull()).groupBy("run", "g", "producer", "value").agg(
        F.min("t_ns").alias("t_ns"))
    for r in first.groupBy("run", "g", b).count().orderBy("run", "g", "b").collect():
        out[r["run"]].group_done.setdefault(r["g"], []).append((r["b"] * BUCKET_NS, r["count"]))
    if skips is not None:
        for row in _first_rows(skips.where(F.col("run").isin(list(out))), ["group", "producer", "value"],
                               FIRST_ROWS):
            out[row["run"]].skips.append(row)


def collect(spark: SparkSession, df: DataFrame, verdicts: list[dict], jumps: Optional[DataFrame] = None,
            losses: Optional[DataFrame] = None, send_ns_runs: Optional[list] = None,
            skips: Optional[DataFrame] = None, divergence: Optional[DataFrame] = None) -> dict[str, RunTimeline]:
    """Every run's timeline. `jumps`, `losses`, `skips` and `divergence` are the analysis' logs
    (metrics.Analysis); positions, jumps and losses are gathered only for runs that have
    any. `send_ns_runs`: the runs whose acks carry their send time (format 1.4), whose
    latency needs no pairing."""
    t, ts = F.col("type"), F.col("t_ns")
    out: dict[str, RunTimeline] = {v["run"]: RunTimeline() for v in verdicts}
    b = F.floor(ts / F.lit(BUCKET_NS)).cast("long")
    for r in (
        df.where(t.isin(list(MESSAGE_TYPES)))
        .groupBy("run", b.alias("b"), "type")
        .agg(F.count(F.lit(1)).alias("n"), F.min(ts).alias("lo"), F.max(ts).alias("hi"))
        .orderBy("run", "type", "b")
        .collect()
    ):
        out.setdefault(r["run"], RunTimeline()).counts.setdefault(r["type"], []).append(
            (r["b"] * BUCKET_NS, r["n"], r["lo"], r["hi"]))
    _latency(df, out, send_ns_runs)

    observers: dict[str, set] = {}  # and the groups' members and replica readers: not the checking readers
    for r in df.where(t.isin(*EVENT_TYPES)).orderBy("run", "t_ns").collect():
        row = r.asDict()
        out.setdefault(row["run"], RunTimeline()).events.append(row)
        if row["type"] == "subscribe" and (row["detail"] in (OBSERVER, REPLICA) or row.get("group") is not None):
            observers.setdefault(row["run"], set()).add(row["client"])
    _groups(spark, df, out, skips)

    troubled = {v["run"]: v for v in verdicts
                if v.get("acked_missing") or v.get("jf") or v.get("jb") or v.get("djf") or v.get("djb")}
    if troubled:
        _positions(spark, df, out, troubled, observers, jumps, losses)
    split = [v["run"] for v in verdicts if v.get("replicas_diverged") or v.get("acked_on_no_replica")]
    if divergence is not None and split:
        for row in _first_rows(divergence.where(F.col("run").isin(split)), ["kind", "partition", "producer", "value",
                                                                             "offset"], FIRST_ROWS):
            out[row["run"]].diverged.append(row)
    return out


def _latency(df: DataFrame, out: dict[str, RunTimeline], send_ns_runs: Optional[list]) -> None:
    """Each run's latency per bucket, counted from where the verdicts count it: the acks'
    send_ns (a steady rate's intended time) where the producer wrote it, else each
    message's first send."""
    t, ts = F.col("type"), F.col("t_ns")
    carried = sorted(set(send_ns_runs or ()) & set(out))
    paired = sorted(set(out) - set(carried))
    parts = []
    if carried:
        d = df.where(F.col("run").isin(carried)) if paired else df
        parts.append(d.where((t == "ack") & F.col("send_ns").isNotNull())
                     .select("run", F.col("send_ns").alias("s"), F.col("t_ns").alias("a")))
    if paired or not out:
        d = df.where(F.col("run").isin(paired)) if carried else df
        parts.append(
            d.where(t.isin("send", "ack"))
            .groupBy("run", "producer", "value")
            .agg(F.min(F.when(t == "send", ts)).alias("s"), F.min(F.when(t == "ack", ts)).alias("a"))
            .where(F.col("s").isNotNull() & F.col("a").isNotNull())
            .select("run", "s", "a"))
    msgs = parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])
    lat = (F.col("a") - F.col("s")) / F.lit(1e6)
    for r in (
        msgs.groupBy("run", F.floor(F.col("a") / F.lit(BUCKET_NS)).cast("long").alias("b"))
        .agg(F.percentile_approx(lat, [0.5, 0.99], 1000).alias("p"), F.max(lat).alias("mx"),
             F.count(F.lit(1)).alias("n"))
        .orderBy("run", "b")
        .collect()
    ):
        out.setdefault(r["run"], RunTimeline()).latency.append(
            (r["b"] * BUCKET_NS, r["p"][0], r["p"][1], r["mx"], r["n"]))


def _positions(spark: SparkSession, df: DataFrame, out: dict[str, RunTimeline], troubled: dict[str, dict],
               observers: dict[str, set], jumps: Optional[DataFrame], losses: Optional[DataFrame]) -> None:
    """For runs with losses or jumps: the checking readers' read positions in slices, and
    the first rows of the jump and loss logs."""
    steps = [(run, max(1, -(-int(v.get("recv_rows") or 0) // POSITIONS))) for run, v in troubled.items()]
    step = local_table(spark, steps, "run string, _step long")
    recv = df.where(F.col("type") == "recv").join(F.broadcast(step), "run")
    skip = [(run, c) for run, cs in observers.items() for c in cs]
    if skip:
        recv = recv.join(F.broadcast(local_table(spark, skip, "run string, client string")),
                         ["run", "client"], "left_anti")
    for r in (
        recv.groupBy("run", "client", "producer", F.floor(F.col("seq") / F.col("_step")).alias("pb"))
        .agg(F.min("seq").alias("seq"), F.min("value").alias("lo"), F.max("value").alias("hi"))
        .orderBy("run", "client", "producer", "seq")
        .collect()
    ):
        out[r["run"]].positions.setdefault((r["client"], r["producer"]), []).append((r["seq"], r["lo"], r["hi"]))
    runs = list(troubled)
    if jumps is not None:
        for row in _first_rows(jumps.where(F.col("run").isin(runs)), ["consumer", "producer", "seq"], FIRST_ROWS):
            out[row["run"]].jumps.append(row)
    if losses is not None:
        for row in _first_rows(losses.where(F.col("run").isin(runs)), ["producer", "value"], FIRST_ROWS):
            out[row["run"]].lost.append(row)
