"""Process faults: what the cluster does to a node's process (signals to the processes we
started, or an external cluster file's hooks)."""
from __future__ import annotations

import asyncio
import time
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from ..sandbox.probe import proc_state
from ..sandbox.process import wait_pid_stopped
from ..systems.cluster import PAUSE_S
from . import effect
from .base import Fault, Target
from .effect import HEALED, INJECTED
from .registry import FAULTS


@FAULTS.register("none")
class NoFault(Fault):
    description = "control run: no fault"
    family = None
    observes = "nothing: a control run has no fault window"
    recoverable = False

    async def observe(self, stage: str):
        return None

    async def inject(self, target: Target) -> None:
        pass

    async def heal(self) -> None:
        pass


class _Restarting(Fault):
    """Heal = start every node this fault took down that is not up (the cluster's own look,
    `down_why`: an external node must also answer at its address, whatever its hook says);
    a node the start did not bring up fails the heal (the cluster's `start_node` raises).

    Its look: the processes held before the inject are gone (an external node no longer
    answers), and after the heal each node runs again as a new process."""

    observes = ("the target's process gone (its pid no longer running; an external node no longer answering), "
                "and after the heal a new process running")
    starts_at_heal = True

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.pids_before: dict[str, Optional[int]] = {}  # the processes the inject took down
        if self.read_after():
            self.readable = asyncio.Event()

    def hold(self, nodes: list[str]) -> None:
        """Before taking them down: the nodes the heal starts again, and their processes now."""
        self.nodes.extend(nodes)
        self.pids_before.update(effect.pids(self, nodes))

    async def observe(self, stage: str):
        hit = list(self.pids_before)
        if stage == INJECTED:
            return await effect.exited(self, hit, self.pids_before)
        if stage == HEALED:
            left = self.effect.get("left_to_another_fault", [])
            if left and all(n in left for n in hit):
                return effect.not_known(f"{', '.join(left)} left down: another fault of the run still held it")
            return await effect.restarted(self, [n for n in hit if n not in left], self.pids_before)
        return None

    def stagger_s(self) -> float:
        """Seconds between starting one node and the next at the heal (0: one after another)."""
        return 0.0

    def read_after(self) -> int:
        """How many nodes the heal starts before the read may begin (0: all of them)."""
        return 0

    def heal_bound(self) -> float:
        return super().heal_bound() + self.stagger_s() * max(0, len(self.nodes) - 1)

    async def heal(self) -> None:
        cluster, group = self.ctx.cluster, self.ctx.group()
        done = 0
        while self.nodes:
            n = self.nodes[0]
            started = False
            if group is not None and group.owns(n):
                if group.down(n):  # a group member: another process in its place
                    await group.start_member(n)
                    started = True
            elif self.ctx.held_elsewhere(n):  # another fault of the run still holds it down: its heal starts it
                self.effect.setdefault("left_to_another_fault", []).append(n)
            elif await asyncio.to_thread(cluster.down_why, n):
                await asyncio.to_thread(cluster.start_node, n)
                started = True
                note = cluster.start_notes.pop(n, None)
                if note:
                    self.effect.setdefault("start_waited", {})[n] = note
            if started and self.effect_ns is not None:  # from the fault taking effect
                self.effect.setdefault("started_ms", {})[n] = round((time.monotonic_ns() - self.effect_ns) / 1e6, 1)
            self.nodes.pop(0)
            done += 1
            if self.readable is not None and done >= self.read_after():
                self.readable.set()  # the read may begin with the rest still down
            if started and self.nodes and self.stagger_s():  # a staged return: the next one later
                await asyncio.sleep(self.stagger_s())


async def kill(fault: Fault, nodes: list[str]) -> None:
    """SIGKILL the nodes: in effect at the signal; `exit_ms` in the window's effect is how
    long until every process was gone (a JVM's teardown)."""
    group = fault.ctx.group()
    members = [n for n in nodes if group is not None and group.owns(n)]
    t = None
    for n in members:  # a consumer group's member processes (workload/group.py)
        t = t or await group.kill(n)
    rest = [n for n in nodes if n not in members]
    if rest:
        t = await fault.ctx.cluster.kill_nodes(rest) or t
    if t is not None:
        fault.effect_ns = t
        fault.effect["exit_ms"] = round((time.monotonic_ns() - t) / 1e6, 1)


