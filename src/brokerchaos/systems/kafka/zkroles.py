"""Roles on Apache Kafka: on ZooKeeper the partition's state as the controller wrote it there,
on KRaft the brokers' metadata."""
from __future__ import annotations

import asyncio
import json
from typing import Optional

from .. import jvm
from ..base import SystemError_
from ..runtime import quiet_logger
from .apache import CONTROLLER, ZK, _node_name
from .roles import KafkaRoles

class ApacheKafkaRoles(KafkaRoles):
    """On ZooKeeper, the partition's state as the controller wrote it there (leader, ISR,
    leader epoch: what `kafka-topics --describe` printed for the seed). A broker's metadata
    would not do: a leader cut off from ZooKeeper keeps naming itself, and a client asking
    it is told so. On KRaft (or an external cluster), the brokers' metadata."""

    async def zk_state(self) -> Optional[dict]:
        if ZK not in self.cluster.service_hosts:
            return None
        topic = self.ctx.stream_name

        def read() -> dict:
            from kazoo.client import KazooClient

            zk = KazooClient(hosts="{}:{}".format(*self.cluster.address(ZK, "zk")), timeout=3.0,
                             logger=quiet_logger("kazoo"))
            zk.start(timeout=3.0)
            try:
                state = json.loads(zk.get(f"/brokers/topics/{topic}/partitions/0/state")[0])
                assigned = json.loads(zk.get(f"/brokers/topics/{topic}")[0])["partitions"]["0"]
                state["replicas"] = assigned
                # none between a controller's session ending and the next one's election
                controller = zk.exists("/controller") and zk.get("/controller")[0]
                state["controller"] = json.loads(controller).get("brokerid") if controller else -1
                # the brokers whose sessions are alive (ephemeral registrations)
                state["registered"] = sorted(int(b) for b in zk.get_children("/brokers/ids") if b.isdigit())
                return state
            finally:
                zk.stop()
                zk.close()

        return await asyncio.to_thread(read)

    def node_of_id(self, broker: int) -> str:
        node = f"n{broker}"
        if node not in self.cluster.node_names:
            raise SystemError_(f"broker {broker} is not a known node")
        return node

    async def leader(self) -> str:
        state = await self.zk_state()
        if state is None:
            return await super().leader()
        if state["leader"] < 0:
            raise SystemError_(f"{self.ctx.stream_name} has no leader (ISR {state['isr']})")
        return self.node_of_id(state["leader"])

    async def serving(self) -> str:
        """On ZooKeeper, the leader the partition's state names, while its broker is
        registered: a killed leader stays named there until the controller elects another
        (seconds after its session ends, longer when it was the controller too), and a
        look then must not take it for the topic served again (faults/owners.py)."""
        state = await self.zk_state()
        if state is None:
            return await super().serving()
        if state["leader"] < 0:
            raise SystemError_(f"{self.ctx.stream_name} has no leader (ISR {state['isr']})")
        if state["leader"] not in state["registered"]:
            raise SystemError_(f"the named leader, broker {state['leader']}, is not registered (its session is gone)")
        return self.node_of_id(state["leader"])

    async def replicas(self) -> list[str]:
        state = await self.zk_state()
        if state is None:
            return await super().replicas()
        lead = self.node_of_id(state["leader"])
        return [lead] + [self.node_of_id(r) for r in state["replicas"] if r != state["leader"]]

    async def coordinator(self) -> str:
        """ZooKeeper's host, or the KRaft controller's: what a broker must reach to stay a member."""
        if not self.cluster.service_hosts:
            raise LookupError("this cluster has no coordinator host")
        return self.cluster.service_hosts[0]

    async def describe(self) -> dict:
        state = await self.zk_state()
        if state is None:
            out = await super().describe()
            if CONTROLLER in self.cluster.service_hosts:  # KRaft names a random broker as "controller"
                out["controller"] = CONTROLLER
            return out
        name = _node_name
        return {"leader": name(state["leader"]), "leader_epoch": state.get("leader_epoch"),
                "replicas": [name(b) for b in state["replicas"]], "isr": [name(b) for b in state["isr"]],
                "controller": name(state["controller"])}

    async def stream_ready(self) -> bool:
        """Led, with every replica back in the ISR, as the controller recorded it."""
        state = await self.zk_state()
        if state is None:
            return await super().stream_ready()
        return state["leader"] >= 0 and sorted(state["isr"]) == sorted(state["replicas"])

    async def whole(self) -> tuple[bool, str]:
        """Every broker registered and answering, ZooKeeper serving."""
        md = await self.client.metadata()
        missing = sorted(set(self.cluster.node_names) - {self.cluster.node_at(b.host, b.port)
                                                          for b in md.brokers.values()})
        if missing:
            return False, f"not registered: {', '.join(missing)}"
        for n in self.cluster.node_names:
            await self.client.metadata_from(n, 3.0)
        if ZK in self.cluster.service_hosts and not await jvm.ruok(self.cluster.address(ZK, "zk")):
            return False, "ZooKeeper does not answer ruok"
        return True, "every broker registered and answering"
