"""The Pulsar client side, whichever server is under it: the official pulsar-client (C++
core) producers and a Reader by message id.

Send callbacks become history rows: Ok is an *ack* (offset: the message id); a send timeout
or a lost connection is *unknown*; a refusal before anything was written (queue full,
producer closed, message too big, topic terminated) is a *nack*.

The admin side is here (PulsarClient: topics, the broker's REST API); the producer
(producer.py), the read and live consumer (read.py) and the roles (roles.py) beside it.
"""
from __future__ import annotations

import asyncio
import json
from typing import ClassVar, Optional

from ..base import Client, NodeExited, SystemError_
from ..runtime import http_get, wait_until
from .entries import BookieCopies
from .library import SharedInstances, _close, client_logger
from .owners import ZkOwners, owned_by
from .producer import PulsarProducer
from .read import PulsarConsumer, PulsarReader


class PulsarClient(BookieCopies, Client):
    # the C++ client's reconnect back-off: 100 ms doubling (the availability seed's 100, 300,
    # 700, 1500 ms…), each delay after the first up to 10% shorter (the seed: "-10% jitter")
    reconnect_steps_ms = (100.0, 300.0, 700.0, 1500.0, 3100.0, 6300.0)
    reconnect_jitter = (-0.10, 0.0)

    def __init__(self, ctx, cluster) -> None:
        super().__init__(ctx, cluster)
        self.owner_now: Optional[str] = None
        self._watch: Optional[asyncio.Future] = None
        self._every = 0.5  # seconds between two looks at the owner
        self._cluster_name: Optional[str] = None  # as the admin API names it (owners.owned_by)
        # the ZooKeeper session bundle_owner reads owners through, shared with the topics'
        # copies like _closing
        self._zk = ZkOwners()
        # workload.topics: one client library instance per producer, shared by its topics
        self.shared = SharedInstances(lambda: self.new_client(10))
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

    @property
    def owned_name(self) -> str:
        """The topic whose owner, ledgers and ensemble are the stream's: itself, or a
        partitioned topic's first partition (as Kafka's leader is its first partition's)."""
        name = self.stream_name
        return name if self.options.partitions == 1 else f"{name}-partition-0"

    def partition_topics(self) -> list[str]:
        """The topics to read: the topic, or each partition of a partitioned one."""
        n = self.options.partitions
        return [self.topic] if n == 1 else [f"{self.topic}-partition-{i}" for i in range(n)]

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
        """One partition: created by the first producer. Several: a partitioned topic made by
        the admin API first (a producer would make a topic of one partition)."""
        n = self.options.partitions
        if n > 1:
            path = f"/admin/v2/persistent/{self.options.namespace}/{self.stream_name}/partitions"
            last: Exception = LookupError("no broker has an admin address")
            for addr in self.admins():
                try:
                    await http_get(*addr, path, timeout, method="PUT", body=str(n).encode())
                    return self.topic
                except (OSError, asyncio.TimeoutError) as e:
                    last = e
            raise SystemError_(f"cannot create {self.topic} with {n} partitions: {last}")
        return self.topic

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
        return await self.owner_of(f"{self.options.namespace}/{self.owned_name}")

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
        path = f"/lookup/v2/topic/persistent/{self.options.namespace}/{self.owned_name}/bundle"
        raw = await (http_get(*admin, path, timeout) if admin else self.admin_get(path, timeout))
        return raw.decode().strip().strip('"')

    async def bundle_owner(self, timeout: float = 1.0) -> str:
        """The broker owning the bundle of the topic, asked without changing it (owners.py:
        from ZooKeeper on the harness's own clusters, from the brokers on an external one)."""
        if len(self.cluster.node_names) == 1 or not self.admins():
            return self.cluster.node_names[0]
        bundle = f"{self.options.namespace}/{await self.bundle_of(timeout)}"
        store = self.cluster.metadata_store()
        if store is not None:
            owners = await asyncio.to_thread(self._zk.read, store, bundle, timeout, self.cluster.node_at)
        else:
            if self._cluster_name is None:
                self._cluster_name = json.loads(await self.admin_get("/admin/v2/clusters", timeout))[0]
            owners = await owned_by(self.cluster, self._cluster_name, bundle, timeout)
        if not owners:
            raise LookupError(f"no broker owns bundle {bundle}")
        return owners[0]

    def forked(self) -> None:
        self._watch = None  # the harness's; a producer process follows the owner itself
        self._watches = []
        self._closing = {"now": False}
        self.shared = SharedInstances(lambda: self.new_client(10))
        self._zk = ZkOwners()  # the parent's session is not this process's

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
        await asyncio.to_thread(self._zk.end)

    # the Java client's producers (java.py: plain, transactional), set by the package:
    # java.py builds on this module
    java_producers: ClassVar[tuple] = ()

    def producer(self, name: str) -> "PulsarProducer":
        if self.options.client == "java":
            plain, txn = self.java_producers
            return (txn if self.ctx.scenario.workload.transactions is not None else plain)(self, name)
        return PulsarProducer(self, name)

    @property
    def java_set(self) -> str:
        """The set whose pulsar-client jar the Java client runs: options.client_version's, else
        the servers' release."""
        from .release import client_set, resolve

        if self.options.client_version is not None:
            return client_set(self.options.client_version)
        r = resolve(self.ctx.scenario.cluster.version)
        r.pom()
        return r.set_name

    def library(self) -> dict:
        if self.options.client == "java":
            from ..jclient import jar_version

            return {"library": "java", "artifact": "org.apache.pulsar:pulsar-client-original",
                    "version": jar_version(self.java_set, "pulsar-client-original")}
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
