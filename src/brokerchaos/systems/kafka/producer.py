"""The producer: confluent-kafka (librdkafka) with every delivery report a history row, and
the library's own log read for the broker states it reports (a connection down, up)."""
from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
import traceback
from typing import Optional

from ..base import Client, ClientEvents, OutcomeCallback
from .library import outcome_of


class _BrokerStates(logging.Handler):
    """librdkafka's broker state changes (its `debug: broker` log, facility STATE, served by
    poll() on the loop's thread) as client events: UP -> anything is a disconnect, and the
    next -> UP of that broker its reconnect. And (`debug: topic`, facility BRKDELGT) the
    broker the topic's first partition is handed to: the one the producer writes to from
    then on, known before any of its acks, as the log is served from the same queue as the
    delivery reports (the statistics say it too, but up to an interval late: acks from a new
    leader were put down to the old one)."""

    # a learned broker (host:port/id); the bootstrap entries (…/bootstrap) are dropped
    # once the metadata names the brokers, which is not a disconnect
    CHANGE = re.compile(r"(\S+):(\d+)/\d+: Broker changed state (\w+) -> (\w+)")
    DELEGATE = re.compile(r"(\S+) \[0\]: delegate to broker (\S+):(\d+)/\d+ ")

    def __init__(self, producer: "KafkaProducer") -> None:
        super().__init__(logging.DEBUG)
        self.producer = producer
        self.down: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = record.getMessage()
            m = self.CHANGE.search(line)
            if not m:
                d = self.DELEGATE.search(line)
                # to the internal broker (:0/internal) when no leader is known: where it
                # wrote last stays, as with the statistics
                if d and d.group(1) == self.producer.topic and d.group(3) != "0":
                    self.producer._node = self.producer.system.cluster.node_at(d.group(2), int(d.group(3)))
                return
            host, port, old, new = m.groups()
            node = self.producer.system.cluster.node_at(host, int(port)) or f"{host}:{port}"
            if old == "UP" and new != "UP" and not self.producer.closing:
                self.down.add(node)
                self.producer.on_event("disconnect", node, f"librdkafka: broker {old} -> {new}")
            elif new == "UP" and node in self.down:
                self.down.discard(node)
                self.producer.on_event("reconnect", node, f"librdkafka: broker {old} -> {new}")
        except Exception:  # a log line must never break the client
            pass


