"""One system under test: a cluster (local or external, chosen here, once), its roles and
its client, built from a registry entry. The runner and the faults hold this."""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

from .base import Context, SystemError_
from .cluster import Cluster, ExternalCluster
from .runtime import wait_until
from .system import System

if TYPE_CHECKING:
    from ..sandbox import Sandbox
    from ..scenario import Scenario


class Deployment:
    def __init__(self, system: type[System], scenario: "Scenario", sandbox: "Sandbox", run_id: str,
                 logdir: Path, tag: str = "", needs: frozenset = frozenset()) -> None:
        options = system.Options.model_validate(scenario.options)
        self.system = system
        self.ctx = Context(scenario, options, sandbox, run_id, logdir, tag, needs)
        self.cluster: Cluster = (ExternalCluster(self.ctx, scenario.external) if scenario.external
                                 else system.local_cluster(scenario)(self.ctx))
        self.client = system.Client(self.ctx, self.cluster)
        self.roles = system.roles_class(scenario)(self.ctx, self.cluster, self.client)

    @property
    def offers(self) -> frozenset[str]:
        """What faults may ask of this deployment: its cluster's verbs and its roles' lookups."""
        return self.cluster.offers | self.system.roles_offers(self.ctx.scenario)

    @property
    def reusable(self) -> bool:
        return self.system.reusable

    def serve(self, scenario: "Scenario", tag: str, needs: frozenset) -> None:
        """Serve another session's scenario on this cluster, whose servers are configured as
        that scenario would have them (runner/pool.py): its options, names, clients and roles."""
        self.ctx.scenario, self.ctx.tag, self.ctx.needs = scenario, tag, needs
        self.ctx.options = self.system.Options.model_validate(scenario.options)
        self.client = self.system.Client(self.ctx, self.cluster)
        self.roles = self.system.roles_class(scenario)(self.ctx, self.cluster, self.client)

    def begin_run(self, run_id: str, logdir: Path) -> None:
        self.cluster.begin_run(run_id, logdir)

    async def up(self, timeout: float) -> None:
        """From the client namespace: the cluster's staged start-up, then the client's connection."""
        await self.cluster.ready(timeout)
        await self.client.connect(timeout)

    async def healthy(self, timeout: float) -> tuple[bool, str]:
        """Can the next run reuse this cluster? Every node up, and whole within `timeout`."""
        down = await asyncio.to_thread(self.down)
        if down:
            return False, "; ".join(down)
        try:
            await wait_until(self.roles.whole, timeout, "the cluster", every=0.25)
        except SystemError_ as e:
            return False, str(e)
        return True, "healthy"

    def down(self) -> list[str]:
        """Every node that is not up, with why ("n2: not running"); [] when all are."""
        return [f"{n}: {why}" for n in self.cluster.host_names if (why := self.cluster.down_why(n))]

    def stop(self) -> None:
        self.cluster.stop()
