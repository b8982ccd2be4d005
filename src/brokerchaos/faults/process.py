"""Process faults: what the cluster does to a node's process (signals to the processes we
started, or an external cluster file's hooks)."""
from __future__ import annotations

import asyncio
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field

from .base import Fault, Target
from .registry import FAULTS


@FAULTS.register("none")
class NoFault(Fault):
    description = "control run: no fault"
    recoverable = False

    async def inject(self, target: Target) -> None:
        pass

    async def heal(self) -> None:
        pass


class _Restarting(Fault):
    """Heal = start every node this fault took down that is not running."""

    async def heal(self) -> None:
        cluster = self.ctx.cluster
        while self.nodes:
            n = self.nodes[0]
            if not cluster.alive(n):
                await asyncio.to_thread(cluster.start_node, n)
            self.nodes.pop(0)


@FAULTS.register("kill")
class Kill(_Restarting):
    description = "SIGKILL the target's broker process; heal starts it again on the same data"
    needs = frozenset({"kill", "start"})

    async def inject(self, target: Target) -> None:
        for n in target.nodes:
            self.ctx.cluster.kill(n)
            self.nodes.append(n)


@FAULTS.register("kill-wipe")
class KillWipe(_Restarting):
    description = ("SIGKILL the target and delete its data (its disk lost); heal starts it again empty "
                   "(Pulsar bookies: bookies[2] is a whole write quorum with Qw 2)")
    needs = frozenset({"kill", "start", "wipe"})

    async def inject(self, target: Target) -> None:
        for n in target.nodes:
            self.ctx.cluster.kill(n)
            self.nodes.append(n)
            self.ctx.cluster.wipe(n)


class StopParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    timeout: float = Field(30.0, gt=0, le=600, description="seconds to wait for a clean exit before SIGKILL")


@FAULTS.register("stop")
class Stop(_Restarting):
    description = "graceful shutdown (SIGTERM, wait for exit; SIGKILL after params.timeout); heal starts it again"
    Params = StopParams
    needs = frozenset({"stop", "start"})

    async def inject(self, target: Target) -> None:
        clean = []
        for n in target.nodes:
            self.nodes.append(n)
            clean.append(await asyncio.to_thread(self.ctx.cluster.stop_node, n, self.p.timeout))
        self.effect["clean_exit"] = clean


@FAULTS.register("pause")
class Pause(Fault):
    description = "SIGSTOP the target's process group (alive but silent); heal sends SIGCONT"
    needs = frozenset({"pause"})

    async def inject(self, target: Target) -> None:
        for n in target.nodes:
            self.nodes.append(n)
            self.ctx.cluster.pause(n)

    async def heal(self) -> None:
        while self.nodes:
            n = self.nodes[0]
            if self.ctx.cluster.alive(n):
                self.ctx.cluster.resume(n)
            self.nodes.pop(0)


class RestartParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    graceful: bool = Field(False, description="stop with SIGTERM instead of SIGKILL")
    down: float = Field(0.0, ge=0, le=600, description="seconds to stay down before starting again")
    timeout: float = Field(30.0, gt=0, le=600, description="graceful stop: seconds before SIGKILL")


@FAULTS.register("restart")
class Restart(_Restarting):
    description = "kill (or params.graceful: stop) the target, then start it again on the same data at once"
    Params = RestartParams
    needs = frozenset({"kill", "start"})

    @classmethod
    def needs_for(cls, params) -> frozenset[str]:
        return frozenset({"stop", "start"}) if getattr(params, "graceful", False) else cls.needs

    async def inject(self, target: Target) -> None:
        cluster = self.ctx.cluster
        for n in target.nodes:
            self.nodes.append(n)
            if self.p.graceful:
                await asyncio.to_thread(cluster.stop_node, n, self.p.timeout)
            else:
                cluster.kill(n)
        if self.p.down:
            await asyncio.sleep(self.p.down)
        await self.heal()


class CommandParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    inject: str = Field(..., description="hook of the external cluster file run on each target node")
    heal: Optional[str] = Field(None, description="hook run on each of them to heal (none: nothing to heal)")


@FAULTS.register("command")
class Command(Fault):
    description = ("external clusters: run the target nodes' hook params.inject from the cluster file "
                   "(an iptables snippet, docker network disconnect, …); heal runs params.heal")
    Params = CommandParams
    needs = frozenset({"hooks"})

    @classmethod
    def check(cls, params, node_names, offers, scenario) -> None:
        from ..systems.external import load
        from .targets import TargetError

        ext = load(scenario.external)
        for hook in filter(None, (params.inject, params.heal)):
            missing = [n for n in ext.nodes if not ext.has(n, hook)]
            if missing:
                raise TargetError(f"hook {hook!r} is missing for {', '.join(missing)} in the cluster file",
                                  "params")

    async def inject(self, target: Target) -> None:
        for n in target.nodes:
            self.nodes.append(n)
            await asyncio.to_thread(self.ctx.cluster.run_hook, n, self.p.inject)

    async def heal(self) -> None:
        while self.nodes:
            if self.p.heal:
                await asyncio.to_thread(self.ctx.cluster.run_hook, self.nodes[0], self.p.heal)
            self.nodes.pop(0)
