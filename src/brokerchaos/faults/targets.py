"""Targets: which node(s) a fault hits, resolved against the live cluster when it fires.

A target expression is built from role names (the TARGETS registry) and node names:
- `leader`, `n2`: one role or node;
- `n1,n2` or `leader,client-node`: the union;
- `followers[1]`: n of a role, chosen with the scenario's seed;
- `n1|n2,n3` (partitions only): groups; one group alone (`leader`) means it against the rest.
`peers` (every node not targeted) and `clients` (the client host) exist only where a fault
takes a second set, as in `isolate-from`'s `from`.
"""
from __future__ import annotations

import re
from typing import Optional

from .base import FaultContext, Target
from .registry import TARGETS

RELATIVE = ("peers", "clients")
_TERM = re.compile(r"^([a-z][a-z0-9-]*)(?:\[(\d+)\])?$")


class TargetError(ValueError):
    def __init__(self, msg: str, field: str = "target") -> None:
        super().__init__(msg)
        self.field = field


@TARGETS.register("leader")
async def leader(ctx: FaultContext) -> list[str]:
    """the current leader of the scenario's stream/topic/queue"""
    return [await ctx.roles.leader()]


@TARGETS.register("followers")
async def followers(ctx: FaultContext) -> list[str]:
    """every replica that is not the leader"""
    replicas = await ctx.roles.replicas()
    return sorted(r for r in replicas[1:] if r != replicas[0])


@TARGETS.register("follower")
async def follower(ctx: FaultContext) -> list[str]:
    """one replica that is not the leader, chosen with the scenario's seed"""
    others = await followers(ctx)
    return [ctx.rng.choice(others)] if others else []


@TARGETS.register("random")
async def random_node(ctx: FaultContext) -> list[str]:
    """any broker node, chosen with the scenario's seed"""
    return [ctx.rng.choice(ctx.cluster.node_names)]


@TARGETS.register("all")
async def all_nodes(ctx: FaultContext) -> list[str]:
    """every broker node"""
    return list(ctx.cluster.node_names)


