"""The Pulsar client side, whichever server is under it: the official pulsar-client (C++
core) producers and a Reader by message id.

Send callbacks become history rows: Ok is an *ack* (offset: the message id); a send timeout
or a lost connection is *unknown*; a refusal before anything was written (queue full,
producer closed, message too big, topic terminated) is a *nack*.
"""
from __future__ import annotations

import asyncio
import functools
import json
import os
import re
import time
from datetime import datetime
from pathlib import Path
from typing import ClassVar, Optional

from ..base import Client, ClientEvents, DeliverCallback, NodeExited, OutcomeCallback, Roles, SystemError_
from ..consumer import LiveConsumer
from ..runtime import Handoff, http_get, wait_until

# results meaning the message was never written
DEFINITE = frozenset({
    "ProducerQueueIsFull", "AlreadyClosed", "InvalidMessage", "MessageTooBig", "TopicTerminated",
    "ProducerBlockedQuotaExceededError", "ProducerBlockedQuotaExceededException", "ProducerFenced",
    "InvalidTopicName", "AuthorizationError", "AuthenticationError", "InvalidConfiguration",
})


_OUTCOMES: dict[int, tuple[str, Optional[str]]] = {}


def outcome_of(result) -> tuple[str, Optional[str]]:
    """A send callback's result -> (kind, detail). Remembered by the result's number: its
    name (pybind11 finds it among the enum's entries) cost 1.3 µs a message, 0.3 now, on
    the one thread the recorded producer has."""
    try:
        key = int(result)
    except (TypeError, ValueError):
        key = None
    known = _OUTCOMES.get(key)
    if known is not None:
        return known
    name = getattr(result, "name", str(result)).split(".")[-1]
    known = ("ack", None) if name == "Ok" else (("nack" if name in DEFINITE else "unknown"), name)
    if key is not None:
        _OUTCOMES[key] = known
    return known


async def _close(client) -> None:
    """Close a pulsar.Client, whatever the broker says. Seen in CI after a bookie kill: the
    broker answered no CLOSE_PRODUCER within the operation timeout (its pending writes were
    still stuck) and close() raised Timeout, which ended the whole session. By then every
    outcome is recorded: a close that fails has nothing left to tell."""
    try:
        await asyncio.to_thread(client.close)
    except Exception:
        pass


