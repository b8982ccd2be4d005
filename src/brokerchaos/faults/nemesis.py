"""One fault of a scenario, carried out during a run: wait for the trigger, then for each
planned window resolve the target, inject, record, and heal after the duration.

Every injected window is healed: after its duration, at the scenario's `heal` point, or in
the runner's `finally` (heal_active) whatever happened. The `fault`, `heal` and `ready`
rows go to the history with the resolved nodes and the window's id (its `window` column),
so the analysis pairs each heal with its own fault; run.json gets the precision of each window (trigger
to fault in effect, and the ack count at that moment).
"""
from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable, Optional

from ..history import Recorder
from ..scenario import FaultSpec
from .base import Fault, FaultContext
from .owners import OwnerWatch
from .registry import FAULTS
from .schedule import plan, rng_for
from .targets import parse, resolve

# Roles a target is resolved from with no random choice: the background view may answer for
# them (a seeded choice, `follower` or `random`, is drawn once, when the fault fires)
VIEWED = frozenset({"leader", "coordinator", "followers"})
VIEW_EVERY = 0.5  # seconds between two looks of the background view
VIEW_MAX_AGE_NS = 2_000_000_000  # an older view is not used: the fault waits for its lookup
FRESH_WAIT = 0.03  # how long a fault waits for its own lookup before it takes the view
# how long after the trigger a fault waits for the description asked then, before it takes
# the background look's: a description only says what the cluster was (Kafka's, on
# ZooKeeper under load, never answers this fast: it cost every Kafka window 30 ms)
ROLES_WAIT_NS = 10_000_000


class AckGate:
    """Counts first acks and wakes the nemeses waiting for the N-th one."""

    def __init__(self) -> None:
        self.acks = 0
        self._waiters: dict[int, list[tuple[asyncio.Event, list[int]]]] = {}

    def wait_for(self, n: int) -> tuple[asyncio.Event, list[int]]:
        ev = asyncio.Event()
        box = [0]
        if self.acks >= n:
            box[0] = time.monotonic_ns()
            ev.set()
        else:
            self._waiters.setdefault(n, []).append((ev, box))
        return ev, box

    def on_first_ack(self) -> None:
        self.acks += 1
        for ev, box in self._waiters.pop(self.acks, ()):
            box[0] = time.monotonic_ns()
            ev.set()


