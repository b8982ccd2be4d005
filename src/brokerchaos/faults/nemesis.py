"""One fault of a scenario, carried out during a run: wait for the trigger, then for each
planned window resolve the target, inject, look for the effect, record, and heal after the
duration.

Every injected window is healed: after its duration, at the scenario's `heal` point, or in
the runner's `finally` (heal_active) whatever happened. The `fault`, `heal` and `ready`
rows go to the history with the resolved nodes and the window's id (its `window` column),
so the analysis pairs each heal with its own fault; run.json gets the precision of each window (trigger
to fault in effect, and the ack count at that moment). Every window also gets one `effect`
row, what the harness saw the fault do (effect.py): a window that failed, never fired, or
whose effect was not seen is said so, and the policy does not let the run pass on it.
"""
from __future__ import annotations

import asyncio
import time
from functools import partial
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Optional

from ..history import Recorder
from ..scenario import FaultSpec
from .base import Fault, FaultContext
from .effect import HEALED, HEALING, failed, look
from .healing import Healing, undone
from .owners import OwnerWatch
from .registry import FAULTS
from .schedule import plan, rng_for
from .trigger import AckGate, fired, jitter_of, not_reached
from .view import RoleView
from .window import Window
from .windowbook import WindowBook


class Workload:
    """What a nemesis asks of the run's workload, bound once that exists (`bind`, at the
    write's start): the nodes the producers are connected to (a `client-node` target) and
    the consumer group (a `consumer` target, a member-holding trigger, a member's heal)."""

    def __init__(self) -> None:
        self.producers: tuple = ()
        self.consumer_group: Optional[object] = None

    def bind(self, producers: list, group: Optional[object]) -> None:
        self.producers, self.consumer_group = tuple(producers), group

    def client_nodes(self) -> list[str]:
        return [n for n in (p.client.node() for p in self.producers) if n]

    def group(self) -> Optional[object]:
        return self.consumer_group


@dataclass(frozen=True)
class NemesisContext:
    """What every nemesis of a run shares: the deployment and sandbox it acts on, the seed
    and run its draws come from, where its rows go, the gate that counts first acks, the
    console, the observer's hook before a fault, and the run's workload (bound when the
    write starts)."""

    deployment: Any
    sandbox: Any
    seed: int
    run_id: str
    recorder: Recorder
    gate: AckGate
    line: Callable[[str], None]
    before_fault: Callable[[object, list[str]], Awaitable[None]]
    topics: int = 1
    workload: Workload = field(default_factory=Workload)
    ended: dict = field(default_factory=dict)  # a fault's index: set once its nemesis has run (ended_event)
    nemeses: list = field(default_factory=list)  # every nemesis of the run, each added as it is made

    def held_elsewhere(self, node: str, me: object) -> bool:
        """Whether a nemesis other than `me` holds `node` down with a window in effect whose
        heal starts it (one whose heal is under way starts its nodes itself, or has passed
        them; a pause's heal starts nothing)."""
        return any(nem.active is not None and nem.cls.starts_at_heal and node in nem.active[0].held_down()
                   for nem in self.nemeses if nem is not me)

    def in_effect_on(self, nodes: list[str], me: object) -> list[str]:
        """The nemeses other than `me` with a window in effect (or its heal under way) on any
        of `nodes`, each as "action target on its nodes"."""
        out = []
        for nem in self.nemeses:
            fault = nem.active[0] if nem.active is not None else nem.heals.fault if nem.heals.under_way else None
            on = fault.acts_on() if nem is not me and fault is not None else []
            if set(on) & set(nodes):
                out.append(f"{nem.label} on {','.join(on)}")
        return out

    def ended_event(self, index: int) -> asyncio.Event:
        return self.ended.setdefault(index, asyncio.Event())

    async def healed(self, index: int) -> None:
        """Wait until the fault at `index` has run: its windows done, each healed (`after_fault`)."""
        await self.ended_event(index).wait()


