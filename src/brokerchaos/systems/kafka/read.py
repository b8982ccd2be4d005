"""Reading the topics back: the end-of-run read (every partition from its start to the high
watermark, past what the broker deleted or never delivered) and the live consumer."""
from __future__ import annotations

import asyncio
import time
from typing import Optional

from ..base import Client, DeliverCallback, SystemError_
from ..consumer import LiveConsumer
from ..runtime import quiet_logger

TAIL_QUIET_S = 1.5  # past the high watermark, the read ends after this long without a message


def new_consumer(system: Client, name: str, bootstrap: str, **conf):
    """A librdkafka consumer of the run's group `name`, from the earliest offset, quiet."""
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": bootstrap, "group.id": f"{system.ctx.stream_name}-{name}",
                     "auto.offset.reset": "earliest", "socket.timeout.ms": 3000, "log_level": 0,
                     "logger": quiet_logger("librdkafka"), **conf})


class KafkaReader:
    """Every partition from the beginning, at least up to the high watermark read when it
    starts (the Kafka seed counts loss against it), then on until nothing more comes."""

    def __init__(self, system: Client, name: str, topic: Optional[str] = None) -> None:
        self.system = system
        self.name = name
        self.topic = topic or system.stream_name

    def _consumer(self, bootstrap: str):
        return new_consumer(self.system, self.name, bootstrap, **{"enable.auto.commit": False,
                                                                  "fetch.max.bytes": 16 * 1024 * 1024,
                                                                  "isolation.level": self.system.options.isolation})

    async def _high(self, node: str) -> tuple[Optional[dict], str]:
        """{partition: high watermark} as `node` answers (a consumer bootstrapped on it alone)."""
        from confluent_kafka import TopicPartition

        s = self.system
        c = self._consumer(s.bootstrap([node]))
        try:
            md = await asyncio.to_thread(c.list_topics, self.topic, 3)
            t = md.topics.get(self.topic)
            if t is None or t.error is not None or not t.partitions:
                return None, str(t.error if t is not None else "no topic")
            out = {}
            for p in sorted(t.partitions):
                out[p] = (await asyncio.to_thread(c.get_watermark_offsets, TopicPartition(self.topic, p), 3,
                                                  False))[1]
            return out, ""
        except Exception as e:
            return None, f"{type(e).__name__}: {e}"
        finally:
            await asyncio.to_thread(c.close)

    async def _highest(self, idle: float) -> tuple[Optional[dict], Optional[str], str]:
        """Every node is asked (a tansu broker that served none of the writes was seen to
        report a high watermark 10,000 behind the store's): the highest high watermarks, the
        node that gave them, or why none came within `idle`."""
        deadline = time.monotonic() + idle
        high, node, last = None, None, ""
        while high is None:
            for n in self.system.cluster.node_names:
                got, why = await self._high(n)
                if got is None:
                    last = f"{n}: {why}"
                elif high is None or sum(got.values()) > sum(high.values()):
                    high, node = got, n
            if high is None:
                if time.monotonic() > deadline:
                    return None, None, last
                await asyncio.sleep(0.2)
        return high, node, ""

    async def read(self, deliver: DeliverCallback, idle: float) -> str:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        s = self.system
        high, node, last = await self._highest(idle)
        if high is None:
            return f"incomplete: no high watermark for {self.topic} for {idle:.0f}s ({last})"
        parts = sorted(high)
        c = self._consumer(s.bootstrap([node]))
        try:
            c.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in parts])
            pos = {p: 0 for p in parts}
            deleted: dict[int, int] = {}  # partition -> where its log started, past what was read
            progress = time.monotonic()
            # the high watermark is a floor, not the end: tansu answers ListOffsets with the
            # last batch's first offset + 1, and the batch itself is there to read
            while True:
                msgs = await asyncio.to_thread(c.consume, 10_000, 0.5)
                for m in msgs:
                    if m.error() is not None:
                        continue
                    pos[m.partition()] = m.offset() + 1
                    # several partitions: each read names its own (ordering holds per partition)
                    deliver(m.value(), f"{m.partition()}:{m.offset()}", node,
                            str(m.partition()) if len(parts) > 1 else None)
                if msgs:
                    progress = time.monotonic()
                    continue
                quiet = time.monotonic() - progress
                _past_undelivered(c, self.topic, pos)
                if quiet > TAIL_QUIET_S:
                    await asyncio.to_thread(_past_deleted, c, self.topic, pos, deleted)
                if all(pos[p] >= high[p] for p in parts):
                    if quiet > TAIL_QUIET_S:
                        break
                elif quiet > idle:
                    behind = {p: high[p] - pos[p] for p in parts if pos[p] < high[p]}
                    return f"incomplete: no progress for {idle:.0f}s, {sum(behind.values())} below the high watermark"
            if deleted:
                starts = ", ".join(f"{p}:{o}" for p, o in sorted(deleted.items()))
                return f"complete: the log started at {starts}, past what was read (the broker deleted the rest)"
            return "complete"
        finally:
            await asyncio.to_thread(c.close)


def _past_deleted(c, topic: str, pos: dict, deleted: dict) -> None:
    """What the broker deleted (retention: the log now starts past it) can never be read:
    `pos` moved to each partition's log start, noted in `deleted`."""
    from confluent_kafka import KafkaException, TopicPartition

    for p in pos:
        try:
            low, _ = c.get_watermark_offsets(TopicPartition(topic, p), timeout=2.0, cached=False)
        except KafkaException:  # not answered now: asked again at the next quiet moment
            continue
        if low > pos[p]:
            pos[p] = deleted[p] = low


def _past_undelivered(c, topic: str, pos: dict) -> None:
    """What is never delivered (a transaction's commit and abort markers, an aborted
    transaction's messages) the consumer's position is past: `pos` moved there."""
    from confluent_kafka import TopicPartition

    for tp in c.position([TopicPartition(topic, p) for p in pos]):
        if tp.offset is not None and tp.offset > pos[tp.partition]:
            pos[tp.partition] = tp.offset


class KafkaConsumer(LiveConsumer):
    """A consumer of every partition from the beginning (assigned, so no group rebalance
    delays it), committing its offsets as librdkafka does by default; librdkafka follows
    partition leaders itself. Started again, it seeks to the next offset not delivered."""

    def __init__(self, client: Client, name: str) -> None:
        super().__init__(client, name)
        self.pos: dict[int, int] = {}
        self.c = None

    async def consume(self, deliver: DeliverCallback) -> None:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        s = self.system
        if self.c is None:
            self.c = new_consumer(s, self.name, s.bootstrap(), **{"enable.auto.commit": True})
        md = await self.blocking(self.c.list_topics, s.stream_name, 3)
        t = md.topics.get(s.stream_name)
        if t is None or t.error is not None or not t.partitions:
            raise SystemError_(f"topic {s.stream_name}: {t.error if t is not None else 'not found'}")
        self.c.assign([TopicPartition(s.stream_name, p, self.pos.get(p, OFFSET_BEGINNING))
                       for p in sorted(t.partitions)])
        while True:
            for m in await self.blocking(self.c.consume, 1000, 0.5):
                if m.error() is not None:
                    continue
                self.pos[m.partition()] = m.offset() + 1
                deliver(m.value(), f"{m.partition()}:{m.offset()}", None)

    async def shutdown(self) -> None:
        if self.c is not None:
            await asyncio.to_thread(self.c.close)
            self.c = None
