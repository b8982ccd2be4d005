"""`workload.topics`: work over many topics a few at a time."""
from __future__ import annotations

import asyncio
from typing import Awaitable, Iterable

# topics created, read or dropped at once: a cluster asked for a thousand topics in one burst
# answers slower than one asked for a few at a time
AT_ONCE = 16


async def bounded_gather(work: Iterable[Awaitable], limit: int = AT_ONCE) -> list:
    """Every awaitable's result, in order, at most `limit` running at once; the first error
    is raised once all have ended."""
    sem = asyncio.Semaphore(limit)

    async def one(a: Awaitable):
        async with sem:
            return await a

    out = await asyncio.gather(*(one(a) for a in work), return_exceptions=True)
    for r in out:
        if isinstance(r, BaseException):
            raise r
    return out
