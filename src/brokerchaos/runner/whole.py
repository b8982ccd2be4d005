"""The evidence a run writes about itself besides its fault windows' effects (history format
1.9, docs/history-format.md):

- `whole`: before the read, the cluster whole again: every node the faults did not mean to
  leave down serving (its process running, its client port answering from the client host:
  a metadata view can still name a node that never came back), and where nothing is held
  down on purpose, the cluster's own word that it is whole, the stream's that every
  replica is current, and where each replica can be asked for its own copy (NATS), that
  none ends before the leader's. Asked until all holds or the bound passes; one row, its value how many
  things were short (null: the cluster never answered).
- `mechanism`: once every fault is healed, one row per mechanism the scenario `requires`,
  with whether the run saw it happen (owner-moved, unsynced-dropped) or null where the
  analysis judges it from the messages (duplicates, unknown-outcomes).
"""
from __future__ import annotations

import asyncio
import time
from typing import Callable, Optional

from ..faults.effect import serving
from ..history import Recorder
from ..history.schema import MECHANISM, WHOLE
from .record import RunRecord

WHOLE_S = 90.0  # a node restarted by a heal has this long to serve again (a JVM broker's boot, a 3.9 ZK wait)
EVERY_S = 0.5


async def whole_before_read(dep, nemeses: list, group, rec: RunRecord, nem_rec: Recorder,
                            line: Callable[[str], None], bound: float = WHOLE_S) -> None:
    held = sorted({n for nem in nemeses for n in nem.held()})
    hosts = [h for h in dep.cluster.host_names if h not in held]
    t0 = time.monotonic()
    while True:
        short, said, ready = await _look(dep, group, hosts, held)
        if not short or time.monotonic() - t0 >= bound:
            break
        await asyncio.sleep(EVERY_S)
    waited = time.monotonic() - t0
    rec.stream_ready_before_read = ready if not held else "not asked: a fault holds " + ", ".join(held)
    if not short:
        detail = f"whole after {waited:.1f} s: serving {', '.join(hosts)}" + (f"; {said}" if said else "") + \
                 (f"; held down on purpose: {', '.join(held)}" if held else "")
    else:
        detail = f"not whole after {waited:.0f} s: " + "; ".join(short)
    if dep.cluster.restarts:
        detail += "; started again by the supervisor after exiting on their own: " + ", ".join(
            f"{r['node']} (exit {r['exit_code']})" for r in dep.cluster.restarts)
    nem_rec.record(WHOLE, value=len(short), detail=detail[:2000])
    nem_rec.flush()
    rec.whole = {"whole": not short, "detail": detail, "waited_s": round(waited, 3)}
    if short:
        line(f"Cluster NOT whole before the read: {detail}")


async def _look(dep, group, hosts: list[str], held: list[str]) -> tuple[list[str], str, Optional[bool]]:
    """What is short now (each in words), what the cluster said, and whether the stream said ready."""
    short = []
    for n in hosts:
        why = await serving(dep.cluster, group, n)
        if why:
            short.append(f"{n}: {why}")
    if short or held:
        return short, "", None
    try:
        ok, said = await asyncio.wait_for(dep.roles.whole(), 15.0)
    except Exception as e:
        return [f"the cluster's own look failed: {type(e).__name__}: {e}"[:300]], "", None
    if not ok:
        return [f"the cluster says: {said}"], said, None
    try:
        ready = bool(await asyncio.wait_for(dep.roles.stream_ready(), 15.0))
    except Exception as e:
        return [f"the stream's look failed: {type(e).__name__}: {e}"[:300]], said, False
    if not ready:
        return ["the stream says a replica is not current (or it has no leader)"], said, False
    try:
        behind = await asyncio.wait_for(dep.roles.copies_behind(), 15.0)
    except Exception as e:
        return [f"the replicas' own look failed: {type(e).__name__}: {e}"[:300]], said, False
    if behind:
        return [f"the stream says every replica is current, but {'; '.join(behind)}"], said, False
    return [], f"{said}; the stream: every replica current", True


def mechanisms(requires: list[str], nemeses: list, nem_rec: Recorder) -> None:
    """One `mechanism` row per required mechanism: what the run saw of it."""
    for name in requires:
        value, evidence = _seen(name, nemeses)
        nem_rec.record(MECHANISM, value=value, detail=f"{name}: {evidence}"[:2000])
    nem_rec.flush()


def _seen(name: str, nemeses: list) -> tuple[Optional[int], str]:
    if name == "owner-moved":
        moves = [f"window {w}: {m}" for nem in nemeses for w, m in nem.owner_moves.items()]
        return (1, "; ".join(moves)) if moves else (0, "the stream's owner never moved in a fault window")
    if name == "unsynced-dropped":
        dropped = {n: b for nem in nemeses for w in nem.windows
                   for n, b in ((w.effect or {}).get("bytes_dropped") or {}).items() if b}
        return ((1, ", ".join(f"{n}: {b:,} bytes" for n, b in dropped.items())) if dropped
                else (0, "no power cut dropped an unsynced byte"))
    return None, "judged by the analysis"