async def stop(fault: Fault, nodes: list[str], timeout: float) -> list[bool]:
    """Stop the nodes gracefully, one after the other (whether each exited cleanly): in
    effect at the first SIGTERM, as the broker's own shutdown (a Kafka broker's controlled
    shutdown moving its leaders away: about 0.5 s) is part of what is tested; `exit_ms` is
    how long until the last one was down."""
    fault.effect_ns = time.monotonic_ns()
    clean = []
    group = fault.ctx.group()
    for n in nodes:
        if group is not None and group.owns(n):  # a member leaves the group (workload/group.py)
            await group.leave(n, timeout)
            clean.append(True)
            continue
        clean.append(await asyncio.to_thread(fault.ctx.cluster.stop_node, n, timeout))
    fault.effect["exit_ms"] = round((time.monotonic_ns() - fault.effect_ns) / 1e6, 1)
    return clean


class KillParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    stagger: float = Field(0.0, ge=0, le=3600, description="seconds between starting one killed node and the next "
                                                           "at the heal, in the order they were chosen (the Pulsar "
                                                           "seed's bookie1, then bookie3); 0: all at once")
    apart: float = Field(0.0, ge=0, le=600, description="seconds between killing one node and the next, in the order "
                                                        "they were chosen (what only the later ones acknowledged "
                                                        "meanwhile is theirs alone: the Pulsar seed's bookie3); "
                                                        "0: all at once")
    read_after: int = Field(0, ge=0, le=100, description="with a stagger: the read may begin once the heal has "
                                                         "started this many of the nodes; the others come back at "
                                                         "their stagger while it reads (the Pulsar seed's reader "
                                                         "between bookie1's return and bookie3's); 0: the read "
                                                         "waits for them all")

    @field_validator("read_after")
    @classmethod
    def _staged(cls, v: int, info: ValidationInfo) -> int:
        if v and not info.data.get("stagger"):
            raise ValueError("needs a stagger (the read begins between one start and the next)")
        return v


@FAULTS.register("kill")
class Kill(_Restarting):
    description = "SIGKILL the target's broker process; heal starts it again on the same data"
    family = "crash"
    acts_on_consumers = True
    needs = frozenset({"kill", "start"})
    Params = KillParams

    def stagger_s(self) -> float:
        return self.p.stagger

    def read_after(self) -> int:
        return self.p.read_after

    def inject_bound(self, n_nodes: int) -> float:
        return super().inject_bound(n_nodes) + self.p.apart * max(0, n_nodes - 1)

    async def inject(self, target: Target) -> None:
        self.hold(target.nodes)  # heal starts those not running, whatever happened
        if not self.p.apart:
            await kill(self, target.nodes)
            return
        first = None  # in effect at the first signal; each later one's in killed_ms
        for i, n in enumerate(target.nodes):
            if i:
                await asyncio.sleep(self.p.apart)
            await kill(self, [n])
            first = first or self.effect_ns
            if first is not None and self.effect_ns is not None:
                self.effect.setdefault("killed_ms", {})[n] = round((self.effect_ns - first) / 1e6, 1)
        self.effect_ns = first
        if first is not None:
            self.effect["exit_ms"] = round((time.monotonic_ns() - first) / 1e6, 1)


@FAULTS.register("kill-wipe")
class KillWipe(_Restarting):
    description = ("SIGKILL the target and delete its data (its disk lost); heal starts it again empty "
                   "(Pulsar bookies: bookies[2] is a whole write quorum with Qw 2)")
    family = "disk lost"
    needs = frozenset({"kill", "start", "wipe"})
    destroys_data = True

    async def inject(self, target: Target) -> None:
        self.hold(target.nodes)
        await kill(self, target.nodes)
        for n in target.nodes:
            self.ctx.cluster.wipe(n)


class StopParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    timeout: float = Field(30.0, gt=0, le=600, description="seconds to wait for a clean exit before SIGKILL")


@FAULTS.register("stop")
class Stop(_Restarting):
    description = "graceful shutdown (SIGTERM, wait for exit; SIGKILL after params.timeout); heal starts it again"
    family = "crash"
    acts_on_consumers = True
    Params = StopParams
    needs = frozenset({"stop", "start"})

    async def inject(self, target: Target) -> None:
        self.hold(target.nodes)
        self.effect["clean_exit"] = await stop(self, target.nodes, self.p.timeout)


