"""A member replaced: the target leaves the cluster for good (stopped, forgotten by the
others, its data deleted) and at the heal a new, empty member takes its place and copies
everything from the others, as when an operator replaces a failed machine. Until the new
member holds everything, the cluster has one copy fewer; what it copies from is what the
others kept."""
from __future__ import annotations

import time

from pydantic import BaseModel, ConfigDict, Field

from ..systems.base import REPLACE
from . import effect
from .base import Fault, Target
from .effect import HEALED, INJECTED
from .registry import FAULTS


class ReplaceParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    wait: float = Field(60.0, gt=0, le=600, description="seconds the new member may take to hold everything "
                                                        "(the heal), its full copy included")
    same_name: bool = Field(False, description="the new member comes back under the removed one's name (NATS: "
                                               "its server_name, as Jepsen's nemesis does, which NATS asks not to "
                                               "do; default a name of its own, n2-r1); Redis names no member; a "
                                               "VerneMQ node's name is its address, the same either way")


@FAULTS.register("replace")
class Replace(Fault):
    description = ("a member replaced: the target leaves the cluster for good (stopped, forgotten, its data "
                   "deleted) and the heal puts a new, empty member in its place, which copies everything from the "
                   "others (Redis: a replica shut down, SENTINEL RESET on every sentinel, a new server replicating "
                   "from the primary: a full resync; the target must not be the primary. NATS: the server shut down, "
                   "its store deleted, $JS.API.SERVER.REMOVE; a new server under a new name takes its place. "
                   "Pulsar, with autorecovery: a bookie shut down, its disk deleted, AutoRecovery's decommission "
                   "copying its ledgers elsewhere; a new, empty bookie, in sync once no ledger is under-replicated. "
                   "VerneMQ: vmq-admin cluster leave -k, its sessions cut and its offline queues migrated to the "
                   "others; a new, empty node joins under its name, in sync once it knows the receiver's subscription)")
    family = "membership"
    example_target = "follower"
    destroys_data = True
    observes = ("the target gone from the members the cluster names during the window, and after the heal a new "
                "member in its place holding everything (Redis: the primary's full resyncs one more; NATS: the new "
                "server among the stream's peers, each current; Pulsar: the new bookie writable and no ledger "
                "under-replicated; VerneMQ: every member running and the new node's subscriber store knowing the "
                "receiver's subscription)")
    Params = ReplaceParams
    needs = frozenset({REPLACE})

    def inject_bound(self, n_nodes: int) -> float:
        # per node a clean stop and the others told (Redis: each sentinel reset in turn, each
        # up to 30 s until it knows the others again: about 10 s, its replicas' INFO period)
        return 30.0 + 100.0 * n_nodes

    def heal_bound(self) -> float:
        return max(super().heal_bound(), self.p.wait + 30.0)

    async def inject(self, target: Target) -> None:
        self.effect_ns = time.monotonic_ns()
        for n in target.nodes:
            self.nodes.append(n)
            self.effect.setdefault("removed", {})[n] = await self.ctx.roles.remove_member(n, self.p.same_name)

    async def heal(self) -> None:
        while self.nodes:
            n = self.nodes[0]
            self.effect.setdefault("added", {})[n] = await self.ctx.roles.add_member(n, self.p.wait)
            self.nodes.pop(0)

    async def observe(self, stage: str):
        if stage == INJECTED and "removed" in self.effect:
            gone = {n: r.get("name", n) not in r.get("members_after", [n]) for n, r in self.effect["removed"].items()}
            return effect.judge(all(gone.values()), "; ".join(
                f"{n}: members {r.get('members_before')} -> {r.get('members_after')}"
                for n, r in self.effect["removed"].items()))
        if stage == HEALED and "added" in self.effect:
            ok = {n: a.get("in_sync_s") is not None and a.get("name", n) in a.get("members_after", [])
                  for n, a in self.effect["added"].items()}
            return effect.judge(all(ok.values()), "; ".join(_added(n, a) for n, a in self.effect["added"].items()),
                                HEALED)
        return None


def _added(node: str, a: dict) -> str:
    synced = a.get("in_sync_s")
    when = f"in sync after {synced} s" if synced is not None else "not in sync within the bound"
    return f"{node}: a new member, {when} ({a.get('copied') or 'the copy not said'})"