class PulsarClient(Client):
    # the C++ client's reconnect back-off: 100 ms doubling (the availability seed's 100, 300,
    # 700, 1500 ms…)
    reconnect_steps_ms = (100.0, 300.0, 700.0, 1500.0, 3100.0, 6300.0)

    def __init__(self, ctx, cluster) -> None:
        super().__init__(ctx, cluster)
        self.owner_now: Optional[str] = None
        self._watch: Optional[asyncio.Future] = None
        self._every = 0.5  # seconds between two looks at the owner
        self._cluster_name: Optional[str] = None  # as the admin API names it (bundle_owner)
        # workload.topics: one client library instance per producer, shared by its topics
        # (as an application multiplexes its topics over one client): name -> [client, users]
        self._shared: dict[str, list] = {}
        self._watches: list[asyncio.Future] = []  # this client's and its topics' copies' (for_topic)
        # set by close, seen by every copy's watch: Python 3.11's wait_for (http_request's)
        # swallows a cancel that lands as its request completes, and a watch of 100 topics'
        # kept looking every 5 s after the run's end, its close waiting for it for ever
        self._closing: dict = {"now": False}
        # per producer, the coordinator number of its last transaction begun (Java client)
        self.txn_coordinators: dict[str, Optional[int]] = {}

    @property
    def topic(self) -> str:
        return f"persistent://{self.options.namespace}/{self.stream_name}"

    def service_url(self) -> str:
        return "pulsar://" + ",".join("{}:{}".format(*self.cluster.address(n)) for n in self.cluster.node_names)

    def new_client(self, timeout: float = 10.0):
        import pulsar

        return pulsar.Client(self.service_url(), operation_timeout_seconds=max(1, int(timeout)),
                             connection_timeout_ms=3000, logger=client_logger(self.ctx.logdir))

    async def connect(self, timeout: float) -> None:
        async def look():
            if self.cluster.not_running():
                raise NodeExited(f"pulsar broker exited while starting; see {self.ctx.logdir}")
            await self.serving()
            return True, "serving"

        await wait_until(look, timeout, "Pulsar broker")

    async def serving(self) -> None:
        for n in self.cluster.node_names:
            _, w = await asyncio.wait_for(asyncio.open_connection(*self.cluster.address(n)), 3)
            w.close()
        client = self.new_client(3)
        try:
            await asyncio.to_thread(client.get_topic_partitions, f"persistent://{self.options.namespace}/bc-probe")
        finally:
            await _close(client)

    async def create_stream(self, timeout: float) -> str:
        return self.topic  # created by the first producer

    # -- the admin REST API (real brokers; pulsar-lite has none) ------------------------------
    def admins(self) -> list[tuple[str, int]]:
        out = []
        for n in self.cluster.node_names:
            try:
                out.append(self.cluster.address(n, "admin"))
            except LookupError:
                continue
        return out

    async def admin_get(self, path: str, timeout: float = 3.0) -> bytes:
        """GET from the first broker that answers (any broker redirects or proxies)."""
        last: Exception = LookupError("no broker has an admin address")
        for addr in self.admins():
            try:
                return await http_get(*addr, path, timeout)
            except (OSError, asyncio.TimeoutError) as e:
                last = e
        raise SystemError_(f"no broker answered {path}: {last}")

    async def owner(self) -> str:
        """The broker owning the topic, by the REST lookup; a single broker owns everything."""
        return await self.owner_of(f"{self.options.namespace}/{self.stream_name}")

    async def owner_of(self, topic: str) -> str:
        """The broker owning a persistent topic (`<tenant>/<namespace>/<topic>`), by lookup."""
        if len(self.cluster.node_names) == 1 or not self.admins():
            return self.cluster.node_names[0]
        from urllib.parse import urlsplit

        body = json.loads(await self.admin_get(f"/lookup/v2/topic/persistent/{topic}"))
        b = urlsplit(body.get("brokerUrl", ""))
        node = self.cluster.node_at(b.hostname or "", b.port or 6650)
        if node is None:
            raise SystemError_(f"the owner of {topic} ({body.get('brokerUrl')!r}) is not a node of the cluster")
        return node

    async def bundle_of(self, timeout: float, admin: Optional[tuple[str, int]] = None) -> str:
        """The bundle (`0x…_0x…`) holding the topic, asked of `admin` or any broker; the
        answer is computed from the topic's name and the bundles' bounds, nothing assigned."""
        path = f"/lookup/v2/topic/persistent/{self.options.namespace}/{self.stream_name}/bundle"
        raw = await (http_get(*admin, path, timeout) if admin else self.admin_get(path, timeout))
        return raw.decode().strip().strip('"')

    async def bundle_owner(self, timeout: float = 1.0) -> str:
        """The broker owning the bundle of the topic, from each broker's own list of the
        bundles it owns. A lookup (owner_of) assigns an unowned bundle, and a topic's stats
        load the topic: either would end an unload's outage it was meant to watch."""
        if len(self.cluster.node_names) == 1 or not self.admins():
            return self.cluster.node_names[0]
        bundle = f"{self.options.namespace}/{await self.bundle_of(timeout)}"
        if self._cluster_name is None:
            self._cluster_name = json.loads(await self.admin_get("/admin/v2/clusters", timeout))[0]

        async def owns(n: str) -> bool:
            host, port = self.cluster.address(n, "admin")
            path = f"/admin/v2/brokers/{self._cluster_name}/{host}:{port}/ownedNamespaces"
            return bool((json.loads(await http_get(host, port, path, timeout)).get(bundle) or {}).get("is_active"))

        owners = [n for n, yes in zip(self.cluster.node_names,
                                      await asyncio.gather(*(owns(n) for n in self.cluster.node_names))) if yes]
        if not owners:
            raise LookupError(f"no broker owns bundle {bundle}")
        return owners[0]

    def shared_client(self, producer: str):
        """The client library instance of a producer (`p1` for `p1.t3`): its topics' producers
        share one, with its connections; made on first use."""
        base = producer.split(".")[0]
        entry = self._shared.get(base)
        if entry is None:
            entry = self._shared[base] = [self.new_client(10), 0]
        entry[1] += 1
        return entry[0]

    async def release_client(self, producer: str, client) -> None:
        """One user fewer of a shared instance; closed when its last user is."""
        entry = self._shared.get(producer.split(".")[0])
        if entry is None or entry[0] is not client:
            await _close(client)
            return
        entry[1] -= 1
        if entry[1] <= 0:
            del self._shared[producer.split(".")[0]]
            await _close(client)

    def forked(self) -> None:
        self._watch = None  # the harness's; a producer process follows the owner itself
        self._watches = []
        self._closing = {"now": False}
        self._shared = {}

    def follow_owner(self) -> None:
        """Keep `owner_now` current while producers run: the client library does not say
        which broker it writes to, so the history's node is the owner as the cluster says."""
        if self._watch is None and len(self.cluster.node_names) > 1 and self.admins():
            self._closing["now"] = False  # a client reused by the next run on the same cluster
            self._watch = asyncio.ensure_future(self._follow())
            self._watches.append(self._watch)

    async def _follow(self) -> None:
        while not self._closing["now"]:
            try:  # not by lookup: a lookup would take an unloaded bundle back at once
                self.owner_now = await self.bundle_owner(3.0)
            except Exception:  # no owner right now (fail-over): keep the last one
                pass
            await asyncio.sleep(self._every)

    def for_topic(self, topic: str) -> "PulsarClient":
        """A topic's copy follows its own topic's owner, each less often the more topics there
        are (about 20 looks a second over all of them)."""
        c = super().for_topic(topic)
        c._watch, c.owner_now = None, None
        c._every = max(0.5, self.ctx.scenario.workload.topics / 20)
        return c

    async def close(self) -> None:
        self._closing["now"] = True
        watches, self._watches[:] = list(self._watches), []
        for w in watches:
            w.cancel()
        await asyncio.gather(*watches, return_exceptions=True)
        self._watch = None

    # the Java client's producers (java.py: plain, transactional), set by the package:
    # java.py builds on this module
    java_producers: ClassVar[tuple] = ()

    def producer(self, name: str) -> "PulsarProducer":
        if self.options.client == "java":
            plain, txn = self.java_producers
            return (txn if self.ctx.scenario.workload.transactions is not None else plain)(self, name)
        return PulsarProducer(self, name)

    def library(self) -> dict:
        if self.options.client == "java":
            from ..jclient import jar_version

            return {"library": "java", "artifact": "org.apache.pulsar:pulsar-client-original",
                    "version": jar_version("pulsar-4.0", "pulsar-client-original")}
        import pulsar

        return {"library": "cpp", "binding": f"pulsar-client {pulsar.__version__}"}

    transactions = True

    @classmethod
    def txn_error(cls, scenario) -> Optional[tuple[str, str]]:
        o = scenario.options or {}
        if o.get("client", "cpp") != "java":
            return "options.client", "Pulsar's transactions are in its Java client only (options.client: java)"
        if o.get("broker", "apache") != "apache":
            return "options.broker", "pulsar-lite has no transaction coordinator (options.broker: apache)"
        return None

    def reader(self, name: str) -> "PulsarReader":
        return PulsarReader(self, name)

    def consumer(self, name: str) -> "PulsarConsumer":
        return PulsarConsumer(self, name)

    group_kinds = ("shared", "failover", "key-shared")  # a durable subscription's type (pulsar/group.py)

    @classmethod
    def group_error(cls, scenario) -> Optional[tuple[str, str]]:
        if (scenario.options or {}).get("broker") == "lite":
            return "kind", "pulsar-lite has no admin API to say what a subscription has left (options.broker: apache)"
        if scenario.workload.group.commit == "auto":
            return "commit", "Pulsar has no automatic ack: after or before"
        return None

    def group_member(self, name: str, spec, events):
        from .group import PulsarGroupMember

        return PulsarGroupMember(self, name, spec, events, spec.kind or self.group_kinds[0])


