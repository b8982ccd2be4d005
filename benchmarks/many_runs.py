"""The Spark analysis of a long session: many small runs, one Parquet file each.

    .venv/bin/python benchmarks/many_runs.py [--runs 2000] [--messages 500] [--dir /tmp/brokerchaos-bench]

The VerneMQ seed runs its test about a thousand times per session; `brokerchaos run` writes
one history file per run and analyses the whole session at the end. This generates such a
session (per run: one producer, send + ack per message, a fault with a 300 ms ack outage, a
read after the write; every tenth run loses 0.1% of its messages), then times
`brokerchaos.analysis.metrics.analyze` on it, once cold (the first analysis in the process)
and once warm, and prints one JSON line with both times and the seconds per step.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
from brokerchaos.history.schema import SCHEMA


def generate(out: Path, runs: int, messages: int) -> tuple[dict[str, int], dict[str, float]]:
    """Writes the session; returns the acked messages each run loses and its median ack latency."""
    rng = np.random.default_rng(1)
    lost: dict[str, int] = {}
    p50: dict[str, float] = {}
    for r in range(runs):
        run = f"run-{r + 1:05d}"
        v = np.arange(1, messages + 1, dtype=np.int64)
        t_send = v * 100_000
        t_fault = messages // 3 * 100_000
        t_ack = t_send + 2_000_000
        # acks due during the 300 ms after the fault arrive together at its end
        t_ack = np.where((t_ack > t_fault) & (t_ack < t_fault + 300_000_000), t_fault + 300_000_000, t_ack)
        recv = v[rng.random(messages) > 0.001] if r % 10 == 0 else v
        lost[run] = messages - len(recv)
        p50[run] = float(np.percentile((t_ack - t_send) / 1e6, 50))
        parts: list[dict] = []

        def add(client, seq, t, ty, producer, value, node=None, detail=None, window=None, run=run, parts=parts,
                send_ns=None):
            m = len(t)
            parts.append({"run": [run] * m, "client": [client] * m, "seq": np.asarray(seq, dtype=np.int64),
                          "t_ns": np.asarray(t, dtype=np.int64), "type": [ty] * m, "producer": [producer] * m,
                          "value": value, "offset": [None] * m, "node": [node] * m, "detail": [detail] * m,
                          "window": [window] * m, "intended_ns": [None] * m,
                          "send_ns": [None] * m if send_ns is None else send_ns})

        add("p1", np.arange(0, 2 * messages, 2), t_send, "send", "p1", v)
        # format 1.4: each ack carries its send's time, as the producer writes it
        add("p1", np.arange(1, 2 * messages, 2), t_ack, "ack", "p1", v, send_ns=t_send)
        add("c1", np.arange(len(recv)), 10**10 + np.arange(len(recv)) * 1000, "recv", "p1", recv)
        add("nemesis", [0], [t_fault], "fault", None, [None], "n1", "kill leader", 1)
        add("nemesis", [1], [t_fault + 10**9], "heal", None, [None], "n1", "kill leader", 1)
        add("c1", [len(recv)], [2 * 10**10], "read_end", None, [None], None, "complete")
        table = pa.concat_tables(
            pa.table({f.name: pa.array(p[f.name], type=f.type) if f.name in p else pa.nulls(len(p["run"]), f.type)
                      for f in SCHEMA}, schema=SCHEMA) for p in parts)
        (out / run / "history").mkdir(parents=True, exist_ok=True)
        pq.write_table(table, out / run / "history" / "history.parquet")
    return lost, p50


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--messages", type=int, default=500, help="per run")
    ap.add_argument("--dir", default="/tmp/brokerchaos-bench")
    ap.add_argument("--keep", action="store_true", help="reuse a session already generated in --dir")
    args = ap.parse_args()
    d = Path(args.dir) / f"session-{args.runs}x{args.messages}"
    lost = p50 = None
    if not (args.keep and d.exists()):
        import shutil

        shutil.rmtree(d, ignore_errors=True)
        t = time.perf_counter()
        lost, p50 = generate(d, args.runs, args.messages)
        print(f"generated {args.runs} runs in {time.perf_counter() - t:.1f}s at {d}", file=sys.stderr)

    from brokerchaos.analysis import metrics
    from brokerchaos.analysis.spark import get_spark

    spark = get_spark()
    out = {"runs": args.runs, "messages_per_run": args.messages}
    for name in ("cold", "warm"):
        t = time.perf_counter()
        a = metrics.analyze(spark, metrics.read_history(spark, str(d)))
        out[f"{name}_s"] = round(time.perf_counter() - t, 2)
        out[f"{name}_steps_s"] = a.meta["seconds"]
        a.release()
        assert len(a.verdicts) == args.runs, len(a.verdicts)
        assert all(v["send_count"] == args.messages for v in a.verdicts)
        assert all(abs(v["fault_outages_ms"][0] - 300) <= 3 for v in a.verdicts), "outage of 300 ms expected"
        if lost is not None:
            got = {v["run"]: v["acked_missing"] for v in a.verdicts}
            assert got == lost, "acked_missing differs from what the generator dropped"
            got = {v["run"]: v["ack_latency_ms"]["p50"] for v in a.verdicts}
            # past Tuning.exact_percentile_rows history rows, Spark's percentile_approx (said in
            # latency_exact): a value within a hundredth of a rank's width of the exact one
            tol = 1e-6 if a.verdicts[0]["latency_exact"] else 0.01
            assert all(abs(got[r] - p50[r]) <= tol * max(1.0, p50[r]) for r in p50), \
                "median ack latency differs from the generator's"
        print(f"{name}: {out[f'{name}_s']:.1f}s {out[f'{name}_steps_s']}", file=sys.stderr)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