class Nemesis:
    def __init__(self, index: int, spec: FaultSpec, deployment, sandbox, seed: int, run_id: str,
                 recorder: Recorder, gate: AckGate, client_nodes: Callable[[], list[str]],
                 line: Callable[[str], None],
                 before_fault: Callable[[object, list[str]], Awaitable[None]],
                 group: Callable[[], object] = lambda: None, topics: int = 1) -> None:
        self.index = index
        self.topics = topics  # workload.topics: whose owners are watched (owners.py)
        self.spec = spec
        self.deployment = deployment
        self.sandbox = sandbox
        self.rec = recorder
        self.gate = gate
        self.line = line
        self.before_fault = before_fault
        self.cls: type[Fault] = FAULTS.get(spec.action)
        self.params = self.cls.Params.model_validate(spec.params)
        self.target_rng = rng_for(seed, run_id, index, "target")
        self.client_nodes = client_nodes
        self.group = group
        self.schedule = plan(spec, rng_for(seed, run_id, index, "schedule"))
        self.jitter_s = rng_for(seed, run_id, index, "trigger").uniform(0, spec.trigger.jitter) \
            if spec.trigger.jitter else 0.0
        self.active: Optional[tuple[Fault, dict]] = None
        self.pending: Optional[Fault] = None  # prepared, not injected yet
        self.stopping = False  # the write phase is over: finish the current window, start no other
        self.injecting: Optional[float] = None  # an inject under way: how long it may still take
        self.windows: list[dict] = []
        self.state: dict = {
            "index": index, "action": spec.action, "target": spec.target, "params": spec.params,
            "trigger": spec.trigger.model_dump(exclude_none=True), "duration": spec.duration,
            "schedule": self.schedule, "windows": self.windows, "nodes": [],
        }
        self._uid = 0
        self.task: Optional[asyncio.Task] = None  # start()
        self._watchers: list[asyncio.Task] = []
        self._owner_watch: Optional[OwnerWatch] = None  # the roles watched through the write (owners.py)
        self._owner_task: Optional[asyncio.Task] = None
        self._healing: Optional[asyncio.Future] = None
        # (target, when asked, the cluster's description then): kept current while the
        # nemesis waits for its trigger, so that a lookup slowed by the load (a stream-info
        # request behind thousands of acks) does not delay the fault
        self._view: Optional[tuple] = None
        # (when asked, the description): the same look for every target, so that the
        # window's `roles_before` does not hold the fault back either
        self._seen: Optional[tuple] = None
        self._viewer: Optional[asyncio.Future] = None

    @property
    def label(self) -> str:
        return f"{self.spec.action} {self.spec.target}"

    def _new_fault(self) -> Fault:
        self._uid += 1
        ctx = FaultContext(self.deployment, self.target_rng, self.sandbox, self.params, self.client_nodes,
                           uid=self.index * 1000 + self._uid, record=self._record, group=self.group,
                           watch=lambda w: self._owner_watch is not None and self._owner_watch.own_window(w))
        return self.cls(ctx)

    async def _prepared(self) -> Optional[Fault]:
        fault = self._new_fault()
        self.pending = fault
        try:
            await fault.prepare()
        except Exception as e:
            self.state["error"] = f"prepare: {type(e).__name__}: {e}"
            self.line(f"Fault: {self.label} FAILED to prepare: {self.state['error']}")
            await self._release()
            return None
        return fault

    async def _release(self) -> None:
        fault, self.pending = self.pending, None
        if fault is not None:
            try:
                await fault.heal()
            except Exception as e:
                self.state["release_error"] = f"{type(e).__name__}: {e}"

    def _viewable(self) -> bool:
        try:
            terms = [t for part in parse(self.spec.target, self.cls.takes_groups) for t in part]
        except ValueError:
            return False
        names = set(self.deployment.cluster.host_names)
        return (any(n in VIEWED for n, _ in terms)
                and all(c is None and (n in VIEWED or n in names) for n, c in terms))

    async def _keep_view(self) -> None:
        ctx = FaultContext(self.deployment, self.target_rng, self.sandbox, self.params, self.client_nodes,
                           group=self.group)
        viewable = self._viewable()
        # the flag as well as the cancel: Python 3.11's wait_for (in _roles) can swallow a
        # cancel that lands as its inner call completes, and the loop would go on for ever
        while self._viewer is not None:
            t = time.monotonic_ns()
            target = None
            if viewable:
                try:
                    async with asyncio.timeout(5):
                        target = await resolve(self.spec.target, ctx, groups=self.cls.takes_groups)
                except asyncio.CancelledError:
                    raise
                except Exception:  # the next look may answer; a view too old is not used
                    pass
            roles = await self._roles()
            if target is not None:
                self._view = (target, t, roles)
            if roles and "error" not in roles:
                self._seen = (t, roles)
            await asyncio.sleep(VIEW_EVERY)

    def start(self) -> asyncio.Task:
        """The nemesis as a task of the write phase (end_of_write() ends it)."""
        self.task = asyncio.create_task(self.run())
        return self.task

    async def end_of_write(self) -> None:
        """The write phase is over, and how this nemesis ends is its own rule: an operation
        under way finishes (a rolling restart, bounded by its inject bound); a window under
        way lasts its configured duration (no new window starts); anything else is
        cancelled now, and a trigger never reached is said in run.json."""
        task = self.task
        if task is None:
            return
        if not task.done() and self.injecting is not None:
            self.stopping = True
            await asyncio.wait([task], timeout=self.injecting)
        if not task.done() and (self.healing or self.active is not None and self.spec.duration is not None):
            self.stopping = True
            await asyncio.wait([task], timeout=(self.spec.duration or 0) + 5)
        if not task.done():
            if not self.windows:
                self.state["why"] = f"trigger not reached (acks: {self.gate.acks})"
            task.cancel()

    async def run(self) -> None:
        if self.spec.action == "none":
            return
        self._viewer = asyncio.ensure_future(self._keep_view())
        self._owner_watch = self._watch_owners()
        self.state["owner_looks"] = self._owner_watch.stats
        self._owner_task = asyncio.ensure_future(self._owner_watch.run())
        try:
            await self._run()
        finally:
            await self._stop_view()

    async def _stop_view(self) -> None:
        viewer, self._viewer = self._viewer, None
        if viewer is not None:
            viewer.cancel()
            await asyncio.gather(viewer, return_exceptions=True)

    async def _run(self) -> None:
        t_begin = time.monotonic()
        fault = await self._prepared()
        if fault is None:
            return
        t = self.spec.trigger
        if t.after_acks is not None:
            ev, box = self.gate.wait_for(t.after_acks)
            await ev.wait()
            t_trigger = box[0]
        else:
            await asyncio.sleep(max(0.0, t.at_seconds - (time.monotonic() - t_begin)))
            t_trigger = time.monotonic_ns()
        t_trigger += int(self.jitter_s * 1e9)  # the schedule's offsets count from here
        for k, offset in enumerate(self.schedule):
            if self.stopping:
                return
            if k > 0:
                fault = await self._prepared()
                if fault is None:
                    return
            t_start = t_trigger + int(offset * 1e9)
            wait = (t_start - time.monotonic_ns()) / 1e9
            if wait > 0:
                await asyncio.sleep(wait)
            if self.stopping:
                return
            self.pending = None
            ok = await self._window(k, t_start, fault)
            if k == len(self.schedule) - 1:
                await self._stop_view()  # no window left to aim
            if self.spec.duration is not None and self.active is not None:
                await asyncio.sleep(self.spec.duration)
                await self.heal_active("after duration")
            if not ok and self.spec.repeat is None:
                return

    async def _window(self, k: int, t_start: int, fault: Fault) -> bool:
        # the window's id in the history: unique in the run (a fault's index and its own count)
        w: dict = {"window": k, "id": fault.ctx.uid, "nodes": []}
        if self.spec.trigger.jitter:
            w["trigger_jitter_ms"] = round(self.jitter_s * 1e3, 3)
        self.windows.append(w)
        self.active = (fault, w)  # from here on, heal_active undoes whatever it did
        if self._owner_watch is not None and not self.cls.own_windows:  # those arm their own (OwnerWatch.own_window)
            self._owner_watch.arm(w)
        first = self.cls.opens_window_first or self.cls.own_windows
        described = asyncio.ensure_future(self._roles())  # asked at the trigger, with the target
        try:
            target, view = await self._target(fault, w, t_start)
            w["resolve_ms"] = round((time.monotonic_ns() - t_start) / 1e6, 3)
            await self.before_fault(self.deployment, target.nodes)
            if view is None:
                await self._roles_before(w, described, t_start)
            elif view[2]:
                w["roles_before"] = view[2]  # as the view saw the cluster (view_age_ms)
            if first:
                self._opened(k, w, fault, target, t_start)
            # trigger -> inject called: lookup, roles_before and the loop's own delays (the
            # rest of delay_ms is the action's)
            w["inject_at_ms"] = round((time.monotonic_ns() - t_start) / 1e6, 3)
            self.injecting = fault.inject_bound(len(target.nodes))
            try:
                await fault.inject(target)
            finally:
                self.injecting = None
        except Exception as e:  # recorded; the run goes on and says so
            described.cancel()
            w["error"] = f"{type(e).__name__}: {e}"
            if k == 0:
                self.state["error"] = w["error"]
            self.line(f"Fault: {self.label} FAILED: {w['error']}")
            await self.heal_active("inject failed")
            return False
        described.cancel()
        if not first:
            self._opened(k, w, fault, target, t_start)
        w["effect"] = fault.effect
        if not self.cls.recoverable:
            self.active = None
        return True

    async def _target(self, fault: Fault, w: dict, t_start: int) -> tuple:
        """The target, from the cluster when it answers within FRESH_WAIT, else from the
        background view (at most VIEW_MAX_AGE_NS old); the lookup then goes on, and what it
        answers confirms the view or says it was stale (`target_confirmed` in run.json)."""
        fresh = asyncio.ensure_future(resolve(self.spec.target, fault.ctx, groups=self.cls.takes_groups))
        view = self._view
        if view is None or time.monotonic_ns() - view[1] > VIEW_MAX_AGE_NS:
            return await fresh, None
        done, _ = await asyncio.wait({fresh}, timeout=FRESH_WAIT)
        if done:
            return fresh.result(), None
        w["target_by"] = "view"
        w["view_age_ms"] = round((t_start - view[1]) / 1e6, 3)
        self._watchers.append(asyncio.ensure_future(self._confirm(fresh, view[0], w)))
        return view[0], view

    async def _confirm(self, fresh: asyncio.Future, viewed, w: dict) -> None:
        try:
            got = await asyncio.wait_for(fresh, 10)
        except asyncio.CancelledError:
            fresh.cancel()
            raise
        except Exception as e:  # asked before the fault; a node it hit may never answer
            w["target_confirmed"] = None
            w["confirm_error"] = f"{type(e).__name__}: {e}"[:200]
            return
        w["target_confirmed"] = got.nodes == viewed.nodes and got.groups == viewed.groups
        if not w["target_confirmed"]:
            w["target_when_asked"] = got.nodes
            self.line(f"Fault: {self.label}: the background view named {viewed.label()}, the cluster "
                      f"answered {got.label()} (asked at the trigger)")

    async def _roles_before(self, w: dict, described: asyncio.Future, t_start: int) -> None:
        """The description asked at the trigger, if it answers within ROLES_WAIT_NS of it;
        else the background look (at most VIEW_MAX_AGE_NS old, its age in
        `roles_before_age_ms`); with neither, the fault waits for its answer."""
        seen = self._seen
        if seen is not None and time.monotonic_ns() - seen[0] <= VIEW_MAX_AGE_NS:
            left = (t_start + ROLES_WAIT_NS - time.monotonic_ns()) / 1e9
            done = described.done() or (await asyncio.wait({described}, timeout=max(0.0, left)))[0]
            if not done:
                w["roles_before"] = seen[1]
                w["roles_before_age_ms"] = round((time.monotonic_ns() - seen[0]) / 1e6, 3)
                return
        got = await described
        if got:
            w["roles_before"] = got

    def _opened(self, k: int, w: dict, fault: Fault, target, t_start: int) -> None:
        """The window is in effect: its fault row (unless the fault records its own windows),
        and what run.json keeps of it. At the moment the fault says it took effect, if it
        says (a kill: the signal, not the reaping of a JVM 50-100 ms later)."""
        t_eff = fault.effect_ns if fault.effect_ns is not None else time.monotonic_ns()
        if self.cls.own_windows:
            t = self.rec.now()
        else:
            t = self.rec.record("fault", node=target.label(), detail=self.label, window=w["id"],
                                t_ns=t_eff - self.rec.origin)
            self.rec.flush()
        w.update(nodes=target.nodes, label=target.label(), groups=target.groups if len(target.groups) > 1 else None,
                 acks_at_effect=self.gate.acks, t_ms=round(t / 1e6, 3),
                 delay_ms=round((t_eff - t_start) / 1e6, 3), effect=fault.effect)
        if k == 0:
            for key in ("nodes", "acks_at_effect", "t_ms", "delay_ms", "resolve_ms"):
                self.state[key] = w.get(key)
        self.line(f"Fault: {self.label} -> {target.label()} at ack {self.gate.acks} "
                  f"({w['delay_ms']:.0f} ms after the trigger)")

    def _watch_owners(self) -> OwnerWatch:
        """Each topic's owner watched through the write (owners.py)."""
        def record(type_: str, node, detail: str, window: int, topic: Optional[str], at_ns: int) -> int:
            t = self.rec.record(type_, node=node, detail=detail, window=window, topic=topic,
                                t_ns=at_ns - self.rec.origin)
            self.rec.flush()
            return t

        return OwnerWatch.of(self.deployment, self.topics, record)

    def _record(self, type_: str, node: Optional[str], detail: Optional[str], window: Optional[int]) -> int:
        t = self.rec.record(type_, node=node, detail=detail, window=window)
        self.rec.flush()
        return t

    @property
    def healing(self) -> bool:
        return self._healing is not None and not self._healing.done()

    async def heal_active(self, why: str) -> None:
        # A heal under way is never cut short: the runner cancels a nemesis whose write phase
        # ended, and a heal cancelled in its middle would leave the window open and the node
        # down with nobody left to heal it (active is already cleared). The heal runs as its
        # own task; a cancelled caller leaves it to finish, and the next caller waits for it.
        while self.healing:
            await asyncio.shield(self._healing)
        self._healing = asyncio.ensure_future(self._heal(why))
        await asyncio.shield(self._healing)

    async def wait_healed(self) -> None:
        """Wait for a heal whose caller was cancelled (each step of a heal is bounded)."""
        while self.healing:
            await asyncio.gather(asyncio.shield(self._healing), return_exceptions=True)

    async def _heal(self, why: str) -> None:
        await self._release()
        if self.active is None:
            return
        fault, w = self.active
        self.active = None
        if "t_ms" in w:
            await self._describe(w, "roles_during")
        try:
            await fault.heal()
        except Exception as e:
            w["heal_error"] = f"{type(e).__name__}: {e}"
            why += f"; heal FAILED: {w['heal_error']}"
            self.line(f"Heal: {self.label} FAILED: {w['heal_error']}")
        if "t_ms" in w and not self.cls.own_windows:  # only windows recorded as in effect get a heal row
            t = self.rec.record("heal", node=w["label"], detail=f"{self.label} ({why})", window=w["id"])
            self.rec.flush()
            w["healed_ms"] = round(t / 1e6, 3)
            if "heal_error" not in w and not fault.ready_recorded:
                self._watchers.append(asyncio.ensure_future(self._ready_after(w)))
        w["effect"] = fault.effect

    async def _ready_after(self, w: dict) -> None:
        """Record when the cluster is whole again after a heal (the seeds' end of downtime)."""
        if await self.deployment.roles.wait_stream_ready(timeout=120):
            t = self.rec.record("ready", node=w["label"], detail=f"{self.label}: cluster whole again",
                                window=w["id"])
            self.rec.flush()
            w["ready_ms"] = round(t / 1e6, 3)
            await self._describe(w, "roles_after")

    async def _describe(self, w: dict, key: str) -> None:
        got = await self._roles()
        if got:
            w[key] = got

    async def _roles(self) -> dict:
        """The stream as the cluster describes it (the seed's topic details), bounded: a
        cluster in the middle of a fault may not answer, and that is what gets kept."""
        try:
            return await asyncio.wait_for(self.deployment.roles.describe(), 5.0)
        except Exception as e:
            return {"error": f"{type(e).__name__}: {e}"[:200]}

    async def settle(self, timeout: float) -> None:
        """Let the ready watchers finish (bounded), then stop what is left; the owners'
        watch ends at once (what it saw is recorded)."""
        task, self._owner_task = self._owner_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if self._watchers:
            await asyncio.wait(self._watchers, timeout=timeout)
        for t in self._watchers:
            t.cancel()
        await asyncio.gather(*self._watchers, return_exceptions=True)
        self._watchers.clear()
