"""What the transactions' verdicts (format 1.7) cost a run's analysis.

    .venv/bin/python benchmarks/transactions.py [--messages 1000000] [--repeat 3] [--dir /tmp/bc-bench-txn]

Generates benchmarks/analysis.py's history (one producer, an end read with losses, a
redelivered block and swapped blocks), then a copy whose producer wrote in transactions of
10: each outcome row names its transaction (`txn`), and one transaction in five is
aborted (its acks become nacks, and the end read, read_committed, never got its
messages). Times, on one warm session, the analysis of the plain
history and of the transactional one (best of --repeat each, alternated) and prints one
JSON line: both times, their ratio (the issue's target: at most 2), the transactions
step's own seconds in each, and the transactions' figures as a check that the work was done.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from analysis import generate

from brokerchaos.history.schema import SCHEMA

SIZE = 10  # messages per transaction
ABORT_EVERY = 5  # every fifth transaction aborted


def _txn(t: pa.Table):
    return pc.add(pc.divide(pc.subtract(t.column("value"), 1), SIZE), 1)  # integer division


def _aborted(t: pa.Table):
    """Rows of a value whose transaction is aborted: its number a multiple of ABORT_EVERY."""
    txn = _txn(t)
    return pc.fill_null(pc.equal(pc.subtract(txn, pc.multiply(pc.divide(txn, ABORT_EVERY), ABORT_EVERY)), 0), False)


def transactional(src: Path, dest: Path) -> None:
    """`src`'s history with its producer's outcome rows in transactions (module docstring)."""
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(src, dest)
    for f in dest.rglob("*.parquet"):
        pq.write_table(in_transactions(pq.read_table(f)), f)


def in_transactions(t: pa.Table) -> pa.Table:
    """One history table's producer outcomes in transactions of SIZE, every ABORT_EVERY-th
    aborted (its acks become nacks, its messages never read)."""
    # a read_committed read never gets an aborted transaction's messages
    t = t.filter(pc.invert(pc.and_(pc.equal(t.column("type"), "recv"), _aborted(t))))
    txn, nth = _txn(t), _aborted(t)
    outcome = pc.is_in(t.column("type"), pa.array(["ack", "nack", "unknown"]))
    txn = pc.if_else(outcome, txn, pa.nulls(len(t), pa.int64()))
    types = pc.if_else(pc.and_(pc.equal(t.column("type"), "ack"), nth), pa.scalar("nack"), t.column("type"))
    cols = {c: t.column(c) for c in t.column_names}
    cols["type"], cols["txn"] = types, txn
    return pa.table({c: cols.get(c, pa.nulls(len(t), SCHEMA.field(c).type)) for c in SCHEMA.names},
                    schema=SCHEMA)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default="/tmp/bc-bench-txn")
    a = ap.parse_args()
    plain, txn = Path(a.dir) / "plain", Path(a.dir) / "txn"
    rows = generate(plain, a.messages)
    transactional(plain, txn)

    from brokerchaos.analysis import metrics
    from brokerchaos.analysis.spark import get_spark

    spark = get_spark()
    times: dict[str, list[float]] = {"plain": [], "txn": []}
    step: dict[str, float] = {}
    v = None
    for i in range(a.repeat + 1):  # the first round warms the JVM up and is not counted
        for name, path in (("plain", plain), ("txn", txn)):
            df = metrics.read_history(spark, str(path))
            t = time.perf_counter()
            an = metrics.analyze(spark, df)
            took = time.perf_counter() - t
            step[name] = an.meta["seconds"].get("transactions")
            if name == "txn":
                v = an.verdicts[0]
            an.release()
            if i:
                times[name].append(took)
    best = {k: min(x) for k, x in times.items()}
    print(json.dumps({
        "messages": a.messages, "history_rows": rows, "plain_s": round(best["plain"], 2),
        "txn_s": round(best["txn"], 2), "ratio": round(best["txn"] / best["plain"], 3),
        "txn_step_s": step, "rounds": times,
        "txn": {k: v[k] for k in ("txns", "txns_committed", "txns_aborted", "aborted_reads", "torn_txns",
                                  "offset_conflicts", "acked_missing")},
    }))


if __name__ == "__main__":
    main()
