"""The MQTT brokers the harness runs locally, and their roles: NATS's MQTT listener on the
JetStream cluster, a single Mosquitto node (RabbitMQ's plugin is rabbitmq/cluster.py's
RabbitMqttServers), each with how the node holding the receiver's session is found and
whether the backend is whole."""
from __future__ import annotations

import asyncio
import os
import time

from ..base import POWER, SystemError_
from ..cluster import LocalCluster
from ..nats.cluster import NatsServers, meta_whole, streams_whole
from ..rabbitmq.cluster import Management
from ..roles import Roles
from ..runtime import wait_until
from .client import MqttClient, _Connection, _first, mqtt_ports

MOSQUITTO = "/usr/sbin/mosquitto"


class NatsMqttServers(NatsServers):
    """NATS keeps MQTT sessions and QoS 1 messages in JetStream streams, replicated on
    `cluster.replicas` nodes."""

    ports = {**NatsServers.ports, "mqtt": 1883}
    extra_offers = frozenset({POWER})  # its messages are in the $MQTT_ streams: no data_files

    def extra_config(self, node: str) -> list[str]:
        return ['mqtt {', '  listen: "{}:{}"'.format(*self.address(node, "mqtt")),
                f"  stream_replicas: {self.ctx.scenario.cluster.replicas}",
                f'  ack_wait: "{int(self.options.ack_wait_s * 1000)}ms"', "}"]

    async def ready(self, timeout: float) -> None:
        await super().ready(timeout)  # a fresh server that never reached the meta leader started again
        # the MQTT listener needs JetStream: a meta leader before the first CONNECT
        async def look():
            for n in self.node_names:
                if not self.alive(n):
                    raise self.exited(n)
            return await meta_whole(self)

        deadline = time.monotonic() + timeout
        await wait_until(look, timeout, "NATS JetStream")
        # A listener that is up does not yet take a session: each node completes an MQTT
        # CONNECT only once the account's $MQTT_ streams have leaders, seen 16 s after the
        # meta leader on a fresh cluster. A receiver meeting that would fail over to another
        # node and the run would not test the node it drew.
        loop = asyncio.get_running_loop()
        for n in self.node_names:
            async def accepts(n=n):
                if not self.alive(n):
                    raise self.exited(n)
                conn = _Connection(self.address(n, "mqtt"), 5, f"bc-probe-{n}", True, n, loop)
                try:
                    if not await conn.open(3.0):
                        return False, f"{n}: no CONNACK within 3 s ({conn.result or 'no answer'})"
                    res, _ = conn.client.subscribe("bc/probe", qos=1)
                    got = await _first(conn.subscribed, conn.refused, 3.0) if res == 0 else None
                    return got is conn.subscribed, f"{n}: QoS 1 subscription {'taken' if got else 'not taken'}"
                finally:
                    await conn.close()

            await wait_until(accepts, max(1.0, deadline - time.monotonic()), f"NATS MQTT on {n}")


class MosquittoServer(LocalCluster):
    """One Mosquitto node, persistence on."""

    ports = {"mqtt": 1883, "client": 1883}

    def settings(self) -> dict:
        # mosquitto has no way to ask it for its configuration: what we gave it
        return {n: {"persistence": True, "autosave_interval": self.options.autosave_interval}
                for n in self.node_names}

    def _conf(self, node: str) -> str:
        ip, port = self.address(node, "mqtt")
        d = self.datadir / node
        d.mkdir(parents=True, exist_ok=True)
        return "\n".join([
            # started as root, mosquitto would switch to its own user and then fail to write
            # its persistence file in our (root-owned) data directory
            f"listener {port} {ip}", "allow_anonymous true", "user root",
            "persistence true", f"persistence_location {d}/", f"autosave_interval {self.options.autosave_interval}",
            "max_inflight_messages 0", "max_queued_messages 0", "log_dest stdout", "log_type error",
            "log_type warning",
        ]) + "\n"

    def launch(self, node: str) -> None:
        if not os.path.exists(MOSQUITTO):
            raise SystemError_("mosquitto not found: run `make setup` (apt-get install mosquitto)")
        conf = self.datadir / f"{node}.conf"
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text(self._conf(node))
        self.spawn_node(node, [MOSQUITTO, "-c", str(conf)])


class MqttRoles(Roles):
    """`leader` is the node holding the receiver's session: here, where the receiver is."""

    client: MqttClient

    async def leader(self) -> str:
        nodes = self.consumer_nodes()
        return nodes[0] if nodes else self.client.rx_node

    def consumer_nodes(self) -> list[str]:
        r = self.client.receiver
        return [r.current] if r is not None and r.current else []

    async def whole(self) -> tuple[bool, str]:
        ok, why = await self.backend_whole()
        if not ok:
            return ok, why
        try:
            await mqtt_ports(self.cluster, 5)
        except SystemError_ as e:
            return False, str(e)
        return True, why

    async def backend_whole(self) -> tuple[bool, str]:
        return True, "one node"

    async def stream_ready(self) -> bool:
        ok, _ = await self.whole()
        return ok


class RabbitMqttRoles(MqttRoles):
    """A QoS 1 subscription of a persistent session is a classic queue on the node the
    subscriber first connected to: that node holds the session, wherever the receiver is now."""

    async def leader(self) -> str:
        r = self.client.receiver
        if r is not None:
            try:
                return await Management(self.cluster).queue_leader(
                    f"mqtt-subscription-{r.client_id}qos{self.client.options.qos}")
            except Exception:  # no session queue yet: fall back
                pass
        return await super().leader()

    async def backend_whole(self) -> tuple[bool, str]:
        return await Management(self.cluster).whole()


class NatsMqttRoles(MqttRoles):
    async def backend_whole(self) -> tuple[bool, str]:
        ok, meta = await meta_whole(self.cluster)
        if not ok:
            return ok, meta
        ok, streams = await streams_whole(self.cluster, "$MQTT_")
        return ok, f"{meta}; {streams}"
