"""Interval estimates for "how often does this happen" verdicts."""
from __future__ import annotations

import math
from typing import Optional


def wilson(k: int, n: int, z: float = 1.959963984540054) -> tuple[Optional[float], Optional[float]]:
    """95% Wilson score interval for k successes in n trials (None, None when n == 0)."""
    if n == 0:
        return None, None
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


SEVERITY = {"pass": 0, "unknown": 1, "fail": 2}


def merge(results: list[str]) -> str:
    """The most severe result: one failed run fails the session; one undecided run means
    the session cannot pass."""
    return max(results, key=lambda r: SEVERITY[r], default="unknown")
