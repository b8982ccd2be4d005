"""The least a broker module writes (docs/architecture.md, "Adding a broker"): one
redis-server per node, not replicated, its Redis Stream the run's stream. A module in
src/brokerchaos/systems/ would add `@SYSTEMS.register("redis-one")` above `RedisOne`; the
contract test (tests/test_contract.py) registers it in a registry of its own instead, holds
it to the same checks as every real system, and runs one session on it.
"""
from __future__ import annotations

import asyncio
import shutil
import time
from typing import Optional

from brokerchaos.systems.base import Client
from brokerchaos.systems.cluster import LocalCluster
from brokerchaos.systems.roles import Roles
from brokerchaos.systems.runtime import wait_until
from brokerchaos.systems.system import System


class OneServer(LocalCluster):
    """The cluster: which ports a node serves, and how its process starts."""

    ports = {"client": 6379}

    def launch(self, node: str) -> None:
        ip, port = self.address(node)
        d = self.datadir / node
        d.mkdir(parents=True, exist_ok=True)
        self.spawn_node(node, [shutil.which("redis-server") or "/usr/bin/redis-server", "--bind", ip,
                               "--port", str(port), "--protected-mode", "no", "--dir", str(d), "--appendonly", "yes",
                               # every write in the file before its reply: a kill loses nothing
                               # acked (everysec postpones the write while a background fsync
                               # runs, up to 2 s, and answers meanwhile: a clean-clone run lost 6)
                               "--appendfsync", "always", "--save", ""])


def _redis(addr):
    import redis.asyncio as aioredis

    return aioredis.Redis(host=addr[0], port=addr[1], socket_timeout=5, socket_connect_timeout=5)


class OneClient(Client):
    """The client: the cluster serving, and a producer and a reader of the run's stream."""

    async def connect(self, timeout: float) -> None:
        async def pong():
            r = _redis(self.cluster.address(self.cluster.node_names[0]))
            try:
                return bool(await r.ping()), "PONG"
            finally:
                await r.aclose()

        await wait_until(pong, timeout, "redis-server")

    def producer(self, name: str) -> "OneProducer":
        return OneProducer(self, name)

    def reader(self, name: str) -> "OneReader":
        return OneReader(self)


class OneProducer:
    """XADD one message at a time; the entry id is the ack, an error the message's unknown."""

    def __init__(self, client: OneClient, name: str) -> None:
        self.client, self.node_name = client, client.cluster.node_names[0]
        self.r = _redis(client.cluster.address(self.node_name))
        self.on_outcome = None

    async def open(self, on_outcome) -> None:
        self.on_outcome = on_outcome

    async def send(self, value: int, payload: bytes) -> None:
        """One at a time (a real driver keeps thousands in flight: systems/redis/producer.py pipelines)."""
        try:
            eid = await self.r.xadd(self.client.stream_name, {b"p": payload})
            self.on_outcome(value, "ack", eid.decode(), self.node_name, None)
        except Exception as e:  # the connection went: whether it was stored is unknown
            self.on_outcome(value, "unknown", None, self.node_name, f"{type(e).__name__}: {e}"[:200])

    def node(self) -> Optional[str]:
        return self.node_name

    async def close(self) -> None:
        await self.r.aclose()


class OneReader:
    """XRANGE over the whole stream after the write (a node just restarted may take a moment
    to answer: the read waits for it up to `idle` seconds)."""

    def __init__(self, client: OneClient) -> None:
        self.client = client

    async def read(self, deliver, idle: float) -> str:
        node = self.client.cluster.node_names[0]
        r = _redis(self.client.cluster.address(node))
        deadline = time.monotonic() + idle
        try:
            while True:
                try:
                    entries = await r.xrange(self.client.stream_name)
                    break
                except Exception as e:
                    if time.monotonic() > deadline:
                        return f"incomplete: {type(e).__name__}: {e}"
                    await asyncio.sleep(0.2)
            for eid, fields in entries:
                deliver(fields[b"p"], eid.decode(), node)
            return "complete"
        finally:
            await r.aclose()


class OneRoles(Roles):
    """The roles: who leads the stream (the one node that has it), and whether it serves."""

    async def leader(self) -> str:
        return self.cluster.node_names[0]

    async def stream_ready(self) -> bool:
        r = _redis(self.cluster.address(self.cluster.node_names[0]))
        try:
            return bool(await r.ping())
        finally:
            await r.aclose()


class RedisOne(System):
    description = "one redis-server per node, not replicated: the least a broker module writes"
    LocalCluster = OneServer
    Client = OneClient
    Roles = OneRoles
    reusable = False
