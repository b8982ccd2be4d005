"""The roles watched through the write, per topic: in each fault window, when the cluster
noticed (its answer about the topic's owner changed from the last one before the fault) and
when the topic was served again. Two `owner` rows per topic and window at most (format
1.8); the outage's `detect` and `serve` parts start from them (analysis/parts.py). A change
is from a known owner: with none answered before the fault, the first answered after it is
the base.

Each row is timed when its look was asked: the answer says how the cluster was then, give
or take how long it took to answer (said in the row's detail). A look not answered within
ASK_S is an answer of "none" (NATS says "no leader" so)."""
from __future__ import annotations

import asyncio
import time
from typing import Callable, Optional

from ..scenario import topic_names
from .window import Window

POLL_S = 0.1  # between two looks at a topic while a window is watched: the marks' precision
IDLE_S = 1.0  # …and while none is: the baseline, kept current at little cost
OWNER_TOPICS = 8  # topics watched at most (the first ones): a look is a request or a few
WATCH_S = 60.0  # a window is watched this long at most…
AFTER_HEAL_S = 10.0  # …and no longer than this after its heal
ASK_S = 1.0


class OwnerWatch:
    """One nemesis's watch over its topics' owners (`roles`: topic -> its roles, the topic
    None in a run of one), from its start until it is stopped; `arm(w)` before a window's
    inject starts that window's watch."""

    def __init__(self, roles: dict, record: Callable[..., int]) -> None:
        self.roles, self.record = roles, record
        self.last: dict = {t: None for t in roles}  # the last owner answered, per topic
        self.w: Optional[Window] = None
        self.state: dict = {}
        self.t_armed = 0.0
        self.pending: set = set()
        # per topic: looks answered with an owner, answered "none", the last why (run.json)
        self.stats: dict = {str(t): {"owner": 0, "none": 0, "why": None} for t in roles}
        # per window id: where the first topic's owner moved to during it ("n1 -> n2"), the
        # owner-moved mechanism's evidence (another node than before the fault, not none)
        self.moves: dict[int, str] = {}

    @classmethod
    def of(cls, dep, topics: int, record: Callable[..., int]) -> "OwnerWatch":
        """The watch over a deployment's first OWNER_TOPICS topics (of `topics`)."""
        names = topic_names(topics)[:OWNER_TOPICS] or [None]
        return cls({t: dep.roles if t is None else dep.roles.for_topic(t, dep.client.for_topic(t)) for t in names},
                   record)

    def own_window(self, window: Optional[int]) -> None:
        """One of a fault's own windows (a rolling restart's step) watched as the nemesis
        watches its own: from its fault row until its node is back (window None) and
        AFTER_HEAL_S more, or until every topic was served again."""
        if window is not None:
            w = Window(window)
            w.injecting(0.0)
            self.arm(w)
        elif self.w is not None and not self.w.ended:
            self.w.healed(None)

    def arm(self, w: Window) -> None:
        self.w, self.t_armed = w, time.monotonic()
        self.state = {t: {"base": self.last[t], "changed": False, "done": False} for t in self.roles}

    async def run(self) -> None:
        try:
            while True:
                for t in self.roles:
                    if not (self.w is not None and self.state[t]["done"]):
                        self.pending.add(asyncio.ensure_future(self._look(t, self.w)))
                done, self.pending = await asyncio.wait(self.pending, timeout=POLL_S)
                for d in done:
                    self._seen(*d.result())
                self._maybe_disarm()
                await asyncio.sleep(POLL_S if self.w is not None else IDLE_S)
        finally:
            for d in self.pending:
                d.cancel()
            await asyncio.gather(*self.pending, return_exceptions=True)

    async def _look(self, topic, w: Optional[Window]) -> tuple:
        """(topic, the window armed when asked, asked after its inject began, when asked, when
        answered, owner serving or None, why none)."""
        t, after = time.monotonic_ns(), w is not None and w.begun
        try:
            owner, why = await asyncio.wait_for(self.roles[topic].serving(), ASK_S), None
        except Exception as e:  # none right now: that is what is watched for
            owner, why = None, (f"{type(e).__name__}: {e}" if str(e) else type(e).__name__)[:120]
        return topic, w, after, t, time.monotonic_ns(), owner, why

    def _seen(self, topic, w, after: bool, t: int, t_answer: int, owner, why) -> None:
        st = self.stats[str(topic)]
        st["owner" if owner is not None else "none"] += 1
        st["why"] = why or st["why"]
        if not after:
            if owner is not None and (self.w is None or not self.state[topic]["changed"]):
                self.last[topic] = owner
                if self.w is not None and not self.w.begun:
                    self.state[topic]["base"] = owner
            return
        st = self.state.get(topic) if w is self.w else None
        if st is None or st["done"]:
            return
        took = f"answered in {(t_answer - t) / 1e6:.0f} ms"
        if st["base"] is None and not st["changed"]:
            # no owner answered before the fault (none asked yet, or each look timed out): the
            # first one answered after it becomes the base, not a move; a move is a change
            # from a known owner, so a window whose base came late may miss its marks (then
            # the mechanism is missing and the run says unknown), never invent them
            if owner is not None:
                st["base"], st["late"] = owner, True
            return
        if owner is not None and owner != st["base"]:
            self.moves.setdefault(w.id, f"{st['base']} -> {owner}" + (f" ({topic})" if topic else ""))
        if not st["changed"] and owner != st["base"]:
            self.record("owner", owner, f"changed: {st['base']} -> {owner or 'none'}"
                        + (f" ({why})" if why else "") + (" (the base first seen after the inject)"
                        if st.get("late") else "") + f"; {took}", w.id, topic, t)
            st["changed"] = True
        if st["changed"] and owner is not None:
            self.record("owner", owner, f"serving; {took}", w.id, topic, t)
            st["done"] = True
            self.last[topic] = owner

    def _maybe_disarm(self) -> None:
        w = self.w
        if w is None:
            return
        healed = w.ended
        if healed and "healed_at" not in self.state:
            self.state["healed_at"] = time.monotonic()
        over = time.monotonic() - self.t_armed > WATCH_S or (
            healed and time.monotonic() - self.state["healed_at"] > AFTER_HEAL_S)
        if over or all(st["done"] for k, st in self.state.items() if k != "healed_at"):
            self.w = None
