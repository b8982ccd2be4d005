"""NATS JetStream: nats-server from Debian, the nats-py client.

Leader: `$JS.API.STREAM.INFO.<stream>` -> cluster.leader (a server name, which we set to
the node name). Dedup: the `Nats-Msg-Id` header within the stream's duplicate window.
Publishing uses core publish with a per-message reply subject instead of js.publish, so
thousands of messages can be in flight at once (about 2x the throughput here).
"""
from __future__ import annotations

import asyncio
import json
import shutil
import time
from typing import Optional

import nats
from nats.errors import NoServersError, TimeoutError as NatsTimeout
from nats.js import api
from nats.js.errors import APIError

from . import SYSTEMS
from .base import EVERY_FAULT, DeliverCallback, OutcomeCallback, System, SystemError_, http_get

CLIENT_PORT = 4222
CLUSTER_PORT = 6222
MONITOR_PORT = 8222


def _quiet(*_a, **_k):
    # nats-py logs every disconnect at ERROR; the history records what matters.
    async def noop(*_a, **_k):
        return None

    return noop


async def _close(nc) -> None:
    """Close a connection within 5 s whatever state it is in (the broker may be dead)."""
    if nc is None:
        return
    try:
        await asyncio.wait_for(nc.close(), 5)
    except (asyncio.TimeoutError, Exception):
        pass


async def _connect(servers: list[str], name: str, timeout: float):
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            return await nats.connect(
                servers=servers,
                name=name,
                connect_timeout=2,
                reconnect_time_wait=0.2,
                max_reconnect_attempts=-1,
                pending_size=256 * 1024 * 1024,
                error_cb=_quiet(),
                disconnected_cb=_quiet(),
                reconnected_cb=_quiet(),
                allow_reconnect=True,
            )
        except (NoServersError, OSError, NatsTimeout, asyncio.TimeoutError) as e:
            last = e
            await asyncio.sleep(0.1)
    raise SystemError_(f"could not connect to NATS at {servers} within {timeout}s: {last!r}")


