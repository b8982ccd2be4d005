"""What a fault is: an action with `inject`/`heal`, the capabilities it needs, and the
context it acts in (a deployment's cluster and roles, the sandbox, a seeded generator)."""
from __future__ import annotations

import asyncio
import copy
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
    # distinguishes concurrent faults' firewall chains and queues; the id of its window
    uid: int = 0
    # a history row of the nemesis: (type, node, detail, window) -> its t_ns. For faults that
    # record windows of their own (a rolling restart: one per node)
    record: Callable[[str, Optional[str], Optional[str], Optional[int]], int] = lambda *a: 0
    # workload.group's members (workload/group.py: names, owns, kill, down, start_member), or
    # None: the `consumer` targets and the faults that act on them
    group: Callable[[], Any] = lambda: None
    # whether another fault of the run holds `node` down now (a combined schedule): a heal
    # leaves such a node to that fault's heal
    held_elsewhere: Callable[[str], bool] = lambda node: False
    # the other faults of the run in effect now on any of these nodes (a window open or its
    # heal under way), each as "action target on nodes": a look that did not see its effect
    # there cannot tell its own fault from theirs (effect.look)
    elsewhere: Callable[[list[str]], list[str]] = lambda nodes: []
    # a fault recording windows of its own has each watched for the topics' owners
    # (faults/owners.py): its id from its fault row on, None once its node is back
    watch: Callable[[Optional[int]], None] = lambda window: None

    def sub_window(self, i: int) -> int:
        """The id of this fault's i-th own window (i >= 1): unique in the run, apart from
        every fault's own id (those stay below 10**6)."""
        return 10**6 + self.uid * 1000 + i

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


