"""Graceful operations: what operators do to a healthy cluster on purpose — move a leader,
restart every node in turn. The Pulsar availability seed's point is that these cause
outages too, short ones whose lengths follow the client's reconnect back-off."""
from __future__ import annotations

import asyncio
import time
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..systems.base import COORDINATOR, ELECT, EVERY, LAMEDUCK, STEPDOWN, UNLOAD
from . import effect
from .base import Fault, Target
from .effect import INJECTED
from .process import _Restarting
from .registry import FAULTS
from .targets import TargetError, names


class StepdownParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["leader", "coordinator"] = Field(
        "leader", description="what the target gives up: the stream's leadership, or the cluster's coordinator role")
    wait: float = Field(30.0, gt=0, le=300, description="seconds to wait for another node to hold the role")
    every: bool = Field(False, description="role leader: every leadership the target holds, not only the run's "
                                           "first topic's (NATS: a step-down of each stream it leads; RabbitMQ's "
                                           "drain moves them all anyway)")


@FAULTS.register("stepdown")
class Stepdown(Fault):
    description = ("move leadership off the target without a crash (NATS: leader step-down; RabbitMQ: drain "
                   "the node into maintenance mode; Redis: SENTINEL FAILOVER; Pulsar: topic unload, the owner "
                   "stays); heal undoes what stays (RabbitMQ: revive)")
    family = "graceful"
    observes = ("the role held by another node once the operation is done; where the system's step-down keeps "
                "the holder (Pulsar's topic unload), the stream's description changed (a new ledger: closed and "
                "opened again)")
    Params = StepdownParams
    needs = frozenset({STEPDOWN})
    # the outage starts with the operation, not when it has finished (a drain takes seconds)
    opens_window_first = True

    async def observe(self, stage: str):
        if stage != INJECTED:
            return None
        moved, target = self.effect.get("moved_to"), ",".join(self.target.nodes if self.target else [])
        if moved:
            return effect.observed(f"{self.p.role} {target} -> {moved} in {self.effect.get('moved_s')} s")
        before, after = self.effect.get("described_before"), self.effect.get("described_after")
        if not getattr(self.ctx.roles, "stepdown_moves", True):
            return effect.judge(before != after, f"the stream's description {before} -> {after}")
        return effect.not_observed(f"the {self.p.role} stayed on {target} for {self.effect.get('moved_s')} s")

    @classmethod
    def check_target(cls, params, target: str) -> None:
        """A step-down moves a role off the node holding it: a target that names nodes
        holding none asks a system's step-down what it refuses (NATS, Redis, RabbitMQ and
        Pulsar all do)."""
        if params.every:
            return
        named = names(target)
        if "all" in named:
            raise TargetError("a step-down moves a role one node holds, and 'all' names the others too "
                              "(params.every: true steps down whatever each node leads)", "target")
        if params.role == "leader" and named & {"follower", "followers"}:
            raise TargetError("a follower holds no leadership to step down (target the leader or a node)",
                              "target")

    @classmethod
    def needs_for(cls, params) -> frozenset[str]:
        role, every = getattr(params, "role", "leader"), getattr(params, "every", False)
        return cls.needs | ({COORDINATOR} if role == "coordinator" else set()) | ({EVERY} if every else set())

    async def _holder(self) -> str:
        roles = self.ctx.roles
        return await (roles.coordinator() if self.p.role == "coordinator" else roles.leader())

    async def inject(self, target: Target) -> None:
        self.effect["verbs"] = []
        keeps = not getattr(self.ctx.roles, "stepdown_moves", True)
        if keeps:
            self.effect["described_before"] = await _described(self.ctx.roles)
        for n in target.nodes:
            self.nodes.append(n)
            if self.p.every and self.p.role == "leader":
                moved = await self.ctx.roles.stepdown_every(n)
                self.effect["verbs"].append(moved.pop("verb"))
                self.effect.setdefault("every", {})[n] = moved
            else:
                self.effect["verbs"].append(await self.ctx.roles.stepdown(n, self.p.role))
        # where the role went, and how long that took: bounded, and a role that stayed put
        # is a finding, not a failure of the harness
        t0 = time.monotonic()
        holder = None
        moves = getattr(self.ctx.roles, "stepdown_moves", True)
        while time.monotonic() - t0 < self.p.wait:
            try:
                holder = await asyncio.wait_for(self._holder(), 5.0)
                if holder not in target.nodes or (not moves and await self.ctx.roles.stream_ready()):
                    break
            except Exception:  # no holder while electing
                holder = None
            await asyncio.sleep(0.1)
        self.effect["moved_to"] = holder if holder not in target.nodes else None
        self.effect["moved_s"] = round(time.monotonic() - t0, 3)
        if keeps:
            self.effect["described_after"] = await _described(self.ctx.roles)
        back = not moves and holder is not None  # the holder took its clients back
        # the end of the seeds' downtime: here, not after the heal (which only undoes a drain)
        # (briefly: a drained RabbitMQ node leaves its queues short of a member until revived,
        # and then the heal's own watcher records it)
        if (self.effect["moved_to"] or back) and await self.ctx.roles.wait_stream_ready(timeout=5.0):
            self.ctx.record("ready", ",".join(target.nodes),
                            f"stepdown {self.p.role}: now {holder}, stream ready", self.ctx.uid)
            self.ready_recorded = True

    async def heal(self) -> None:
        while self.nodes:
            await self.ctx.roles.step_back(self.nodes[0])
            self.nodes.pop(0)


class LameDuckParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    timeout: float = Field(
        180.0, gt=0, le=1800, description="seconds to wait for the server to exit on its own (its "
                                          "lame_duck_duration, 2 minutes by default, and a margin) before SIGKILL")


@FAULTS.register("lame-duck")
class LameDuck(_Restarting):
    description = ("NATS lame-duck mode, the operator's way out before an upgrade: the target hands its stream "
                   "leaderships over, stops taking clients, closes its own over lame_duck_duration (options) "
                   "and exits; heal starts it again on the same data")
    family = "graceful"
    observes = ("the target's process gone on its own (lame duck: it exits after handing over), and after the "
                "heal a new process running")
    Params = LameDuckParams
    needs = frozenset({LAMEDUCK, "start"})

    def inject_bound(self, n_nodes: int) -> float:
        return n_nodes * (self.p.timeout + 15)

    async def inject(self, target: Target) -> None:
        """In effect at the first signal (the hand-over and the shedding are what is
        measured); done when the last target has exited."""
        clean = []
        led = getattr(self.ctx.roles, "led_by", None)
        for n in target.nodes:
            if led is not None:  # what it hands over (NATS: the streams it leads)
                self.effect.setdefault("led", {})[n] = await _led(led, n)
            self.hold([n])
            self.effect_ns = self.effect_ns or time.monotonic_ns()
            clean.append(await asyncio.to_thread(self.ctx.cluster.lame_duck, n, self.p.timeout))
        self.effect["clean_exit"] = clean
        self.effect["exit_ms"] = round((time.monotonic_ns() - self.effect_ns) / 1e6, 1)


async def _described(roles) -> dict:
    """The stream's description now (bounded; what went wrong, if it did not answer)."""
    try:
        return await asyncio.wait_for(roles.describe(), 5.0)
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"[:120]}


async def _led(led_by, node: str):
    """How many streams the node leads, or why that is not known (bounded)."""
    try:
        return len(await asyncio.wait_for(led_by(node), 5.0))
    except Exception as e:
        return f"{type(e).__name__}: {e}"[:120]


class UnloadParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    scope: Literal["bundle", "namespace"] = Field(
        "bundle", description="what is closed: the bundle holding the run's first topic (with every topic of "
                              "it), or the whole namespace")
    split: bool = Field(False, description="split the bundle in two first (scope bundle); both halves unloaded")
    wait: float = Field(30.0, gt=0, le=300, description="seconds to wait for the first topic to be served again")


