"""What a fault window is seen to do, by the harness's own looks rather than by the fault's
return value: each action names the effect it must have (`Fault.observes`, in words) and
looks for it (`Fault.observe`) at three moments of its window:

- `injected`: right after inject returned (the process is gone, the cut drops a probe);
- `healing`: just before the heal undoes it (what the window did meanwhile: packets dropped
  by the cut, held back by the rate limit);
- `healed`: just after the heal (a new process running, the probe across the cut answered).

Each look is a `Seen`; the window's is the worst of them (`combine`). The nemesis writes it
as the window's `effect` row (history format 1.9) and keeps it in run.json; the policy's
`fault in effect` check reads it: a window whose effect was not seen, whose heal did not
undo it, or that failed or never fired, leaves the run unknown, never a pass.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Iterable, Optional

from ..history.schema import EFFECT_STATES
from ..sandbox.probe import gone, proc_state
from ..sandbox.process import stopped as all_stopped
from ..systems.runtime import port_open

Fault = Any  # a faults.base.Fault (base imports nothing of this module's, and this nothing of base's)

OBSERVED, NOT_OBSERVED, NOT_HEALED, FAILED, NOT_KNOWN = EFFECT_STATES
INJECTED, HEALING, HEALED = "injected", "healing", "healed"
STAGES = (INJECTED, HEALING, HEALED)
# worst first: the window's state is the first of these any look gave
_ORDER = (FAILED, NOT_OBSERVED, NOT_HEALED, NOT_KNOWN, OBSERVED)
LOOK_S = 15.0  # a look that takes longer is "not known"
EXIT_LOOK_S = 3.0  # how long an external node killed by its hook has to stop answering


@dataclass(frozen=True)
class Seen:
    state: str
    evidence: str

    @property
    def value(self) -> Optional[int]:
        """The effect row's value: 1 observed, None not known, 0 otherwise."""
        return 1 if self.state == OBSERVED else None if self.state == NOT_KNOWN else 0

    def detail(self) -> str:
        return f"{self.state}: {self.evidence}"


def observed(evidence: str) -> Seen:
    return Seen(OBSERVED, evidence)


def not_observed(evidence: str) -> Seen:
    return Seen(NOT_OBSERVED, evidence)


def not_healed(evidence: str) -> Seen:
    return Seen(NOT_HEALED, evidence)


def not_known(evidence: str) -> Seen:
    return Seen(NOT_KNOWN, evidence)


def failed(evidence: str) -> Seen:
    return Seen(FAILED, evidence)


def judge(ok: bool, evidence: str, stage: str = INJECTED) -> Seen:
    """Observed when `ok`; else not observed (or, after the heal, not healed)."""
    if ok:
        return observed(evidence)
    return not_healed(evidence) if stage == HEALED else not_observed(evidence)


def combine(looks: Iterable[Seen]) -> Optional[Seen]:
    """The window's state from its looks: the worst one, with every look's evidence."""
    looks = [s for s in looks if s is not None]
    if not looks:
        return None
    state = next(s for s in _ORDER if any(x.state == s for x in looks))
    return Seen(state, "; ".join(dict.fromkeys(x.evidence for x in looks if x.evidence)))


async def look(fault: Fault, stage: str) -> Optional[Seen]:
    """One of a fault's looks, bounded: one that raises or hangs says so as not known; one
    that did not see its effect while another fault was in effect where it looked, too."""
    before = _elsewhere(fault)
    try:
        seen = await asyncio.wait_for(fault.observe(stage), LOOK_S)
    except Exception as e:
        return not_known(f"the {stage} look failed: {type(e).__name__}: {e}"[:300])
    return confounded(seen, [*before, *_elsewhere(fault)])


def _elsewhere(fault: Fault) -> list[str]:
    looked = fault.looked_at()
    return fault.ctx.elsewhere(looked) if looked else []


def confounded(seen: Optional[Seen], others: list[str]) -> Optional[Seen]:
    """A look that did not see its fault's effect (or its undoing) while other faults of the
    run were in effect on a node it looked at cannot tell its fault from theirs (a delay's
    probe after its heal, silent because another fault cut the leader off): not known, with
    both said, rather than blamed on its own fault."""
    if seen is None or seen.state not in (NOT_OBSERVED, NOT_HEALED) or not others:
        return seen
    return not_known(f"{seen.evidence} (while {'; '.join(dict.fromkeys(others))} in effect there: "
                     f"not told from its own)")


# -- processes -----------------------------------------------------------------------------

def pid_of(fault: Fault, node: str) -> Optional[int]:
    """The pid of the node's process (a consumer group's member's), where the harness holds it."""
    group = fault.ctx.group()
    if group is not None and group.owns(node):
        return group.pid_of(node)
    return fault.ctx.cluster.pid_of(node)


