"""What a fault is: an action with `inject`/`heal`, the capabilities it needs, and the
context it acts in (a deployment's cluster and roles, the sandbox, a seeded generator)."""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Optional

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from ..sandbox import Sandbox
    from ..scenario import Scenario
    from ..systems import Deployment


class NoParams(BaseModel):
    model_config = ConfigDict(extra="forbid")


@dataclass
class FaultContext:
    deployment: "Deployment"
    rng: random.Random
    sandbox: Optional["Sandbox"] = None
    params: BaseModel = field(default_factory=NoParams)
    # the nodes the workload's clients are connected to right now (the `client-node` target)
    client_nodes: Callable[[], list[str]] = lambda: []
    # distinguishes concurrent faults' firewall chains and queues
    uid: int = 0

    @property
    def cluster(self):
        return self.deployment.cluster

    @property
    def roles(self):
        return self.deployment.roles


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

    name: ClassVar[str]  # set by FAULTS.register
    description: ClassVar[str]
    Params: ClassVar[type[BaseModel]] = NoParams
    # capabilities a deployment must offer (systems/cluster.py: kill, stop, start, pause,
    # netns, hooks; a system's own: coordinator)
    needs: ClassVar[frozenset[str]] = frozenset()
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
    def needs_for(cls, params: Any) -> frozenset[str]:
        """The capabilities this fault needs with these settings."""
        return cls.needs

    @classmethod
    def check(cls, params: Any, node_names: list[str], offers: frozenset[str], scenario: "Scenario") -> None:
        """Static checks beyond the params model and the capabilities (raise targets.TargetError)."""

    async def prepare(self) -> None:
        """Slow set-up that does not disturb anything, done before the trigger so that the
        fault lands promptly; `heal` must also undo it when the fault never fired."""

    async def inject(self, target: Target) -> None:
        raise NotImplementedError

    async def heal(self) -> None:
        raise NotImplementedError


def supported(cls: type[Fault], offers: frozenset[str], params: Any = None) -> bool:
    return cls.needs_for(params if params is not None else cls.Params.model_construct()) <= offers
