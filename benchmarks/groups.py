"""What the consumer-group verdicts (format 1.6) add to a run's analysis.

    .venv/bin/python benchmarks/groups.py [--messages 1000000] [--repeat 3] [--dir /tmp/bc-bench-groups]

Generates benchmarks/analysis.py's history (one producer, an end read with losses, a
redelivered block and swapped blocks) and beside it a consumer group of two members that
processed the same messages on two partitions: each message once, but for a block one
member processed again after the other (a hand-over), a block no member processed (skips),
a commit every 500 messages, an assignment per member. Then times, on one warm session,
the analysis of the history without the group and with it (best of --repeat each,
alternated), and prints one JSON line: both times, the added fraction (the issue's target:
at most a third), and the group figures as a check that the work was done.
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
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from analysis import CHUNK, generate

from brokerchaos.history.schema import SCHEMA

SKIPPED = 5_000  # values no member processed
AGAIN = 10_000  # values processed a second time by the other member


def _member(directory: Path, client: str, part: int, values: np.ndarray, t0: int) -> int:
    """One member's rows (member_table), written in CHUNK-row files."""
    table = member_table("bench", client, part, values, t0)
    for i, start in enumerate(range(0, len(table), CHUNK)):
        pq.write_table(table.slice(start, CHUNK), directory / f"{client}-{i:05d}.parquet")
    return len(table)


def member_table(run: str, client: str, part: int, values: np.ndarray, t0: int) -> pa.Table:
    """One member's rows: its subscribe and assignment, a recv per value (position =
    value's place in its partition), a commit after every 500."""
    n = len(values)
    commits = np.arange(499, n, 500)
    m = 2 + n + len(commits)
    types = np.empty(m, dtype=object)
    pos = np.empty(m, dtype=np.int64)
    vals = np.zeros(m, dtype=np.int64)
    has_val = np.zeros(m, dtype=bool)
    types[0], types[1] = "subscribe", "assign"
    # recv rows, with a commit row after each 500th
    idx = np.arange(n) + 2 + np.searchsorted(commits, np.arange(n), side="left")
    types[idx] = "recv"
    vals[idx], has_val[idx] = values, True
    pos[idx] = (values - 1) // 2
    cidx = commits + 3 + np.arange(len(commits))
    types[cidx] = "commit"
    pos[cidx] = (values[commits] - 1) // 2 + 1
    pos[:2] = 0
    seq = np.arange(1, m + 1, dtype=np.int64)
    is_recv = types == "recv"
    return pa.table({
        "run": pa.array([run] * m), "client": pa.array([client] * m), "seq": seq,
        "t_ns": t0 + seq * 700, "type": pa.array(types.tolist(), pa.string()),
        "producer": pa.array(np.where(is_recv, "p1", None).tolist(), pa.string()),
        "value": pa.array(vals, mask=~has_val), "offset": pa.array(
            [f"{part}:{p}" if r else None for p, r in zip(pos.tolist(), is_recv.tolist())], pa.string()),
        "node": pa.nulls(m, pa.string()),
        "detail": pa.array(np.where(types == "commit", "ok", np.where(types == "subscribe", "kafka classic", None))
                           .tolist(), pa.string()),
        "window": pa.nulls(m, pa.int64()), "intended_ns": pa.nulls(m, pa.int64()), "send_ns": pa.nulls(m, pa.int64()),
        "group": pa.array(["g1"] * m), "partition": pa.array([str(part)] * m),
        "position": pa.array(pos, mask=~(is_recv | (types == "commit"))), "epoch": pa.nulls(m, pa.int64()),
        "txn": pa.nulls(m, pa.int64()), "topic": pa.nulls(m, pa.string()),
    }, schema=SCHEMA)


def generate_group(directory: Path, n: int, seed: int = 2) -> int:
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    v = np.arange(1, n + 1, dtype=np.int64)
    a = int(rng.integers(0, n - SKIPPED))
    done = np.concatenate([v[:a], v[a + SKIPPED:]])
    even, odd = done[done % 2 == 0], done[done % 2 == 1]
    b = int(rng.integers(0, len(odd) - AGAIN))
    t0 = n * 1_000
    return (_member(directory, "g1-m1", 1, odd, t0)
            + _member(directory, "g1-m2", 0, np.concatenate([even, odd[b:b + AGAIN]]), t0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default="/tmp/bc-bench-groups")
    a = ap.parse_args()
    base, group = Path(a.dir) / "history", Path(a.dir) / "group"
    rows = generate(base, a.messages)
    group_rows = generate_group(group, a.messages)

    from brokerchaos.analysis import metrics
    from brokerchaos.analysis.spark import get_spark

    spark = get_spark()
    times: dict[str, list[float]] = {"without": [], "with": []}
    v = None
    for i in range(a.repeat + 1):  # the first round warms the JVM up and is not counted
        for name, paths in (("without", [base]), ("with", [base, group])):
            df = metrics.read_history(spark, *[str(p) for p in paths])
            t = time.perf_counter()
            an = metrics.analyze(spark, df)
            took = time.perf_counter() - t
            if name == "with":
                v = an.verdicts[0]
            an.release()
            if i:
                times[name].append(took)
    best = {k: min(x) for k, x in times.items()}
    print(json.dumps({
        "messages": a.messages, "history_rows": rows, "group_rows": group_rows,
        "without_s": round(best["without"], 2), "with_s": round(best["with"], 2),
        "added": round(best["with"] / best["without"] - 1, 3), "rounds": times,
        "group": {k: v[k] for k in ("group_recv_rows", "group_skips", "group_duplicates", "group_dup_handover",
                                    "group_nonmonotonic", "group_commits", "group_commit_backwards")},
    }))


if __name__ == "__main__":
    main()
