"""Every verdict of a history, as Spark DataFrame expressions (no Python UDFs).

This module is the one place the metric logic lives; docs/history-format.md defines each
figure and tests/oracle.py re-implements them in plain Python to check this one.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from ..history.schema import MESSAGE_TYPES, SCHEMA

# Spark's DDL for the history schema (format v1), derived so the two cannot drift apart.
_DDL = {"string": "string", "int64": "long"}
SPARK_SCHEMA = ", ".join(f"{f.name} {_DDL[str(f.type)]}" for f in SCHEMA)
PERCENTILES = [0.5, 0.99, 0.999]
# Exact percentiles hold every latency of a run in one aggregation buffer; past this many
# history rows we switch to Spark's percentile_approx and say so (latency_exact = false).
EXACT_PERCENTILE_ROW_LIMIT = 6_000_000
# consumer events per ordering bucket: big enough that per-bucket overhead stays small, small
# enough that a 10-million-message stream still spreads over every core
SEQ_BUCKET = 1 << 20
TIME_BUCKET_NS = 1_000_000_000  # acks per gap bucket: one second
MS = 1_000_000.0

JUMP_CLASSES = ("JF", "JB", "DJF", "DJB")


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


def with_previous(df: DataFrame, keys: list[str], order: str, value: str, bucket: int) -> DataFrame:
    """Adds `prev`: `value` of the previous row in `order` within `keys`.

    A plain lag() over Window.partitionBy(keys) puts a whole stream in one task; with one
    producer and one consumer that is one core. Instead the order is cut into buckets, lag()
    runs per bucket in parallel, and the first row of each bucket takes the last value of
    the previous non-empty bucket from a (small) per-bucket table.
    """
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


def _exact_percentiles(c):
    """Exact percentiles, linear interpolation between closest ranks (as numpy's default).

    Spark's own exact percentile() keeps a hash map of every distinct value, which for
    nanosecond latencies is one entry per message and several times slower than sorting
    the run's latencies once.
    """
    arr = F.sort_array(F.collect_list(c))
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


def message_verdicts(m: DataFrame, exact: bool) -> DataFrame:
    sent = F.col("sent") == 1
    acked = F.col("acked") == 1
    nacked = F.col("nacked") == 1
    unk = F.col("unk") == 1
    r = F.col("recv_n")
    ack_lat = F.when(sent & acked, (F.col("t_ack") - F.col("t_send")) / MS)
    e2e_lat = F.when(sent & (r > 0), (F.col("t_recv") - F.col("t_send")) / MS)
    pct = _exact_percentiles if exact else (lambda c: F.percentile_approx(c, PERCENTILES, 10_000))
    return m.groupBy("run").agg(
        _count(sent).alias("send_count"),
        _count(sent & acked).alias("pos_ack_count"),
        _count(sent & nacked & ~acked).alias("neg_ack_count"),
        _count(sent & unk & ~acked & ~nacked).alias("unknown_count"),
        F.sum(F.when(sent, r).otherwise(0)).alias("received"),
        F.sum(F.when(~sent, r).otherwise(0)).alias("stowaways"),
        _count(sent & acked & (r == 0)).alias("acked_missing"),
        _count(sent & (r == 0)).alias("missing"),
        _count(sent & (r > 0) & ~acked).alias("received_no_ack"),
        _count(sent & (r > 0) & ~acked & nacked).alias("received_after_nack"),
        _count(sent & (r > 0) & ~acked & ~nacked & unk).alias("received_after_unknown"),
        _count(sent & (r > 1)).alias("msgs_with_dups"),
        F.sum(F.when(sent & (r > 0), r - 1).otherwise(0)).alias("duplicate_deliveries"),
        F.sum(F.when(sent & (F.col("recv_od") > 1), F.col("recv_od") - 1).otherwise(0)).alias("stored_duplicates"),
        F.sum(F.when(sent, F.col("recv_o") - F.col("recv_cod")).otherwise(0)).alias("redeliveries"),
        pct(ack_lat).alias("_ack_p"),
        F.max(ack_lat).alias("_ack_max"),
        pct(e2e_lat).alias("_e2e_p"),
        F.max(e2e_lat).alias("_e2e_max"),
    )


def run_frame(df: DataFrame) -> DataFrame:
    """Per-run facts the other verdicts need: the end of the run, when sending stopped,
    whether a consumer read while producers were still sending, and how reads ended."""
    t = F.col("type")
    ts = F.col("t_ns")
    return df.groupBy("run").agg(
        F.max(ts).alias("t_end"),
        F.min(F.when(t == "send", ts)).alias("t_first_send"),
        F.max(F.when(t == "send", ts)).alias("t_last_send"),
        F.max(F.when(t == "ack", ts)).alias("t_last_ack"),
        F.max(F.when(t.isin("send", "ack", "nack", "unknown"), ts)).alias("t_write_end"),
        F.min(F.when(t == "recv", ts)).alias("t_first_recv"),
        _count(t == "recv").alias("recv_rows"),
        F.collect_list(F.when(t == "read_end", F.col("detail"))).alias("read_ends"),
    )


def jumps(df: DataFrame) -> DataFrame:
    """Every ordering jump: one row per (consumer, producer) stream deviation, seeds' classes."""
    t = F.col("type")
    keys = ["run", "client", "producer"]
    r = df.where((t == "recv") & F.col("producer").isNotNull() & F.col("value").isNotNull()).select(
        "run", "client", "seq", "producer", "value"
    )
    # when this stream first read this value (a window without order: hash-partitioned by
    # value, so parallel, and about twice as fast here as a groupBy joined back)
    r = r.withColumn("first_seq", F.min("seq").over(Window.partitionBy(*keys, "value")))
    r = with_previous(r, keys, "seq", "value", SEQ_BUCKET)
    dup = F.col("seq") > F.col("first_seq")
    v, p = F.col("value"), F.col("prev")
    cls = (
        F.when(p.isNull(), F.lit(None))
        .when(v > p + 1, F.when(dup, "DJF").otherwise("JF"))
        .when(v <= p, F.when(dup, "DJB").otherwise("JB"))
    )
    return (
        r.withColumn("class", cls)
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


def jump_counts(j: DataFrame) -> DataFrame:
    c = F.col("class")
    return j.groupBy("run").agg(*[_count(c == k).alias(k.lower()) for k in JUMP_CLASSES])


def gaps(rows: DataFrame) -> DataFrame:
    """Intervals between consecutive rows of a run in time: (run, gap_start, gap_end)."""
    g = with_previous(rows.select("run", "t_ns"), ["run"], "t_ns", "t_ns", TIME_BUCKET_NS)
    return g.where(F.col("prev").isNotNull()).select(
        "run", F.col("prev").alias("gap_start"), F.col("t_ns").alias("gap_end")
    )


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


@dataclass
class Analysis:
    verdicts: list[dict]
    jumps: DataFrame
    duplicates: DataFrame
    latency_exact: bool
    meta: dict = field(default_factory=dict)


def _action(detail: Optional[str]) -> Optional[str]:
    return detail.split()[0] if detail and detail.split() else None


def pair_windows(rows: list[dict], t_end: int) -> list[tuple[int, int, dict]]:
    """(t_fault, t_window_end, fault row) per fault, in time order.

    A heal ends the open faults of the same action (first word of `detail`); a heal whose
    action matches no open fault ends every open fault. Unhealed faults last to `t_end`.
    """
    rows = sorted(rows, key=lambda r: (r["t_ns"], r["type"] != "fault"))
    open_: list[dict] = []
    ends: dict[int, int] = {}
    for r in rows:
        if r["type"] == "fault":
            open_.append(r)
            continue
        match = [f for f in open_ if _action(f["detail"]) == _action(r["detail"])] or list(open_)
        for f in match:
            ends[id(f)] = r["t_ns"]
            open_.remove(f)
    faults = [r for r in rows if r["type"] == "fault"]
    return [(f["t_ns"], ends.get(id(f), t_end), f) for f in faults]


def _fault_windows(nemesis: list, ends: dict[str, int]) -> list[tuple]:
    """(run, index, t_fault, t_window_end, node, detail) per fault (see pair_windows)."""
    by_run: dict[str, list] = {}
    for row in nemesis:
        by_run.setdefault(row["run"], []).append(row)
    out = []
    for run, rows in by_run.items():
        for i, (tf, te, f) in enumerate(pair_windows(rows, ends.get(run, max(r["t_ns"] for r in rows)))):
            out.append((run, i, tf, te, f["node"], f["detail"]))
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


def _session_facts(spark: SparkSession, df: DataFrame, windows: list) -> dict[str, dict]:
    """What the VerneMQ seed's per-run table needs beyond the verdicts, per run: the node
    the transmitter/receiver was on at the first fault (else at its first event), the
    first `ready` after that fault, and the receiver's longest delivery gap in its window."""
    t, ts = F.col("type"), F.col("t_ns")
    first = [(r, tf, te) for r, i, tf, te, _, _ in windows if i == 0]
    w0 = spark.createDataFrame(first, "run string, t_fault long, t_wend long")
    order = F.struct(ts, F.col("client"), F.col("seq"))
    before = ts <= F.col("t_fault")
    rows = (
        df.where(t.isin("send", "recv", "ready"))
        .join(F.broadcast(w0), "run", "left")
        .groupBy("run")
        .agg(
            F.max_by("node", F.when((t == "send") & before & F.col("node").isNotNull(), order)).alias("txm_f"),
            F.min_by("node", F.when((t == "send") & F.col("node").isNotNull(), order)).alias("txm_0"),
            F.max_by("node", F.when((t == "recv") & before & F.col("node").isNotNull(), order)).alias("rxm_f"),
            F.min_by("node", F.when((t == "recv") & F.col("node").isNotNull(), order)).alias("rxm_0"),
            F.min(F.when((t == "ready") & (ts >= F.col("t_fault")), ts)).alias("t_ready"),
        )
    )
    out = {r["run"]: r.asDict() for r in rows.collect()}
    if first:
        # the receivers already reading when the fault's window closed (a consumer that only
        # reads after the write phase has no row by then and costs nothing here)
        recv = df.where(t == "recv").select("run", "client", "t_ns")
        reading = (
            recv.join(F.broadcast(w0), "run")
            .where(ts <= F.col("t_wend"))
            .select("run", "client")
            .distinct()
        )
        recv_gaps = gaps(recv.join(F.broadcast(reading), ["run", "client"]))
        eff = F.col("gap_end") - F.greatest(F.col("gap_start"), F.col("t_fault"))
        rx = (
            recv_gaps.join(F.broadcast(w0), "run")
            .where((F.col("gap_end") > F.col("t_fault")) & (F.col("gap_start") <= F.col("t_wend")))
            .groupBy("run").agg(F.max(eff).alias("rx_down"))
        )
        for r in rx.collect():
            out.setdefault(r["run"], {})["rx_down"] = r["rx_down"]
    return out


def _session_row(run: str, position: int, f: dict, facts: dict, run_windows: list,
                 outages_ms: list) -> dict[str, Any]:
    """The seed's per-run table (Seq_ix … Rxm) from one run's facts; seconds, None = NA."""
    digits = re.search(r"(\d+)$", run)
    first = run_windows[0] if run_windows else None
    tf = first[2] if first else None
    killed = first[4] if first else None
    txm = (facts.get("txm_f") or facts.get("txm_0")) if first else facts.get("txm_0")
    rxm = (facts.get("rxm_f") or facts.get("rxm_0")) if first else facts.get("rxm_0")
    t_ready = facts.get("t_ready") if first else None
    t_send, t_eos = f.get("t_first_send"), f.get("t_last_ack")

    def sec(a, b):
        return None if a is None or b is None else (b - a) / 1e9

    hit = set(re.split(r"[,|]", killed)) if killed else set()
    tx_down = None
    if txm is not None and txm in hit and outages_ms and outages_ms[0] is not None:
        tx_down = outages_ms[0] / 1e3
    rx_down = facts.get("rx_down")
    return {
        "seq_ix": int(digits.group(1)) if digits else position,
        "killed_node": killed,
        "runtime_s": sec(t_send, t_ready),
        "txtime_s": sec(t_send, t_eos),
        "gaptime_s": sec(tf, t_eos),
        "downtime_s": sec(tf, t_ready),
        "tx_downtime_s": tx_down,
        "rx_downtime_s": None if rx_down is None else rx_down / 1e9,
        "txm": txm,
        "rxm": rxm,
    }


def _pct(arr: Optional[list], mx: Optional[float]) -> Optional[dict]:
    if arr is None or mx is None:
        return None
    return {"p50": arr[0], "p99": arr[1], "p999": arr[2], "max": mx}


def result_of(v: dict) -> str:
    """pass / fail / unknown; a run that could not decide is never a pass."""
    if v["received_after_nack"] > 0:
        return "fail"
    if v["read_complete"] is False or (v["read_complete"] is None and v["recv_rows"] == 0):
        return "unknown"
    if v["acked_missing"] > 0:
        return "fail"
    return "pass"


def analyze(spark: SparkSession, df: DataFrame) -> Analysis:
    n_rows = df.count()
    exact = n_rows <= EXACT_PERCENTILE_ROW_LIMIT

    frames = {r["run"]: r.asDict() for r in run_frame(df).collect()}
    msgs = {r["run"]: r.asDict() for r in message_verdicts(message_table(df), exact).collect()}
    j = jumps(df)
    jc = {r["run"]: r.asDict() for r in jump_counts(j).collect()}

    t = F.col("type")
    nemesis = [r.asDict() for r in df.where(t.isin("fault", "heal")).select("run", "t_ns", "type", "node", "detail").collect()]
    windows = _fault_windows(nemesis, {k: f["t_end"] for k, f in frames.items()})

    ack_gaps = gaps(df.where(t == "ack"))
    max_ack_gap = {r["run"]: r["g"] for r in ack_gaps.groupBy("run").agg(F.max(F.col("gap_end") - F.col("gap_start")).alias("g")).collect()}

    outages: dict[tuple, Optional[int]] = {}
    max_recv_gap: dict[str, int] = {}
    if windows:
        w = spark.createDataFrame(
            [(r, i, tf, te) for r, i, tf, te, _, _ in windows],
            "run string, w int, t_fault long, t_wend long",
        )
        eff = F.col("gap_end") - F.greatest(F.col("gap_start"), F.col("t_fault"))
        o = (
            ack_gaps.join(F.broadcast(w), "run")
            .where((F.col("gap_end") > F.col("t_fault")) & (F.col("gap_start") <= F.col("t_wend")))
            .groupBy("run", "w", "t_fault")
            # of equally long intervals, the earliest: max_by alone would pick any of them
            .agg(F.max_by("gap_end", F.struct(eff, -F.col("gap_end"))).alias("end"), F.max(eff).alias("eff"))
        )
        closed = {(r["run"], r["w"]): (r["eff"], r["end"]) for r in o.collect()}
        for run, i, tf, te, _, _ in windows:
            outages[(run, i)] = _outage(tf, te, closed.get((run, i)), frames[run]["t_last_ack"], frames[run]["t_write_end"])
        # consumers that read while a fault was in effect: their delivery gaps are outages too
        recv = df.where(t == "recv").select("run", "client", "t_ns")
        live = (
            recv.join(F.broadcast(w), "run")
            .where((F.col("t_ns") >= F.col("t_fault")) & (F.col("t_ns") <= F.col("t_wend")))
            .select("run", "client")
            .distinct()
        )
        rg = gaps(recv.join(F.broadcast(live), ["run", "client"]))
        max_recv_gap = {r["run"]: r["g"] for r in rg.groupBy("run").agg(F.max(F.col("gap_end") - F.col("gap_start")).alias("g")).collect()}

    session = _session_facts(spark, df, windows)

    verdicts = []
    zero_msgs = {k: 0 for k in (
        "send_count", "pos_ack_count", "neg_ack_count", "unknown_count", "received", "stowaways",
        "acked_missing", "missing", "received_no_ack", "received_after_nack",
        "received_after_unknown", "msgs_with_dups", "duplicate_deliveries", "stored_duplicates", "redeliveries")}
    for run in sorted(frames):
        f = frames[run]
        m = msgs.get(run) or {**zero_msgs, "_ack_p": None, "_ack_max": None, "_e2e_p": None, "_e2e_max": None}
        v: dict[str, Any] = {"run": run}
        for k in zero_msgs:
            v[k] = int(m[k] or 0)
        v["ack_count"] = v["pos_ack_count"] + v["neg_ack_count"]
        counts = jc.get(run, {})
        for k in JUMP_CLASSES:
            v[k.lower()] = int(counts.get(k.lower()) or 0)
        v["out_of_order"] = v["jb"]
        ends = f["read_ends"]
        v["read_complete"] = None if not ends else all(e == "complete" for e in ends)
        v["read_status"] = None if not ends else "; ".join(sorted(set(ends)))
        v["recv_rows"] = int(f["recv_rows"])
        g = max_ack_gap.get(run)
        v["max_ack_gap_ms"] = None if g is None else g / MS
        g = max_recv_gap.get(run)
        v["max_recv_gap_ms"] = None if g is None else g / MS
        run_windows = [x for x in windows if x[0] == run]
        v["faults"] = [
            {"t_ms": tf / MS, "until_ms": te / MS, "node": node, "detail": detail}
            for _, _, tf, te, node, detail in run_windows
        ]
        v["fault_outages_ms"] = [
            None if outages.get((run, i)) is None else outages[(run, i)] / MS for _, i, *_ in run_windows
        ]
        v["ack_latency_ms"] = _pct(m["_ack_p"], m["_ack_max"])
        live_reader = f["t_first_recv"] is not None and f["t_last_send"] is not None and f["t_first_recv"] < f["t_last_send"]
        v["e2e_latency_ms"] = _pct(m["_e2e_p"], m["_e2e_max"]) if live_reader else None
        v["latency_exact"] = exact
        v["result"] = result_of(v)
        v.update(_session_row(run, sorted(frames).index(run) + 1, f, session.get(run, {}), run_windows,
                              v["fault_outages_ms"]))
        verdicts.append(v)
    return Analysis(verdicts, j, duplicates(df), exact)
