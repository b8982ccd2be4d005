from __future__ import annotations

import random
from dataclasses import dataclass
from typing import ClassVar

from ..systems.base import System


@dataclass
class FaultContext:
    system: System
    rng: random.Random


class Fault:
    """One fault action. `inject` hits the resolved nodes; `heal` undoes it and must be safe
    to call whatever happened before (the runner calls it in `finally`)."""

    name: ClassVar[str]
    description: ClassVar[str]
    needs_netns: ClassVar[bool] = False
    # a recoverable fault is healed; a one-off (e.g. tcp-kill once) has nothing to undo
    recoverable: ClassVar[bool] = True

    def __init__(self, ctx: FaultContext) -> None:
        self.ctx = ctx
        self.nodes: list[str] = []

    async def inject(self, nodes: list[str]) -> None:
        raise NotImplementedError

    async def heal(self) -> None:
        raise NotImplementedError