class PulsarRoles(Roles):
    """One broker owns everything (pulsar-lite)."""

    client: PulsarClient

    async def leader(self) -> str:
        return self.cluster.node_names[0]

    async def whole(self) -> tuple[bool, str]:
        await self.client.serving()
        return True, "serving"

    async def group_coordinator(self, group: str) -> str:
        """The broker owning the topic dispatches to its subscriptions."""
        return await self.leader()


# The C++ client keeps the first logger a process gives it (later clients' are ignored), so
# a process has one client log: the first client's, in its run's log directory, at INFO (a
# few lines per connection, none per message). Native, not a Python logger: the C++ client
# asks a Python logger about every line, DEBUG included, several per message, each taking
# the interpreter lock from the thread that sends or from an I/O thread (with outcome_of's
# lookup, 4 rounds: the recorded producer 15,400 -> 21,400 msg/s, the bare client's loop,
# which makes its clients here too, 23,100 -> 30,700), and a client freed while its I/O
# threads log through Python can deadlock.
_LOG_FILE: Optional[Path] = None


def client_logger(logdir: Path):
    import pulsar

    global _LOG_FILE
    if _LOG_FILE is None:
        logdir.mkdir(parents=True, exist_ok=True)
        _LOG_FILE = logdir / "pulsar-client.log"
    return pulsar.FileLogger(pulsar.LoggerLevel.Info, str(_LOG_FILE))