@FAULTS.register("unload")
class Unload(Fault):
    description = ("close every topic of a group at once, to be served again where the cluster puts them: "
                   "Pulsar's namespace-bundle unload, split or namespace unload (load balancing, a broker's "
                   "graceful shutdown); asked of the target's admin API. Nothing to heal")
    family = "graceful"
    observes = ("the first topic closed and opened again (another owner, or the same with a new ledger in its "
                "description), and served again within params.wait")
    Params = UnloadParams
    needs = frozenset({UNLOAD})
    opens_window_first = True  # the outage starts with the request, which returns once all is closed

    async def observe(self, stage: str):
        if stage != INJECTED:
            return None
        e = self.effect
        if "owner_after" not in e:
            return effect.not_healed(f"not served again within {self.p.wait:.0f} s (owner before: "
                                     f"{e.get('owner_before')})")
        moved = e["owner_before"] != e["owner_after"]
        changed = e.get("described_before") != e.get("described_after")
        return effect.judge(moved or changed, f"owner {e['owner_before']} -> {e['owner_after']}"
                            + ("" if moved else f", the stream's description {e.get('described_before')} -> "
                                                f"{e.get('described_after')}"))

    async def inject(self, target: Target) -> None:
        roles = self.ctx.roles
        self.effect["described_before"] = await _described(roles)
        self.effect["owner_before"] = await _serving(roles)
        self.effect["verb"] = await roles.unload(target.nodes[0], self.p.scope, self.p.split)
        self.nodes.append(target.nodes[0])
        # when the first topic is served again, asked without loading it (Roles.serving): the
        # clients' own reconnects bring their topics back, not the harness's looks
        t0 = time.monotonic()
        while time.monotonic() - t0 < self.p.wait:
            after = await _serving(roles)
            if not after.startswith("none"):
                self.effect.update(owner_after=after, served_s=round(time.monotonic() - t0, 3),
                                   described_after=await _described(roles))
                self.ctx.record("ready", target.nodes[0], f"unload {self.p.scope}: first topic served by {after}",
                                self.ctx.uid)
                self.ready_recorded = True
                return
            await asyncio.sleep(0.1)
        self.effect["not_served_within_s"] = self.p.wait

    async def heal(self) -> None:
        self.nodes.clear()


async def _serving(roles) -> str:
    try:
        return await asyncio.wait_for(roles.serving(), 5.0)
    except Exception as e:
        return f"none ({type(e).__name__}: {e})"[:200]


class ElectParams(BaseModel):
    model_config = ConfigDict(extra="forbid")


@FAULTS.register("elect-leaders")
class ElectLeaders(Fault):
    description = ("a preferred-leader election over every topic of the run (Kafka: each partition led again by "
                   "its first replica, what an operator runs after a rolling restart); the target is where the "
                   "window is recorded. Nothing to heal")
    family = "graceful"
    example_target = "all"
    observes = ("some partition led again by its preferred replica (what the controller moved; none moved: "
                "every one was led by it already, no effect)")
    Params = ElectParams
    needs = frozenset({ELECT})
    opens_window_first = True

    async def observe(self, stage: str):
        if stage != INJECTED:
            return None
        moved, errors = self.effect.get("moved") or {}, self.effect.get("errors") or {}
        words = (f"moved: {', '.join(f'{k} {v}' for k, v in moved.items())}" if moved else
                 f"nothing moved: each of {self.effect.get('partitions')} partitions was led by its preferred replica")
        return effect.judge(bool(moved), words + (f"; errors: {errors}" if errors else ""))

    async def inject(self, target: Target) -> None:
        self.effect.update(await self.ctx.roles.elect_leaders())
        self.nodes.append(target.nodes[0])

    async def heal(self) -> None:
        self.nodes.clear()


class RollingParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    timeout: float = Field(30.0, gt=0, le=600, description="seconds to wait for a clean exit before SIGKILL")
    whole_timeout: float = Field(120.0, gt=0, le=1800,
                                 description="seconds to wait, after each start, for the cluster and stream to "
                                             "be whole before the next node")
    pause: float = Field(0.0, ge=0, le=600, description="seconds to wait between one node whole and the next stop")


