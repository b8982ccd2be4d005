"""Network faults, applied inside the node namespaces (iptables, tc, ss -K).

Which links each fault covers (the client host is one namespace for every client):
- partition / bridge / majorities-ring: node<->node links only; clients still reach every node.
- isolate: the node's links to every other node and to the clients.
- isolate-from: the node's links to the set in `from` (peers, clients, coordinator, …).

Here the cuts (and NetFault, what every network fault shares); shaping.py: loss, delay,
bandwidth; tcp.py: tcp-kill, tcp-reject.
"""
from __future__ import annotations

import asyncio
from itertools import combinations
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field

from ..sandbox import netfilter, probe
from . import effect
from .base import Fault, Target
from .effect import HEALED, HEALING, INJECTED
from .registry import FAULTS
from .targets import TargetError, check_expression, names, parse, resolve_set

DEV = "eth0"
# a rule that only the harness's own probes match, so that their packets are counted apart
# from the cluster's (the cut's evidence is what the cluster sent into it)
PROBE = f"-p tcp --dport {probe.PROBE_PORT} -m comment --comment bc-probe"
PROBE_IN = f"-p tcp --sport {probe.PROBE_PORT} -m comment --comment bc-probe"
COUNT = "-m comment --comment bc-count"  # a rule without a target: it only counts
CUT_PROBE_S = 0.3  # a probe across a cut waits this long for an answer


class NetFault(Fault):
    needs = frozenset({"netns"})

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.chains: list[netfilter.Chains] = []

    @property
    def sb(self):
        return self.ctx.sandbox

    def ns(self, node: str) -> str:
        return self.sb.hosts[node].ns

    def ip(self, node: str) -> str:
        return self.sb.hosts[node].ip

    @property
    def tag(self) -> str:
        return f"bc{self.ctx.uid}-{self.name}"

    @classmethod
    def check(cls, params, node_names, offers, scenario) -> None:
        expr = getattr(params, "from_", None)
        if expr is not None:
            check_expression(expr, node_names, offers, relative=True, field="params.from")

    async def from_set(self, expr: str, targeted: list[str]) -> tuple[list[str], bool]:
        """The nodes a `from` expression names (never the target's own) and whether it names
        the client host."""
        nodes = [n for n in await resolve_set(expr, self.ctx, targeted) if n not in targeted]
        return nodes, any(name == "clients" for name, _ in parse(expr)[0])

    async def endpoints(self, expr: Optional[str], targeted: list[str]) -> list[str]:
        """IPs of a `from` set (None: everyone but the target, clients included)."""
        if expr is None:
            nodes, clients = [n for n in self.ctx.cluster.host_names if n not in targeted], True
        else:
            nodes, clients = await self.from_set(expr, targeted)
        return [self.ip(n) for n in nodes] + ([self.sb.client.ip] if clients else [])

    def probe_ns(self, host: str) -> str:
        return self.sb.client.ns if host == "clients" else self.ns(host)

    def probe_ip(self, host: str) -> str:
        return self.sb.client.ip if host == "clients" else self.ip(host)

    async def reach(self, src: str, dst: str, timeout: float = CUT_PROBE_S) -> probe.Reach:
        return await asyncio.to_thread(probe.reach, self.probe_ns(src), self.probe_ip(dst), probe.PROBE_PORT, timeout)

    def counted(self) -> dict[str, int]:
        """Packets the fault's rules matched so far, the harness's probes apart: per target
        (its rule's jump: DROP, NFQUEUE, REJECT, or the counting rules' "count")."""
        out: dict[str, int] = {}
        for c in self.chains:
            for chain in (c.cin, c.cout):
                for packets, _, text in probe.chain_counters(c.ns, chain):
                    if "bc-probe" in text:
                        continue
                    kind = "count" if "bc-count" in text else text.split()[2] if len(text.split()) > 2 else "?"
                    out[kind] = out.get(kind, 0) + packets
        return out

    def load(self, per_node: dict[str, tuple[list[str], list[str]]]) -> None:
        """Load every node's rules at once, so the fault lands in one step."""
        todo = []
        for node, (rin, rout) in per_node.items():
            if rin or rout:
                c = netfilter.Chains(self.ns(node), self.tag)
                self.chains.append(c)
                todo.append((c, rin, rout))
        netfilter.load(todo)

    async def heal(self) -> None:
        errors = []
        while self.chains:
            c = self.chains.pop()
            try:
                c.remove()
            except Exception as e:  # the others must still go
                errors.append(str(e))
        if errors:
            raise RuntimeError("; ".join(errors))


