"""Redis with Sentinel: redis-server + sentinel from Debian, the redis-py client.

One redis-server and one sentinel per node namespace; n1 starts as the primary, the others
replicate it. The workload writes a Redis Stream: XADD is a send and its reply (the entry
id) the ack; the read is XRANGE from the start on the primary the sentinels name. Writes
are pipelined in batches on a few connections so thousands can be in flight.

Durability setting: `options.wait_replicas: n` sends `WAIT n timeout` after each batch (the
analogue of acks=all); a batch that reaches fewer replicas is recorded as *unknown*, since
Redis has already applied it on the primary and may or may not keep it. Replication is
asynchronous otherwise: a primary cut off from its replicas and sentinels keeps acking the
clients that can still reach it, and when the sentinels have promoted another node those
writes are discarded (the split-brain positive control).
"""
from __future__ import annotations

import asyncio
import collections
import os
import shutil
import time
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..errors import ScenarioError
from .base import (POWER, STEPDOWN, Client, ClientEvents, DeliverCallback, Hopeless, OutcomeCallback, Roles, System,
                   SystemError_)
from .consumer import LiveConsumer
from .runtime import wait_until
from .cluster import LocalCluster
from .redisio import FIELD, abandon_after, aclose, client_for, entry_id
from .registry import SYSTEMS



class RedisOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    master_name: str = Field(
        "bc", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
        description="the name the sentinels monitor the primary under (`sentinel monitor NAME ...`); an external "
                    "cluster's own, e.g. mymaster")
    wait_replicas: int = Field(0, ge=0, le=8, description="WAIT for this many replicas after each batch (0: no WAIT)")
    wait_timeout_ms: int = Field(1000, ge=1, le=60_000, description="WAIT timeout")
    follow_failover: bool = Field(
        True, description="producers move to the new primary after a failover; false pins them to the first one")
    down_after_ms: int = Field(2000, ge=100, le=60_000, description="sentinel down-after-milliseconds")
    batch: int = Field(256, ge=1, le=10_000, description="XADDs per pipelined batch")
    # one connection keeps each producer's writes in send order, so the ordering verdicts are
    # about the broker; more connections are faster but interleave batches
    connections: int = Field(1, ge=1, le=64, description="connections per producer, each with one batch in flight")
    appendfsync: Literal["always", "everysec", "no"] = Field(
        "everysec", description="when the AOF is fsynced: always (before each reply), everysec (Redis's default), "
                                "no (when the OS flushes)")

    @field_validator("appendfsync", mode="before")
    @classmethod
    def _no(cls, v):
        return "no" if v is False else v  # YAML (a file's, or --option's) reads a bare `no` as false


class UnknownMaster(Hopeless):
    """The sentinels monitor no primary by the name asked (options.master_name)."""


def _bin() -> str:
    return shutil.which("redis-server") or "/usr/bin/redis-server"


