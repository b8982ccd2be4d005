"""The first analysis in a JVM is several times slower than the next ones: Spark generates
and compiles ~270 classes for it, and the JIT has not seen the planner's code yet (measured
on a 100,000-message NATS run: 14 s first, then 6.8 s, 3.1 s, 2.5 s). A session pays that
before its first run's write phase, while its first cluster starts, on a small history of
the same shape as a run's, so that a run's verdict comes at the warm speed.

Generated code is cached by its text, which does not depend on the run's names or times,
so what this compiles is what the runs' analyses use.
"""
from __future__ import annotations

import tempfile
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..history.schema import SCHEMA

_done = threading.Event()
_lock = threading.Lock()


def _history(path: Path, messages: int = 2_000) -> None:
    """One run: a producer (sends, acks carrying their send time, a few nacks), a fault window
    with a pause in the acks, a read with a redelivered block, a swapped pair and a loss."""
    v = np.arange(1, messages + 1, dtype=np.int64)
    t_send = v * 100_000
    t_fault = messages // 3 * 100_000
    t_ack = t_send + 2_000_000
    t_ack = np.where((t_ack > t_fault) & (t_ack < t_fault + 300_000_000), t_fault + 300_000_000, t_ack)
    nack = v % 500 == 0
    read = list(v[~nack & (v != 7)])
    read[10], read[11] = read[11], read[10]
    read[100:100] = read[50:80]  # a block read again
    read = np.asarray(read, dtype=np.int64)
    cols: dict[str, list] = {f.name: [] for f in SCHEMA}

    def add(client, seq, t, ty, producer, value, node=None, detail=None, window=None, offset=None, send_ns=None):
        m = len(t)
        cols["run"] += ["warm-up"] * m
        cols["client"] += [client] * m
        cols["seq"] += list(seq)
        cols["t_ns"] += list(t)
        cols["type"] += [ty] * m
        cols["producer"] += [producer] * m
        cols["value"] += list(value)
        cols["offset"] += list(offset) if offset is not None else [None] * m
        cols["node"] += [node] * m
        cols["detail"] += [detail] * m
        cols["window"] += [window] * m
        cols["intended_ns"] += [None] * m
        cols["send_ns"] += list(send_ns) if send_ns is not None else [None] * m

    add("p1", 2 * v - 2, t_send, "send", "p1", v, node="n1")
    add("p1", (2 * v - 1)[~nack], t_ack[~nack], "ack", "p1", v[~nack], offset=[str(x) for x in v[~nack]],
        send_ns=t_send[~nack])
    add("p1", (2 * v - 1)[nack], t_ack[nack], "nack", "p1", v[nack])
    add("c1", range(len(read)), 10**10 + np.arange(len(read)) * 1000, "recv", "p1", read, node="n2",
        offset=[str(x) for x in read])
    add("nemesis", [1], [t_fault], "fault", None, [None], node="n1", detail="kill leader", window=1)
    add("nemesis", [2], [t_fault + 10**9], "heal", None, [None], node="n1", detail="kill leader", window=1)
    add("c1", [len(read)], [2 * 10**10], "read_end", None, [None], detail="complete")
    path.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(cols, schema=SCHEMA), path / "warm-up.parquet")


def warm_up(spark) -> None:
    """One analysis of a small history, once per process (later calls return at once)."""
    from . import metrics

    with _lock:
        if _done.is_set():
            return
        with tempfile.TemporaryDirectory(prefix="brokerchaos-warm-up-") as d:
            _history(Path(d))
            metrics.analyze(spark, metrics.read_history(spark, d)).release()
        _done.set()
