"""The producer loop: 1, 2, 3, … with a bounded number in flight, every outcome recorded.

The broker client only publishes and reports answers; this loop owns the in-flight bound,
the ack timeout (after which the outcome is *unknown*: the message may or may not be
stored), retries, and the history rows.
"""
from __future__ import annotations

import asyncio
import collections
import contextlib
import sys
import time
from typing import Callable, Optional

from ..history import Recorder
from ..history.schema import LATE_NS
from ..scenario import WorkloadSpec
from .accounting import Accounting
from .payload import encode


# The interpreter's switch interval while producers run. A client library that calls back
# from threads of its own (pulsar-client's I/O threads; paho's network loop until it moved
# onto the event loop, systems/mqtt/client.py) takes the interpreter lock once or more per
# message; the producer's thread, having let go of it inside a send, waits to get it back
# until that thread lets go between two callbacks, which a thread with more callbacks to
# run takes back at once, or until the interval forces a switch: 5 ms by default.
# Measured with benchmarks/producer.py, 5 ms against 0.5 ms, alternating, 4 rounds each:
# MQTT 11,600 -> 13,100 msg/s, Pulsar 20,900 -> 22,200 (0.2 and 0.05 ms: no better). A
# client without threads of its own (nats-py, redis-py, aio-pika; confluent-kafka calls
# back from poll() on the loop's thread) never has another thread waiting: no switch
# happens.
SWITCH_S = 0.0005


@contextlib.contextmanager
def quick_switches():
    """The switch interval at SWITCH_S (unless already shorter) until the block ends."""
    old = sys.getswitchinterval()
    if old <= SWITCH_S:
        yield
        return
    sys.setswitchinterval(SWITCH_S)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


