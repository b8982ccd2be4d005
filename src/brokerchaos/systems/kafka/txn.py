"""Kafka's transactional producer (`workload.transactions`; systems/transact.py writes the
transactions): librdkafka's transactional API through confluent-kafka, or the Java
client's (`options.client: java`), driven from the event loop as KafkaProducer is.

The transactional id is `<stream>-<producer>`; a producer that hit a fatal error (fenced,
broken) is replaced by a new one with the same id, whose init_transactions fences what is
left of the old one and ends what it left open.
"""
from __future__ import annotations

import asyncio

from ..transact import TxnProducer
from .library import transactional_id
from .producer import KafkaProducer, close_library

__all__ = ["KafkaTxnProducer"]


class KafkaTxnProducer(TxnProducer, KafkaProducer):
    def __init__(self, system, name: str) -> None:
        from confluent_kafka import KafkaException

        super().__init__(system, name)
        self._txn_setup(system.ctx, name)
        self.call_errors = (KafkaException,)
        self.txn_id = transactional_id(system.stream_name, name)

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

    async def _renew(self) -> None:
        """A new producer with the same transactional id: its init_transactions fences the
        old one and ends what it left open."""
        p = await asyncio.to_thread(self._new_producer)
        try:
            await asyncio.to_thread(p.init_transactions, self.spec.commit_timeout)
        except Exception:  # broken still: tried again before the next transaction
            await asyncio.to_thread(close_library, p)
            raise
        old, self.p, self.broken = self.p, p, None
        old.purge()
        await asyncio.to_thread(close_library, old)
