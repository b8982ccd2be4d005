"""Network faults that shape traffic rather than cut it, inside the node namespaces: loss
(iptables' statistic match, entering and leaving), delay (an NFQUEUE delayer: nfqdelay.py;
no netem here) and bandwidth (tc tbf), leaving the target node, to everyone or to the
`from` set."""
from __future__ import annotations

import asyncio
import os
import re
import sys
import time
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..sandbox import netfilter, probe, process
from . import effect
from .base import Target
from .effect import HEALED, HEALING, INJECTED
from .network import COUNT, DEV, PROBE, PROBE_IN, NetFault
from .registry import FAULTS


class LossParams(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    probability: float = Field(..., gt=0, le=1, description="chance each packet is dropped, each way")
    from_: Optional[str] = Field(None, alias="from", description="only the links to this set (default: all)")


@FAULTS.register("loss")
class Loss(NetFault):
    description = "drop each packet entering or leaving the target with params.probability"
    family = "network"
    example = {"probability": 0.3}
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
    example = {"delay_ms": 50}
    machine = ("nfqueue",)
    observes = ("a probe's round trip from the target across the delayed link at least the delay during the "
                "window and short again after the heal; the cluster's packets delayed (none: no effect)")
    Params = DelayParams

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.qdisc: list[str] = []
        self.delayers: dict = {}
        self.probed: Optional[tuple[str, str]] = None  # (target, a host on the delayed link)

    def looked_at(self) -> list[str]:
        return [*self.acts_on(), *(self.probed or ())]

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
    example = {"rate": "1mbit"}
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
