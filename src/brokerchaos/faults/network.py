"""Network faults, applied inside the node namespaces (iptables, tc, ss -K).

Which links each fault covers (the client host is one namespace for every client):
- partition / bridge / majorities-ring: node<->node links only; clients still reach every node.
- isolate: the node's links to every other node and to the clients.
- isolate-from: the node's links to the set in `from` (peers, clients, coordinator, …).
- loss / delay / bandwidth: traffic leaving (delay, bandwidth) or entering and leaving (loss)
  the target node, to everyone or to the `from` set.
- tcp-kill: the TCP connections between the target and the client host.
- tcp-reject: the same connections, and every new one the clients try, until healed.
"""
from __future__ import annotations

import asyncio
import os
import re
import sys
import time
from itertools import combinations
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..sandbox import netfilter, probe, process
from . import effect
from .base import Fault, Target
from .effect import HEALED, HEALING, INJECTED
from .registry import FAULTS
from .targets import TargetError, check_expression, parse, resolve_set

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
    Params = FromParams

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


class LossParams(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    probability: float = Field(..., gt=0, le=1, description="chance each packet is dropped, each way")
    from_: Optional[str] = Field(None, alias="from", description="only the links to this set (default: all)")


@FAULTS.register("loss")
class Loss(NetFault):
    description = "drop each packet entering or leaving the target with params.probability"
    family = "network"
    observes = "packets of the cluster's dropped by the rule during the window (none dropped: no effect), of those seen"
    Params = LossParams

    async def inject(self, target: Target) -> None:
        self.nodes = list(target.nodes)
        stat = f"-m statistic --mode random --probability {self.p.probability:.6f} -j DROP"
        ips = await self.endpoints(self.p.from_, target.nodes)
        rules = ([r for ip in ips for r in (f"-i {DEV} -s {ip} {COUNT}", f"-i {DEV} -s {ip} {stat}")],
                 [r for ip in ips for r in (f"-o {DEV} -d {ip} {COUNT}", f"-o {DEV} -d {ip} {stat}")])
        self.load({n: rules for n in target.nodes})

    async def observe(self, stage: str):
        if stage != HEALING:
            return None
        got = self.counted()
        dropped, seen = got.get("DROP", 0), got.get("count", 0)
        self.effect.update(packets_dropped=dropped, packets_seen=seen)
        return effect.judge(dropped > 0, f"{dropped:,} of {seen:,} packets dropped")


class DelayParams(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    delay_ms: float = Field(..., ge=1, le=10_000, description="added one-way delay on packets leaving the target")
    jitter_ms: float = Field(0.0, ge=0, description="uniform ± jitter (reorders packets, as netem does)")
    from_: Optional[str] = Field(None, alias="from", description="only the links to this set (default: all)")
    method: str = Field("auto", description="auto (netem where the kernel has it, else nfqueue), netem, nfqueue")
    direction: str = Field("out", description="out: packets leaving the target; in: packets arriving at it "
                                              "(from `from`: e.g. a client's requests on their way to a leader)")

    @field_validator("direction")
    @classmethod
    def _direction(cls, v: str) -> str:
        if v not in ("out", "in"):
            raise ValueError("expected out or in")
        return v

    @field_validator("method")
    @classmethod
    def _method(cls, v: str) -> str:
        if v not in ("auto", "netem", "nfqueue"):
            raise ValueError("expected auto, netem or nfqueue")
        return v

    @model_validator(mode="after")
    def _jitter(self) -> "DelayParams":
        if self.jitter_ms > self.delay_ms:
            raise ValueError("jitter_ms cannot exceed delay_ms")
        if self.method == "netem" and (self.from_ is not None or self.direction == "in"):
            raise ValueError("method netem delays all traffic leaving the target; `from` and direction in need nfqueue")
        return self


NFQDELAY = Path(__file__).with_name("nfqdelay.py")


@FAULTS.register("delay")
class Delay(NetFault):
    description = ("add params.delay_ms (± jitter_ms) to packets leaving the target (netem, or an NFQUEUE delayer), "
                   "or arriving at it (direction: in)")
    family = "network"
    machine = ("nfqueue",)
    observes = ("a probe's round trip from the target across the delayed link at least the delay during the "
                "window and short again after the heal; the cluster's packets delayed (none: no effect)")
    Params = DelayParams

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.qdisc: list[str] = []
        self.delayers: dict = {}
        self.probed: Optional[tuple[str, str]] = None  # (target, a host on the delayed link)

    async def observe(self, stage: str):
        if self.probed is None:
            return effect.not_observed("no link delayed") if stage == INJECTED else None
        src, dst = self.probed
        if stage in (INJECTED, HEALED):
            r = await self.reach(src, dst, 2 * self.p.delay_ms / 1e3 + 1.0)
            words = r.words(f"probe {src} -> {dst}" + (" after the heal" if stage == HEALED else ""))
            if stage == INJECTED:
                return effect.judge(r.answered and r.ms >= 0.7 * self.p.delay_ms, words)
            return effect.judge(r.answered and r.ms < 0.5 * self.p.delay_ms, words, HEALED)
        if self.qdisc:
            sent = sum((probe.qdisc_counters(self.ns(n), DEV) or {}).get("packets", 0) for n in self.qdisc)
        else:
            sent = self.counted().get("NFQUEUE", 0)
        self.effect["packets_delayed"] = sent
        return effect.judge(sent > 0, f"{sent:,} of the cluster's packets delayed" if sent
                            else "none of the cluster's packets crossed the delayed link")

    def _use_netem(self) -> bool:
        p = self.p
        if p.method == "nfqueue" or p.from_ is not None or p.direction == "in":
            return False
        ok = netfilter.has_netem(self.sb.ns_name("hub"))
        if not ok and p.method == "netem":
            raise RuntimeError("netem is not available in this kernel (method: netem)")
        return ok

    async def prepare(self) -> None:
        """Start an idle delayer in every node's namespace before the trigger: starting one
        takes ~50 ms, and the fault must land within 100 ms of its trigger."""
        if self._use_netem():
            return
        queue = self.ctx.uid
        todo = []
        for node in self.ctx.cluster.host_names:
            log = self.sb.dir / "faults" / f"nfqdelay-{node}-{queue}.log"
            # -I -S: no site packages to import, the delayer needs only the standard library
            argv = [os.path.realpath(sys.executable), "-I", "-S", str(NFQDELAY), "--queue", str(queue),
                    "--delay-ms", str(self.p.delay_ms), "--jitter-ms", str(self.p.jitter_ms),
                    "--seed", str(self.ctx.rng.randrange(1 << 30))]
            # the log is appended to: a delayer of an earlier injection said its line there too
            start = log.stat().st_size if log.exists() else 0
            proc = self.sb.spawn(self.sb.hosts[node], f"nfqdelay-{node}", argv, log)
            self.delayers[node] = proc
            todo.append((proc, log, start))
        for proc, log, start in todo:
            await _wait_for_line(proc, log, "nfqdelay: queue", 10.0, start)

    async def inject(self, target: Target) -> None:
        self.nodes = list(target.nodes)
        p = self.p
        self.probed = await self._probed(target.nodes)
        if self._use_netem():
            spec = ["netem", "delay", f"{p.delay_ms}ms"] + ([f"{p.jitter_ms}ms"] if p.jitter_ms else [])
            for n in target.nodes:
                r = netfilter.set_root_qdisc(self.ns(n), DEV, spec)
                if r.returncode != 0:
                    raise RuntimeError(f"netem on {n}: {r.stderr.strip()}")
                self.qdisc.append(n)
            self.effect["method"] = "netem"
            return
        if not self.delayers:
            await self.prepare()
        ips = await self.endpoints(p.from_, target.nodes)
        way, peer = ("-i", "-s") if p.direction == "in" else ("-o", "-d")
        match = [f"{peer} {ip} " for ip in ips] if p.from_ is not None else [""]
        jump = f"-j NFQUEUE --queue-num {self.ctx.uid} --queue-bypass"
        mark = PROBE_IN if p.direction == "in" else PROBE
        rules = [r for m in match for r in (f"{way} {DEV} {m}{mark} {jump}", f"{way} {DEV} {m}{jump}")]
        self.load({n: (rules, []) if p.direction == "in" else ([], rules) for n in target.nodes})
        self.effect.update(method="nfqueue", direction=p.direction)

    async def _probed(self, targeted: list[str]) -> Optional[tuple[str, str]]:
        """The target and a host on its delayed link (in `from`, else any other host)."""
        if self.p.from_ is None:
            others = [n for n in self.ctx.cluster.host_names if n not in targeted] + ["clients"]
        else:
            nodes, clients = await self.from_set(self.p.from_, targeted)
            others = nodes + (["clients"] if clients else [])
        return (targeted[0], others[0]) if targeted and others else None

    async def heal(self) -> None:
        errors = []
        try:
            await super().heal()  # stop queueing first, then let the held packets go
        except Exception as e:
            errors.append(str(e))
        while self.delayers:
            _, proc = self.delayers.popitem()
            await asyncio.to_thread(process.terminate, proc, 5.0)
            self.sb.forget(proc)
        while self.qdisc:
            n = self.qdisc.pop()
            try:
                netfilter.del_root_qdisc(self.ns(n), DEV)
            except Exception as e:
                errors.append(str(e))
        if errors:
            raise RuntimeError("; ".join(errors))


async def _wait_for_line(proc, log: Path, text: str, timeout: float, start: int = 0) -> None:
    """Until `text` is in what the process wrote to `log` past byte `start`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(log, "rb") as fh:
                fh.seek(start)
                if text.encode() in fh.read():
                    return
        except OSError:
            pass
        if not proc.alive():
            raise RuntimeError(f"{proc.name} exited: {log.read_text(errors='replace').strip()[-300:]}")
        await asyncio.sleep(0.01)
    raise RuntimeError(f"{proc.name} not ready within {timeout}s (see {log})")


_RATE = re.compile(r"^\d+(\.\d+)?(bit|kbit|mbit|gbit|bps|kbps|mbps|gbps)$")


class BandwidthParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rate: str = Field(..., description="tc rate: 1mbit, 500kbit, 10mbit …")
    burst: str = Field("32kbit", description="tc burst")
    latency: str = Field("400ms", description="how long a packet may wait before it is dropped")

    @field_validator("rate", "burst")
    @classmethod
    def _rate(cls, v: str) -> str:
        if not _RATE.match(v.lower()) and not re.match(r"^\d+[kmg]?b?$", v.lower()):
            raise ValueError(f"expected a tc rate such as 1mbit, got {v!r}")
        return v


@FAULTS.register("bandwidth")
class Bandwidth(NetFault):
    description = "limit the rate of packets leaving the target (tc tbf) to params.rate"
    family = "network"
    machine = ("tc",)
    observes = "packets held back or dropped by the rate limit (the qdisc's overlimits; none: nothing exceeded it)"
    Params = BandwidthParams

    async def observe(self, stage: str):
        if stage != HEALING:
            return None
        got = {n: probe.qdisc_counters(self.ns(n), DEV) for n in self.nodes}
        missing = [n for n, c in got.items() if c is None]
        if missing:
            return effect.not_observed(f"no rate limit in place on {', '.join(missing)}")
        held = sum(c["overlimits"] + c["dropped"] for c in got.values())
        self.effect["qdisc"] = got
        return effect.judge(held > 0, ", ".join(f"{n}: {c['packets']:,} packets sent, {c['overlimits']:,} held back, "
                                                f"{c['dropped']:,} dropped" for n, c in got.items()))

    async def inject(self, target: Target) -> None:
        for n in target.nodes:
            self.nodes.append(n)
            r = netfilter.set_root_qdisc(self.ns(n), DEV, ["tbf", "rate", self.p.rate, "burst", self.p.burst,
                                                                 "latency", self.p.latency])
            if r.returncode != 0:
                raise RuntimeError(f"tc tbf on {n}: {r.stderr.strip()}")

    async def heal(self) -> None:
        while self.nodes:
            netfilter.del_root_qdisc(self.ns(self.nodes[0]), DEV)
            self.nodes.pop(0)


class TcpKillParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    repeat: bool = Field(True, description="keep resetting new connections until healed (else once)")
    interval: float = Field(0.1, gt=0, le=60, description="seconds between resets while repeating")


@FAULTS.register("tcp-kill")
class TcpKill(NetFault):
    description = "reset every client TCP connection to the target (ss -K), once or repeatedly until healed"
    family = "network"
    machine = ("ss-kill",)
    observes = "client connections to the target reset (ss -K's count over every round; none: nothing to reset)"
    Params = TcpKillParams

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.task: Optional[asyncio.Task] = None

    async def observe(self, stage: str):
        if stage != HEALING:
            return None
        n = self.effect.get("connections_reset", 0)
        return effect.judge(n > 0, f"{n} client connections reset in {self.effect.get('rounds', 0)} rounds")

    async def _kill_all(self) -> int:
        return netfilter.kill_tcp([self.ns(n) for n in self.nodes], self.sb.client.ip)

    async def inject(self, target: Target) -> None:
        self.nodes = list(target.nodes)
        self.effect["connections_reset"] = await self._kill_all()
        self.effect["rounds"] = 1
        if self.p.repeat:
            self.task = asyncio.create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.p.interval)
            self.effect["connections_reset"] += await self._kill_all()
            self.effect["rounds"] += 1

    async def heal(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
            self.task = None


@FAULTS.register("tcp-reject")
class TcpReject(NetFault):
    """Unlike `isolate` (silence: the client waits for a timeout), the node answers every
    client packet with an RST, so the client knows at once and retries on its own back-off
    schedule: its disconnect and reconnect callbacks bound the outage, which is what a
    test of the client's way back needs."""

    description = "the target resets every client TCP connection and refuses new ones until healed " \
                  "(REJECT with tcp-reset); its peers still reach it"
    family = "network"
    observes = "client connections reset and client packets refused by the rule during the window (none: no effect)"

    async def observe(self, stage: str):
        if stage != HEALING:
            return None
        refused, reset = self.counted().get("REJECT", 0), self.effect.get("connections_reset", 0)
        self.effect["packets_refused"] = refused
        return effect.judge(refused + reset > 0, f"{reset} connections reset, {refused:,} client packets refused")

    async def inject(self, target: Target) -> None:
        self.nodes = list(target.nodes)
        # refuse first, then reset: a reconnect between the two would otherwise get through
        rule = f"-s {self.sb.client.ip} -p tcp -j REJECT --reject-with tcp-reset"
        self.load({n: ([rule], []) for n in self.nodes})
        self.effect["connections_reset"] = netfilter.kill_tcp([self.ns(n) for n in self.nodes], self.sb.client.ip)
