"""The producer: XADD pipelined in batches on a few connections, each reply (the entry id)
an ack; with `wait_replicas`, a batch WAITed for and unknown where too few replicas had it."""
from __future__ import annotations

import asyncio
import collections
from typing import Optional

from ..base import Client, ClientEvents, OutcomeCallback
from .conn import FIELD, abandon_after, aclose, client_for, entry_id


class RedisProducer(ClientEvents):
    """XADDs pipelined in batches over a few connections to the primary. redis-py has no
    connection callbacks: its client events are the first error it raises while connected
    (disconnect) and the first reply after one (reconnect), over all the connections."""

    def __init__(self, client: Client, name: str) -> None:
        self.system = client
        self.name = name
        self.o = client.options
        self.queue: collections.deque = collections.deque()
        self.wake = asyncio.Event()
        self.tasks: list[asyncio.Task] = []
        self.addr: Optional[tuple[str, int]] = None
        self.on_outcome: Optional[OutcomeCallback] = None
        self.connected = False
        self.abandoned: set[asyncio.Task] = set()  # stuck client calls, cancelled, never awaited
        self.down = False  # a disconnect was recorded: the next reply is its reconnect

    async def open(self, on_outcome: OutcomeCallback) -> None:
        self.on_outcome = on_outcome
        self.addr = await self.system.primary_addr()
        self.tasks = [asyncio.create_task(self._writer()) for _ in range(self.o.connections)]

    async def send(self, value: int, payload: bytes) -> None:
        self.send_now(value, payload)

    def send_now(self, value: int, payload: bytes) -> bool:
        self.queue.append((value, payload))
        self.wake.set()
        return True

    def node(self) -> Optional[str]:
        return self.system.cluster.node_at(*self.addr) if self.addr and self.connected else None

    async def _writer(self) -> None:
        r = None
        while True:
            if not self.queue:
                self.wake.clear()
                await self.wake.wait()
                continue
            batch = [self.queue.popleft() for _ in range(min(self.o.batch, len(self.queue)))]
            try:
                if r is None:
                    r = client_for(self.addr, timeout=10)
                res = await self._execute(r, batch)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # connection lost: the outcome is unknowable
                # nothing is reported: the producer loop's ack_timeout makes them unknown
                await self._lost(r, e)
                r = None
                continue
            try:
                self._report(batch, res)
            except Exception as e:  # never lose the writer (and with it the queue)
                for value, _ in batch:
                    why = f"reply not understood: {type(e).__name__}: {e}"
                    self.on_outcome(value, "unknown", None, None, why[:200])

    async def _execute(self, r, batch: list) -> list:
        """One batch's XADDs (and WAIT) in a pipeline; its replies."""
        pipe = r.pipeline(transaction=False)
        for _, payload in batch:
            pipe.xadd(self.system.stream_name, {FIELD: payload})
        if self.o.wait_replicas:
            pipe.execute_command("WAIT", self.o.wait_replicas, self.o.wait_timeout_ms)
        # a pipeline on a connection whose server died mid-batch was seen to wait
        # forever, and so did its cancellation (which asyncio.wait_for awaits): the
        # write phase then ran into write_timeout. It is abandoned instead.
        res = await abandon_after(pipe.execute(raise_on_error=False), 10, self.abandoned)
        self.connected = True
        if self.down:
            self.down = False
            self.on_event("reconnect", self.system.cluster.node_at(*self.addr), "redis-py: a reply")
        return res

    async def _lost(self, r, e: Exception) -> None:
        """The connection gone: said once (disconnect), closed, and the primary asked again."""
        if self.connected:
            self.down = True
            self.on_event("disconnect", self.system.cluster.node_at(*self.addr),
                          f"redis-py: {type(e).__name__}: {e}"[:200])
        self.connected = False
        if r is not None:
            await aclose(r, self.abandoned)
        await asyncio.sleep(0.2)
        if self.o.follow_failover:
            try:
                self.addr = await self.system.primary_addr()
            except Exception:
                pass

    def _report(self, batch: list, res: list) -> None:
        node = self.system.cluster.node_at(*self.addr)
        short = None
        if self.o.wait_replicas:
            got = res[-1]
            res = res[:-1]
            if isinstance(got, Exception) or int(got) < self.o.wait_replicas:
                short = f"WAIT: {got} of {self.o.wait_replicas} replicas"
        for (value, _), reply in zip(batch, res):
            if isinstance(reply, Exception):
                self.on_outcome(value, "nack", None, node, f"{type(reply).__name__}: {reply}"[:200])
                if self.o.follow_failover and "READONLY" in str(reply):
                    self._refresh_soon()
            elif short:
                self.on_outcome(value, "unknown", entry_id(reply), node, short)
            else:
                self.on_outcome(value, "ack", entry_id(reply), node, None)

    def _refresh_soon(self) -> None:
        async def refresh():
            try:
                self.addr = await self.system.primary_addr()
            except Exception:
                pass
        asyncio.ensure_future(refresh())

    async def close(self) -> None:
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