class RedisServers(LocalCluster):
    """One redis-server and one sentinel per node namespace; n1 the first primary. A fault
    hits the server: the node's sentinel is a helper, stopped only with the cluster."""

    ports = {"client": 6379, "sentinel": 26379}
    # a server's `dir` (its AOF) on the layer: power-off; its config file, which the
    # sentinels rewrite, and the sentinels' own stay off it
    extra_offers = frozenset({POWER})

    def _server_conf(self, node: str) -> str:
        ip, port = self.address(node)
        d = self.datadir / node
        d.mkdir(parents=True, exist_ok=True)
        lines = [f"bind {ip}", f"port {port}", "protected-mode no", "daemonize no", f'dir "{d}"',
                 "appendonly yes", f"appendfsync {self.options.appendfsync}", 'save ""', f"replica-announce-ip {ip}",
                 f"replica-announce-port {port}", "repl-diskless-sync no"]
        first = self.node_names[0]
        if node != first:
            lines.append("replicaof {} {}".format(*self.address(first)))
        return "\n".join(lines) + "\n"

    def _sentinel_conf(self, node: str) -> str:
        ip, port = self.address(node, "sentinel")
        d = self.datadir / f"{node}-sentinel"
        d.mkdir(parents=True, exist_ok=True)
        pip, pport = self.address(self.node_names[0])
        quorum = len(self.node_names) // 2 + 1
        name = self.options.master_name
        return "\n".join([
            f"bind {ip}", f"port {port}", "daemonize no", "protected-mode no", f'dir "{d}"',
            f"sentinel announce-ip {ip}", f"sentinel announce-port {port}",
            f"sentinel monitor {name} {pip} {pport} {quorum}",
            f"sentinel down-after-milliseconds {name} {self.options.down_after_ms}",
            # a first attempt often finds no replica whose INFO is fresh enough (sentinels
            # refresh it every 10 s until the primary is down) and the next attempt waits
            # 2 x failover-timeout: 3 s keeps that wait at 6 s instead of 20 s
            f"sentinel failover-timeout {name} 3000",
            f"sentinel parallel-syncs {name} 1",
            # otherwise a sentinel learns of replicas only from the primary's INFO, every 10 s
            *[f"sentinel known-replica {name} {r_ip} {r_port}"
              for r_ip, r_port in (self.address(n) for n in self.node_names[1:])],
        ]) + "\n"

    def settings(self) -> dict:
        """appendonly and appendfsync as each running server reports them (CONFIG GET)."""
        import redis

        out = {}
        for n in self.node_names:
            if not self.alive(n):
                continue
            ip, port = self.address(n)
            try:
                with redis.Redis(host=ip, port=port, socket_timeout=2, socket_connect_timeout=2) as r:
                    got = {**r.config_get("appendonly"), **r.config_get("appendfsync")}
            except (redis.RedisError, OSError):
                continue
            out[n] = {k: v.decode() if isinstance(v, bytes) else v for k, v in got.items()}
        return out

    def start(self) -> None:
        if not os.path.exists(_bin()):
            raise SystemError_("redis-server not found: run `make setup` (apt-get install redis-server redis-sentinel)")
        super().start()
        for n in self.node_names:
            conf = self.datadir / f"{n}-sentinel.conf"
            conf.write_text(self._sentinel_conf(n))
            self.spawn_helper(n, f"{n}-sentinel", [_bin(), str(conf), "--sentinel"])

    def launch(self, node: str) -> None:
        conf = self.datadir / f"{node}.conf"
        if not conf.exists():  # a restart keeps the file the sentinels may have rewritten
            conf.parent.mkdir(parents=True, exist_ok=True)
            conf.write_text(self._server_conf(node))
        self.spawn_node(node, [_bin(), str(conf)])


class RedisClient(Client):
    def __init__(self, ctx, cluster) -> None:
        super().__init__(ctx, cluster)
        self.abandoned: set[asyncio.Task] = set()

    async def ask(self, addr, *cmd, timeout: float = 2.0):
        r = client_for(addr, timeout)
        try:
            return await abandon_after(r.execute_command(*cmd), timeout + 1, self.abandoned)
        finally:
            await aclose(r, self.abandoned)

    async def connect(self, timeout: float) -> None:
        """Every server answers, the replicas are in sync, and every sentinel sees the others."""
        await wait_until(self.settled, timeout, "Redis/Sentinel")

    async def settled(self) -> tuple[bool, str]:
        nodes = self.cluster.node_names
        want = len(nodes) - 1
        for n in nodes:
            if not self.cluster.alive(n):
                raise self.cluster.exited(n)
        # the primary the sentinels name: n1 at first, another node after a failover (a
        # reused cluster); before the sentinels answer, n1
        try:
            primary = await self.primary_addr()
        except UnknownMaster:
            raise
        except Exception:  # the sentinels are not up yet
            primary = self.cluster.address(nodes[0])
        info = _parse_info(await self.ask(primary, "INFO", "replication"))
        if info.get("role") != "master" or int(info.get("connected_slaves", 0)) < want:
            return False, f"replicas {info.get('connected_slaves')}/{want}"
        for n in nodes:
            sentinel = self.cluster.address(n, "sentinel")
            if len(await self.sentinel(sentinel, "SENTINELS")) < want:
                return False, f"the sentinel of {n} does not know every other sentinel yet"
            # a sentinel learns replicas from the primary's INFO every 10 s; one that has not
            # yet seen a replica leaves it out of a failover, and that replica follows the dead
            # primary for good (seen in CI: no WAIT ever satisfied again after a kill 2.5 s
            # into the run)
            if _healthy_replicas(await self.sentinel(sentinel, "REPLICAS")) < want:
                return False, f"the sentinel of {n} does not know every replica yet"
        return True, "settled"

    async def sentinel(self, addr, verb: str, timeout: float = 2.0):
        """SENTINEL <verb> <master name>; a sentinel that monitors no primary by that name is
        said so, with the name (the option that sets it)."""
        try:
            return await self.ask(addr, "SENTINEL", verb, self.options.master_name, timeout=timeout)
        except Exception as e:
            if "No such master" in str(e):
                raise UnknownMaster(self.unknown_master(self.cluster.node_at(*addr, "sentinel") or
                                                      "{}:{}".format(*addr))) from None
            raise

    def unknown_master(self, where: str) -> str:
        return (f"the sentinel of {where} monitors no primary named {self.options.master_name!r} (the sentinels' "
                f"`sentinel monitor NAME`: set options.master_name to it)")

    async def drop_stream(self) -> None:
        try:
            await self.ask(await self.primary_addr(), "DEL", self.stream_name)
        except Exception:  # best effort
            pass

    async def primary_addr(self) -> tuple[str, int]:
        """The primary most reachable sentinels name (a lone isolated one may disagree)."""
        nodes = self.cluster.node_names

        async def one(n: str):
            got = await self.sentinel(self.cluster.address(n, "sentinel"), "GET-MASTER-ADDR-BY-NAME", timeout=1.0)
            if got is None:  # a sentinel's answer for a name it does not monitor
                raise UnknownMaster(self.unknown_master(n))
            ip, port = got
            return ip.decode() if isinstance(ip, bytes) else ip, int(port)

        answers = await asyncio.gather(*(one(n) for n in nodes), return_exceptions=True)
        votes = collections.Counter(a for a in answers if not isinstance(a, BaseException))
        if not votes:
            unknown = [a for a in answers if isinstance(a, UnknownMaster)]
            if unknown:
                raise unknown[0]
            errors = [f"{n}: {type(a).__name__}" for n, a in zip(nodes, answers)]
            raise SystemError_(f"no sentinel answered ({', '.join(errors)})")
        return votes.most_common(1)[0][0]

    def producer(self, name: str) -> "RedisProducer":
        return RedisProducer(self, name)

    def reader(self, name: str) -> "RedisReader":
        return RedisReader(self, name)

    def consumer(self, name: str) -> "RedisConsumer":
        return RedisConsumer(self, name)

    group_kinds = ("stream",)  # a Redis Streams consumer group (XREADGROUP, XACK, XAUTOCLAIM)

    def group_member(self, name: str, spec, events):
        from .redisgroup import RedisGroupMember

        return RedisGroupMember(self, name, spec, events)