class LogTail:
    """The lines a file gains from when this is made: (time, message) of the C++ client's
    `2026-11-25 11:05:08.509 INFO  [tid] File:line | message`, the time on the monotonic
    clock from the line's own (local, milliseconds; the time it is read if the line's is not
    within a minute of now: a log in another time zone)."""

    def __init__(self, path: Optional[Path]) -> None:
        self.f = None
        try:
            self.f = open(path, "rb") if path is not None else None
            if self.f is not None:
                self.f.seek(0, os.SEEK_END)
        except OSError:  # no client log (yet): no client events
            self.f = None
        self.rest = b""

    def lines(self) -> list[tuple[int, str]]:
        if self.f is None:
            return []
        data = self.rest + self.f.read()
        *whole, self.rest = data.split(b"\n")
        out = []
        wall, mono = time.time(), time.monotonic_ns()
        for raw in whole:
            head, sep, msg = raw.decode(errors="replace").partition(" | ")
            if not sep:
                continue
            t = mono
            try:
                ago = wall - datetime.strptime(head[:23], "%Y-%m-%d %H:%M:%S.%f").timestamp()
                if -1 < ago < 60:
                    t = mono - int(max(ago, 0) * 1e9)
            except ValueError:
                pass
            out.append((t, msg))
        return out

    def close(self) -> None:
        if self.f is not None:
            self.f.close()
            self.f = None


class _ProducerStates:
    """One producer's lines of the client log as its client events: its handler scheduling
    a reconnection is the disconnect, the next "Created producer on broker" the reconnect,
    on the broker named there. `t` is the line's time on the monotonic clock."""

    CREATED = re.compile(r"Created producer on broker \[\S+ -> ([\d.]+):(\d+)\]")
    LOST = "Schedule reconnection in "

    def __init__(self, producer: "PulsarProducer", topic: str, producer_name: str) -> None:
        self.producer = producer
        self.prefix = f"[{topic}, {producer_name}] "
        self.at: Optional[str] = None
        self.down = False

    def line(self, t: int, msg: str) -> None:
        if not msg.startswith(self.prefix):
            return
        try:
            m = self.CREATED.search(msg)
            if m:
                self.at = self.producer.system.cluster.node_at(m.group(1), int(m.group(2))) or m.group(1)
                if self.down:
                    self.down = False
                    self.producer.on_event("reconnect", self.at, "pulsar-client: created producer on broker", t)
            elif self.LOST in msg and not self.down and self.at is not None:
                self.down = True
                self.producer.on_event("disconnect", self.at, f"pulsar-client: {msg.strip()}"[:200], t)
        except Exception:  # a log line must never break the client
            pass


