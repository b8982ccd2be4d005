"""The reader: after the write phase, everything from the beginning, every delivery recorded."""
from __future__ import annotations

import asyncio

from ..history import Recorder
from .payload import decode


def _deliverer(recorder: Recorder):
    def deliver(payload: bytes, offset, node) -> None:
        producer, value = decode(payload)
        detail = None if value is not None else f"not a brokerchaos payload: {payload[:64]!r}"
        recorder.record("recv", producer, value, offset, node, detail)
        recorder.maybe_flush()

    return deliver


async def start_live(client, recorder: Recorder) -> None:
    """A live consumer (MQTT): subscribed before the write phase, recording as it goes."""
    await client.start(_deliverer(recorder))


async def finish_live(client, recorder: Recorder, idle: float, timeout: float) -> str:
    """Let a live consumer read until idle; "complete" or "incomplete: why", as read_all."""
    return await _ended(client.finish(idle), recorder, timeout)


async def read_all(client, recorder: Recorder, idle: float, timeout: float) -> str:
    """Returns "complete" or "incomplete: why"; the same text is recorded as a read_end row."""
    return await _ended(client.read(_deliverer(recorder), idle), recorder, timeout)


async def _ended(work, recorder: Recorder, timeout: float) -> str:
    try:
        status = await asyncio.wait_for(work, timeout)
    except asyncio.TimeoutError:
        status = f"incomplete: read_timeout ({timeout:.0f}s) reached"
    except Exception as e:  # noqa: BLE001 - any client failure ends the read, reported as such
        status = f"incomplete: {type(e).__name__}: {e}"
    recorder.record("read_end", detail=status)
    recorder.flush()
    return status
