"""One fault window's life, typed: opened at its scheduled start, its target resolved, the
inject begun, in effect (its `fault` row), then healed; or failed at the inject. Each step is
a method that says what it needs of the one before (a heal of a window never in effect
writes no `heal` time; a window is in effect once); the fields are what run.json keeps of
the window (docs/faults.md, "What is recorded"), an unset one left out.

The nemesis (nemesis.py) moves a window along; the views around it add what they saw
(view.py: the target's confirmation, the roles before, during and after; windowbook.py: the
effect observed from its `looks`; owners.py: whether the owner moved)."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from .effect import Seen


class Phase(enum.Enum):
    OPEN = "open"  # scheduled, its target being resolved
    INJECTING = "injecting"  # the action begun
    IN_EFFECT = "in effect"  # its `fault` row written
    FAILED = "failed"  # the inject raised: nothing to heal but what it left
    HEALED = "healed"  # the heal returned or failed (`heal_error`)


class WindowError(RuntimeError):
    """A step asked of a window in a phase it does not follow (a harness bug, said at once)."""


@dataclass(eq=False)
class Window:
    id: int  # the history's `window` column: unique in the run
    window: Optional[int] = None  # its place in the fault's schedule (none for a fault's own steps)
    nodes: list = field(default_factory=list)
    trigger_jitter_ms: Optional[float] = None
    # the target: by the background view (its age), and what the lookup asked at the trigger said
    target_by: Optional[str] = None
    view_age_ms: Optional[float] = None
    target_confirmed: Optional[bool] = None
    confirm_error: Optional[str] = None
    target_when_asked: Optional[list] = None
    resolve_ms: Optional[float] = None  # trigger -> target known
    roles_before: Optional[dict] = None
    roles_before_age_ms: Optional[float] = None
    inject_at_ms: Optional[float] = None  # trigger -> the action begun
    # in effect: the `fault` row's time, the trigger's precision, the ack count then
    label: Optional[str] = None
    groups: Optional[list] = None  # the groups hit, when more than one
    acks_at_effect: Optional[int] = None
    t_ms: Optional[float] = None
    delay_ms: Optional[float] = None
    effect: Optional[dict] = None  # what the action measured (the fault's own)
    error: Optional[str] = None  # the inject's
    roles_during: Optional[dict] = None
    role_at_heal: Any = None  # the nodes holding the target's role at the heal, or why none
    role_moved: Optional[bool] = None
    heal_error: Optional[str] = None
    healed_ms: Optional[float] = None
    not_ready: Optional[str] = None
    ready_ms: Optional[float] = None
    roles_after: Optional[dict] = None
    observed: Optional[dict] = None  # what the harness saw the fault do (effect.py)
    owner_moved: Optional[str] = None  # "n1 -> n2" (owners.py)
    phase: Phase = field(default=Phase.OPEN, repr=False)
    # what the harness saw the fault do, look by look (effect.py), combined into `observed`
    looks: list[Optional[Seen]] = field(default_factory=list, repr=False)

    # -- the steps --------------------------------------------------------------------------

    def _from(self, step: str, *phases: Phase) -> None:
        if self.phase not in phases:
            raise WindowError(f"window {self.id}: {step} in phase {self.phase.value}")

    def resolved(self, ms: float) -> None:
        self._from("resolved", Phase.OPEN)
        self.resolve_ms = ms

    def injecting(self, ms: float) -> None:
        """The action begun (a fault that opens its window first is in effect already)."""
        self._from("injecting", Phase.OPEN, Phase.IN_EFFECT)
        self.inject_at_ms = ms
        if self.phase is Phase.OPEN:
            self.phase = Phase.INJECTING

    def took_effect(self, *, nodes: list, label: str, groups: list, acks: int, t_ms: float, delay_ms: float,
                    effect: Optional[dict]) -> None:
        self._from("in effect", Phase.OPEN, Phase.INJECTING)
        self.nodes, self.label, self.groups = nodes, label, groups if len(groups) > 1 else None
        self.acks_at_effect, self.t_ms, self.delay_ms, self.effect = acks, t_ms, delay_ms, effect
        self.phase = Phase.IN_EFFECT

    def failed(self, error: str) -> None:
        self._from("failed", Phase.OPEN, Phase.INJECTING, Phase.IN_EFFECT)
        self.error, self.phase = error, Phase.FAILED

    def healed(self, ms: Optional[float], heal_error: Optional[str] = None) -> None:
        """The heal returned (or failed: `heal_error`); `ms`, its `heal` row's time, only for a
        window that was in effect."""
        self._from("healed", Phase.OPEN, Phase.INJECTING, Phase.IN_EFFECT, Phase.FAILED)
        self.heal_error, self.healed_ms = heal_error, ms
        self.phase = Phase.HEALED

    # -- what the rest asks of it -----------------------------------------------------------

    @property
    def begun(self) -> bool:
        """The inject was called: what is seen from here on is the fault's doing."""
        return self.inject_at_ms is not None

    @property
    def in_effect(self) -> bool:
        """Recorded in effect (its `fault` row), whatever came after."""
        return self.t_ms is not None

    @property
    def ended(self) -> bool:
        return self.phase in (Phase.FAILED, Phase.HEALED)

    def as_json(self) -> dict:
        """What run.json keeps: every field set, in this order."""
        out = {}
        for f in fields(self):
            x = getattr(self, f.name)
            if x is not None and f.name not in ("phase", "looks"):
                out[f.name] = x
        return out

    # a read-only mapping over as_json(), for what reads run.json's windows (tests, tools)
    def __getitem__(self, key: str):
        return self.as_json()[key]

    def __contains__(self, key: str) -> bool:
        return key in self.as_json()

    def get(self, key: str, default=None):
        return self.as_json().get(key, default)