class PulsarProducer(ClientEvents):
    def __init__(self, system: PulsarClient, name: str) -> None:
        self.system = system
        self.name = name
        self.client = None
        self.p = None
        self.on_outcome: Optional[OutcomeCallback] = None
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.dedup = system.ctx.scenario.workload.dedup
        self.states: Optional[_ProducerStates] = None
        self._tail: Optional[LogTail] = None
        self._follow: Optional[asyncio.Task] = None

    async def open(self, on_outcome: OutcomeCallback) -> None:
        s, o, w = self.system, self.system.options, self.system.ctx.scenario.workload
        self.on_outcome = on_outcome
        self.loop = asyncio.get_running_loop()
        self.handoff = Handoff(self.loop)
        s.follow_owner()
        timeout_ms = o.send_timeout_ms or int((w.ack_timeout - 1.0) * 1000)
        self.client = s.shared_client(self.name) if w.topics > 1 else s.new_client(10)
        # named, so that its lines in the client log are told apart (and broker-side dedup,
        # where on, keys on (producer name, sequence id))
        name = f"{self.name}-{s.ctx.run_id}"
        kwargs = dict(
            block_if_queue_full=False, max_pending_messages=w.in_flight + 1000, send_timeout_millis=timeout_ms,
            batching_enabled=o.batching, batching_max_messages=o.batching_max_messages,
            batching_max_publish_delay_ms=o.batching_max_publish_delay_ms, producer_name=name)
        self.states = _ProducerStates(self, s.topic, name)
        self._tail = LogTail(_LOG_FILE)  # from here on: its creation is the first line it needs
        deadline = time.monotonic() + 30
        while True:
            try:
                self.p = await asyncio.to_thread(self.client.create_producer, s.topic, **kwargs)
                from pulsar import _pulsar  # the extension module beneath pulsar-client's Python layer

                self._builder, self._send_async = _pulsar.MessageBuilder, self.p._producer.send_async
                self._follow = asyncio.ensure_future(self._follow_log())
                return
            except Exception as e:
                if time.monotonic() > deadline:
                    self._tail.close()  # the loop does not close a producer that never opened
                    raise SystemError_(f"cannot create a producer on {s.topic}: {e}") from None
                await asyncio.sleep(0.5)

    def _read_log(self) -> None:
        for t, msg in self._tail.lines():
            self.states.line(t, msg)

    async def _follow_log(self) -> None:
        # each producer follows the one log: with many topics, each less often
        every = 0.02 * max(1, self.system.ctx.scenario.workload.topics / 10)
        while True:
            await asyncio.sleep(every)
            self._read_log()

    def _report(self, value: int, result, msg_id) -> None:
        kind, detail = outcome_of(result)
        self.on_outcome(value, kind, str(msg_id) if kind == "ack" and msg_id is not None else None, self.node(),
                        detail)

    async def send(self, value: int, payload: bytes) -> None:
        # The client's I/O thread calls back with the interpreter lock taken, which the
        # sending thread then waits for: the callback is the hand-off itself (no Python
        # frame of ours there) and the message id is formatted on the loop. The message is
        # built as pulsar's Producer.send_async builds it, without its per-call checks.
        b = self._builder().content(payload)
        if self.dedup:
            b.sequence_id(value)
        self._send_async(b.build(), functools.partial(self.handoff.put, self._report, value))

    def node(self) -> Optional[str]:
        if self.p is None or not self.p.is_connected():
            return None
        return self.system.owner_now or self.system.cluster.node_names[0]

    async def close(self) -> None:
        if self.p is not None:
            try:
                await asyncio.wait_for(asyncio.to_thread(self.p.flush), 10)
            except Exception:  # outstanding sends are already unknown
                pass
        if self.client is not None:
            await self.system.release_client(self.name, self.client)
        if self._follow is not None:
            self._follow.cancel()
            await asyncio.gather(self._follow, return_exceptions=True)
            self._read_log()  # up to the close
            self._tail.close()
        # the close's last callbacks were handed to the loop: let them run
        await asyncio.sleep(0)


class PulsarReader:
    """A Reader from the earliest message until none is available; every delivery recorded
    with its message id, so redeliveries (same id) and stored duplicates (new ids) differ."""

    def __init__(self, system: PulsarClient, name: str) -> None:
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
        import pulsar

        s = self.system
        client = s.new_client(10)
        try:
            deadline = time.monotonic() + idle
            reader = None
            while reader is None:
                try:
                    reader = await asyncio.to_thread(client.create_reader, s.topic, pulsar.MessageId.earliest)
                except Exception as e:
                    if time.monotonic() > deadline:
                        return f"incomplete: no reader on {s.topic} for {idle:.0f}s: {e}"
                    await asyncio.sleep(0.5)
            try:
                node = await s.owner()
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
                    deliver(data, mid, node)
                if msgs:
                    progress = time.monotonic()
                elif at_end:
                    return "complete"
                elif time.monotonic() - progress > idle:
                    return f"incomplete: no message for {idle:.0f}s and the end not reached{last}"
        finally:
            await _close(client)


class PulsarConsumer(LiveConsumer):
    """An exclusive subscription from the earliest message, acked cumulatively per batch;
    the C++ client reconnects it (its 100 ms doubling back-off) and unacked messages come
    again, recorded as redeliveries by their message ids."""

    def __init__(self, client: PulsarClient, name: str) -> None:
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
