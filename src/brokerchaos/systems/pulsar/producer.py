"""The producer: pulsar-client with every send callback a history row, and the client's own
log read for the connection states it reports (LogTail)."""
from __future__ import annotations

import asyncio
import functools
import os
import re
import time
from datetime import datetime
from pathlib import Path
from typing import Optional

from ..base import Client, ClientEvents, OutcomeCallback, SystemError_
from ..runtime import Handoff
from . import library
from .library import outcome_of


class LogTail:
    """The lines a file gains from when this is made: (time, message) of the C++ client's
    `2026-11-25 11:05:08.509 INFO  [tid] File:line | message`, the time on the monotonic
    clock from the line's own (local, milliseconds; the time it is read if the line's is not
    within a minute of now: a log in another time zone)."""

    def __init__(self, path: Optional[Path]) -> None:
        self.f = None
        try:
            self.f = open(path, "rb") if path is not None else None
            if self.f is not None:
                self.f.seek(0, os.SEEK_END)
        except OSError:  # no client log (yet): no client events
            self.f = None
        self.rest = b""

    def lines(self) -> list[tuple[int, str]]:
        if self.f is None:
            return []
        data = self.rest + self.f.read()
        *whole, self.rest = data.split(b"\n")
        out = []
        wall, mono = time.time(), time.monotonic_ns()
        for raw in whole:
            head, sep, msg = raw.decode(errors="replace").partition(" | ")
            if not sep:
                continue
            t = mono
            try:
                ago = wall - datetime.strptime(head[:23], "%Y-%m-%d %H:%M:%S.%f").timestamp()
                if -1 < ago < 60:
                    t = mono - int(max(ago, 0) * 1e9)
            except ValueError:
                pass
            out.append((t, msg))
        return out

    def close(self) -> None:
        if self.f is not None:
            self.f.close()
            self.f = None


class _ProducerStates:
    """One producer's lines of the client log as its client events: its handler scheduling
    a reconnection is the disconnect, the next "Created producer on broker" the reconnect,
    on the broker named there. `t` is the line's time on the monotonic clock."""

    CREATED = re.compile(r"Created producer on broker \[\S+ -> ([\d.]+):(\d+)\]")
    LOST = "Schedule reconnection in "

    def __init__(self, producer: "PulsarProducer", topic: str, producer_name: str) -> None:
        self.producer = producer
        self.prefix = f"[{topic}, {producer_name}] "
        self.at: Optional[str] = None
        self.down = False

    def line(self, t: int, msg: str) -> None:
        if not msg.startswith(self.prefix):
            return
        try:
            m = self.CREATED.search(msg)
            if m:
                self.at = self.producer.system.cluster.node_at(m.group(1), int(m.group(2))) or m.group(1)
                if self.down:
                    self.down = False
                    self.producer.on_event("reconnect", self.at, "pulsar-client: created producer on broker", t)
            elif self.LOST in msg and not self.down and self.at is not None:
                self.down = True
                self.producer.on_event("disconnect", self.at, f"pulsar-client: {msg.strip()}"[:200], t)
        except Exception:  # a log line must never break the client
            pass


class PulsarProducer(ClientEvents):
    def __init__(self, system: Client, name: str) -> None:
        self.system = system
        self.name = name
        self.client = None
        self.p = None
        self.on_outcome: Optional[OutcomeCallback] = None
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.dedup = system.ctx.scenario.workload.dedup
        self.states: Optional[_ProducerStates] = None
        self._tail: Optional[LogTail] = None
        self._follow: Optional[asyncio.Task] = None

    async def open(self, on_outcome: OutcomeCallback) -> None:
        s, o, w = self.system, self.system.options, self.system.ctx.scenario.workload
        self.on_outcome = on_outcome
        self.loop = asyncio.get_running_loop()
        self.handoff = Handoff(self.loop)
        s.follow_owner()
        timeout_ms = o.send_timeout(w.ack_timeout)
        self.client = s.shared.take(self.name) if w.topics > 1 else s.new_client(10)
        # named, so that its lines in the client log are told apart (and broker-side dedup,
        # where on, keys on (producer name, sequence id))
        name = f"{self.name}-{s.ctx.run_id}"
        kwargs = dict(
            block_if_queue_full=False, max_pending_messages=w.in_flight + 1000, send_timeout_millis=timeout_ms,
            batching_enabled=o.batching, batching_max_messages=o.batching_max_messages,
            batching_max_publish_delay_ms=o.batching_max_publish_delay_ms, producer_name=name)
        # a partitioned topic's: its first partition's producer, the one the owner watch follows
        self.states = _ProducerStates(self, s.partition_topics()[0], name)
        self._tail = LogTail(library.log_file())  # from here on: its creation is the first line it needs
        deadline = time.monotonic() + 30
        while True:
            try:
                self.p = await asyncio.to_thread(self.client.create_producer, s.topic, **kwargs)
                from pulsar import _pulsar  # the extension module beneath pulsar-client's Python layer

                self._builder, self._send_async = _pulsar.MessageBuilder, self.p._producer.send_async
                self._follow = asyncio.ensure_future(self._follow_log())
                return
            except Exception as e:
                if time.monotonic() > deadline:
                    self._tail.close()  # the loop does not close a producer that never opened
                    raise SystemError_(f"cannot create a producer on {s.topic}: {e}") from None
                await asyncio.sleep(0.5)

    def _read_log(self) -> None:
        for t, msg in self._tail.lines():
            self.states.line(t, msg)

    async def _follow_log(self) -> None:
        # each producer follows the one log: with many topics, each less often
        every = 0.02 * max(1, self.system.ctx.scenario.workload.topics / 10)
        while True:
            await asyncio.sleep(every)
            self._read_log()

    def _report(self, value: int, result, msg_id) -> None:
        kind, detail = outcome_of(result)
        self.on_outcome(value, kind, str(msg_id) if kind == "ack" and msg_id is not None else None, self.node(),
                        detail)

    async def send(self, value: int, payload: bytes) -> None:
        self.send_now(value, payload)

    def send_now(self, value: int, payload: bytes) -> bool:
        # The client's I/O thread calls back with the interpreter lock taken, which the
        # sending thread then waits for: the callback is the hand-off itself (no Python
        # frame of ours there) and the message id is formatted on the loop. The message is
        # built as pulsar's Producer.send_async builds it, without its per-call checks.
        b = self._builder().content(payload)
        if self.dedup:
            b.sequence_id(value)
        self._send_async(b.build(), functools.partial(self.handoff.put, self._report, value))
        return True

    def node(self) -> Optional[str]:
        if self.p is None or not self.p.is_connected():
            return None
        return self.system.owner_now or self.system.cluster.node_names[0]

    async def close(self) -> None:
        if self.p is not None:
            try:
                await asyncio.wait_for(asyncio.to_thread(self.p.flush), 10)
            except Exception:  # outstanding sends are already unknown
                pass
        if self.client is not None:
            await self.system.shared.release(self.name, self.client)
        if self._follow is not None:
            self._follow.cancel()
            await asyncio.gather(self._follow, return_exceptions=True)
            self._read_log()  # up to the close
            self._tail.close()
        # the close's last callbacks were handed to the loop: let them run
        await asyncio.sleep(0)
