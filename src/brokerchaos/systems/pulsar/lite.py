"""pulsar-lite: the Pulsar protocol on one broker, the `options.broker: lite` choice.

One pulsar-lite broker (PyPI `pulsar-lite`, storage in RocksDB) in node n1's namespace. What
is real: the Pulsar binary protocol and the client's send queue, batching, send timeouts,
reconnects and Reader. What is not: BookKeeper ensembles and quorums, ZooKeeper, bundle
ownership moving between brokers (one broker: killing the owner is a full outage), broker
deduplication. It starts in a second.
"""
from __future__ import annotations

from ..runtime import packaged_binary
from ..cluster import LocalCluster


def pulsar_lite_binary() -> str:
    return packaged_binary("pulsar_lite", "pulsar-lite", "pip install pulsar-lite")


class PulsarLite(LocalCluster):
    """One pulsar-lite broker per node (in practice one: it has no clustering)."""

    ports = {"client": 6650}

    def launch(self, node: str) -> None:
        d = self.datadir / node
        d.mkdir(parents=True, exist_ok=True)
        conf = d / "pulsar-lite.toml"
        # metrics off: it would listen on 0.0.0.0:8080
        conf.write_text("[metrics]\nenabled = false\n")
        self.spawn_node(node, [pulsar_lite_binary(), "--config", str(conf), "--addr",
                               "{}:{}".format(*self.address(node)), "--db-path", str(d / "db"), "--log-level", "warn"])
