"""A connection to NATS from the harness (nats-py): connected within a bound, closed within
one, with nats-py's own logging of every disconnect kept quiet (the history records them)."""
from __future__ import annotations

import asyncio
import time

import nats
from nats.errors import NoServersError
from nats.errors import TimeoutError as NatsTimeout

from ..base import SystemError_


def _quiet(*_a, **_k):
    # nats-py logs every disconnect at ERROR; the history records what matters.
    async def noop(*_a, **_k):
        return None

    return noop


async def _close(nc) -> None:
    """Close a connection within 5 s whatever state it is in (the broker may be dead)."""
    if nc is None:
        return
    try:
        await asyncio.wait_for(nc.close(), 5)
    except Exception:  # closing anyway
        pass


async def _connect(servers: list[str], name: str, timeout: float, disconnected=None, reconnected=None,
                   check=lambda: None, ordered: bool = False):
    """`check` raises when waiting is hopeless (a server of ours exited while starting)."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        check()
        try:
            return await nats.connect(
                servers=servers,
                name=name,
                connect_timeout=2,
                reconnect_time_wait=0.2,
                max_reconnect_attempts=-1,
                pending_size=256 * 1024 * 1024,
                error_cb=_quiet(),
                disconnected_cb=disconnected or _quiet(),
                reconnected_cb=reconnected or _quiet(),
                allow_reconnect=True,
                dont_randomize=ordered,
            )
        except (NoServersError, OSError, NatsTimeout, asyncio.TimeoutError) as e:
            last = e
            await asyncio.sleep(0.1)
    raise SystemError_(f"could not connect to NATS at {servers} within {timeout}s: {last!r}")
