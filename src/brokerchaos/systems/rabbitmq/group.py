"""Competing consumers on the run's queue (`workload.group`, kind `queue`), each member in a
process of its own (workload/group.py): an aio-pika consumer with manual acks and a
prefetch of `options.prefetch`, on a node of its own (members spread over the nodes, the
next one after a lost connection), as an application's workers share a work queue.

A quorum or classic queue hands each message to one consumer and deletes it once acked, so
the end read finds only what the group left: each ack is recorded *before* it is sent, as a
commit row naming the message (detail `acked`), which the analysis counts as read from the
broker (docs/history-format.md, "Consumer groups"). A row whose ack never arrived (the
member killed first, the connection lost) names a message the broker delivers again: it is
read twice, never missed.

- `commit: after`: each message processed, then acked: a member killed with messages in
  hand leaves them unacked, and the broker gives them to another member: a redelivery;
- `before`: each message acked as it arrives (in aio-pika's delivery callback), then queued
  for the member's work, as auto-ack does: acked messages no longer count against the
  prefetch, so a member slower than the producers pulls in the queue's backlog, and one
  killed with it in hand has acked what it never processed: nobody gets it again (skips);
- `auto` (no_ack consumers) is refused: what the broker had pushed to a member killed before
  reading it leaves no trace on the client side and would be taken for the broker's loss.

Queues have no position: deliveries and acks carry none (partition `0`). The member ends
`complete` once the queue has had no message ready for QUIET_S seconds and it holds none.
"""
from __future__ import annotations

import asyncio
import time
from typing import Optional

from ..consumer import GroupEnd, member_nodes

PARTITION = "0"
QUIET_S = 2.0
CHECK_EVERY_S = 0.5


class RabbitGroupMember:
    def __init__(self, client, name: str, spec, events) -> None:
        self.system = client
        self.name = name
        self.spec = spec
        self.events = events
        self.nodes = member_nodes(name, client.cluster.node_names)
        self.idx = 0
        self.last_error: Optional[str] = None

    def _failed(self, e: BaseException) -> str:
        self.last_error = f"{type(e).__name__}: {e}"[:200]
        return self.last_error

    async def _connect(self, finishing, idle: float):
        """A connection, channel and consumer on the first node that takes them; tries the
        nodes in turn until one does or, once finishing, for `idle` s."""
        since = time.monotonic()
        while True:
            node = self.nodes[self.idx % len(self.nodes)]
            conn = None
            try:
                conn = await self.system.connection(node, timeout=2.0)
                ch = await conn.channel()
                await ch.set_qos(prefetch_count=self.system.options.prefetch)
                q = await ch.declare_queue(self.system.stream_name, passive=True)
                inbox: asyncio.Queue = asyncio.Queue()
                await q.consume(self._arrived(inbox), no_ack=False)
                return conn, ch, inbox
            except Exception as e:
                self._failed(e)
                self.idx += 1
                if conn is not None:
                    await self.system.close_connection(conn)
                if finishing.is_set() and time.monotonic() - since > idle:
                    raise ConnectionError(f"no node took a consumer for {idle:.0f}s ({self.last_error})") from None
                await asyncio.sleep(0.3)

    async def _ack(self, message) -> None:
        """The ack's row first (so that no ack the broker took goes unrecorded), then the ack."""
        self.events.commit(PARTITION, None, cumulative=False, message=message.body)
        try:
            await message.ack()
        except Exception as e:  # the channel went: the broker delivers it again
            self.events.commit(PARTITION, None, self._failed(e), cumulative=False, message=message.body)
            raise

    def _arrived(self, inbox: asyncio.Queue):
        """aio-pika's delivery callback: the message queued for the work (`before`: acked first)."""
        async def arrived(message) -> None:
            if self.spec.commit == "before":
                try:
                    await self._ack(message)
                except Exception:  # not acked: the broker delivers it again
                    return
            inbox.put_nowait(message)

        return arrived

    async def _handle(self, message) -> None:
        self.events.process(message.body, PARTITION, None, None)
        if self.spec.commit == "after":
            await self._ack(message)

    async def _left(self, ch) -> Optional[str]:
        """None when the queue has no message ready, else why not."""
        try:
            q = await asyncio.wait_for(ch.declare_queue(self.system.stream_name, passive=True), 3)
        except Exception as e:
            return self._failed(e)
        n = q.declaration_result.message_count
        return f"{n} messages ready" if n else None

    async def _run(self, finishing, idle: float) -> str:
        conn, ch, inbox = await self._connect(finishing, idle)
        end = GroupEnd(idle)
        quiet_since: Optional[float] = None
        try:
            while True:
                try:
                    message = await asyncio.wait_for(inbox.get(), CHECK_EVERY_S)
                except asyncio.TimeoutError:
                    message = None
                try:
                    if message is not None:
                        end.got()
                        quiet_since = None
                        await self._handle(message)
                        continue
                    if conn.is_closed:
                        raise ConnectionError("connection lost")
                except Exception as e:  # the node gone: the next one
                    self._failed(e)
                    self.idx += 1
                    await self.system.close_connection(conn)
                    conn, ch, inbox = await self._connect(finishing, idle)
                    continue
                if not finishing.is_set():
                    continue
                why = await self._left(ch)
                quiet_since = quiet_since or time.monotonic()
                if why is None and time.monotonic() - quiet_since < QUIET_S:
                    end.got()  # nothing ready, but not for long enough: not done, not idle either
                    continue
                detail = end.check(why, self.last_error)
                if detail is not None:
                    return detail
        finally:
            await self.system.close_connection(conn)

    def run(self, finishing, idle: float) -> str:
        return asyncio.run(self._run(finishing, idle))

    def close(self) -> None:
        """Nothing left open: run() closed its connection."""