# the fault families a user asks for, in the order of the README's matrix columns; each
# action declares its own (`Fault.family`)
# a heal's bound, whole (Fault.heal_bound): a kill's restart of a JVM broker waits up to
# 90 s for it to serve, a Kafka 3.9 one for its old ZooKeeper session first
HEAL_S = 240.0
FAMILIES = ("crash", "network", "power-off", "corrupt", "disk lost", "clock", "membership", "graceful")


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
    # its heal starts the nodes it took down (a kill's, a power cut's): another fault's heal
    # leaves such a node to it while its window is in effect (FaultContext.held_elsewhere)
    starts_at_heal: ClassVar[bool] = False
    # the window opens when inject starts, not when it returns (a slow graceful operation)
    opens_window_first: ClassVar[bool] = False
    # inject records the fault's windows itself (ctx.record, ctx.sub_window), one per step
    own_windows: ClassVar[bool] = False
    # the effect the action must have and how the harness sees it, in words (`brokerchaos
    # faults`, the docs): every action says, and `observe` looks for it (faults/effect.py)
    observes: ClassVar[str] = ""
    # its column in the README's matrix (one of FAMILIES), or None: in no column. Declared by
    # every action, without a default (tests/test_faults_unit.py)
    family: ClassVar[Optional[str]]
    # what the machine needs for it besides its capabilities' needs (doctor's names)
    machine: ClassVar[tuple[str, ...]] = ()
    # it may target workload.group's members (the `consumer` targets)
    acts_on_consumers: ClassVar[bool] = False
    # it destroys what its target had stored (corrupt, truncate, kill-wipe): on every node at
    # once, the loss is the fault's, not the system's, and explore does not draw it there
    destroys_data: ClassVar[bool] = False
    # what `brokerchaos new` writes for it: values for the settings without a default, the
    # target, and the nodes where the action needs more than three
    example: ClassVar[dict[str, Any]] = {}
    example_target: ClassVar[str] = "leader"
    example_nodes: ClassVar[int] = 3

    def __init__(self, ctx: FaultContext) -> None:
        self.ctx = ctx
        self.p: Any = ctx.params
        self.nodes: list[str] = []
        # the target as resolved when it fired (set before inject): what the looks check
        self.target: Optional[Target] = None
        # what the fault measured or did, for run.json (e.g. connections reset, method used)
        self.effect: dict[str, Any] = {}
        # the fault wrote its window's `ready` row itself: the heal adds no second one
        self.ready_recorded = False
        # when the fault took effect (monotonic ns), if before inject returned: a kill is in
        # effect at the signal, its processes reaped later
        self.effect_ns: Optional[int] = None
        # set once a heal under way has gone as far as the read needs (a staged return that
        # lets the read begin between its starts: kill's read_after); None: the whole heal
        self.readable: Optional[asyncio.Event] = None

    def acts_on(self) -> list[str]:
        """The nodes this fault acts on: those it names (`nodes`), else its target's."""
        return list(self.nodes) or (list(self.target.nodes) if self.target is not None else [])

    def looked_at(self) -> list[str]:
        """The nodes this fault's looks read: those it acts on; a fault that probes a link
        adds the node at its other end."""
        return self.acts_on()

    def held_down(self) -> list[str]:
        """The nodes this fault still holds down on purpose (while in effect, or while a heal
        that let the read begin has not started them yet)."""
        return list(self.nodes)

    # capabilities a setting adds to `needs` (needs_for), by the setting's name: a refusal
    # names that field
    needs_by_param: ClassVar[dict[str, str]] = {}

    @classmethod
    def needs_for(cls, params: Any) -> frozenset[str]:
        """The capabilities this fault needs with these settings."""
        return cls.needs

    @classmethod
    def check(cls, params: Any, node_names: list[str], offers: frozenset[str], scenario: "Scenario") -> None:
        """Static checks beyond the params model and the capabilities (raise targets.TargetError)."""

    @classmethod
    def check_target(cls, params: Any, target: str) -> None:
        """Static checks of the target expression with these settings: one this fault can
        never act on (a follower's step-down of a leadership it does not hold) is refused
        here (raise targets.TargetError), not drawn and found undecided at run time."""

    @classmethod
    def example_for(cls, target: str) -> dict:
        """Settings that fit `target`, for a fault drawn rather than written (explore):
        `example` unless the plugin knows better."""
        return copy.deepcopy(cls.example)

    @classmethod
    def before_write(cls, params: Any, cluster: Any) -> None:
        """Set-up this fault needs once the cluster serves and before the write begins (the
        run calls it in a thread, for each fault of the run); nothing by default."""

    def inject_bound(self, n_nodes: int) -> float:
        """Seconds an inject of `n_nodes` may take: the run waits that long for one under
        way when the write phase ends, instead of cutting it short."""
        return 30.0

    def heal_bound(self) -> float:
        """Seconds a heal may take as a whole: past it, it is stopped and fails, and the run
        says so. A JVM broker's restart and its wait to serve fit well within the default;
        an external cluster's hooks (a start, then its wait to be up) get two of theirs more."""
        return HEAL_S + 2 * self.ctx.cluster.step_bound_s

    async def prepare(self) -> None:
        """Slow set-up that does not disturb anything, done before the trigger so that the
        fault lands promptly; `heal` must also undo it when the fault never fired."""

    async def inject(self, target: Target) -> None:
        raise NotImplementedError

    async def heal(self) -> None:
        raise NotImplementedError

    async def observe(self, stage: str) -> Any:
        """The harness's own look for this fault's effect at one stage of its window
        (effect.py: `injected`, `healing`, `healed`): an effect.Seen, or None where there is
        nothing to look at then (a window no look saw is "not known"). Every action writes
        it (tests/test_faults_unit.py)."""
        return None


def needs_of(scenario: "Scenario") -> frozenset[str]:
    """Everything the scenario's faults need of its deployment, with their settings."""
    from .registry import FAULTS

    out: set[str] = set()
    for _, f in scenario.fault_fields():
        cls = FAULTS.get(f.action)
        out |= cls.needs_for(cls.Params.model_validate(f.params))
    return frozenset(out)


def supported(cls: type[Fault], offers: frozenset[str], params: Any = None) -> bool:
    return cls.needs_for(params if params is not None else cls.Params.model_construct()) <= offers
