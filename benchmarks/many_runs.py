"""The Spark analysis of a long session: many small runs, one Parquet file each.

    .venv/bin/python benchmarks/many_runs.py [--runs 2000] [--messages 500] [--kind plain|group|txn]
                                             [--command] [--dir /tmp/brokerchaos-bench]

The VerneMQ seed runs its test about a thousand times per session; `brokerchaos run` writes
one history file per run and analyses the whole session at the end. This generates such a
session (per run: one producer, send + ack per message, a fault with a 300 ms ack outage, a
read after the write; every tenth run loses 0.1% of its messages), then times
`brokerchaos.analysis.metrics.analyze` on it, once cold (the first analysis in the process)
and once warm, and prints one JSON line with both times and the seconds per step.
`--kind group` gives each run a consumer group of two members, `--kind txn` puts each run's
outcomes in transactions (issue 67's many-small-runs rows: 20 × 1,000, 200 × 1,000 and
1 × 200,000 of each kind); `--command` times the CLI's `analyze` in a process of its own.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
from brokerchaos.history.schema import SCHEMA


def generate(out: Path, runs: int, messages: int, kind: str = "plain") -> tuple[dict[str, int], dict[str, float]]:
    """Writes the session; returns the acked messages each run loses and its median ack latency.
    `kind`: plain; group (each run's messages also processed by a consumer group of two
    members, benchmarks/groups.py's); txn (the producer's outcomes in transactions, every
    fifth aborted, benchmarks/transactions.py's)."""
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
        table = _of_kind(table, kind, run, recv)
        lost[run], p50[run] = _expected(table)
        (out / run / "history").mkdir(parents=True, exist_ok=True)
        pq.write_table(table, out / run / "history" / "history.parquet")
    return lost, p50


def _of_kind(table: pa.Table, kind: str, run: str, recv: np.ndarray) -> pa.Table:
    if kind == "txn":
        from transactions import in_transactions

        return in_transactions(table)
    if kind == "group":
        from groups import member_table

        t0 = 3 * 10**10
        odd, even = recv[recv % 2 == 1], recv[recv % 2 == 0]
        return pa.concat_tables([table, member_table(run, "g1-m1", 1, odd, t0),
                                 member_table(run, "g1-m2", 0, even, t0)])
    return table


def _expected(table: pa.Table) -> tuple[int, float]:
    """The acked values the end read (c1) missed, and the median ack latency, from the rows."""
    ty, client, value = (table.column(c).to_numpy(zero_copy_only=False) for c in ("type", "client", "value"))
    acked = ty == "ack"
    read = set(value[(ty == "recv") & (client == "c1")].tolist())
    latency = (table.column("t_ns").to_numpy() - table.column("send_ns").fill_null(0).to_numpy())[acked] / 1e6
    return len(set(value[acked].tolist()) - read), float(np.percentile(latency, 50))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--messages", type=int, default=500, help="per run")
    ap.add_argument("--dir", default="/tmp/brokerchaos-bench")
    ap.add_argument("--kind", choices=("plain", "group", "txn"), default="plain",
                    help="plain runs, or each with a consumer group, or in transactions")
    ap.add_argument("--keep", action="store_true", help="reuse a session already generated in --dir")
    ap.add_argument("--jobs", action="store_true",
                    help="count the Spark jobs and stages each step of the analysis runs (the profile)")
    ap.add_argument("--command", action="store_true",
                    help="also time `brokerchaos analyze DIR --no-write` in a process of its own (a user's cold start)")
    args = ap.parse_args()
    d = Path(args.dir) / f"session-{args.kind}-{args.runs}x{args.messages}"
    lost = p50 = None
    if not (args.keep and d.exists()):
        import shutil

        shutil.rmtree(d, ignore_errors=True)
        t = time.perf_counter()
        lost, p50 = generate(d, args.runs, args.messages, args.kind)
        print(f"generated {args.runs} runs in {time.perf_counter() - t:.1f}s at {d}", file=sys.stderr)

    command_s = _command(d) if args.command else None
    from brokerchaos.analysis import metrics
    from brokerchaos.analysis.spark import get_spark

    spark = get_spark()
    if args.jobs:
        _count_jobs(spark)
    out = {"kind": args.kind, "runs": args.runs, "messages_per_run": args.messages}
    for name in ("cold", "warm"):
        t = time.perf_counter()
        a = metrics.analyze(spark, metrics.read_history(spark, str(d)))
        out[f"{name}_s"] = round(time.perf_counter() - t, 2)
        out[f"{name}_steps_s"] = a.meta["seconds"]
        if args.jobs:
            out[f"{name}_steps_jobs"] = dict(JOBS)
            JOBS.clear()
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
    if command_s is not None:
        out["command_s"] = command_s
    print(json.dumps(out))


JOBS: dict[str, list[int]] = {}  # step -> [jobs, stages], by _count_jobs


def _count_jobs(spark) -> None:
    """Each step's Spark jobs and stages (job.Clock's laps), from the status tracker: the
    jobs started since the step before."""
    from brokerchaos.analysis import job

    tracker, seen = spark.sparkContext.statusTracker(), set(spark.sparkContext.statusTracker().getJobIdsForGroup())
    lap = job.Clock.lap

    def counted(self, name: str) -> None:
        new = set(tracker.getJobIdsForGroup()) - seen
        seen.update(new)
        stages = sum(len(info.stageIds) for info in map(tracker.getJobInfo, new) if info is not None)
        JOBS[name] = [len(new), stages]
        lap(self, name)

    job.Clock.lap = counted


def _command(d: Path) -> float:
    """The CLI's analysis in a fresh process: the JVM's start, the reading and every verdict."""
    import subprocess

    cli = Path(sys.executable).with_name("brokerchaos")
    t = time.perf_counter()
    subprocess.run([str(cli), "analyze", str(d), "--no-write", "--format", "json"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return round(time.perf_counter() - t, 2)


if __name__ == "__main__":
    main()
