"""What the Redis system and its consumer group's member (group.py) both use: the
client, the stream entry's field, entry ids as text, and calls with a bound that leave a
silent server's call behind rather than wait for it."""
from __future__ import annotations

import asyncio
from typing import Optional

FIELD = b"p"


def _redis():
    import redis.asyncio as aioredis

    return aioredis


def client_for(addr: tuple[str, int], timeout: float = 2.0):
    return _redis().Redis(host=addr[0], port=addr[1], socket_connect_timeout=timeout, socket_timeout=timeout)


def entry_id(reply) -> str:
    return reply.decode() if isinstance(reply, bytes) else str(reply)


async def abandon_after(coro, timeout: float, abandoned: set):
    """`await coro` for at most `timeout` seconds; past that it is cancelled and left behind
    (kept in `abandoned`), not awaited as asyncio.wait_for would."""
    task = asyncio.ensure_future(coro)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except BaseException:  # the caller was cancelled (a producer's writer at the write's end)
        _leave(task, abandoned)
        raise
    if not done:
        _leave(task, abandoned)
        raise TimeoutError(f"no answer within {timeout:.0f}s")
    return task.result()


def _leave(task: asyncio.Task, abandoned: set) -> None:
    task.cancel()
    abandoned.add(task)
    task.add_done_callback(lambda t: _settle(t, abandoned))


def _settle(task: asyncio.Task, abandoned: set) -> None:
    abandoned.discard(task)
    # its error (a connection closed, long after we gave up) is retrieved here: otherwise
    # asyncio prints "Task exception was never retrieved" with a traceback on the console
    if not task.cancelled():
        task.exception()


async def aclose(r, abandoned: Optional[set] = None) -> None:
    try:
        await abandon_after(r.aclose(), 2, abandoned if abandoned is not None else set())
    except Exception:
        pass
