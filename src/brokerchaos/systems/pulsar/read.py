"""Reading the topics back: the end-of-run Reader by message id, and the live consumer."""
from __future__ import annotations

import asyncio
import time

from ..base import Client, DeliverCallback
from ..consumer import LiveConsumer
from .library import _close


class PulsarReader:
    """A Reader from the earliest message until none is available; every delivery recorded
    with its message id, so redeliveries (same id) and stored duplicates (new ids) differ."""

    def __init__(self, system: Client, name: str) -> None:
        self.system = system
        self.name = name

    @staticmethod
    def _batch(reader, n: int) -> tuple[list, bool]:
        import pulsar

        out = []
        while len(out) < n:
            try:
                if not out and not reader.has_message_available():
                    return out, True
                m = reader.read_next(500)
            except pulsar.Timeout:
                return out, False
            out.append((m.data(), str(m.message_id())))
        return out, False

    async def read(self, deliver: DeliverCallback, idle: float) -> str:
        """The topic, or each partition of a partitioned one in turn, its reads naming it."""
        s = self.system
        topics = s.partition_topics()
        client = s.new_client(10)
        try:
            for i, topic in enumerate(topics):
                part = str(i) if len(topics) > 1 else None
                status = await self._read_one(client, topic, part, deliver, idle)
                if status != "complete":
                    return status if part is None else f"{status} (partition {part})"
            return "complete"
        finally:
            await _close(client)

    async def _read_one(self, client, topic: str, part, deliver: DeliverCallback, idle: float) -> str:
        import pulsar

        s = self.system
        deadline = time.monotonic() + idle
        reader = None
        while reader is None:
            try:
                reader = await asyncio.to_thread(client.create_reader, topic, pulsar.MessageId.earliest)
            except Exception as e:
                if time.monotonic() > deadline:
                    return f"incomplete: no reader on {topic} for {idle:.0f}s: {e}"
                await asyncio.sleep(0.5)
        try:
            node = await (s.owner() if part is None else s.owner_of(topic.split("://", 1)[1]))
        except Exception:  # the rows still say what was read; only the node is unknown
            node = None
        progress, last = time.monotonic(), ""
        while True:
            try:
                msgs, at_end = await asyncio.to_thread(self._batch, reader, 5000)
            except Exception as e:  # connection lost mid-read; or (seen after a wipe of every
                # copy) the broker's "No such ledger exists on Bookies" as BrokerMetadataError
                msgs, at_end, last = [], False, f" (last error: {type(e).__name__}: {e})"
                await asyncio.sleep(0.2)
            for data, mid in msgs:
                deliver(data, mid, node, part)
            if msgs:
                progress = time.monotonic()
            elif at_end:
                return "complete"
            elif time.monotonic() - progress > idle:
                return f"incomplete: no message for {idle:.0f}s and the end not reached{last}"


class PulsarConsumer(LiveConsumer):
    """An exclusive subscription from the earliest message, acked cumulatively per batch;
    the C++ client reconnects it (its 100 ms doubling back-off) and unacked messages come
    again, recorded as redeliveries by their message ids."""

    def __init__(self, client: Client, name: str) -> None:
        super().__init__(client, name)
        self.client = None
        self.consumer = None

    @staticmethod
    def _batch(consumer, n: int) -> list:
        import pulsar

        out = []
        try:
            out.append(consumer.receive(500))
            while len(out) < n:
                out.append(consumer.receive(1))
        except pulsar.Timeout:
            pass
        return out

    async def consume(self, deliver: DeliverCallback) -> None:
        import pulsar

        s = self.system
        if self.client is None:
            self.client = s.new_client(10)
        if self.consumer is None:
            self.consumer = await self.blocking(
                lambda: self.client.subscribe(s.topic, f"live-{self.name}", consumer_type=pulsar.ConsumerType.Exclusive,
                                              initial_position=pulsar.InitialPosition.Earliest))
        while True:
            msgs = await self.blocking(self._batch, self.consumer, 1000)
            for m in msgs:
                deliver(m.data(), str(m.message_id()), s.owner_now)
            if msgs:
                try:
                    self.consumer.acknowledge_cumulative(msgs[-1])
                except Exception:  # acked again with the next batch, or redelivered
                    pass

    async def shutdown(self) -> None:
        if self.client is not None:
            await _close(self.client)
            self.client = self.consumer = None
