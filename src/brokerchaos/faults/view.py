"""A nemesis's view of the roles: the target and the cluster's description kept current while
it waits for its trigger, so that a lookup slowed by the load (a stream-info request behind
thousands of acks) does not delay the fault; and at the trigger, the target from the cluster
when it answers at once, else from that view, confirmed afterwards."""
from __future__ import annotations

import asyncio
import time
from typing import Callable, Optional

from .base import FaultContext
from ..systems.runtime import cancel_all
from .effect import serving
from .targets import parse, resolve
from .window import Window

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
READY_S = 120.0  # how long after a heal the cluster has to be whole again for its `ready` row


class RoleView:
    def __init__(self, deployment, target: str, groups: bool, ctx: Callable[[], FaultContext],
                 label: str, line: Callable[[str], None]) -> None:
        self.deployment, self.target, self.groups = deployment, target, groups
        self.ctx, self.label, self.line = ctx, label, line
        # (target, when asked, the cluster's description then)
        self._view: Optional[tuple] = None
        # (when asked, the description): the same look for every target, so that the
        # window's `roles_before` does not hold the fault back either
        self._seen: Optional[tuple] = None
        self._viewer: Optional[asyncio.Future] = None
        self.watchers: list[asyncio.Task] = []

    def viewable(self) -> bool:
        try:
            terms = [t for part in parse(self.target, self.groups) for t in part]
        except ValueError:
            return False
        names = set(self.deployment.cluster.host_names)
        return (any(n in VIEWED for n, _ in terms)
                and all(c is None and (n in VIEWED or n in names) for n, c in terms))

    def names_a_role(self) -> bool:
        """The target is a role alone (leader, coordinator), not node names or a seeded pick."""
        try:
            terms = [t for part in parse(self.target, self.groups) for t in part]
        except ValueError:
            return False
        return bool(terms) and all(n in ("leader", "coordinator") and c is None for n, c in terms)

    async def at_heal(self, ctx: FaultContext, w: Window) -> None:
        """Before a window in effect is healed: the cluster's description (`roles_during`),
        and for a target that named a role, whether the role moved (asked now, answered
        beside the heal: a slow answer must not lengthen the window)."""
        await self.describe(w, "roles_during")
        if self.names_a_role():
            self.watchers.append(asyncio.ensure_future(self.role_into(ctx, w)))

    async def role_into(self, ctx: FaultContext, w: Window) -> None:
        """role_now for a window, into it."""
        got = await self.role_now(ctx, w.nodes)
        w.role_at_heal, w.role_moved = got["role_at_heal"], got["role_moved"]

    async def role_now(self, ctx: FaultContext, hit: list[str]) -> dict:
        """Who holds the target's role now (asked before the heal): whether it moved off the
        nodes the window hit (run.json: `role_at_heal`, `role_moved`)."""
        try:
            got = await asyncio.wait_for(resolve(self.target, ctx, groups=self.groups), 5.0)
        except Exception as e:  # none holds it (an election under way), or no answer
            return {"role_at_heal": f"{type(e).__name__}: {e}"[:200], "role_moved": None}
        return {"role_at_heal": got.nodes, "role_moved": sorted(got.nodes) != sorted(hit)}

    def start(self) -> None:
        self._viewer = asyncio.ensure_future(self._keep())

    async def stop(self) -> None:
        viewer, self._viewer = self._viewer, None
        if viewer is not None:
            viewer.cancel()
            await asyncio.gather(viewer, return_exceptions=True)

    async def _keep(self) -> None:
        ctx = self.ctx()
        viewable = self.viewable()
        # the flag as well as the cancel: Python 3.11's wait_for (in roles()) can swallow a
        # cancel that lands as its inner call completes, and the loop would go on for ever
        while self._viewer is not None:
            t = time.monotonic_ns()
            target = None
            if viewable:
                try:
                    async with asyncio.timeout(5):
                        target = await resolve(self.target, ctx, groups=self.groups)
                except asyncio.CancelledError:
                    raise
                except Exception:  # the next look may answer; a view too old is not used
                    pass
            roles = await self.roles()
            if target is not None:
                self._view = (target, t, roles)
            if roles and "error" not in roles:
                self._seen = (t, roles)
            await asyncio.sleep(VIEW_EVERY)

    async def roles(self) -> dict:
        """The stream as the cluster describes it (the seed's topic details), bounded: a
        cluster in the middle of a fault may not answer, and that is what gets kept."""
        try:
            return await asyncio.wait_for(self.deployment.roles.describe(), 5.0)
        except Exception as e:
            return {"error": f"{type(e).__name__}: {e}"[:200]}

    async def target_of(self, ctx: FaultContext, w: Window, t_start: int) -> tuple:
        """The target, from the cluster when it answers within FRESH_WAIT, else from the
        background view (at most VIEW_MAX_AGE_NS old); the lookup then goes on, and what it
        answers confirms the view or says it was stale (`target_confirmed` in run.json)."""
        fresh = asyncio.ensure_future(resolve(self.target, ctx, groups=self.groups))
        view = self._view
        if view is None or time.monotonic_ns() - view[1] > VIEW_MAX_AGE_NS:
            return await fresh, None
        done, _ = await asyncio.wait({fresh}, timeout=FRESH_WAIT)
        if done:
            return fresh.result(), None
        w.target_by = "view"
        w.view_age_ms = round((t_start - view[1]) / 1e6, 3)
        self.watchers.append(asyncio.ensure_future(self._confirm(fresh, view[0], w)))
        return view[0], view

    async def _confirm(self, fresh: asyncio.Future, viewed, w: Window) -> None:
        try:
            got = await asyncio.wait_for(fresh, 10)
        except asyncio.CancelledError:
            fresh.cancel()
            raise
        except Exception as e:  # asked before the fault; a node it hit may never answer
            w.target_confirmed = None
            w.confirm_error = f"{type(e).__name__}: {e}"[:200]
            return
        w.target_confirmed = got.nodes == viewed.nodes and got.groups == viewed.groups
        if not w.target_confirmed:
            w.target_when_asked = got.nodes
            self.line(f"Fault: {self.label}: the background view named {viewed.label()}, the cluster "
                      f"answered {got.label()} (asked at the trigger)")

    async def roles_before(self, w: Window, described: asyncio.Future, t_start: int) -> None:
        """The description asked at the trigger, if it answers within ROLES_WAIT_NS of it;
        else the background look (at most VIEW_MAX_AGE_NS old, its age in
        `roles_before_age_ms`); with neither, the fault waits for its answer."""
        seen = self._seen
        if seen is not None and time.monotonic_ns() - seen[0] <= VIEW_MAX_AGE_NS:
            left = (t_start + ROLES_WAIT_NS - time.monotonic_ns()) / 1e9
            done = described.done() or (await asyncio.wait({described}, timeout=max(0.0, left)))[0]
            if not done:
                w.roles_before = seen[1]
                w.roles_before_age_ms = round((time.monotonic_ns() - seen[0]) / 1e6, 3)
                return
        got = await described
        if got:
            w.roles_before = got

    async def describe(self, w: Window, key: str) -> None:
        """The cluster's description, into the window's `key` (roles_during, roles_after)."""
        got = await self.roles()
        if got:
            setattr(w, key, got)

    async def ready_after(self, w: Window, group: Callable[[], object],
                          record: Callable[[str, Optional[str], Optional[str], Optional[int]], int]) -> None:
        """Record when the cluster is whole again after a window's heal (the seeds' end of
        downtime): every node the window hit serving again (its process running, its client
        port answering: a metadata view can still name a node that never came back), then
        the stream ready; its `ready` row, and what the cluster says of itself then."""
        deadline = time.monotonic() + READY_S
        while True:
            down = [n for n in w.nodes if await serving(self.deployment.cluster, group(), n)]
            if not down:
                break
            if time.monotonic() >= deadline:
                w.not_ready = f"not serving {READY_S:.0f} s after the heal: {', '.join(down)}"
                return
            await asyncio.sleep(0.25)
        if await self.deployment.roles.wait_stream_ready(timeout=max(1.0, deadline - time.monotonic())):
            t = record("ready", w.label, f"{self.label}: cluster whole again", w.id)
            w.ready_ms = round(t / 1e6, 3)
            await self.describe(w, "roles_after")

    async def settle(self, timeout: float) -> None:
        """Let the watchers finish (bounded: ready rows, role moves), then stop what is left."""
        if self.watchers:
            await asyncio.wait(self.watchers, timeout=timeout)
        still = await cancel_all(self.watchers)
        self.watchers.clear()
        if still:
            self.line(f"Fault: {self.label}: {len(still)} watcher(s) still running after their cancel")