def pids(fault: Fault, nodes: list[str]) -> dict[str, Optional[int]]:
    return {n: pid_of(fault, n) for n in nodes}


async def serving(cluster, group, node: str) -> Optional[str]:
    """Why the node is not serving (None: it is): a consumer group's member's process
    running; else the cluster's own look, and for a broker node, its client port answering
    from the client host."""
    if group is not None and group.owns(node):
        return "its member process is not running" if group.down(node) else None
    why = await asyncio.to_thread(cluster.down_why, node)
    if why or node not in cluster.node_names:  # a service host (ZooKeeper, a bookie): running is what is seen
        return why
    try:
        addr = cluster.address(node)
    except LookupError:  # no client port to try
        return None
    return None if await port_open(addr, 1.0) else "its client port does not answer"


async def _down_within(fault: Fault, node: str, bound: float) -> Optional[str]:
    """Why the node no longer serves, asked until it does not or `bound` passes: a kill hook
    returns once its signal is sent, and a loaded machine takes a moment to end the process
    and close its port (seen: a Redis killed by `kill -9` in its hook still answering at the
    look, the suite's two workers beside it)."""
    deadline = time.monotonic() + bound
    while True:
        why = await serving(fault.ctx.cluster, fault.ctx.group(), node)
        if why is not None or time.monotonic() >= deadline:
            return why
        await asyncio.sleep(0.1)


async def exited(fault: Fault, nodes: list[str], before: dict[str, Optional[int]]) -> Seen:
    """Each node's process is gone: the pid held before is no longer running (a local
    cluster's, a group member's); where no pid is held (an external cluster), the node no
    longer answers (its port closed, or its `alive` hook says so)."""
    gone_: list[str] = []
    left: list[str] = []
    for n in nodes:
        pid = before.get(n)
        if pid is not None:
            (gone_ if gone(pid) else left).append(f"{n} (pid {pid})")
        elif (why := await _down_within(fault, n, EXIT_LOOK_S)) is not None:
            gone_.append(f"{n} ({why})")
        else:
            left.append(f"{n} (still answering {EXIT_LOOK_S:.0f} s on)")
    if left:
        return not_observed("still running: " + ", ".join(left))
    return observed("gone: " + ", ".join(gone_))


async def restarted(fault: Fault, nodes: list[str], before: dict[str, Optional[int]],
                    stage: str = HEALED) -> Seen:
    """Each node runs again as a new process (another pid than before; an external node
    answers again)."""
    cluster, group = fault.ctx.cluster, fault.ctx.group()
    back, down = [], []
    for n in nodes:
        pid = pid_of(fault, n)
        if before.get(n) is not None or (group is not None and group.owns(n)):
            running = pid is not None and not gone(pid)
            if running and pid != before.get(n):
                back.append(f"{n} as pid {pid}")
            else:
                down.append(f"{n} ({'not running' if not running else 'the same pid ' + str(pid)})")
        elif (why := await asyncio.to_thread(cluster.down_why, n)) is None:
            back.append(f"{n} answering")
        else:
            down.append(f"{n} ({why})")
    if down:
        return judge(False, "not running again: " + ", ".join(down), stage)
    return observed("running again: " + ", ".join(back))


def _stop_state(pid: Optional[int]) -> Optional[str]:
    """T when every thread of the process is stopped, else its state (one still running
    makes it not stopped: it may still take work)."""
    state = proc_state(pid)
    if state == "T" and not all_stopped(pid):
        return "T, a thread still running"
    return state


def stopped(fault: Fault, nodes: list[str], stage: str) -> Seen:
    """Each node's process is stopped (SIGSTOP: state T in /proc) during the window, and no
    longer after the heal; not known where no pid is held (an external cluster's pause hook:
    a paused process still takes TCP connections, so no probe from outside can tell)."""
    states = {n: _stop_state(pid_of(fault, n)) for n in nodes}
    if any(pid_of(fault, n) is None for n in nodes):
        return not_known("no pid held for " + ", ".join(n for n in nodes if pid_of(fault, n) is None)
                         + " (a paused process still accepts connections: no probe can tell)")
    if stage == HEALED:
        bad = [n for n, s in states.items() if s == "T"]
        return judge(not bad, "still stopped: " + ", ".join(bad) if bad else "running again (not state T)", stage)
    bad = [f"{n} (state {s})" for n, s in states.items() if s != "T"]
    return judge(not bad, "not stopped: " + ", ".join(bad) if bad else
                 "stopped (state T): " + ", ".join(states), stage)