@SYSTEMS.register("nats")
class NatsSystem(System):
    name = "nats"
    description = "NATS JetStream cluster (nats-server), stream with N replicas, file storage"
    supported_faults = EVERY_FAULT
    has_coordinator = True  # the JetStream meta leader, from the monitoring endpoint

    def __init__(self, *a, **k) -> None:
        super().__init__(*a, **k)
        self.nc = None
        self.js = None
        self.binary = shutil.which("nats-server") or "/usr/sbin/nats-server"

    # -- processes -------------------------------------------------------------
    def client_url(self, node: str) -> str:
        h = self.host(node)
        return f"nats://{h.ip}:{self.sandbox.port(h, CLIENT_PORT)}"

    def servers(self) -> list[str]:
        return [self.client_url(n) for n in self.node_names]

    def node_of_url(self, netloc: str) -> Optional[str]:
        for n in self.node_names:
            if self.client_url(n).endswith("//" + netloc):
                return n
        return None

    def _config(self, node: str) -> str:
        h = self.host(node)
        store = self.datadir / node
        store.mkdir(parents=True, exist_ok=True)
        lines = [
            f"server_name: {node}",
            f'listen: "{h.ip}:{self.sandbox.port(h, CLIENT_PORT)}"',
            f'http: "{h.ip}:{self.sandbox.port(h, MONITOR_PORT)}"',
            "jetstream {",
            f'  store_dir: "{store}"',
            "  max_memory_store: 256MB",
            "  max_file_store: 8GB",
            "}",
        ]
        if len(self.node_names) > 1:
            routes = ", ".join(
                f'"nats://{self.host(o).ip}:{self.sandbox.port(self.host(o), CLUSTER_PORT)}"'
                for o in self.node_names
                if o != node
            )
            lines += [
                "cluster {",
                "  name: brokerchaos",
                f'  listen: "{h.ip}:{self.sandbox.port(h, CLUSTER_PORT)}"',
                f"  routes: [{routes}]",
                "}",
            ]
        return "\n".join(lines + self.extra_config(node)) + "\n"

    def extra_config(self, node: str) -> list[str]:
        """More server configuration (the MQTT listener of the mqtt system's NATS backend)."""
        return []

    def start_node(self, node: str) -> None:
        if not shutil.which(self.binary):
            raise SystemError_("nats-server not found: run `make setup` (apt-get install nats-server)")
        conf = self.datadir / f"{node}.conf"
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text(self._config(node))
        self.spawn_node(node, [self.binary, "-c", str(conf)])

    def stop(self) -> None:
        super().stop()
        shutil.rmtree(self.datadir, ignore_errors=True)

    # -- control plane ---------------------------------------------------------
    async def connect(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        self.nc = await _connect(self.servers(), "brokerchaos-admin", timeout)
        self.js = self.nc.jetstream(timeout=2)
        last: Exception | None = None
        while time.monotonic() < deadline:
            for n in self.node_names:
                if not self.node_alive(n):
                    raise SystemError_(f"{n} exited while starting; see {self.logdir / (n + '.log')}")
            try:
                await self.js.account_info()
                return
            except (APIError, NatsTimeout, asyncio.TimeoutError) as e:
                last = e
                await asyncio.sleep(0.1)
        raise SystemError_(f"JetStream not ready within {timeout}s: {last!r}")

    async def create_stream(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                await self.js.add_stream(
                    name=self.stream_name,
                    subjects=[f"{self.stream_name}.>"],
                    num_replicas=self.scenario.cluster.replicas,
                    storage=api.StorageType.FILE,
                    duplicate_window=120.0,
                )
                return self.stream_name
            except (APIError, NatsTimeout, asyncio.TimeoutError) as e:
                # right after start-up the meta leader may not yet know every peer
                last = e
                await asyncio.sleep(0.2)
        raise SystemError_(f"could not create stream {self.stream_name} within {timeout}s: {last!r}")

    async def whole(self) -> tuple[bool, str]:
        """A JetStream meta leader, and every peer current."""
        h = self.host(self.node_names[0])
        meta = json.loads(await http_get(h.ip, self.sandbox.port(h, MONITOR_PORT), "/jsz", 2.0)).get("meta_cluster") or {}
        peers = meta.get("replicas") or []
        ok = bool(meta.get("leader") or len(self.node_names) == 1) and \
            all(p.get("current") and not p.get("offline") for p in peers)
        return ok, f"meta leader {meta.get('leader')!r}, peers {[(p.get('name'), p.get('current')) for p in peers]}"

    async def drop_stream(self) -> None:
        try:
            await self.js.delete_stream(self.stream_name)
        except Exception:  # noqa: BLE001 - best effort
            pass

    async def _info(self):
        return await self.js.stream_info(self.stream_name)

    async def leader(self) -> str:
        info = await self._info()
        if info.cluster is None or not info.cluster.leader:
            # single server without clustering: it is the leader
            if len(self.node_names) == 1:
                return self.node_names[0]
            raise SystemError_(f"stream {self.stream_name} has no leader")
        return info.cluster.leader

    async def coordinator(self) -> str:
        """The JetStream meta leader, as the first node that answers /jsz says."""
        last = "no node answered"
        for n in self.node_names:
            if not self.node_alive(n):
                continue
            h = self.host(n)
            try:
                body = await http_get(h.ip, self.sandbox.port(h, MONITOR_PORT), "/jsz", 2.0)
                leader = (json.loads(body).get("meta_cluster") or {}).get("leader")
            except (OSError, ValueError, asyncio.TimeoutError) as e:
                last = f"{n}: {type(e).__name__}: {e}"
                continue
            if leader:
                return leader
            last = f"{n}: no meta leader"
        raise SystemError_(f"JetStream meta leader unknown ({last})")

    async def replicas(self) -> list[str]:
        info = await self._info()
        if info.cluster is None:
            return list(self.node_names[:1])
        return [info.cluster.leader] + [r.name for r in (info.cluster.replicas or [])]

    async def wait_stream_ready(self, timeout: float) -> bool:
        """True once the stream has a leader and every replica is current."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                info = await self._info()
                c = info.cluster
                if c is None or (c.leader and all(r.current for r in (c.replicas or []))):
                    return True
            except (APIError, NatsTimeout, asyncio.TimeoutError):
                pass
            await asyncio.sleep(0.2)
        return False

    def producer(self, name: str) -> "NatsProducer":
        return NatsProducer(self, name)

    def reader(self, name: str) -> "NatsReader":
        return NatsReader(self, name)

    async def close(self) -> None:
        await _close(self.nc)
        self.nc = None


class NatsProducer:
    def __init__(self, system: NatsSystem, name: str) -> None:
        self.system = system
        self.name = name
        self.subject = f"{system.stream_name}.{name}"
        self.dedup = system.scenario.workload.dedup
        self.nc = None
        self.inbox = ""

    async def open(self, on_outcome: OutcomeCallback) -> None:
        self.nc = await _connect(self.system.servers(), f"brokerchaos-{self.name}", 30)
        self.inbox = self.nc.new_inbox()
        prefix_len = len(self.inbox) + 1
        handled = [0]

        async def on_reply(msg) -> None:
            handled[0] += 1
            if handled[0] % 256 == 0:
                # nats-py drains a subscription's backlog without yielding; a burst of
                # thousands of acks would otherwise hold back the nemesis
                await asyncio.sleep(0)
            value = int(msg.subject[prefix_len:])
            node = self.node()
            hdr = msg.headers
            if hdr and hdr.get("Status") == "503":
                on_outcome(value, "nack", None, node, "no responders")
                return
            try:
                body = json.loads(msg.data)
            except ValueError:
                on_outcome(value, "nack", None, node, f"unparseable reply {msg.data[:80]!r}")
                return
            err = body.get("error")
            if err:
                on_outcome(value, "nack", None, node, f"{err.get('code')} {err.get('description')}")
                return
            on_outcome(value, "ack", str(body.get("seq")), node, "duplicate" if body.get("duplicate") else None)

        await self.nc.subscribe(self.inbox + ".*", cb=on_reply, pending_msgs_limit=-1, pending_bytes_limit=-1)

    async def send(self, value: int, payload: bytes) -> None:
        headers = {"Nats-Msg-Id": f"{self.name}-{value}"} if self.dedup else None
        await self.nc.publish(self.subject, payload, reply=f"{self.inbox}.{value}", headers=headers)

    def node(self) -> Optional[str]:
        nc = self.nc
        if nc is None or nc.connected_url is None or not nc.is_connected:
            return None
        return self.system.node_of_url(nc.connected_url.netloc)

    async def close(self) -> None:
        await _close(self.nc)


class NatsReader:
    """Reads the whole stream from its first message with an ephemeral pull consumer."""

    def __init__(self, system: NatsSystem, name: str) -> None:
        self.system = system
        self.name = name

    async def read(self, deliver: DeliverCallback, idle: float) -> str:
        s = self.system
        nc = await _connect(s.servers(), f"brokerchaos-{self.name}", idle)
        try:
            js = nc.jetstream(timeout=2)
            deadline = time.monotonic() + idle
            info = None
            last_err: Exception | None = None
            while info is None and time.monotonic() < deadline:
                try:
                    info = await js.stream_info(s.stream_name)
                except (APIError, NatsTimeout, asyncio.TimeoutError) as e:
                    last_err = e
                    await asyncio.sleep(0.2)
            if info is None:
                return f"incomplete: stream {s.stream_name} unavailable for {idle:.0f}s ({type(last_err).__name__})"
            last_seq = info.state.last_seq
            if info.state.messages == 0:
                return "complete"
            psub = None
            while psub is None:
                try:
                    psub = await js.pull_subscribe(
                        f"{s.stream_name}.>",
                        stream=s.stream_name,
                        config=api.ConsumerConfig(
                            ack_policy=api.AckPolicy.NONE,
                            deliver_policy=api.DeliverPolicy.ALL,
                            inactive_threshold=300.0,
                        ),
                        pending_msgs_limit=-1,
                        pending_bytes_limit=-1,
                    )
                except (APIError, NatsTimeout, asyncio.TimeoutError) as e:
                    if time.monotonic() > deadline:
                        return f"incomplete: could not create a consumer ({e!r})"
                    await asyncio.sleep(0.2)
            seen = 0
            progress_at = time.monotonic()
            # Read up to the stream's own last sequence. The consumer's num_pending is not
            # trusted: NATS 2.9 reported 0 for a filtered consumer after a leader change
            # while 35 messages were still to come, which looked like acked loss.
            while seen < last_seq:
                try:
                    msgs = await psub.fetch(batch=5000, timeout=1)
                except (NatsTimeout, asyncio.TimeoutError, APIError):
                    msgs = []
                if not msgs:
                    try:
                        # the stream may really have lost its tail: then it ends earlier
                        last_seq = min(last_seq, (await js.stream_info(s.stream_name)).state.last_seq)
                    except (APIError, NatsTimeout, asyncio.TimeoutError):
                        pass
                    if seen >= last_seq:
                        break
                    if time.monotonic() - progress_at > idle:
                        return f"incomplete: no progress for {idle:.0f}s at stream seq {seen} of {last_seq}"
                    continue
                progress_at = time.monotonic()
                node = s.node_of_url(nc.connected_url.netloc) if nc.connected_url else None
                for m in msgs:
                    seq = m.metadata.sequence.stream
                    seen = max(seen, seq)
                    deliver(m.data, str(seq), node)
            return "complete"
        finally:
            await _close(nc)
