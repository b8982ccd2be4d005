"""What a broker's roles say: who does what in the cluster right now, as the cluster itself
says (the lookups faults target, the evidence a run keeps). A broker subclasses `Roles`
with its `leader`, and what else its servers can tell; the rest raise LookupError."""
from __future__ import annotations

import asyncio
import time
from typing import ClassVar, Optional
from .base import Client, Cluster, Context, _topic_copy


class Roles:
    """Who does what in the cluster right now, as the cluster itself says."""

    def __init__(self, ctx: Context, cluster: Cluster, client: Client) -> None:
        self.ctx = ctx
        self.cluster = cluster
        self.client = client

    def for_topic(self, topic: str, client: Client) -> "Roles":
        """These roles asked about one topic of `workload.topics` (its client: Client.for_topic)."""
        r = _topic_copy(self, topic)
        r.client = client
        return r

    async def leader(self) -> str:
        """The node currently leading the run's stream/topic/queue."""
        raise NotImplementedError

    async def replicas(self) -> list[str]:
        """All nodes holding a replica of the stream, the leader first. By default every node
        (systems that replicate to all, or where every node serves the stream)."""
        lead = await self.leader()
        return [lead] + [n for n in self.cluster.node_names if n != lead]

    async def coordinator(self) -> str:
        """The node coordinating the cluster (controller, meta leader); needs `coordinator`."""
        raise LookupError("this system has no coordinator")

    async def group_coordinator(self, group: str) -> str:
        """The node coordinating workload.group's group (`group`: its name in the scenario):
        Kafka's group coordinator, NATS's consumer leader. Target `group-coordinator`."""
        raise LookupError("this system has no group coordinator")

    async def txn_coordinator(self) -> str:
        """The node coordinating the first producer's transactions (Kafka: the leader of its
        `__transaction_state` partition; Pulsar: the owner of its open transaction's
        coordinator partition). Target `txn-coordinator`."""
        raise LookupError("this system has no transaction coordinator")

    async def ensemble(self) -> list[str]:
        """The storage nodes holding the stream's current segment (Pulsar: the bookies of the
        current ledger's last ensemble); needs `ensemble`."""
        raise LookupError("this system has no storage ensemble")

    async def stepdown(self, node: str, role: str) -> str:
        """Move `role` ("leader" of the stream, or "coordinator") off `node` the way an
        operator does before maintenance, without a crash; returns the verb used (run.json).
        Raises LookupError if `node` does not hold the role now. Needs `stepdown`."""
        raise LookupError("this system has no graceful leadership move")

    # whether `stepdown` hands the role to another node (else it only makes the holder let
    # its clients go and take them back, as Pulsar's topic unload)
    stepdown_moves: ClassVar[bool] = True

    async def stepdown_every(self, node: str) -> dict:
        """Move every leadership `node` holds off it (not only the run's stream's), the way
        an operator empties a server before maintenance; returns the verb and what it
        moved (run.json). Needs `stepdown-every`."""
        raise LookupError("this system has no step-down of everything a node leads")

    async def set_replicas(self, count: int) -> dict:
        """Change the stream's replica count to `count` under load (a membership change);
        returns the verb, the count it had (`replicas_before`) and the peers before and
        after (run.json). Needs `replicas`."""
        raise LookupError("this system cannot change a stream's replica count")

    async def remove_member(self, node: str, same_name: bool = False) -> dict:
        """`node` leaves the cluster for good: stopped, forgotten by the others, its data
        deleted; returns the verb, the members before and after (run.json), and `name`, the
        member's name among them where it is not the node's. With `same_name` the new member
        will come back under the removed one's name (where a system names its members).
        Needs `replace`."""
        raise LookupError("this system cannot replace a member")

    async def add_member(self, node: str, timeout: float) -> dict:
        """A new, empty member in the place of the removed `node`, waited for (up to
        `timeout`) until it holds everything; returns the verb, the members after,
        `in_sync_s` (None: not within the bound) and `name` as remove_member. Needs `replace`."""
        raise LookupError("this system cannot replace a member")

    async def assignment(self) -> list[str]:
        """The nodes holding the stream's replicas, in their assigned order. Needs `reassign`."""
        raise LookupError("this system cannot move a stream's replicas")

    async def reassign(self, replicas: list[str], timeout: float) -> dict:
        """Move the stream's replicas to `replicas` under load and wait until they are in sync
        (within `timeout`); returns the verb, `replicas_before`, `replicas_after`,
        `leader_after` and `done_s` (run.json). Needs `reassign`."""
        raise LookupError("this system cannot move a stream's replicas")

    async def step_back(self, node: str) -> None:
        """Undo what `stepdown` left in place (RabbitMQ: the node leaves maintenance mode);
        nothing where leadership simply moved."""

    async def describe(self) -> dict:
        """What the cluster says of the stream now (leader, replicas in sync, controller), kept
        in run.json around each fault window; {} where there is nothing more than the leader."""
        return {}

    def consumer_nodes(self) -> list[str]:
        """Nodes the live consumers are connected to now (systems that read during the run)."""
        return []

    def copies_wait(self) -> Optional[float]:
        """How long a run's end check waits for the cluster to say nothing is short of copies
        (`under_replicated`); None where the system, with these settings, keeps no such account."""
        return None

    async def under_replicated(self) -> list[str]:
        """One look: what the cluster itself reports short of copies now (Pulsar with
        AutoRecovery: under-replicated ledger ids); raises where it cannot be asked."""
        raise LookupError("this system keeps no account of under-replicated data")

    async def short_of_copies(self, ids: list[str]) -> list[str]:
        """What each of `ids` (from under_replicated) is, one line each, for an end check that
        still finds them; nothing where the system says no more than their ids."""
        return []

    async def whole(self) -> tuple[bool, str]:
        """One look: is the cluster whole and serving? (ok, what was seen)."""
        await self.client.connect(5.0)
        return True, "serving"

    async def stream_ready(self) -> bool:
        """One look: does the stream have a leader with every replica current?"""
        return True

    async def drop_counts(self) -> dict[str, dict[str, tuple[int, str]]]:
        """What the broker counts of what it dropped on purpose, per node: counter name ->
        (count since the node started, unit: "messages" or "bytes"). VerneMQ: messages
        dropped from full session queues, bytes its inter-node buffer dropped. Raises
        LookupError where the system keeps no such count."""
        raise LookupError("this system keeps no count of what it drops")

    async def copies_behind(self) -> list[str]:
        """One look at each replica's own copy: those that end before the leader's (in words).
        Empty where every copy is whole, or where the system cannot ask a replica for its own."""
        return []

    async def unload(self, node: str, scope: str, split: bool) -> str:
        """Close every topic of the stream's bundle (`scope` bundle) or namespace, asked of
        `node`, to be served again wherever the cluster puts them (Pulsar's load balancing,
        a broker's graceful shutdown); `split`: split the bundle in two first. Returns the
        request made. Needs `unload`."""
        raise LookupError("this system has no bundles to unload")

    async def elect_leaders(self) -> dict:
        """A preferred-leader election over every topic of the run: each partition led again
        by its preferred replica (what an operator runs after a rolling restart). Returns
        what it asked and what each partition answered. Needs `elect`."""
        raise LookupError("this system has no preferred-leader election")

    async def serving(self) -> str:
        """One look: the node serving the stream now (it has an owner that takes writes);
        raises when none does. By default its leader (a Kafka partition's, a NATS stream's:
        elected is serving); a system whose owner loads the stream after it is named says
        more (Pulsar: the topic's ledger open). The outage's `serve` mark (faults/owners.py)."""
        return await self.leader()

    async def wait_stream_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if await self.stream_ready():
                    return True
            except Exception:  # not ready: the cluster may be electing
                pass
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.2)