class ProducerLoop:
    def __init__(
        self,
        name: str,
        client,
        recorder: Recorder,
        spec: WorkloadSpec,
        on_first_ack: Optional[Callable[[], None]] = None,
    ) -> None:
        self.name = name
        self.client = client
        self.rec = recorder
        self.spec = spec
        self.acct = Accounting(spec.messages)
        self.on_first_ack = on_first_ack or (lambda: None)
        self.attempts: dict[int, int] = {}  # value -> attempt number of the outstanding send
        # value -> when its latency counts from (first send's intended time, else its t_ns),
        # until its first ack carries it (history format 1.4: `send_ns`)
        self._start: dict[int, int] = {}
        self._expiry: collections.deque = collections.deque()  # (deadline, value, attempt)
        # the in-flight bound: free slots, and the send loop's wait for one (a bare future:
        # a semaphore's acquire raced against the resend event cost two tasks per message
        # once the bound was reached, a third of the recorded producer's time)
        self._free = spec.in_flight
        self._waiter: Optional[asyncio.Future] = None
        self._resend: collections.deque = collections.deque()
        self._pending_retries = 0
        self._wake = asyncio.Event()
        self.stopped_early: Optional[str] = None
        self.late = 0  # sends more than LATE_NS after their intended time (steady rate only)
        # a driver whose library reports its connection's life calls this (systems/base.py:
        # ClientEvents); on the others it stays unused
        client.on_event = self._client_event
        # a send that never waits, where the client has one (systems/base.py: Producer.send_now)
        self._now: Optional[Callable[[int, bytes], bool]] = getattr(client, "send_now", None)

    def _client_event(self, kind: str, node: Optional[str], detail: Optional[str], t: Optional[int] = None) -> None:
        self.rec.record(kind, self.name, None, None, node, detail, t_ns=None if t is None else t - self.rec.origin)

    # -- outcomes (called by the client, on the loop) --------------------------
    def on_outcome(self, value: int, kind: str, offset, node, detail, txn: Optional[int] = None) -> None:
        """The client's answer for `value`; a transactional producer's (format 1.7) names the
        transaction, whose outcome it is."""
        self.rec.outcome_row(kind, self.name, value, offset, node, detail,
                             self._start.pop(value, None) if kind == "ack" else None, txn)
        if kind == "ack":
            if self.acct.on_ack(value):
                self.on_first_ack()
        elif kind == "unknown":  # the client knows it cannot learn the outcome (e.g. a WAIT fell short)
            self.acct.on_unknown(value)
        else:
            self.acct.on_nack(value)
        attempt = self.attempts.pop(value, None)
        if attempt is None:
            return  # late answer to a send already timed out: recorded, nothing to release
        if kind != "ack" and attempt <= self.spec.retries:
            self._retry(value, attempt + 1)
        else:
            self._release()

    def _retry(self, value: int, attempt: int) -> None:
        # exponential back-off, so a broker in the middle of an election is not hammered
        delay = min(self.spec.retry_backoff * 2 ** (attempt - 2), self.spec.retry_backoff_max)
        self._pending_retries += 1
        asyncio.get_running_loop().call_later(delay, self._due, value, attempt)

    def _release(self) -> None:
        self._free += 1
        self._notify()

    def _notify(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _due(self, value: int, attempt: int) -> None:
        self._pending_retries -= 1
        self._resend.append((value, attempt))
        self._wake.set()
        self._notify()

    def _expire(self) -> None:
        now = time.monotonic()
        q = self._expiry
        while q and q[0][0] <= now:
            _, value, attempt = q.popleft()
            if self.attempts.get(value) != attempt:
                continue
            del self.attempts[value]
            self.rec.record("unknown", self.name, value, None, self.client.node(), "no answer within ack_timeout")
            self.acct.on_unknown(value)
            if attempt <= self.spec.retries:
                self._retry(value, attempt + 1)
            else:
                self._release()

    async def _sweeper(self) -> None:
        while True:
            await asyncio.sleep(0.05)
            self._expire()
            self.rec.maybe_flush()

    # -- sending ---------------------------------------------------------------
    def _hand(self, value: int, attempt: int, intended: Optional[int] = None) -> Optional[bytes]:
        """A send's bookkeeping and row, then the message handed to the client's `send_now`
        where it has one (a library call that never waits: one coroutine less per message,
        two with the client's); the payload back when the client's `send` must be awaited."""
        self.acct.on_send(value)
        self.attempts[value] = attempt
        t = self.rec.send_row(self.name, value, self.client.node(), None if attempt == 1 else f"retry {attempt - 1}",
                              intended)
        if attempt == 1:
            self._start[value] = t if intended is None else intended
        if intended is not None and t - intended > LATE_NS:
            self.late += 1
        self._expiry.append((time.monotonic() + self.spec.ack_timeout, value, attempt))
        payload = encode(self.name, value, self.spec.message_size)
        now = self._now
        if now is None:
            return payload
        try:
            return None if now(value, payload) else payload
        except Exception as e:
            self._refused(value, attempt, e)
            return None

    async def _send(self, value: int, attempt: int, intended: Optional[int] = None) -> None:
        payload = self._hand(value, attempt, intended)
        if payload is not None:
            await self._send_waiting(value, attempt, payload)

    async def _send_waiting(self, value: int, attempt: int, payload: bytes) -> None:
        try:
            await self.client.send(value, payload)
        except Exception as e:
            self._refused(value, attempt, e)

    def _refused(self, value: int, attempt: int, e: Exception) -> None:
        """The client refused the send: it never left us."""
        if self.attempts.get(value) == attempt:
            self.on_outcome(value, "nack", None, self.client.node(), f"send failed: {type(e).__name__}: {e}")

    async def _drain_resends(self, deadline: float) -> None:
        """Send the due retries, until `deadline`: a client whose sends block (RabbitMQ's while
        its node boots: one nack every ack_timeout) must not hold the write past its bound;
        a retry not sent has its nack or unknown row already."""
        n = 0
        while self._resend and time.monotonic() < deadline:
            value, attempt = self._resend.popleft()
            await self._send(value, attempt)
            n += 1
            if n % 32 == 0:
                # thousands come due together after a mass timeout: sent without a pause
                # they held the loop for 150-190 ms, and a fault firing then waited for it
                await asyncio.sleep(0)

    async def run(self, deadline: float) -> None:
        """Send every message, then wait for every outcome; both bounded by `deadline`."""
        await self.client.open(self.on_outcome)
        sweeper = asyncio.create_task(self._sweeper())
        try:
            await self._write_all(deadline)
            await self._tail(deadline)
        finally:
            sweeper.cancel()
            await self._end()

    async def _write_all(self, deadline: float) -> None:
        """Every message sent once, on the rate's schedule and within the in-flight bound."""
        rate, t_first = self.spec.rate, time.monotonic_ns()
        intended = None
        for value in range(1, self.spec.messages + 1):
            if rate is not None:
                # open loop: each message has its time on a schedule kept against the start,
                # so a stalled client does not lower the offered rate (a backlog goes out
                # at once when it can) and latency counts from the schedule, not from
                # when the client got round to it (no coordinated omission)
                due = t_first + int((value - 1) * 1e9 / rate)
                intended = due - self.rec.origin
                ahead = (due - time.monotonic_ns()) / 1e9
                if ahead > 0.001:
                    await asyncio.sleep(ahead)
            # the common case without a coroutine each (three per message cost 1 µs)
            if self._resend:
                await self._drain_resends(deadline)
            if self._free > 0 and time.monotonic() < deadline:
                self._free -= 1
            elif not await self._acquire(deadline):
                # a free slot does not mean time is left: a client whose send blocks (a
                # transaction's commit waiting out a broker that never serves) would go on
                # past write_timeout, one message every ack_timeout (seen: 13 min of 10)
                self.stopped_early = f"write_timeout reached after {value - 1} messages"
                return
            payload = self._hand(value, 1, intended)
            if payload is not None:
                await self._send_waiting(value, 1, payload)
            if value % 32 == 0:
                # publish rarely blocks, so without this the nemesis and the reply
                # handler starve and the fault lands late
                await asyncio.sleep(0)

    async def _tail(self, deadline: float) -> None:
        """The outstanding answers, retries and timeouts, until `deadline`; what is left then
        is said in `stopped_early`."""
        while (self.attempts or self._resend or self._pending_retries) and time.monotonic() < deadline:
            await self._drain_resends(deadline)
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), 0.05)
            except asyncio.TimeoutError:
                pass
        self._expire()
        if self.attempts and not self.stopped_early:
            self.stopped_early = f"write_timeout reached with {len(self.attempts)} answers outstanding"
        retries = len(self._resend) + self._pending_retries
        if retries and not self.stopped_early:
            self.stopped_early = f"write_timeout reached with {retries} retries not sent"

    async def _end(self) -> None:
        """Whatever is still outstanding is unknown: never silently dropped (a message waiting
        for its resend already has its nack/unknown row); then the client closed."""
        for value in list(self.attempts):
            self.rec.record("unknown", self.name, value, None, None, "outstanding when the write phase ended")
            self.acct.on_unknown(value)
        self.attempts.clear()
        try:
            await self.client.close()
        finally:  # what was recorded reaches the disk even when a client's close fails
            self.rec.flush()

    async def _acquire(self, deadline: float) -> bool:
        """A free in-flight slot, serving due resends while waiting for one; False once
        `deadline` has passed."""
        while True:
            if self._resend:
                await self._drain_resends(deadline)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if self._free > 0:
                self._free -= 1
                return True
            loop = asyncio.get_running_loop()
            w = self._waiter = loop.create_future()
            timer = loop.call_later(min(remaining, 1.0), _wake_up, w)
            try:
                await w
            finally:
                timer.cancel()
                self._waiter = None


def _wake_up(w: asyncio.Future) -> None:
    if not w.done():
        w.set_result(None)
