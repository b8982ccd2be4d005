"""A live consumer's machinery (`workload.consumers`): a system writes `consume()`, this
runs it in the background, starts it again after an error its library gave up on, and
finishes and closes it."""
from __future__ import annotations

import asyncio
import re
import time
from typing import TYPE_CHECKING, Any, Callable, Optional

from .base import DeliverCallback

if TYPE_CHECKING:
    from .base import Client


class LiveConsumer:
    """A consumer reading during the write phase (`workload.consumers`), as an application
    would: from the stream's first message, acking as the system expects, recovering from
    lost connections the way its client library does. A system writes `consume()`; this
    class runs it in the background, starts it again after an error the library did not
    recover from (the consumer keeps its position in `self`), and ends it.

    `checks`: True where consuming takes the message away from the end read (a RabbitMQ
    queue): its deliveries are then part of the end check. Otherwise it only observes."""

    checks: bool = False

    def __init__(self, client: "Client", name: str) -> None:
        self.system = client
        self.name = name
        self.task: Optional[asyncio.Task] = None
        self.last_delivery = time.monotonic()
        self.errors: list[str] = []
        self._call: Optional[asyncio.Future] = None

    async def consume(self, deliver: DeliverCallback) -> None:
        """Deliver every message as it arrives, until cancelled; may raise to be started again."""
        raise NotImplementedError

    async def shutdown(self) -> None:
        """Close what consume() opened (after it was cancelled)."""

    async def blocking(self, fn: Callable, *args) -> Any:
        """A blocking client call in a thread: close() lets the one under way end before
        shutdown() closes the client under it."""
        self._call = asyncio.get_running_loop().run_in_executor(None, fn, *args)
        return await asyncio.shield(self._call)

    async def start(self, deliver: DeliverCallback) -> None:
        def got(payload: bytes, offset, node) -> None:
            self.last_delivery = time.monotonic()
            deliver(payload, offset, node)

        async def run() -> None:
            while True:
                try:
                    await self.consume(got)
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # the library gave up: start again from our position
                    self.errors.append(f"{type(e).__name__}: {e}"[:200])
                    del self.errors[:-5]
                await asyncio.sleep(0.2)

        self.task = asyncio.ensure_future(run())

    async def finish(self, idle: float, all_acked_seen: Callable[[], bool]) -> str:
        """Read on until every acked message has arrived or nothing has for `idle` seconds
        (counted from the end of the write phase at the earliest)."""
        self.last_delivery = max(self.last_delivery, time.monotonic())
        try:
            while True:
                if all_acked_seen():
                    return "complete"
                if time.monotonic() - self.last_delivery > idle:
                    if self.checks:
                        return "complete"  # nothing more comes: the end read takes what is left
                    why = f" (last error: {self.errors[-1]})" if self.errors else ""
                    return f"incomplete: no delivery for {idle:.0f}s{why}"
                await asyncio.sleep(0.2)
        finally:
            await self.close()

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.wait([self.task], timeout=5)
            self.task = None
            if self._call is not None and not self._call.done():
                await asyncio.wait([self._call], timeout=5)
            try:
                await asyncio.wait_for(self.shutdown(), 5)
            except Exception:  # closing a broken connection: nothing left to save
                pass


class GroupEnd:
    """When a consumer group's member told to finish ends (its `run`): `complete` once the
    group has made everything durable (`why` None), `incomplete` once neither the member got
    anything (`got`) nor the group moved (`why`, what is left, changed: another member's
    commits or deliveries) for `idle` seconds."""

    def __init__(self, idle: float) -> None:
        self.idle = idle
        self.last = time.monotonic()
        self.since: Optional[float] = None
        self.seen: Optional[str] = None

    def got(self) -> None:
        self.last = time.monotonic()

    def check(self, why: Optional[str], last_error: Optional[str]) -> Optional[str]:
        """The member's read_end detail, or None to go on."""
        now = time.monotonic()
        self.since = self.since or now
        if why is None:
            return "complete"
        if why != self.seen:
            self.seen, self.last = why, now
        if now - max(self.last, self.since) <= self.idle:
            return None
        err = f"; last error {last_error}" if last_error else ""
        return f"incomplete: the group did not move for {self.idle:.0f}s ({why}{err})"


def slot_of(member: str) -> str:
    """A member incarnation's slot (`g1-m1-r2` -> `g1-m1`): what a member started again keeps."""
    return re.sub(r"-r\d+$", "", member)


def member_nodes(member: str, names: list[str]) -> list[str]:
    """The nodes a member tries in turn: its slot's own first, so the members spread over the
    nodes (`g1-m1` on the first, `g1-m2` on the second, ...), then the others in order."""
    last = slot_of(member).rsplit("m", 1)[-1]
    i = (int(last) - 1 if last.isdigit() else 0) % len(names)
    return names[i:] + names[:i]
