"""Targets: which node(s) a fault hits, resolved against the live cluster when it fires."""
from __future__ import annotations

from . import TARGETS
from .base import FaultContext


@TARGETS.register("leader")
async def leader(ctx: FaultContext) -> list[str]:
    """the current leader of the scenario's stream/topic/queue"""
    return [await ctx.system.leader()]


@TARGETS.register("follower")
async def follower(ctx: FaultContext) -> list[str]:
    """one replica that is not the leader, chosen with the scenario's seed"""
    replicas = await ctx.system.replicas()
    lead = replicas[0]
    others = sorted(r for r in replicas if r != lead)
    return [ctx.rng.choice(others)] if others else []


@TARGETS.register("random")
async def random_node(ctx: FaultContext) -> list[str]:
    """any broker node, chosen with the scenario's seed"""
    return [ctx.rng.choice(ctx.system.node_names)]


async def resolve(name: str, ctx: FaultContext) -> list[str]:
    if name in TARGETS:
        return await TARGETS.get(name)(ctx)
    if name in ctx.system.node_names:
        return [name]
    raise ValueError(f"unknown target {name!r}")
