"""The reader: after the write phase, everything from the beginning, every delivery recorded."""
from __future__ import annotations

import asyncio
from typing import Callable, Optional

from ..history import Recorder
from .payload import decode


class LiveProgress:
    """Which of this run's acked messages a live consumer has received, so that its read can
    end as soon as all have arrived instead of always waiting out `read_idle`."""

    def __init__(self, topic: Optional[str] = None) -> None:
        self.topic = topic  # workload.topics: a consumer of one topic waits for its producers only
        self.producers: dict = {}  # name -> ProducerLoop
        self.seen: dict[str, bytearray] = {}

    def add(self, loop) -> None:
        if self.topic is not None and not loop.name.endswith(f".{self.topic}"):
            return
        self.producers[loop.name] = loop
        self.seen[loop.name] = bytearray(loop.spec.messages + 1)

    def saw(self, producer, value) -> None:
        got = self.seen.get(producer)
        if got is not None and value is not None and 0 < value < len(got):
            got[value] = 1

    def all_acked_seen(self) -> bool:
        from .accounting import ACK

        for name, loop in self.producers.items():
            seen = self.seen[name]
            if any(st == ACK and not s for st, s in zip(loop.acct.state, seen)):
                return False
        return True


# the Pulsar seed's reader says where it is every 50,000 messages
PROGRESS_EVERY = 50_000


class _Said:
    """The read's progress lines: `Received: N Curr Entry: <position>`, as the seed prints."""

    def __init__(self, line: Callable[[str], None], every: int) -> None:
        self.line, self.every = line, every
        self.n = 0
        self.at = None

    def saw(self, offset) -> None:
        self.n += 1
        self.at = offset
        if self.n % self.every == 0:
            self.line(f"Received: {self.n} Curr Entry: {offset}")

    def end(self, status: str) -> None:
        self.line(f"Received: {self.n} Curr Entry: {self.at} (read {status})")


def _deliverer(recorder: Recorder, progress: Optional[LiveProgress] = None, said: Optional[_Said] = None):
    def deliver(payload: bytes, offset, node, partition: Optional[str] = None) -> None:
        producer, value = decode(payload)
        detail = None if value is not None else f"not a brokerchaos payload: {payload[:64]!r}"
        recorder.record("recv", producer, value, offset, node, detail, partition=partition)
        recorder.maybe_flush()
        if progress is not None:
            progress.saw(producer, value)
        if said is not None:
            said.saw(offset)

    return deliver


async def start_live(client, recorder: Recorder, progress: LiveProgress) -> None:
    """A live consumer (MQTT): subscribed before the write phase, recording as it goes."""
    await client.start(_deliverer(recorder, progress))


async def finish_live(client, recorder: Recorder, progress: LiveProgress, idle: float, timeout: float) -> str:
    """Let a live consumer read until every acked message has arrived, or nothing has for
    `idle` seconds; "complete" or "incomplete: why", as read_all."""
    return await _ended(client.finish(idle, progress.all_acked_seen), recorder, timeout)


async def read_all(client, recorder: Recorder, idle: float, timeout: float,
                   line: Optional[Callable[[str], None]] = None, every: int = PROGRESS_EVERY) -> str:
    """Returns "complete" or "incomplete: why"; the same text is recorded as a read_end row.
    `line` gets a progress line every `every` deliveries and one at the end."""
    said = _Said(line, every) if line is not None else None
    status = await _ended(client.read(_deliverer(recorder, said=said), idle), recorder, timeout)
    if said is not None:
        said.end(status)
    return status


async def _ended(work, recorder: Recorder, timeout: float) -> str:
    try:
        status = await asyncio.wait_for(work, timeout)
    except asyncio.TimeoutError:
        status = f"incomplete: read_timeout ({timeout:.0f}s) reached"
    except Exception as e:  # any client failure ends the read, reported as such
        status = f"incomplete: {type(e).__name__}: {e}"
    recorder.record("read_end", detail=status)
    recorder.flush()
    return status