@FAULTS.register("pause")
class Pause(Fault):
    description = "SIGSTOP the target's process group (alive but silent); heal sends SIGCONT"
    family = "crash"
    acts_on_consumers = True
    observes = ("the target's process stopped (state T in /proc) during the window and running after the heal; "
                "not known on an external cluster (a paused process still accepts connections)")
    needs = frozenset({"pause"})

    async def observe(self, stage: str):
        if stage not in (INJECTED, HEALED) or self.target is None:
            return None
        # a node another fault of the run took down (before the pause, or since): its process
        # is gone, and what the pause did to it cannot be seen
        down = [n for n in self.target.nodes if self._taken(n)]
        paused = [n for n in self.target.nodes if n not in down]
        if not paused:
            return effect.not_known(f"{', '.join(down)} down when the pause came or since (another fault held it)")
        return effect.stopped(self, paused, stage)

    def _taken(self, n: str) -> bool:
        """Whether another fault of the run took `n`'s process since (or before) the pause:
        held down, killed (a zombie), or replaced by a new one."""
        if n in self.effect.get("down_when_paused", []) or n in getattr(self.ctx.cluster, "on_purpose", ()):
            return True
        then = self.effect.get("paused_pids", {}).get(n)
        return then is not None and (effect.pid_of(self, n) != then or proc_state(then) in (None, "Z"))

    async def inject(self, target: Target) -> None:
        group = self.ctx.group()
        cluster = self.ctx.cluster
        for n in target.nodes:
            if (group is None or not group.owns(n)) and n in getattr(cluster, "on_purpose", ()):
                # killed or cut by another fault of the run (a combined schedule): no process to stop
                self.effect.setdefault("down_when_paused", []).append(n)
                continue
            self.effect.setdefault("paused_pids", {})[n] = effect.pid_of(self, n)
            self.nodes.append(n)
            if group is not None and group.owns(n):  # a consumer group's member process
                t = group.pause(n)
                self.effect_ns = self.effect_ns or t
                pid = group.pid_of(n)  # in effect once each of its threads has stopped (as a node's)
                if pid is not None:
                    wait_pid_stopped(pid, PAUSE_S)
            else:
                self.ctx.cluster.pause(n)

    async def heal(self) -> None:
        group = self.ctx.group()
        while self.nodes:
            n = self.nodes[0]
            if group is not None and group.owns(n):
                group.resume(n)
            elif self.ctx.cluster.alive(n):
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
    family = "crash"
    acts_on_consumers = True
    observes = "the target's process replaced by a new one (another pid; an external node answering again)"
    Params = RestartParams
    needs = frozenset({"kill", "start"})

    async def observe(self, stage: str):
        if stage == INJECTED:
            return await effect.restarted(self, list(self.pids_before), self.pids_before, INJECTED)
        return None

    @classmethod
    def needs_for(cls, params) -> frozenset[str]:
        return frozenset({"stop", "start"}) if getattr(params, "graceful", False) else cls.needs

    async def inject(self, target: Target) -> None:
        self.hold(target.nodes)
        if self.p.graceful:
            await stop(self, target.nodes, self.p.timeout)
        else:
            await kill(self, target.nodes)
        if self.p.down:
            await asyncio.sleep(self.p.down)
        await self.heal()


class CommandParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    inject: str = Field(..., description="hook of the external cluster file run on each target node")
    heal: Optional[str] = Field(None, description="hook run on each of them to heal (none: nothing to heal)")
    takes_down: bool = Field(False, description="the inject hook takes the node down: the harness checks that it "
                                                "stops answering at its address, and answers again after the heal "
                                                "hook (else what a hook does is not known to the harness)")


@FAULTS.register("command")
class Command(Fault):
    description = ("external clusters: run the target nodes' hook params.inject from the cluster file "
                   "(an iptables snippet, docker network disconnect, …); heal runs params.heal")
    family = None
    example = {"inject": "isolate", "heal": "heal"}
    example_target = "all"
    observes = ("with params.takes_down, the node no longer answering at its address during the window and "
                "answering after the heal; otherwise not known (only the hook knows what it did)")
    Params = CommandParams
    needs = frozenset({"hooks"})

    async def observe(self, stage: str):
        nodes = self.target.nodes if self.target is not None else []
        if not self.p.takes_down:
            return effect.not_known(f"hook {self.p.inject!r} ran on {', '.join(nodes)}; what it did is the "
                                    f"hook's to know (params.takes_down: the harness checks a node it takes down)"
                                    ) if stage == INJECTED else None
        if stage == INJECTED:
            return await effect.exited(self, nodes, {})
        if stage == HEALED and self.p.heal:
            return await effect.restarted(self, nodes, {})
        return None

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
