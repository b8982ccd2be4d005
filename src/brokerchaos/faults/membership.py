"""Membership changes: a stream's set of replicas changed while it is written, where Jepsen
found loss in other systems (stale and lost messages under kills plus membership changes):
its replica count (`replicas`) or the nodes that hold it (`reassign`). The change is an
operator's verb, asked of the cluster's API; the heal changes it back."""
from __future__ import annotations

import asyncio
import time
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field

from ..systems.base import REASSIGN, REPLICAS
from . import effect
from .base import Fault, Target
from .effect import HEALED, INJECTED
from .registry import FAULTS
from .targets import TargetError


class ReplicasParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    to: int = Field(1, ge=1, le=9, description="the replica count the stream is changed to")
    back: bool = Field(True, description="heal: change it back to the count it had (new peers catch up then)")
    wait: float = Field(30.0, gt=0, le=300, description="seconds to wait for every replica to be current")


@FAULTS.register("replicas")
class Replicas(Fault):
    description = ("a membership change under load: the stream's replica count changed to params.to (NATS: "
                   "$JS.API.STREAM.UPDATE; 3 -> 1 drops two peers, 1 -> 3 adds two that catch up; RabbitMQ "
                   "quorum queue: rabbitmq-queues delete_member / add_member; Kafka: a partition "
                   "reassignment to fewer or more brokers, the leader kept); heal changes it back. The target "
                   "is where the window is recorded; the effect names the peers before and after")
    family = "membership"
    observes = ("the stream's peers, as the cluster names them, changed by the update, and after the heal the "
                "count back (with params.back)")
    Params = ReplicasParams
    needs = frozenset({REPLICAS})
    opens_window_first = True  # the outage starts with the request

    async def observe(self, stage: str):
        e = self.effect
        if stage == INJECTED:
            b, a = e.get("peers_before"), e.get("peers_after")
            return effect.judge(b is not None and a is not None and sorted(b) != sorted(a), f"peers {b} -> {a}")
        if stage == HEALED and "back" in e:
            back = e["back"].get("peers_after") or []
            return effect.judge(len(back) == e.get("replicas_before"), f"peers back: {back}", HEALED)
        return None

    @classmethod
    def check(cls, params, node_names: list[str], offers: frozenset[str], scenario) -> None:
        if params.to > len(node_names):
            raise TargetError(f"{params.to} replicas on {len(node_names)} nodes", "params.to")

    def inject_bound(self, n_nodes: int) -> float:
        return self.p.wait + 25.0  # the update's 10 s, its peers' 10 s, then the wait for current replicas

    async def inject(self, target: Target) -> None:
        self.nodes.append(target.nodes[0])
        changed = await self.ctx.roles.set_replicas(self.p.to)
        self.effect.update(changed)
        self.effect["current_s"] = await self._current()

    async def heal(self) -> None:
        before = self.effect.get("replicas_before")
        if self.p.back and before is not None and before != self.p.to and "back" not in self.effect:
            back = await self.ctx.roles.set_replicas(before)
            self.effect["back"] = {k: back[k] for k in ("verb", "peers_after", "peers_settled_s") if k in back}
            self.effect["back"]["current_s"] = await self._current()
        self.nodes.clear()

    async def _current(self) -> Optional[float]:
        """Seconds until the stream says every replica is current (None: not within `wait`)."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < self.p.wait:
            try:
                if await asyncio.wait_for(self.ctx.roles.stream_ready(), 5.0):
                    return round(time.monotonic() - t0, 3)
            except Exception:  # a leader being elected for the new peer set
                pass
            await asyncio.sleep(0.1)
        return None


class ReassignParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    back: bool = Field(True, description="heal: move the replicas back to the nodes they were on")
    wait: float = Field(60.0, gt=0, le=600, description="seconds the move may take, new replicas in sync included")


@FAULTS.register("reassign")
class Reassign(Fault):
    description = ("a membership change under load: the target's replicas of the stream moved to nodes that "
                   "hold none, each in its place in the assignment (Kafka: alterPartitionReassignments, what "
                   "kafka-reassign-partitions does; the new replicas fetch the log, join the ISR, the old are "
                   "dropped; the leader's replica moved moves the leadership). Needs more nodes than replicas; "
                   "heal moves them back. The effect names the replicas before and after")
    family = "membership"
    example_nodes = 4  # a replica moved needs a node that holds none
    observes = ("the stream's replicas, as the controller names them, on the new nodes, and after the heal back "
                "where they were (with params.back)")
    Params = ReassignParams
    needs = frozenset({REASSIGN})
    opens_window_first = True  # the outage starts with the request

    async def observe(self, stage: str):
        e = self.effect
        if stage == INJECTED:
            b, a = e.get("replicas_before"), e.get("replicas_after")
            return effect.judge(bool(b) and bool(a) and b != a, f"replicas {b} -> {a}")
        if stage == HEALED and "back" in e:
            back = e["back"].get("replicas_after")
            return effect.judge(back == e.get("replicas_before"), f"replicas back: {back}", HEALED)
        return None

    @classmethod
    def check(cls, params, node_names: list[str], offers: frozenset[str], scenario) -> None:
        c = scenario.cluster
        if c.replicas >= c.nodes:
            raise TargetError(f"{c.replicas} replicas on {c.nodes} nodes leave no node to move a replica to; "
                              "add nodes (cluster.nodes)")

    def inject_bound(self, n_nodes: int) -> float:
        return self.p.wait + 40.0  # the JVM's start and the controller's answer beside the move

    async def inject(self, target: Target) -> None:
        before = await self.ctx.roles.assignment()
        moved = [n for n in target.nodes if n in before]
        if not moved:
            raise TargetError(f"{','.join(target.nodes)} holds no replica of the stream (it is on "
                              f"{','.join(before)})")
        spare = [n for n in self.ctx.cluster.node_names if n not in before]
        if len(spare) < len(moved):
            raise TargetError(f"{len(moved)} replicas to move and {len(spare)} nodes holding none")
        to = dict(zip(moved, spare))
        self.nodes.extend(moved)
        self.effect["moved"] = to
        self.effect.update(await self.ctx.roles.reassign([to.get(n, n) for n in before], self.p.wait))

    async def heal(self) -> None:
        before = self.effect.get("replicas_before")
        if self.p.back and before and "back" not in self.effect:
            back = await self.ctx.roles.reassign(before, self.p.wait)
            self.effect["back"] = {k: back[k] for k in ("replicas_after", "isr_after", "leader_after", "done_s")}
        self.nodes.clear()
