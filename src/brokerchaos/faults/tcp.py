"""TCP faults on the clients' connections, inside the node namespaces: tcp-kill (`ss -K`:
the connections between the target and the client host reset), tcp-reject (the same, and
every new one the clients try refused, until healed)."""
from __future__ import annotations

import asyncio
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field

from ..sandbox import netfilter
from . import effect
from .base import Target
from .effect import HEALING
from .network import NetFault
from .registry import FAULTS


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
