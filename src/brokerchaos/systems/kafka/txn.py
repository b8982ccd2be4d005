"""A transactional producer (`workload.transactions`, history format 1.7): librdkafka's
transactional API through confluent-kafka, driven from the event loop as KafkaProducer is.

Messages go out in transactions of `size` (a transaction not yet full ends `linger_ms`
after its first message), each committed, or aborted on purpose in a seeded share. A
message's delivery report only says where it was written; its outcome is its
transaction's, recorded when the transaction ends and naming it (`txn`): `ack` when the
commit returned, `nack` (detail `aborted: …`, the reported offset kept) when it was
aborted, on purpose (its messages written first) or because the commit failed in a way
that asks for an abort, and
`unknown` when the commit's answer never came (a retriable failure until commit_timeout,
or a fatal one: a fenced or broken producer, replaced by a new one with the same
transactional id, which fences what is left of the old one).
"""
from __future__ import annotations

import asyncio
import random
import time
from typing import Optional

from .client import KafkaProducer, transactional_id

ABORTED = "aborted"  # begins the detail of an aborted transaction's nack (docs/history-format.md)


class KafkaTxnProducer(KafkaProducer):
    def __init__(self, system, name: str) -> None:
        super().__init__(system, name)
        ctx = system.ctx
        self.spec = ctx.scenario.workload.transactions
        self.rnd = random.Random(f"{ctx.scenario.seed}-{ctx.run_id}-{name}")
        self.txn_id = transactional_id(system.stream_name, name)
        self.txn = 0  # the number of the transaction open or last ended
        self.values: list[int] = []  # the open transaction's messages, in send order
        self.reports: dict[int, tuple] = {}  # value -> (error, "partition:offset")
        self.lock = asyncio.Lock()  # a send waits for a transaction being ended
        self.linger: Optional[asyncio.TimerHandle] = None
        self.enders: set[asyncio.Task] = set()
        self.broken: Optional[str] = None  # a fatal error: a new producer before the next

    def _config(self) -> dict:
        conf = super()._config()
        conf.update({"transactional.id": self.txn_id, "enable.idempotence": True, "acks": "all",
                     "max.in.flight.requests.per.connection": min(5, conf["max.in.flight.requests.per.connection"])})
        return conf

    async def open(self, on_outcome) -> None:
        await super().open(on_outcome)
        await asyncio.to_thread(self.p.init_transactions, self.spec.commit_timeout)

    def _record(self, value: int, err, msg) -> None:
        """A delivery report: where the message was written, kept until its transaction ends."""
        off = msg.offset()
        self.reports[value] = (err, f"{msg.partition()}:{off}" if err is None and off is not None and off >= 0
                               else None)

    async def send(self, value: int, payload: bytes) -> None:
        async with self.lock:
            if not self.values:
                if self.broken:
                    await self._renew()
                self.p.begin_transaction()
                self.txn += 1
                self.linger = asyncio.get_running_loop().call_later(self.spec.linger_ms / 1000, self._lingered,
                                                                    self.txn)
            await super().send(value, payload)  # refused: not in the transaction (a nack of its own)
            self.values.append(value)
            if len(self.values) >= self.spec.size:
                await self._end()

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
        err = _retried(self.p.commit_transaction, deadline, stop=lambda e: e.txn_requires_abort())
        if err is None:
            return "ack", None
        why = f"{err.name()}: {err.str()}"[:160]
        if err.txn_requires_abort():
            return self._abort(f"{ABORTED}: the commit failed ({why})", deadline)
        self.broken = why
        return "unknown", f"commit: {why}"

    def _abort(self, detail: str, deadline: float) -> tuple[str, Optional[str]]:
        err = _retried(self.p.abort_transaction, deadline)
        if err is None:
            return "nack", detail
        self.broken = f"{err.name()}: {err.str()}"[:160]
        return "unknown", f"abort: {self.broken}"

    async def _renew(self) -> None:
        """A producer that hit a fatal error replaced by a new one with the same
        transactional id: its init_transactions fences the old one and ends what it left open."""
        from confluent_kafka import Producer

        p = Producer(self._config())
        await asyncio.to_thread(p.init_transactions, self.spec.commit_timeout)  # fails: broken still, tried again
        self.p.purge()
        self.p, self.broken = p, None

    async def close(self) -> None:
        async with self.lock:
            if self.values and self.p is not None and not self.broken:
                await self._end()
        await super().close()


def _retried(call, deadline: float, stop=lambda err: False):
    """`call(timeout)` again after each retriable error until `deadline`; None once it
    returned, else the KafkaError it ended with (at once where `stop` says so)."""
    from confluent_kafka import KafkaException

    while True:
        try:
            call(max(0.1, deadline - time.monotonic()))
            return None
        except KafkaException as e:
            err = e.args[0]
            if stop(err) or not err.retriable() or time.monotonic() >= deadline:
                return err
