from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Optional

from pydantic import BaseModel, ConfigDict

from ..systems.base import System

if TYPE_CHECKING:
    from ..sandbox import Sandbox
    from ..scenario import Scenario


class NoParams(BaseModel):
    model_config = ConfigDict(extra="forbid")


@dataclass
class FaultContext:
    system: System
    rng: random.Random
    sandbox: Optional["Sandbox"] = None
    params: BaseModel = field(default_factory=NoParams)
    # the nodes the workload's clients are connected to right now (the `client-node` target)
    client_nodes: Callable[[], list[str]] = lambda: []
    # distinguishes concurrent faults' firewall chains and queues
    uid: int = 0


@dataclass
class Target:
    """A resolved target: the nodes hit, and for partitions the groups they fall into."""

    nodes: list[str]
    groups: list[list[str]] = field(default_factory=list)

    def label(self) -> str:
        if len(self.groups) > 1:
            return "|".join(",".join(g) for g in self.groups)
        return ",".join(self.nodes)


class Fault:
    """One fault action. `inject` hits the resolved target; `heal` undoes it and must be safe
    to call whatever happened before (the runner calls it in `finally`)."""

    name: ClassVar[str]
    description: ClassVar[str]
    Params: ClassVar[type[BaseModel]] = NoParams
    needs_netns: ClassVar[bool] = False
    # a recoverable fault is healed; a one-off (e.g. tcp-kill once) has nothing to undo
    recoverable: ClassVar[bool] = True
    # partitions take groups (`n1|n2,n3`); everything else a set of nodes
    takes_groups: ClassVar[bool] = False

    def __init__(self, ctx: FaultContext) -> None:
        self.ctx = ctx
        self.p: Any = ctx.params
        self.nodes: list[str] = []
        # what the fault measured or did, for run.json (e.g. connections reset, method used)
        self.effect: dict[str, Any] = {}

    @classmethod
    def check(cls, params: Any, node_names: list[str], system: type[System], scenario: "Scenario") -> None:
        """Static checks beyond the params model (raise targets.TargetError)."""

    async def prepare(self) -> None:
        """Slow set-up that does not disturb anything, done before the trigger so that the
        fault lands promptly; `heal` must also undo it when the fault never fired."""

    async def inject(self, target: Target) -> None:
        raise NotImplementedError

    async def heal(self) -> None:
        raise NotImplementedError