class RedisRoles(Roles):
    """The leader is the primary the sentinels name."""

    client: RedisClient

    async def leader(self) -> str:
        ip, port = await self.client.primary_addr()
        node = self.cluster.node_at(ip, port)
        if node is None:
            raise SystemError_(f"sentinels name an unknown primary {ip}:{port}")
        return node

    async def whole(self) -> tuple[bool, str]:
        return await self.client.settled()

    async def group_coordinator(self, group: str) -> str:
        """A Streams group lives in the stream, on the primary."""
        return await self.leader()

    async def stepdown(self, node: str, role: str) -> str:
        """SENTINEL FAILOVER: a sentinel promotes a replica without a vote, as for a dead
        primary, but the old primary is told to follow the new one (no writes lost to it)."""
        if role != "leader":
            raise LookupError("Redis has no coordinator role to step down from")
        holder = await self.leader()
        if holder != node:
            raise LookupError(f"{node} is not the primary ({holder} is)")
        errors = []
        for n in [x for x in self.cluster.node_names if x != node] + [node]:
            try:
                await self.client.sentinel(self.cluster.address(n, "sentinel"), "FAILOVER")
                return f"SENTINEL FAILOVER {self.client.options.master_name} (sentinel of {n})"
            except Exception as e:  # that sentinel is down or busy: another one
                errors.append(f"{n}: {type(e).__name__}: {e}")
        raise SystemError_(f"no sentinel took SENTINEL FAILOVER ({'; '.join(errors)})")

    async def stream_ready(self) -> bool:
        """The named primary is a primary with every replica online."""
        lead = await self.leader()
        info = _parse_info(await self.client.ask(self.cluster.address(lead), "INFO", "replication"))
        online = sum(1 for k, v in info.items() if k.startswith("slave") and "state=online" in v)
        return info.get("role") == "master" and online >= len(self.cluster.node_names) - 1


@SYSTEMS.register("redis")
class Redis(System):
    description = "Redis primary + replicas with one Sentinel per node (redis-server 7), a Redis Stream"
    Options = RedisOptions
    LocalCluster = RedisServers
    Client = RedisClient
    Roles = RedisRoles
    offers = frozenset({STEPDOWN})  # SENTINEL FAILOVER
    external_services = ("sentinel",)  # the primary, as the sentinels name it

    @classmethod
    def machine_needs(cls, options, version):
        return ("redis",)

    @classmethod
    def check(cls, scenario) -> None:
        c = scenario.cluster
        if c.replicas != c.nodes:
            raise ScenarioError(f"scenario field 'cluster.replicas': Redis replicates to every node; set it to "
                                f"cluster.nodes ({c.nodes})")
        w = scenario.options.get("wait_replicas", 0)
        if isinstance(w, int) and w > c.nodes - 1:
            raise ScenarioError(f"scenario field 'options.wait_replicas': {w} is more than the {c.nodes - 1} replicas")


