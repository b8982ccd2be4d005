"""Who owns a bundle, asked without changing it (PulsarClient.bundle_owner): a lookup
assigns an unowned bundle and a topic's stats load the topic, either of which would end an
unload's outage the owner watch is there to see.

On the harness's own clusters the answer is the bundle's ownership entry in ZooKeeper
(`/namespace/<tenant>/<ns>/<bundle>`: the owner's `nativeUrl`, none while it is absent or
`disabled` by an unload). On a cluster whose ZooKeeper the harness does not know (external)
it is each broker's list of the bundles it owns, a question that hung a Pulsar 4.0.7 broker
for good when two of its bundles were being acquired (docs/findings/transactions.md, "a
broker hung by a question")."""
from __future__ import annotations

import asyncio
import json
import threading
from typing import Callable, Optional
from urllib.parse import urlsplit

from ..runtime import http_get, quiet_logger


class ZkOwners:
    """One ZooKeeper session for a client and its topics' copies, kept until `end`: a
    session's creation is a write to ZooKeeper's log, and the watch looks twice a second."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._zk = None

    def read(self, zk: tuple[str, int], bundle: str, timeout: float,
             node_at: Callable[[str, int], Optional[str]]) -> list[str]:
        """The node its ownership entry names ([] while none does); blocking, at most about
        2 × `timeout` (a session started again, then the read)."""
        from kazoo.exceptions import NoNodeError

        try:
            data, _ = self._session(zk, timeout).get_async(f"/namespace/{bundle}").get(timeout=timeout)
        except NoNodeError:
            return []
        entry = json.loads(data or b"{}")
        if entry.get("disabled"):
            return []
        url = urlsplit(entry.get("nativeUrl") or "")
        node = node_at(url.hostname or "", url.port or 6650)
        return [node] if node is not None else []

    def _session(self, zk: tuple[str, int], timeout: float):
        """The session, started again when it is not connected (ZooKeeper killed or cut off)."""
        with self._lock:
            if self._zk is None or not self._zk.connected:
                from kazoo.client import KazooClient

                self._end()
                zkc = KazooClient(hosts="{}:{}".format(*zk), timeout=max(timeout, 3.0), logger=quiet_logger("kazoo"))
                zkc.start(timeout=timeout)
                self._zk = zkc
            return self._zk

    def end(self) -> None:
        with self._lock:
            self._end()

    def _end(self) -> None:
        zkc, self._zk = self._zk, None
        if zkc is not None:
            try:
                zkc.stop()
                zkc.close()
            except Exception:  # its connection gone already: nothing left to end
                pass


async def owned_by(cluster, cluster_name: str, bundle: str, timeout: float) -> list[str]:
    """The brokers whose list of owned bundles has `bundle` active (external clusters)."""
    async def owns(n: str) -> bool:
        host, port = cluster.address(n, "admin")
        path = f"/admin/v2/brokers/{cluster_name}/{host}:{port}/ownedNamespaces"
        return bool((json.loads(await http_get(host, port, path, timeout)).get(bundle) or {}).get("is_active"))

    answers = await asyncio.gather(*(owns(n) for n in cluster.node_names))
    return [n for n, yes in zip(cluster.node_names, answers) if yes]
