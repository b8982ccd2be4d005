"""Writing in transactions (`workload.transactions`, history format 1.7), whatever the
library: what a transactional producer does between its sends and its library's calls.

Messages go out in transactions of `size` (one not yet full ends `linger_ms` after its
first message), each committed, or aborted on purpose in a seeded share. A message's
delivery report only says where it was written; its outcome is its transaction's,
recorded when the transaction ends and naming it (`txn`): `ack` when the commit returned,
`nack` (detail `aborted: …`, the reported position kept) when it was aborted, on purpose
(its messages written first) or because the commit failed in a way that asks for an abort,
and `unknown` when the commit's answer never came (a retriable failure until
commit_timeout, or a fatal one: the producer is then replaced before the next transaction).

`TxnProducer` is mixed in before a system's producer class, which gives it: `p` (the
library's producer: begin_transaction, commit_transaction(timeout),
abort_transaction(timeout), flush(timeout)), `call_errors` (the exceptions its calls raise,
each with its error as args[0]: name(), str(), retriable(), txn_requires_abort()), `_record`
filling `reports`, `_poll_once`, `_node`, `on_outcome`, and `_renew` (a new producer after a
fatal error).
"""
from __future__ import annotations

import asyncio
import random
import time
from typing import Optional

ABORTED = "aborted"  # begins the detail of an aborted transaction's nack (docs/history-format.md)


class TxnProducer:
    call_errors: tuple = (Exception,)
    send_now = None  # a send may have to begin or end a transaction first: always awaited

    def _txn_setup(self, ctx, name: str) -> None:
        self.spec = ctx.scenario.workload.transactions
        self.rnd = random.Random(f"{ctx.scenario.seed}-{ctx.run_id}-{name}")
        self.txn = 0  # the number of the transaction open or last ended
        self.values: list[int] = []  # the open transaction's messages, in send order
        self.reports: dict[int, tuple] = {}  # value -> (error, position)
        self.lock = asyncio.Lock()  # a send waits for a transaction being ended
        self.linger: Optional[asyncio.TimerHandle] = None
        self.enders: set[asyncio.Task] = set()
        self.broken: Optional[str] = None  # a fatal error: a new producer before the next

    async def send(self, value: int, payload: bytes) -> None:
        async with self.lock:
            if not self.values:
                if self.broken:
                    await self._renew()
                await self._begin()
                self.txn += 1
                self.linger = asyncio.get_running_loop().call_later(self.spec.linger_ms / 1000, self._lingered,
                                                                    self.txn)
            await super().send(value, payload)  # refused: not in the transaction (a nack of its own)
            self.values.append(value)
            if len(self.values) >= self.spec.size:
                await self._end()

    async def _begin(self) -> None:
        await asyncio.to_thread(self.p.begin_transaction)  # a round trip to a Java client, or a coordinator

    def _lingered(self, txn: int) -> None:
        task = asyncio.ensure_future(self._end_lingering(txn))
        self.enders.add(task)
        task.add_done_callback(self.enders.discard)

    async def _end_lingering(self, txn: int) -> None:
        async with self.lock:
            if self.txn == txn and self.values:
                await self._end()

    async def _end(self) -> None:
        """The open transaction committed or aborted (the seed's draw), and every message's
        outcome recorded as the transaction's."""
        if self.linger is not None:
            self.linger.cancel()
        txn, values, self.values = self.txn, self.values, []
        abort = self.rnd.random() < self.spec.abort
        kind, detail = await asyncio.to_thread(self._finish, abort)
        self._poll_once()  # reports served on the loop's poller come in before the outcomes
        for v in values:
            err, offset = self.reports.pop(v, (None, None))
            self.on_outcome(v, kind, offset if kind != "unknown" else None, self._node, detail, txn=txn)

    def _finish(self, abort: bool) -> tuple[str, Optional[str]]:
        """Commit or abort, in a thread (both block); (kind, detail) for its messages."""
        deadline = time.monotonic() + self.spec.commit_timeout
        if abort:
            # its messages written first, as an application's would be when it gives up on a
            # transaction: a read_committed reader must then pass over them (aborted at once,
            # librdkafka purged them unsent, and once an EndTxn raced the partitions' addition:
            # INVALID_TXN_STATE, fatal)
            self.p.flush(max(0.1, deadline - time.monotonic()))
            return self._abort(f"{ABORTED}: on purpose (abort share {self.spec.abort:g})", deadline)
        err = self._retried(self.p.commit_transaction, deadline, stop=lambda e: e.txn_requires_abort())
        if err is None:
            return "ack", None
        why = f"{err.name()}: {err.str()}"[:160]
        if err.txn_requires_abort():
            return self._abort(f"{ABORTED}: the commit failed ({why})", deadline)
        self.broken = why
        return "unknown", f"commit: {why}"

    def _abort(self, detail: str, deadline: float) -> tuple[str, Optional[str]]:
        err = self._retried(self.p.abort_transaction, deadline)
        if err is None:
            return "nack", detail
        self.broken = f"{err.name()}: {err.str()}"[:160]
        return "unknown", f"abort: {self.broken}"

    async def _renew(self) -> None:
        """A new producer after a fatal error (a system whose library needs one writes it)."""
        self.broken = None

    def _retried(self, call, deadline: float, stop=lambda err: False):
        """`call(timeout)` again after each retriable error until `deadline`; None once it
        returned, else the error it ended with (at once where `stop` says so)."""
        while True:
            try:
                call(max(0.1, deadline - time.monotonic()))
                return None
            except self.call_errors as e:
                err = e.args[0]
                if stop(err) or not err.retriable() or time.monotonic() >= deadline:
                    return err

    async def close(self) -> None:
        async with self.lock:
            if self.values and self.p is not None and not self.broken:
                await self._end()
        await super().close()
