"""When a fault's windows start: once, every X seconds, or after random gaps.

Random gaps come from the scenario's seed (and the run and fault), so the same seed
replays the same schedule; the planned offsets are recorded in run.json.
"""
from __future__ import annotations

import random

from ..scenario import FaultSpec


def plan(spec: FaultSpec, rng: random.Random) -> list[float]:
    """Start offsets of each window, in seconds after the trigger."""
    r = spec.repeat
    if r is None:
        return [0.0]
    out = [0.0]
    t = 0.0
    while len(out) < r.max_windows:
        if r.every is not None:
            t += r.every
        else:
            t += (spec.duration or 0.0) + rng.uniform(r.gap[0], r.gap[1])
        if t >= r.for_:
            break
        out.append(round(t, 3))
    return out


def rng_for(seed: int, run_id: str, index: int, purpose: str) -> random.Random:
    return random.Random(f"{seed}:{run_id}:{index}:{purpose}")