def _healthy_replicas(reply) -> int:
    """How many replicas a SENTINEL REPLICAS reply lists as up (dicts or flat key/value lists)."""
    n = 0
    for r in reply or []:
        if not isinstance(r, dict):
            r = dict(zip(r[0::2], r[1::2]))
        r = {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
             for k, v in r.items()}
        flags = r.get("flags", "")
        flags = flags if isinstance(flags, str) else ",".join(flags)
        if "s_down" not in flags and "disconnected" not in flags:
            n += 1
    return n


def _parse_info(raw) -> dict:
    if isinstance(raw, dict):
        return {k: (",".join(f"{a}={b}" for a, b in v.items()) if isinstance(v, dict) else str(v))
                for k, v in raw.items()}
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    out = {}
    for line in text.splitlines():
        if ":" in line and not line.startswith("#"):
            k, v = line.split(":", 1)
            out[k.strip()] = v.strip()
    return out


class RedisProducer(ClientEvents):
    """XADDs pipelined in batches over a few connections to the primary. redis-py has no
    connection callbacks: its client events are the first error it raises while connected
    (disconnect) and the first reply after one (reconnect), over all the connections."""

    def __init__(self, client: RedisClient, name: str) -> None:
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
        self.queue.append((value, payload))
        self.wake.set()

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
            except asyncio.CancelledError:
                raise
            except Exception as e:  # connection lost: the outcome is unknowable
                # nothing is reported: the producer loop's ack_timeout makes them unknown
                if self.connected:
                    self.down = True
                    self.on_event("disconnect", self.system.cluster.node_at(*self.addr),
                                  f"redis-py: {type(e).__name__}: {e}"[:200])
                self.connected = False
                if r is not None:
                    await aclose(r, self.abandoned)
                r = None
                await asyncio.sleep(0.2)
                if self.o.follow_failover:
                    try:
                        self.addr = await self.system.primary_addr()
                    except Exception:
                        pass
                continue
            try:
                self._report(batch, res)
            except Exception as e:  # never lose the writer (and with it the queue)
                for value, _ in batch:
                    why = f"reply not understood: {type(e).__name__}: {e}"
                    self.on_outcome(value, "unknown", None, None, why[:200])

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


class RedisReader:
    """XRANGE over the whole stream, on the primary the sentinels name."""

    def __init__(self, client: RedisClient, name: str) -> None:
        self.system = client
        self.name = name

    async def read(self, deliver: DeliverCallback, idle: float) -> str:
        s = self.system
        deadline = time.monotonic() + idle
        addr = None
        last = ""
        while addr is None:
            try:
                addr = await s.primary_addr()
            except Exception as e:
                last = f"{type(e).__name__}: {e}"
                if time.monotonic() > deadline:
                    return f"incomplete: no primary known for {idle:.0f}s ({last})"
                await asyncio.sleep(0.2)
        node = s.cluster.node_at(*addr)
        r = client_for(addr, timeout=idle)
        try:
            start = "-"
            while True:
                try:
                    entries = await r.xrange(s.stream_name, min=start, max="+", count=10_000)
                except Exception as e:
                    return f"incomplete: XRANGE on {node} failed: {type(e).__name__}: {e}"
                for eid, fields in entries:
                    deliver(fields.get(FIELD, b""), entry_id(eid), node)
                if len(entries) < 10_000:
                    return "complete"
                start = "(" + entry_id(entries[-1][0])
        finally:
            await aclose(r)


class RedisConsumer(LiveConsumer):
    """XREAD BLOCK on the primary the sentinels name, after the last entry id it delivered;
    a failed or silent primary makes it ask the sentinels again (as a sentinel-aware client
    does). Streams read with XREAD have no acks."""

    def __init__(self, client: RedisClient, name: str) -> None:
        super().__init__(client, name)
        self.last_id = "0-0"
        self.abandoned: set[asyncio.Task] = set()

    async def consume(self, deliver: DeliverCallback) -> None:
        s = self.system
        addr = await s.primary_addr()
        node = s.cluster.node_at(*addr)
        r = client_for(addr, timeout=3.0)
        try:
            while True:
                got = await abandon_after(r.xread({s.stream_name: self.last_id}, count=1000, block=1000), 4,
                                           self.abandoned)
                for _key, entries in got or []:
                    for eid, fields in entries:
                        self.last_id = entry_id(eid)
                        deliver(fields.get(FIELD, b""), self.last_id, node)
        finally:
            await aclose(r, self.abandoned)
