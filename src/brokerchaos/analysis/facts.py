"""The session facts: what the VerneMQ seed's per-run table needs beyond the verdicts (the
nodes the transmitter and receiver were on, the cluster whole again, the receiver's gap)."""
from __future__ import annotations

from typing import Optional

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .availability import gaps
from .frames import local_table
from .tuning import Tuning


def session_facts(spark: SparkSession, df: DataFrame, windows: list, frames: dict[str, dict],
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
            at = local_table(spark, sorted({(run, tm) for run, _, tm in want}), "run string, t_ns long")
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
        w0 = local_table(spark, first, "run string, t_fault long, t_wend long")
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


def live_reader(f: dict, t_first_observed: Optional[int] = None) -> bool:
    """A consumer read while producers were still sending (end-to-end latency means something)."""
    first = min((t for t in (f["t_first_recv"], t_first_observed) if t is not None), default=None)
    return first is not None and f["t_last_send"] is not None and first < f["t_last_send"]
