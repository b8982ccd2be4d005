"""The harness's Redis client: the primary as the sentinels name it, its replicas' health
(INFO replication), the stream made and dropped."""
from __future__ import annotations

import asyncio
import collections

from ..base import Client, Hopeless, SystemError_
from ..runtime import wait_until
from .conn import abandon_after, aclose, client_for
from .producer import RedisProducer
from .read import RedisConsumer, RedisReader


class UnknownMaster(Hopeless):
    """The sentinels monitor no primary by the name asked (options.master_name)."""


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

    replica_reads = True

    def replica_reader(self, name: str, node: str) -> "RedisReader":
        """XRANGE on that node itself, primary or replica (entry ids are the same on every copy)."""
        return RedisReader(self, name, node)

    def consumer(self, name: str) -> "RedisConsumer":
        return RedisConsumer(self, name)

    group_kinds = ("stream",)  # a Redis Streams consumer group (XREADGROUP, XACK, XAUTOCLAIM)

    def group_member(self, name: str, spec, events):
        from .group import RedisGroupMember

        return RedisGroupMember(self, name, spec, events)


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
