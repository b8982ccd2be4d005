"""After the end read, each replica's copy of the stream read on its own (workload.read_replicas):
a reader per node (`replica-<node>`, its subscribe row `replica` naming the node), what it
found at the positions that copy gives, and how its read ended. The replica verdicts are
judged from these rows (analysis/replicas.py); the end read's are not touched by them."""
from __future__ import annotations

import asyncio
import time

from ..history.schema import REPLICA
from ..workload.reader import read_all
from .record import RunRecord


async def read_replicas(c, rec: RunRecord) -> None:
    """Every node holding a copy read, all at once, each bounded by the read's own bounds."""
    w = c.scenario.workload
    if not w.read_replicas:
        return
    t0 = time.monotonic()
    try:
        nodes = await asyncio.wait_for(c.dep.client.replica_nodes(), w.read_idle)
    except Exception as e:  # recorded as a replica read that did not finish: the checks cannot pass
        why = f"incomplete: the nodes holding a copy could not be named: {type(e).__name__}: {e}"
        r = c.recorder("replica-?")
        r.record("subscribe", detail=REPLICA)
        r.record("read_end", detail=why)
        r.close()
        rec.replica_reads = {"?": why}
        c.line(f"Replicas read one by one: {why}")
        return
    ends = await asyncio.gather(*(_one(c, n) for n in nodes))
    rec.replica_reads = dict(zip(nodes, ends))
    said = ", ".join(f"{n} {e}" for n, e in rec.replica_reads.items())
    c.line(f"Replicas read one by one ({time.monotonic() - t0:.1f} s): {said}")


async def _one(c, node: str) -> str:
    w = c.scenario.workload
    name = f"replica-{node}"
    r = c.recorder(name)
    try:
        r.record("subscribe", node=node, detail=REPLICA)
        return await read_all(c.dep.client.replica_reader(name, node), r, w.read_idle, w.read_timeout)
    finally:
        r.close()