class Cut(NetFault):
    """Drop every packet on a set of links, in both directions, at both ends.

    Its look: a probe across one cut link gets no answer while the cut holds (and one
    across a link that stays open does), the cluster's own packets were dropped by it
    (none: the cut had nothing to cut), and the probe is answered again after the heal."""

    observes = ("a probe across a cut link silent during the window (one across a link that stays open "
                "answered), the cluster's own packets dropped by the cut (none dropped: no effect), and the "
                "probe answered again after the heal")

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.cut_pair: Optional[tuple[str, str]] = None  # (from, to) probed across the cut
        self.open_pair: Optional[tuple[str, str]] = None  # (from, to) that must stay open

    def links(self, target: Target) -> set[tuple[str, str]]:
        raise NotImplementedError

    def looked_at(self) -> list[str]:
        return [*self.acts_on(), *(self.cut_pair or ()), *(self.open_pair or ())]

    async def inject(self, target: Target) -> None:
        self.nodes = list(target.nodes)
        links = await self.compute_links(target)
        per_node: dict[str, tuple[list[str], list[str]]] = {}
        for a, b in sorted(links):
            for x, y in ((a, b), (b, a)):
                if x == "clients":
                    continue
                yip = self.sb.client.ip if y == "clients" else self.ip(y)
                rin, rout = per_node.setdefault(x, ([], []))
                rin.append(f"-s {yip} -j DROP")
                rout += [f"-d {yip} {PROBE} -j DROP", f"-d {yip} -j DROP"]
        self.effect["links_cut"] = sorted(f"{a}-{b}" for a, b in links)
        self.cut_pair, self.open_pair = probe_pairs(links, target.nodes, self.ctx.cluster.host_names)
        self.load(per_node)

    async def observe(self, stage: str):
        if self.cut_pair is None:
            return effect.not_observed("no link to cut") if stage == INJECTED else None
        a, b = self.cut_pair
        if stage == INJECTED:
            cut = await self.reach(a, b)
            looks = [effect.judge(not cut.answered, cut.words(f"probe {a} -> {b} across the cut"))]
            if self.open_pair is not None:
                x, y = self.open_pair
                kept = await self.reach(x, y, 2.0)
                looks.append(effect.judge(kept.answered, kept.words(f"probe {x} -> {y}, which stays open")))
            return effect.combine(looks)
        if stage == HEALING:
            dropped = sum(self.counted().values())
            self.effect["packets_dropped"] = dropped
            return effect.judge(dropped > 0, f"{dropped:,} of the cluster's packets dropped by the cut" if dropped
                                else "none of the cluster's packets crossed the cut (0 dropped)")
        back = await self.reach(a, b, 2.0)
        return effect.judge(back.answered, back.words(f"probe {a} -> {b} after the heal"), HEALED)

    async def compute_links(self, target: Target) -> set[tuple[str, str]]:
        return self.links(target)


def probe_pairs(links: set[tuple[str, str]], targeted: list[str],
                hosts: list[str]) -> tuple[Optional[tuple[str, str]], Optional[tuple[str, str]]]:
    """A cut link to probe (from a host with a namespace: never from the clients, whose
    packets the far end's INPUT would count as the cluster's) and a link that stays open,
    one with a target first where there is one."""
    cut = next(((b, a) if a == "clients" else (a, b) for a, b in sorted(links)), None)
    closed = {frozenset(x) for x in links}
    pairs = [(x, y) for x in hosts for y in [*hosts, "clients"] if x != y and frozenset((x, y)) not in closed]
    pairs.sort(key=lambda p: (p[0] not in targeted and p[1] not in targeted, p[1] == "clients"))
    return cut, (pairs[0] if pairs else None)