class Nemesis:
    def __init__(self, index: int, spec: FaultSpec, ctx: NemesisContext) -> None:
        self.index, self.spec, self.ctx = index, spec, ctx
        ctx.nemeses.append(self)
        self.deployment, self.rec, self.gate, self.line = ctx.deployment, ctx.recorder, ctx.gate, ctx.line
        seed, run_id = ctx.seed, ctx.run_id
        self.cls: type[Fault] = FAULTS.get(spec.action)
        self.params = self.cls.Params.model_validate(spec.params)
        self.target_rng = rng_for(seed, run_id, index, "target")
        self.group = ctx.workload.group
        self.schedule = plan(spec, rng_for(seed, run_id, index, "schedule"))
        self.jitter_s = jitter_of(spec.trigger, rng_for(seed, run_id, index, "trigger"))
        self.active: Optional[tuple[Fault, Window]] = None
        self.pending: Optional[Fault] = None  # prepared, not injected yet
        self.stopping = False  # the write phase is over: finish the current window, start no other
        self.injecting: Optional[float] = None  # an inject under way: how long it may still take
        self.windows: list[Window] = []
        self.state: dict = _state(index, spec, self.schedule, self.windows)
        self._uid = 0
        self.task: Optional[asyncio.Task] = None  # start()
        self._owner_watch: Optional[OwnerWatch] = None  # the roles watched through the write (owners.py)
        self._owner_task: Optional[asyncio.Task] = None
        self.heals = Healing()  # the heal under way, as a task of its own
        self.book = WindowBook(self.rec, self.line, spec.action, spec.target, lambda: self.owner_moves,
                               self.cls.own_windows)
        self.view = RoleView(self.deployment, spec.target, self.cls.takes_groups, self._context, self.label,
                             self.line)

    @property
    def label(self) -> str:
        return f"{self.spec.action} {self.spec.target}"

    @property
    def owner_moves(self) -> dict[int, str]:
        """Per window id, where the stream's owner moved during it (owners.py)."""
        return self._owner_watch.moves if self._owner_watch is not None else {}

    def _context(self, uid: int = 0) -> FaultContext:
        ctx = self.ctx
        return FaultContext(self.deployment, self.target_rng, ctx.sandbox, self.params, ctx.workload.client_nodes,
                            uid=uid, record=self.book.record, elsewhere=partial(ctx.in_effect_on, me=self),
                            watch=lambda w: self._owner_watch is not None and self._owner_watch.own_window(w),
                            held_elsewhere=partial(ctx.held_elsewhere, me=self), group=self.group)

    def _new_fault(self) -> Fault:
        self._uid += 1
        return self.cls(self._context(self.index * 1000 + self._uid))

    async def _prepared(self) -> Optional[Fault]:
        fault = self._new_fault()
        self.pending = fault
        try:
            await fault.prepare()
        except Exception as e:
            self.state["error"] = f"prepare: {type(e).__name__}: {e}"
            self.line(f"Fault: {self.label} FAILED to prepare: {self.state['error']}")
            self.book.effect_row(fault.ctx.uid, None, failed(self.state["error"]))
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

    def start(self) -> asyncio.Task:
        """The nemesis as a task of the write phase (end_of_write() ends it)."""
        self.task = asyncio.create_task(self.run())
        return self.task

    def crashed(self, e: BaseException) -> None:
        """The nemesis's task raised (a harness bug, e.g. a window step out of order): said on
        the console and in run.json, never lost with the task; its windows still get their
        effect rows (finish_effects), so the run cannot pass on them quietly."""
        self.state.setdefault("error", why := f"the nemesis stopped: {type(e).__name__}: {e}")
        self.line(f"Fault: {self.label} FAILED: {why}")

    async def end_of_write(self) -> None:
        """The write phase is over, and how this nemesis ends is its own rule: an operation
        under way finishes (a rolling restart, bounded by its inject bound); a window under
        way lasts its configured duration (no new window starts); anything else is
        cancelled now, and a trigger never reached is said in run.json and in an effect row
        (the fault never happened: the run tested nothing)."""
        task = self.task
        if task is None:
            return
        if not task.done() and self.injecting is not None:
            self.stopping = True
            await asyncio.wait([task], timeout=self.injecting)
        if not task.done() and (self.heals.under_way or self.active is not None and self.spec.duration is not None):
            self.stopping = True
            try:  # a staged return that lets the read begin: up to that point (its heal goes on)
                await asyncio.wait_for(self.heals.done_or_readable(task), (self.spec.duration or 0) + 5)
            except asyncio.TimeoutError:
                pass
        if not task.done():
            if not self.windows and self.spec.action != "none" and "error" not in self.state:
                self.state["why"] = not_reached(self.spec.trigger, self.gate, self.ctx.ended_event)
                self.book.effect_row(self.index * 1000 + max(self._uid, 1), None,
                                     failed(f"never injected: {self.state['why']}"))
            task.cancel()

    async def run(self) -> None:
        if self.spec.action == "none":
            return
        self.view.start()
        self._owner_watch = self.book.owner_watch(self.deployment, self.ctx.topics)
        self.state["owner_looks"] = self._owner_watch.stats
        self._owner_task = asyncio.ensure_future(self._owner_watch.run())
        try:
            await self._run()
        finally:
            self.ctx.ended_event(self.index).set()
            await self.view.stop()

    async def _run(self) -> None:
        t_begin = time.monotonic()
        fault = await self._prepared()
        if fault is None:
            return
        # the schedule's offsets count from here
        t_trigger = await fired(self.spec.trigger, self.gate, t_begin, self.jitter_s, self.group, self.ctx.healed)
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
                await self.view.stop()  # no window left to aim
            if self.spec.duration is not None and self.active is not None:
                await asyncio.sleep(self.spec.duration)
                await self.heal_active("after duration")
            if not ok and self.spec.repeat is None:
                return

    async def _window(self, k: int, t_start: int, fault: Fault) -> bool:
        # the window's id in the history: unique in the run (a fault's index and its own count)
        w = Window(fault.ctx.uid, k)
        if self.spec.trigger.jitter:
            w.trigger_jitter_ms = round(self.jitter_s * 1e3, 3)
        self.windows.append(w)
        self.active = (fault, w)  # from here on, heal_active undoes whatever it did
        if self._owner_watch is not None and not self.cls.own_windows:  # those arm their own (OwnerWatch.own_window)
            self._owner_watch.arm(w)
        first = self.cls.opens_window_first or self.cls.own_windows
        described = asyncio.ensure_future(self.view.roles())  # asked at the trigger, with the target
        try:
            target, view = await self.view.target_of(fault.ctx, w, t_start)
            w.resolved(round((time.monotonic_ns() - t_start) / 1e6, 3))
            await self.ctx.before_fault(self.deployment, target.nodes)
            if view is None:
                await self.view.roles_before(w, described, t_start)
            elif view[2]:
                w.roles_before = view[2]  # as the view saw the cluster (view_age_ms)
            acks = self.gate.acks  # as the action begins: a slow one (a 3 s VerneMQ leave) is in effect from there
            if first:
                self.book.opened(k, w, fault, target, t_start, acks, self.state)
            # trigger -> inject called: lookup, roles_before, the loop's delays (the rest of delay_ms: the action's)
            w.injecting(round((time.monotonic_ns() - t_start) / 1e6, 3))
            self.injecting = fault.inject_bound(len(target.nodes))
            fault.target = target
            try:
                await fault.inject(target)
            finally:
                self.injecting = None
        except Exception as e:  # recorded; the run goes on and says so
            described.cancel()
            self.book.inject_failed(k, w, e, self.state)
            await self.heal_active("inject failed")
            return False
        described.cancel()
        if not first:
            self.book.opened(k, w, fault, target, t_start, acks, self.state)
        w.effect = fault.effect
        self.book.look_injected(w.id, fault)
        if not self.cls.recoverable:
            self.active = None
            self.view.watchers.append(asyncio.ensure_future(self.book.seen_once_looked(w)))
        return True

    async def finish_effects(self) -> None:
        """Every window left without its effect row gets one (WindowBook.finish)."""
        await self.book.finish(self.windows)

    async def heal_active(self, why: str) -> None:
        """The window healed, whole (a heal under way first ends: healing.py)."""
        await self.heals.run(lambda: self._heal(why))

    async def heal_for_read(self, why: str) -> None:
        """Healed as far as the read needs: the window's heal started if none is under way,
        then waited for until the read may begin (healing.py)."""
        if not self.heals.under_way and (self.active is not None or self.pending is not None):
            self.heals.begin(lambda: self._heal(why))
        await self.heals.wait_readable()

    def held(self) -> list[str]:
        """The nodes this fault holds down on purpose now: its window's while in effect, or
        those a heal that let the read begin has not started yet."""
        if self.active is not None:
            return list(self.active[0].held_down())
        return self.heals.held()

    async def _heal(self, why: str) -> None:
        await self._release()
        if self.active is None:
            return
        (fault, w), self.active = self.active, None
        self.heals.fault = fault
        await self.book.took_injected(w)
        if w.in_effect:
            await self.view.at_heal(fault.ctx, w)
            if w.error is None:
                w.looks.append(await look(fault, HEALING))
        heal_error = await undone(fault)
        if heal_error is not None:
            why += f"; heal FAILED: {heal_error}"
            self.line(f"Heal: {self.label} FAILED: {heal_error}")
            w.looks.append(failed(f"heal: {heal_error}"))
        # only windows recorded as in effect get a heal row
        healed_ms = self.book.heal_row(w, why) if w.in_effect and not self.cls.own_windows else None
        w.healed(healed_ms, heal_error)
        if healed_ms is not None and heal_error is None and not fault.ready_recorded:
            self.view.watchers.append(asyncio.ensure_future(self.view.ready_after(w, self.group, self.book.record)))
        if w.in_effect and w.error is None and heal_error is None:
            w.looks.append(await look(fault, HEALED))
        w.effect = fault.effect
        self.book.seen(w)

    async def settle(self, timeout: float) -> None:
        """Let the ready watchers finish (bounded), then stop what is left; the owners'
        watch ends at once (what it saw is recorded)."""
        task, self._owner_task = self._owner_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await self.view.settle(timeout)


def _state(index: int, spec: FaultSpec, schedule: list, windows: list[Window]) -> dict:
    """What run.json keeps of one fault of the run (its windows filled in as they happen)."""
    return {"index": index, "action": spec.action, "target": spec.target, "params": spec.params,
            "trigger": spec.trigger.model_dump(exclude_none=True), "duration": spec.duration,
            "schedule": schedule, "windows": windows, "nodes": []}


def said(nemeses: list[Nemesis], results: list) -> None:
    """The nemeses' tasks as gathered (return_exceptions): a task that raised is said (crashed)."""
    for n, r in zip(nemeses, results):
        if isinstance(r, Exception):
            n.crashed(r)
