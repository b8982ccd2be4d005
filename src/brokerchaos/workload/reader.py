"""The reader: after the write phase, everything from the beginning, every delivery recorded."""
from __future__ import annotations

import asyncio

from ..history import Recorder
from .payload import decode


async def read_all(client, recorder: Recorder, idle: float, timeout: float) -> str:
    """Returns "complete" or "incomplete: why"; the same text is recorded as a read_end row."""

    def deliver(payload: bytes, offset, node) -> None:
        producer, value = decode(payload)
        detail = None if value is not None else f"not a brokerchaos payload: {payload[:64]!r}"
        recorder.record("recv", producer, value, offset, node, detail)
        recorder.maybe_flush()

    try:
        status = await asyncio.wait_for(client.read(deliver, idle), timeout)
    except asyncio.TimeoutError:
        status = f"incomplete: read_timeout ({timeout:.0f}s) reached"
    except Exception as e:  # noqa: BLE001 - any client failure ends the read, reported as such
        status = f"incomplete: {type(e).__name__}: {e}"
    recorder.record("read_end", detail=status)
    recorder.flush()
    return status
