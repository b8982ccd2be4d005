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


def fisher_exact(a: int, b: int, c: int, d: int) -> float:
    """Two-sided p of Fisher's exact test on the 2x2 table [[a, b], [c, d]]: the chance,
    margins fixed, of a table at most as likely as this one."""
    n1, n2, k = a + b, c + d, a + c
    total = math.comb(n1 + n2, k)

    def p(x: int) -> float:
        return math.comb(n1, x) * math.comb(n2, k - x) / total

    observed = p(a)
    lo, hi = max(0, k - n2), min(k, n1)
    # a relative tolerance, as R and scipy use: tables as likely as the observed one count
    return min(1.0, sum(q for q in (p(x) for x in range(lo, hi + 1)) if q <= observed * (1 + 1e-7)))