@FAULTS.register("rolling-restart")
class RollingRestart(_Restarting):
    description = ("every target node in turn (target order; `all` by default in scenarios): graceful stop, "
                   "start, wait until the cluster and the stream are whole (bounded), next. One window per "
                   "node in the history; a node that does not come back whole ends the round")
    family = "graceful"
    observes = ("each target node's process replaced by a new one in turn (its pid before the stop gone, "
                "another running after the start) and the cluster whole again after each step")
    Params = RollingParams
    needs = frozenset({"stop", "start"})
    # the fault records a window per node itself, not one for the whole round
    own_windows = True

    async def observe(self, stage: str):
        if stage != INJECTED:
            return None
        steps = self.effect.get("steps") or []
        looks = [effect.judge(s.get("pid_after") is not None and s.get("pid_after") != s.get("pid_before"),
                              f"{s['node']} pid {s.get('pid_before')} -> {s.get('pid_after')}") for s in steps]
        looks += [effect.not_healed(f"{s['node']} not whole: {s['not_whole']}") for s in steps if "not_whole" in s]
        left = [n for n in (self.target.nodes if self.target else []) if n not in {s["node"] for s in steps}]
        if left:
            looks.append(effect.not_observed(f"the round stopped before {', '.join(left)}"))
        return effect.combine(looks) or effect.not_observed("no step taken")

    _open: tuple | None = None  # the step whose node is down: (node, label, window)

    def inject_bound(self, n_nodes: int) -> float:
        return n_nodes * (self.p.timeout + self.p.whole_timeout + self.p.pause + 60)

    async def inject(self, target: Target) -> None:
        cluster = self.ctx.cluster
        steps: list[dict] = []
        self.effect["steps"] = steps
        total = len(target.nodes)
        for i, n in enumerate(target.nodes, 1):
            if i > 1 and self.p.pause:
                await asyncio.sleep(self.p.pause)
            wid = self.ctx.sub_window(i)
            label = f"rolling-restart {n} ({i} of {total})"
            step: dict = {"node": n, "window": wid}
            steps.append(step)
            self.ctx.watch(wid)
            t_stop = self.ctx.record("fault", n, label, wid)
            self.nodes.append(n)
            self._open = (n, label, wid)
            step["pid_before"] = effect.pid_of(self, n)
            step["clean_exit"] = await asyncio.to_thread(cluster.stop_node, n, self.p.timeout)
            await asyncio.to_thread(cluster.start_node, n)
            step["pid_after"] = effect.pid_of(self, n)
            self.nodes.remove(n)
            self._open = None
            t_start = self.ctx.record("heal", n, f"{label}: started", wid)
            self.ctx.watch(None)
            step["down_ms"] = round((t_start - t_stop) / 1e6, 3)
            whole = await self._whole()
            if whole is None:
                t_ready = self.ctx.record("ready", n, f"{label}: cluster whole again", wid)
                step["ready_ms"] = round((t_ready - t_stop) / 1e6, 3)
                continue
            # taking the next node down now could cost the quorum: stop the round here
            step["not_whole"] = whole
            self.effect["stopped"] = f"{n} not whole within {self.p.whole_timeout:.0f}s: {whole}"
            break

    async def _whole(self) -> str | None:
        """None once every node runs, the cluster says it is whole and the stream is ready;
        else what was last seen when the bound ran out."""
        cluster, roles = self.ctx.cluster, self.ctx.roles
        deadline = time.monotonic() + self.p.whole_timeout
        last = "not asked"
        while time.monotonic() < deadline:
            try:
                down = await asyncio.to_thread(cluster.not_running)
                if down:
                    last = f"not running: {', '.join(down)}"
                else:
                    ok, last = await asyncio.wait_for(roles.whole(), 10.0)
                    if ok and await asyncio.wait_for(roles.stream_ready(), 10.0):
                        return None
                    if ok:
                        last = "stream not ready"
            except Exception as e:  # electing, or still starting
                last = f"{type(e).__name__}: {e}"[:200]
            await asyncio.sleep(0.2)
        return last

    async def heal(self) -> None:
        # a round cut short (the run ended, the harness was interrupted) leaves no node down
        await super().heal()
        if self._open:  # the step's window closes with this start
            n, label, wid = self._open
            self._open = None
            self.ctx.record("heal", n, f"{label}: started (round cut short)", wid)