class KafkaProducer(ClientEvents):
    """confluent-kafka's Producer driven from the event loop: produce() never blocks and a
    poll task serves the delivery reports on the loop's thread."""

    def __init__(self, system: Client, name: str) -> None:
        self.system = system
        self.name = name
        self.topic = system.stream_name
        self.p = None
        self.on_outcome: Optional[OutcomeCallback] = None
        self.poller: Optional[asyncio.Task] = None
        self._node: Optional[str] = None
        self.detail = "acks=0: the client's word only" if system.options.acks == "0" else None
        self.closing = False

    async def open(self, on_outcome: OutcomeCallback) -> None:
        self.on_outcome = on_outcome
        self.p = await asyncio.to_thread(self._new_producer)
        self.poller = asyncio.create_task(self._poll())
        # where it will write, known before the first statistics arrive (a fast run can
        # reach a fault's trigger sooner)
        try:
            md = await asyncio.to_thread(self.system._admin().list_topics, self.topic, 5)
            part = md.topics[self.topic].partitions[0]
            b = md.brokers.get(part.leader)
            if b is not None:
                self._node = self.system.cluster.node_at(b.host, b.port)
        except Exception:  # the statistics will tell
            pass

    def _new_producer(self):
        """librdkafka's producer, or the Java client's in its process (java.py), blocking."""
        if self.system.options.client == "java":
            from .java import JavaProducer

            log = self.system.ctx.logdir / f"java-{self.name}.log"
            return JavaProducer(self._config(), self.topic, self.system.java_set, log, self._leader_at)
        from confluent_kafka import Producer

        return Producer(self._config())

    def _leader_at(self, host: str, port: int) -> None:
        """The Java client's metadata named a new leader of the first partition."""
        self._node = self.system.cluster.node_at(host, port)

    def _config(self) -> dict:
        conf = self.system.producer_config(self.name)
        conf["stats_cb"] = self._stats
        if "debug" not in conf:  # the connection's life as the client sees it (history rows)
            # not logging.getLogger: that one registers it for good, one per run of a soak
            log = logging.Logger(f"brokerchaos.librdkafka.{self.name}", logging.DEBUG)
            log.addHandler(_BrokerStates(self))
            conf.update({"debug": "broker,topic", "log_level": 7, "logger": log})
        return conf

    def _stats(self, raw: str) -> None:
        try:
            self._follow(raw)
        except Exception:
            traceback.print_exc()

    def _follow(self, raw: str) -> None:
        """The broker the client writes to: the leader its metadata names for the lowest
        partition, whether or not its connection is up yet. Not some other broker that is
        connected: at the start the leader's connection can come up after the bootstrap
        broker's, and after a kill the metadata names the dead leader until it is refreshed,
        and librdkafka writes to no one else meanwhile (a `client-node` fault resolved then
        hit a broker the producer never wrote to)."""
        try:
            stats = json.loads(raw)
        except ValueError:
            return
        parts = stats.get("topics", {}).get(self.topic, {}).get("partitions", {})
        led = [p for k, p in sorted(parts.items()) if k != "-1" and p.get("leader", -1) >= 0]
        if not led:  # no leader known (an election, or metadata not in yet): where it wrote last
            return
        leader = led[0]["leader"]
        named = [b for b in stats.get("brokers", {}).values() if b.get("nodeid") == leader]
        # tansu's brokers all call themselves the same id: then the one connected is it
        for b in sorted(named, key=lambda b: b.get("state") != "UP"):
            host, _, port = b.get("nodename", "").rpartition(":")
            self._node = self.system.cluster.node_at(host, int(port)) if port.isdigit() else None
            return
        self._node = None

    def _report(self, value: int, err, msg) -> None:
        # an exception must not reach librdkafka: confluent-kafka loses it in poll() and
        # the outcome would go unrecorded
        try:
            self._record(value, err, msg)
        except Exception:
            traceback.print_exc()

    def _record(self, value: int, err, msg) -> None:
        kind, detail = outcome_of(err)
        off = msg.offset()  # None with acks=0: the broker never said where
        offset = f"{msg.partition()}:{off}" if kind == "ack" and off is not None and off >= 0 else None
        self.on_outcome(value, kind, offset, self._node, detail if detail else self.detail)

    def _produce(self, value: int, payload: bytes) -> bool:
        try:
            self.p.produce(self.topic, payload, on_delivery=lambda err, msg, v=value: self._report(v, err, msg))
            return True
        except BufferError:  # the local queue is full: `send` waits for reports to drain
            self.p.poll(0)
            return False

    # the producer loop's send without a coroutine (a transactional producer has none: its
    # sends may begin or end a transaction)
    send_now = _produce

    async def send(self, value: int, payload: bytes) -> None:
        while not self._produce(value, payload):
            await asyncio.sleep(0.005)

    def node(self) -> Optional[str]:
        return self._node

    async def _poll(self) -> None:
        # an exception raised in a callback comes out of poll(); the poller must survive it,
        # or delivery reports would wait for the next full queue
        while True:
            try:
                self.p.poll(0)
            except Exception as e:
                print(f"kafka poll: {type(e).__name__}: {e}", file=sys.stderr)
            await asyncio.sleep(0.002)

    async def close(self) -> None:
        self.closing = True
        if self.poller is not None:
            self.poller.cancel()
            await asyncio.gather(self.poller, return_exceptions=True)
        if self.p is not None:
            # nothing is outstanding unless the write phase timed out; what still is gets
            # its report now (a message never sent is a nack, one in flight unknown)
            self.p.purge()
            self._poll_once()
            await asyncio.to_thread(self.p.flush, 5)
            self._poll_once()
            await asyncio.to_thread(close_library, self.p)
            if getattr(self.p, "reports_after_close", False):  # the Java client's last reports; a
                self._poll_once()  # closed librdkafka producer (confluent-kafka 2.16's close()) refuses a poll

    def _poll_once(self) -> None:
        try:
            self.p.poll(0)
        except Exception as e:
            print(f"kafka poll: {type(e).__name__}: {e}", file=sys.stderr)


def close_library(p) -> None:
    """The library's producer closed: the Java client's process ended, librdkafka's handle
    destroyed (confluent-kafka 2.16 has close(); older ones free it when collected)."""
    close = getattr(p, "close", None)
    if close is not None:
        close()
