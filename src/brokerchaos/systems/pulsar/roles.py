"""Who holds what with one Pulsar broker (pulsar-lite); apache.py's roles build on these."""
from __future__ import annotations

from ..base import Client
from ..roles import Roles


class PulsarRoles(Roles):
    """One broker owns everything (pulsar-lite)."""

    client: Client

    async def leader(self) -> str:
        return self.cluster.node_names[0]

    async def whole(self) -> tuple[bool, str]:
        await self.client.serving()
        return True, "serving"

    async def group_coordinator(self, group: str) -> str:
        """The broker owning the topic dispatches to its subscriptions."""
        return await self.leader()
