"""Who holds what in a Kafka cluster, as its metadata says: a partition's leader and ISR, the
group and transaction coordinators (whichever server is under it: apache.py and tansu.py
build on these)."""
from __future__ import annotations

import asyncio

from ..base import Client, SystemError_
from ..roles import Roles
from .library import java_hash, transactional_id


class KafkaRoles(Roles):
    """Roles as the cluster's metadata gives them: the partition leader, its replicas and
    in-sync replicas, the controller. Partition 0 stands for the topic."""

    client: Client

    def node_of(self, md, broker_id: int) -> str:
        b = md.brokers.get(broker_id)
        node = b and self.cluster.node_at(b.host, b.port)
        if node is None:
            raise SystemError_(f"broker {broker_id} is not a known node")
        return node

    async def partition(self) -> tuple[object, object]:
        md = await self.client.metadata()
        t = md.topics.get(self.ctx.stream_name)
        if t is None or t.error is not None or not t.partitions:
            raise SystemError_(f"no metadata for topic {self.ctx.stream_name}")
        return md, t.partitions[min(t.partitions)]

    async def leader(self) -> str:
        md, p = await self.partition()
        if p.leader < 0:
            raise SystemError_(f"partition {p.id} of {self.ctx.stream_name} has no leader")
        return self.node_of(md, p.leader)

    async def replicas(self) -> list[str]:
        md, p = await self.partition()
        lead = self.node_of(md, p.leader)
        return [lead] + [self.node_of(md, r) for r in p.replicas if r != p.leader]

    async def group_coordinator(self, group: str) -> str:
        """The group's coordinator: the broker leading its `__consumer_offsets` partition, as
        FindCoordinator answers (through describe_consumer_groups)."""
        gid = f"{self.ctx.stream_name}-{group}"
        fut = self.client._admin().describe_consumer_groups([gid], request_timeout=3)[gid]
        c = (await asyncio.to_thread(fut.result, 5)).coordinator
        node = c is not None and self.cluster.node_at(c.host, c.port)
        if not node:
            raise SystemError_(f"the coordinator of group {gid} ({c}) is not a known node")
        return node

    async def txn_coordinator(self) -> str:
        """The first producer's transaction coordinator: the broker leading the partition of
        `__transaction_state` its transactional id hashes to (Kafka's own rule: the id's
        Java hashCode, its sign bit cleared, modulo the topic's partitions)."""
        tid = transactional_id(self.ctx.stream_name, "p1")
        md = await asyncio.to_thread(self.client._admin().list_topics, "__transaction_state", 5)
        t = md.topics.get("__transaction_state")
        if t is None or t.error is not None or not t.partitions:
            raise SystemError_("no metadata for __transaction_state (no transaction begun yet?)")
        p = t.partitions.get(java_hash(tid) % len(t.partitions))
        if p is None or p.leader < 0:
            raise SystemError_(f"the __transaction_state partition of {tid} has no leader")
        return self.node_of(md, p.leader)

    async def elect_leaders(self) -> dict:
        """A preferred-leader election over every partition of the run's topics (election.py)."""
        from .election import elect_preferred

        return await elect_preferred(self)

    async def assignment(self) -> list[str]:
        """The partition's replicas in their assigned order (reassign.py)."""
        from .reassign import assignment

        return (await assignment(self))[0]

    async def reassign(self, replicas: list[str], timeout: float) -> dict:
        """The partition moved to `replicas` by the controller, waited for (reassign.py)."""
        from .reassign import reassign

        return await reassign(self, replicas, timeout)

    async def set_replicas(self, count: int) -> dict:
        """The partition's replica count changed to `count` by a reassignment (reassign.py):
        down, it keeps the current leader first and drops the last of the others; up, it adds
        the brokers that hold none, in node order. The count and peers before, the peers after."""
        before = await self.assignment()
        lead = await self.leader()
        if count <= len(before):
            target = ([lead] if lead in before else []) + [n for n in before if n != lead]
            target = target[:count]
        else:
            spare = [n for n in self.cluster.node_names if n not in before]
            target = before + spare[:count - len(before)]
        if len(target) != count:
            raise SystemError_(f"{count} replicas asked of {len(self.cluster.node_names)} brokers")
        moved = await self.reassign(target, timeout=60.0)
        return {"verb": f"alterPartitionReassignments replicas {len(before)} -> {count}",
                "replicas_before": len(before), "peers_before": before, "peers_after": moved["replicas_after"],
                "done_s": moved["done_s"]}

    async def describe(self) -> dict:
        """The topic's details as a broker's metadata gives them, as the seed printed them
        around each fault."""
        md, p = await self.partition()
        # a broker out of the metadata (dead, or cut off from the coordinator) by its id: n<id>
        names = {b: self.cluster.node_at(md.brokers[b].host, md.brokers[b].port) if b in md.brokers
                 else (f"n{b}" if f"n{b}" in self.cluster.node_names else str(b))
                 for b in set(p.replicas) | set(p.isrs) | {p.leader}}
        out = {"leader": names.get(p.leader) if p.leader >= 0 else None,
               "replicas": [names[r] for r in p.replicas], "isr": [names[r] for r in p.isrs]}
        ctrl = md.controller_id
        if ctrl is not None and ctrl in md.brokers:
            out["controller"] = self.cluster.node_at(md.brokers[ctrl].host, md.brokers[ctrl].port)
        return out

    async def stream_ready(self) -> bool:
        """Every partition led, and every replica in sync."""
        md = await self.client.metadata()
        t = md.topics.get(self.ctx.stream_name)
        return t is not None and t.error is None and bool(t.partitions) and all(
            p.leader >= 0 and sorted(p.isrs) == sorted(p.replicas) for p in t.partitions.values())
