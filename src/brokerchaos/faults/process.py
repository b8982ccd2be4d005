"""Process faults: signals to the broker processes we started."""
from __future__ import annotations


from . import FAULTS
from .base import Fault


@FAULTS.register("none")
class NoFault(Fault):
    name = "none"
    description = "control run: no fault"
    recoverable = False

    async def inject(self, nodes: list[str]) -> None:
        pass

    async def heal(self) -> None:
        pass


@FAULTS.register("kill")
class Kill(Fault):
    name = "kill"
    description = "SIGKILL the target's broker process; heal starts it again on the same data"

    async def inject(self, nodes: list[str]) -> None:
        for n in nodes:
            self.ctx.system.kill_node(n)
            self.nodes.append(n)

    async def heal(self) -> None:
        system = self.ctx.system
        while self.nodes:
            n = self.nodes[0]
            if not system.node_alive(n):
                system.start_node(n)
            self.nodes.pop(0)