@FAULTS.register("partition")
class Partition(Cut):
    description = "split the nodes into groups that cannot reach each other (target n1,n2|n3, or one side: leader)"
    family = "network"
    takes_groups = True

    @classmethod
    def check(cls, params, node_names, offers, scenario) -> None:
        super().check(params, node_names, offers, scenario)
        if len(node_names) < 2:
            raise TargetError("a partition needs at least 2 nodes", "target")

    def links(self, target: Target) -> set[tuple[str, str]]:
        out = set()
        for g1, g2 in combinations(target.groups, 2):
            out |= {tuple(sorted((a, b))) for a in g1 for b in g2}
        return out


@FAULTS.register("isolate")
class Isolate(Cut):
    description = "cut the target off from every other node and from the clients"
    family = "network"

    def links(self, target: Target) -> set[tuple[str, str]]:
        others = [n for n in self.ctx.cluster.host_names if n not in target.nodes]
        return {tuple(sorted((a, b))) for a in target.nodes for b in others} | {(a, "clients") for a in target.nodes}


class FromParams(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    from_: str = Field(..., alias="from", description="who the target loses: peers, clients, coordinator, "
                                                      "leader, followers, n2,n3, …")


@FAULTS.register("isolate-from")
class IsolateFrom(Cut):
    description = "cut the target off from params.from only (peers, clients, coordinator, …): " \
                  "e.g. a leader isolated from its peers but not from the clients"
    family = "network"
    example = {"from": "followers"}
    Params = FromParams

    @classmethod
    def check_target(cls, params, target: str) -> None:
        """A target of every node leaves none to cut it from, only the clients. (One that
        merely names the nodes `from` names, `leader` from `leader`, fails at its inject:
        the positive control of a failed fault, scenarios/kafka-no-effect-controls.yaml.)"""
        if "all" in names(target) and "clients" not in names(params.from_):
            raise TargetError("isolate-from 'all' leaves no node to cut it from (give params.from: clients, "
                              "or use isolate)", "target")

    @classmethod
    def example_for(cls, target: str) -> dict:
        """The example's `from`, unless the target holds every node it names: then its peers
        (or, for `all`, the clients)."""
        held = names(target)
        if "all" in held:
            return {"from": "clients"}
        return {"from": "peers"} if names(cls.example["from"]) <= held else dict(cls.example)

    async def compute_links(self, target: Target) -> set[tuple[str, str]]:
        expr = self.p.from_
        others, clients = await self.from_set(expr, target.nodes)
        out = {tuple(sorted((a, b))) for a in target.nodes for b in others}
        if clients:
            out |= {(a, "clients") for a in target.nodes}
        if not out:
            raise LookupError(f"isolate-from {expr!r}: nothing to cut the target {target.nodes} from")
        return out


@FAULTS.register("bridge")
class Bridge(Cut):
    description = "two halves that cannot reach each other, except through the target node, which sees both"
    family = "network"

    @classmethod
    def check(cls, params, node_names, offers, scenario) -> None:
        if len(node_names) < 3:
            raise TargetError("a bridge needs at least 3 nodes", "target")

    def links(self, target: Target) -> set[tuple[str, str]]:
        rest = sorted(n for n in self.ctx.cluster.node_names if n not in target.nodes)
        self.ctx.rng.shuffle(rest)
        half = len(rest) // 2
        a, b = rest[:half], rest[half:]
        self.effect["halves"] = [sorted(a), sorted(b)]
        return {tuple(sorted((x, y))) for x in a for y in b}


@FAULTS.register("majorities-ring")
class MajoritiesRing(Cut):
    description = "every node sees a majority, no two nodes the same one (a ring of the nodes; target ignored)"
    family = "network"
    example_target = "all"

    @classmethod
    def check(cls, params, node_names, offers, scenario) -> None:
        if len(node_names) < 4:
            raise TargetError("majorities-ring needs at least 4 nodes (with 3, every node already sees "
                              "a majority)", "target")

    def links(self, target: Target) -> set[tuple[str, str]]:
        ring = sorted(self.ctx.cluster.node_names)
        self.ctx.rng.shuffle(ring)
        n = len(ring)
        # a node plus `reach` neighbours on each side is a majority: 1 + 2*reach >= n//2 + 1
        reach = -(-(n // 2) // 2)
        out = set()
        for i, j in combinations(range(n), 2):
            d = min(abs(i - j), n - abs(i - j))
            if d > reach:
                out.add(tuple(sorted((ring[i], ring[j]))))
        self.effect["ring"] = ring
        return out