@TARGETS.register("minority")
async def minority(ctx: FaultContext) -> list[str]:
    """a random minority of the nodes ((n-1)/2 of them), chosen with the scenario's seed"""
    names = list(ctx.cluster.node_names)
    return sorted(ctx.rng.sample(names, (len(names) - 1) // 2))


@TARGETS.register("client-node")
async def client_node(ctx: FaultContext) -> list[str]:
    """the node(s) the workload's producers are connected to when the fault fires"""
    nodes = sorted(set(ctx.client_nodes()))
    if not nodes:
        raise LookupError("no producer is connected to a node right now")
    return nodes


@TARGETS.register("consumer-node")
async def consumer_node(ctx: FaultContext) -> list[str]:
    """the node(s) the live consumers are connected to when the fault fires (MQTT's receiver)"""
    nodes = sorted(set(ctx.roles.consumer_nodes()))
    if not nodes:
        raise LookupError("no live consumer is connected to a node right now")
    return nodes


@TARGETS.register("consumers")
async def consumers(ctx: FaultContext) -> list[str]:
    """every running member of workload.group (consumers[2]: two, chosen with the seed)"""
    group = ctx.group()
    if group is None:
        raise LookupError("no consumer group in this run (workload.group)")
    names = group.names()
    if not names:
        raise LookupError("no member of the consumer group is running")
    return names


@TARGETS.register("consumer")
async def consumer(ctx: FaultContext) -> list[str]:
    """one running member of workload.group, chosen with the scenario's seed"""
    return [ctx.rng.choice(await consumers(ctx))]


@TARGETS.register("holding-consumer")
async def holding_consumer(ctx: FaultContext) -> list[str]:
    """the member of workload.group holding its work in hand (workload.group.hold_after: the
    first to have processed that many messages, in its first incarnation), while it holds"""
    group = ctx.group()
    if group is None:
        raise LookupError("no consumer group in this run (workload.group)")
    name = group.holder()
    if name is None:
        raise LookupError("no member of the consumer group is holding its work (workload.group.hold_after)")
    return [name]


CONSUMER_TARGETS = ("consumer", "consumers", "holding-consumer")


@TARGETS.register("group-coordinator")
async def group_coordinator(ctx: FaultContext) -> list[str]:
    """the node coordinating workload.group (Kafka: its group coordinator, the leader of its
    __consumer_offsets partition; NATS: its durable consumer's leader; Redis: the primary)"""
    group = ctx.group()
    if group is None:
        raise LookupError("no consumer group in this run (workload.group)")
    return [await ctx.roles.group_coordinator(group.spec.name)]


@TARGETS.register("txn-coordinator")
async def txn_coordinator(ctx: FaultContext) -> list[str]:
    """the node coordinating the first producer's transactions (workload.transactions; Kafka:
    the leader of its transactional id's __transaction_state partition)"""
    return [await ctx.roles.txn_coordinator()]


@TARGETS.register("coordinator")
async def coordinator(ctx: FaultContext) -> list[str]:
    """the cluster's coordinator (NATS: the JetStream meta leader; Kafka: the controller)"""
    return [await ctx.roles.coordinator()]


@TARGETS.register("bookies")
async def bookies(ctx: FaultContext) -> list[str]:
    """the storage nodes of the stream's current data (Pulsar: the current ledger's ensemble);
    bookies[2]: two of them, chosen with the seed"""
    return await ctx.roles.ensemble()


@TARGETS.register("bookie")
async def bookie(ctx: FaultContext) -> list[str]:
    """one bookie of the current ledger's ensemble, chosen with the seed"""
    return [ctx.rng.choice(await ctx.roles.ensemble())]


def parse(expr: str, groups: bool = False) -> list[list[tuple[str, Optional[int]]]]:
    parts = expr.split("|")
    if len(parts) > 1 and not groups:
        raise TargetError(f"groups ({expr!r}) are for partitions only")
    out = []
    for part in parts:
        terms = []
        for raw in part.split(","):
            m = _TERM.match(raw.strip())
            if not m:
                raise TargetError(f"cannot read {raw.strip()!r} in {expr!r}")
            n = int(m.group(2)) if m.group(2) is not None else None
            if n is not None and n < 1:
                raise TargetError(f"{raw.strip()!r}: a count must be at least 1")
            terms.append((m.group(1), n))
        out.append(terms)
    return out


def names(expr: str) -> set[str]:
    """The names an expression uses, in any of its groups (`followers[1]` is `followers`)."""
    return {name for part in parse(expr, groups=True) for name, _ in part}


def check_expression(expr: str, node_names: list[str], offers: frozenset[str], groups: bool = False,
                     relative: bool = False, field: str = "target") -> None:
    """Static check: every name exists and the deployment offers the roles it names."""
    try:
        parsed = parse(expr, groups)
    except TargetError as e:
        raise TargetError(str(e), field) from None
    for part in parsed:
        for name, _ in part:
            known = name in TARGETS or name in node_names or (relative and name in RELATIVE)
            if not known:
                names = TARGETS.names() + node_names + (list(RELATIVE) if relative else [])
                raise TargetError(f"unknown target {name!r} (known: {', '.join(names)})", field)
            if name == "coordinator" and "coordinator" not in offers:
                raise TargetError("this system has no coordinator", field)
            if name in ("bookie", "bookies") and "ensemble" not in offers:
                raise TargetError(f"{name!r}: this system has no storage ensemble (Pulsar's bookies)", field)
    if groups:
        mentioned = [n for part in parsed for n, c in part if n in node_names and c is None]
        if len(mentioned) != len(set(mentioned)):
            raise TargetError(f"a node is in two groups of {expr!r}", field)


async def _term(name: str, n: Optional[int], ctx: FaultContext, targeted: list[str]) -> list[str]:
    if name == "peers":
        got = [x for x in ctx.cluster.node_names if x not in targeted]
    elif name in TARGETS:
        got = await TARGETS.get(name)(ctx)
    elif name in ctx.cluster.host_names:
        got = [name]
    else:
        raise LookupError(f"unknown target {name!r}")
    if n is not None and n < len(got):
        got = sorted(ctx.rng.sample(sorted(got), n))
    return got


async def resolve_set(expr: str, ctx: FaultContext, targeted: Optional[list[str]] = None) -> list[str]:
    """Nodes named by a single-group expression (`clients` is left to the caller)."""
    out: list[str] = []
    for name, n in parse(expr)[0]:
        if name == "clients":
            continue
        for node in await _term(name, n, ctx, targeted or []):
            if node not in out:
                out.append(node)
    return out


async def resolve(expr: str, ctx: FaultContext, groups: bool = False) -> Target:
    if not groups:
        nodes = await resolve_set(expr, ctx)
        if not nodes:
            raise LookupError(f"target {expr!r} matched no node")
        return Target(nodes, [nodes])
    out: list[list[str]] = []
    taken: set[str] = set()
    for part in parse(expr, groups=True):
        g: list[str] = []
        for name, n in part:
            for node in await _term(name, n, ctx, []):
                if node not in taken and node not in g:
                    g.append(node)
        taken.update(g)
        out.append(g)
    rest = [n for n in ctx.cluster.node_names if n not in taken]
    if rest:
        out.append(rest)
    out = [g for g in out if g]
    if len(out) < 2:
        raise LookupError(f"partition {expr!r} leaves every node in one group")
    return Target(out[0], out)
