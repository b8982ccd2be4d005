"""RabbitMQ: a 3-node cluster from Debian's rabbitmq-server 3.10, the aio-pika client.

One Erlang node per namespace, named rabbit@<namespace IP> (long names: no /etc/hosts
work), one shared cookie, and an epmd we start ourselves in each namespace so none is
left daemonised behind us. The first node boots blank; the others join it through
classic-config peer discovery, all started at once (letting all three discover each other
costs 10 s more: they queue for the discovery lock while the first waits for peers).

The workload: a durable queue declared on the first node (so a quorum queue's first
leader and a classic queue's home are n1), persistent messages published with publisher
confirms, many in flight, by producers connected to the other nodes; the read consumes
everything with manual acks. Leaders come from the management API, never from
cluster-wide `rabbitmqctl` calls (slow, and they can hang while a node is cut off).

Queue types (`options.queue_type`): quorum (Raft, the leader is the Raft leader), classic
(one node, not replicated: the positive control for loss on a node kill) and stream.
"""
from __future__ import annotations

import asyncio
import collections
import json
import os
import secrets
import shutil
import time
import urllib.parse
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from . import SYSTEMS
from .base import EVERY_FAULT, DeliverCallback, OutcomeCallback, System, SystemError_, http_get

AMQP_PORT = 5672
DIST_PORT = 25672
MGMT_PORT = 15672
EPMD_PORT = 4369
MQTT_PORT = 1883
SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"
EPMD = "/usr/bin/epmd"
AUTH = ("guest", "guest")


class RabbitOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    queue_type: Literal["quorum", "classic", "stream"] = Field(
        "quorum", description="quorum (Raft-replicated), classic (one node, not replicated) or stream")
    producers_on: Literal["others", "all", "first"] = Field(
        "others", description="nodes producers connect to, round-robin: others than the queue's first node, "
                              "all, or the first")
    persistent: bool = Field(True, description="delivery_mode 2 (persistent) messages")
    mandatory: bool = Field(True, description="publish with mandatory: an unroutable message comes back (nack)")
    prefetch: int = Field(2000, ge=1, le=65_535, description="consumer prefetch for the read")


def _aio_pika():
    import logging

    import aio_pika

    # a refused connection while failing over is expected and reported by us, not logged
    for name in ("aio_pika", "aiormq"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    return aio_pika


class RabbitBase(System):
    """The cluster alone: processes, readiness, leader lookup. The AMQP and MQTT workloads
    build on it."""

    plugins: tuple[str, ...] = ("rabbitmq_management",)
    # joiners boot side by side once the first node serves; the MQTT plugin's Raft cluster
    # needs them one by one
    joiners_together = True

    def __init__(self, *a, **k) -> None:
        super().__init__(*a, **k)
        self.epmds: dict = {}
        self.home = self.datadir / "home"
        self._unstarted: list[str] = []

    # -- naming ----------------------------------------------------------------
    def erl_name(self, node: str) -> str:
        h = self.host(node)
        # on loopback every node shares 127.0.0.1, so the name part must differ
        return f"rabbit@{h.ip}" if h.ns else f"rabbit-{node}@{h.ip}"

    def node_of(self, erl_name: str) -> Optional[str]:
        for n in self.node_names:
            if self.erl_name(n) == erl_name:
                return n
        return None

    def amqp_addr(self, node: str) -> tuple[str, int]:
        h = self.host(node)
        return h.ip, self.sandbox.port(h, AMQP_PORT)

    def mgmt_addr(self, node: str) -> tuple[str, int]:
        h = self.host(node)
        return h.ip, self.sandbox.port(h, MGMT_PORT)

    def _epmd_port(self) -> int:
        # one epmd per namespace on 4369; on loopback one shared epmd on a free port
        return self.sandbox.port(self.host(self.node_names[0]), EPMD_PORT)

    # -- processes -------------------------------------------------------------
    def _conf(self, node: str) -> str:
        h = self.host(node)
        lines = [
            f"listeners.tcp.1 = {h.ip}:{self.sandbox.port(h, AMQP_PORT)}",
            "loopback_users = none",
            f"management.tcp.ip = {h.ip}",
            f"management.tcp.port = {self.sandbox.port(h, MGMT_PORT)}",
            "log.console = true", "log.console.level = warning", "log.file = false",
            # the machine has 24 GB; three nodes at the default 40 % each would overcommit it
            "vm_memory_high_watermark.absolute = 2GB",
        ]
        if "rabbitmq_mqtt" in self.plugins:
            lines.append(f"mqtt.listeners.tcp.1 = {h.ip}:{self.sandbox.port(h, MQTT_PORT)}")
        first = self.node_names[0]
        if node != first:
            lines += [
                "cluster_formation.peer_discovery_backend = classic_config",
                f"cluster_formation.classic_config.nodes.1 = {self.erl_name(first)}",
                # wait (up to 30 s) for the first node to have booted rather than boot blank
                "cluster_formation.discovery_retry_limit = 120",
                "cluster_formation.discovery_retry_interval = 250",
            ]
        return "\n".join(lines) + "\n"

    def _env(self, node: str) -> dict:
        h = self.host(node)
        d = self.datadir / node
        env = dict(os.environ)
        env.update({
            "HOME": str(self.home),  # the shared .erlang.cookie
            "RABBITMQ_NODENAME": self.erl_name(node),
            "RABBITMQ_USE_LONGNAME": "true",
            "RABBITMQ_NODE_IP_ADDRESS": h.ip,
            "RABBITMQ_DIST_PORT": str(self.sandbox.port(h, DIST_PORT)),
            "RABBITMQ_MNESIA_BASE": str(d / "mnesia"),
            "RABBITMQ_LOG_BASE": str(d / "log"),
            "RABBITMQ_CONFIG_FILE": str(d / "rabbitmq.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.datadir / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(d / "pid"),
            # exec the VM in place of the start script, so the PID we hold is beam.smp and
            # SIGKILL/SIGSTOP hit the broker itself; -noinput keeps the shell off
            "RABBITMQ_ALLOW_INPUT": "true",
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-noinput",
            "ERL_EPMD_PORT": str(self._epmd_port()),
        })
        return env

    def start(self) -> None:
        if not os.path.exists(SERVER):
            raise SystemError_("rabbitmq-server not found: run `make setup` (apt-get install rabbitmq-server)")
        self.home.mkdir(parents=True, exist_ok=True)
        cookie = self.home / ".erlang.cookie"
        if not cookie.exists():
            cookie.write_text(secrets.token_hex(16).upper())
            os.chmod(cookie, 0o400)
        (self.datadir / "enabled_plugins").write_text("[" + ",".join(self.plugins) + "].\n")
        hosts = self.node_names if self.sandbox.mode == "netns" else self.node_names[:1]
        for n in hosts:
            h = self.host(n)
            self.epmds[n] = self.sandbox.spawn(h, f"{n}-epmd", [EPMD, "-port", str(self._epmd_port())],
                                               self.logdir / f"{n}-epmd.log")
        # only the first node now: the joiners boot in connect(), once it serves. Booted side by
        # side, a joiner could fail the schema check while the first still enabled feature
        # flags, and the MQTT plugin's client-id Raft cluster stalled all three nodes for 80 s
        # (a CI run) in add_member calls to peers whose Raft servers were not up yet
        self.start_node(self.node_names[0])
        self._unstarted = list(self.node_names[1:])

    def start_node(self, node: str) -> None:
        d = self.datadir / node
        d.mkdir(parents=True, exist_ok=True)
        (d / "rabbitmq.conf").write_text(self._conf(node))
        self.spawn_node(node, [SERVER], env=self._env(node), exe="beam.smp")

    def stop(self) -> None:
        from ..sandbox import process

        super().stop()
        for p in list(self.epmds.values()):
            process.terminate(p, grace=1.0)
            self.sandbox.forget(p)
        self.epmds.clear()
        shutil.rmtree(self.datadir, ignore_errors=True)

    # -- management API ----------------------------------------------------------
    async def api(self, node: str, path: str, timeout: float = 2.0):
        ip, port = self.mgmt_addr(node)
        return json.loads(await http_get(ip, port, path, timeout, auth=AUTH))

    def _qpath(self, queue: Optional[str] = None) -> str:
        return f"/api/queues/%2F/{urllib.parse.quote(queue or self.stream_name, safe='')}"

    async def _cluster_ready(self) -> tuple[bool, str]:
        nodes = await self.api(self.node_names[0], "/api/nodes?columns=name,running")
        running = {x["name"] for x in nodes if x.get("running")}
        want = {self.erl_name(n) for n in self.node_names}
        if not want <= running:
            return False, f"running: {sorted(running)}"
        for n in self.node_names:  # the AMQP listener opens after the node reports running
            if not await self._serves(n):
                return False, f"{n} AMQP port not open"
        return True, "ready"

    async def _serves(self, node: str) -> bool:
        # listeners open once boot is over, plugins included
        try:
            _, w = await asyncio.wait_for(asyncio.open_connection(*self.amqp_addr(node)), 1.0)
            w.close()
            return True
        except (OSError, asyncio.TimeoutError):
            return False

    async def connect(self, timeout: float) -> None:
        """Boot the joiners once the nodes before them serve, and wait until the cluster is
        whole. Each boot gets `timeout` of its own."""
        deadline = time.monotonic() + timeout
        last = "not started"
        retried: set[str] = set()
        while time.monotonic() < deadline:
            if self._unstarted:
                before = [n for n in self.node_names if n not in self._unstarted][-1]
                if self.node_alive(before) and await self._serves(before):
                    for n in self._unstarted[:None if self.joiners_together else 1]:
                        self.start_node(n)
                        self._unstarted.remove(n)
                    deadline = max(deadline, time.monotonic() + timeout)
                    continue
                last = f"{before} not serving yet ({self._unstarted[0]} joins after it)"
            for n in self.node_names:
                if n in self._unstarted or self.node_alive(n):
                    continue
                if n == self.node_names[0] or n in retried or (self.datadir / n / "booted").exists():
                    raise SystemError_(f"{n} exited while starting; see {self.logdir / (n + '.log')}")
                # a joiner that exits while booting (seen here, when joiners booted beside the
                # first node: table_attributes_mismatch) gets one more boot on empty data
                retried.add(n)
                shutil.rmtree(self.datadir / n / "mnesia", ignore_errors=True)
                self.start_node(n)
                # that second boot was once seen to take 74 s (a CI run): it gets a window of
                # its own, once, instead of what was left of the first
                deadline = max(deadline, time.monotonic() + timeout)
            try:
                ok, last = await self._cluster_ready()
                if ok:
                    for n in self.node_names:
                        (self.datadir / n / "booted").touch()
                    return
            except Exception as e:  # noqa: BLE001 - still booting
                last = f"{type(e).__name__}: {e}"
            await asyncio.sleep(0.25)
        raise SystemError_(f"RabbitMQ cluster not ready within {timeout}s: {last}")

    async def _queue_info(self, queue: Optional[str] = None) -> dict:
        """The queue as most reachable nodes see it (a node cut off may hold a stale view)."""
        alive = [n for n in self.node_names if self.node_alive(n)]
        path = self._qpath(queue) + "?disable_stats=true"
        answers = await asyncio.gather(*(self.api(n, path, 1.5) for n in alive),
                                       return_exceptions=True)
        got = [a for a in answers if isinstance(a, dict)]
        if not got:
            why = ", ".join(f"{n}: {type(a).__name__}" for n, a in zip(alive, answers))
            raise SystemError_(f"no management API answered for queue {queue or self.stream_name} ({why})")
        votes = collections.Counter(a.get("leader") or a.get("node") for a in got)
        best = votes.most_common(1)[0][0]
        return next(a for a in got if (a.get("leader") or a.get("node")) == best)

    async def leader(self, queue: Optional[str] = None) -> str:
        """The node leading the queue (quorum, stream) or holding it (classic)."""
        info = await self._queue_info(queue)
        name = info.get("leader") or info.get("node")
        node = self.node_of(name or "")
        if node is None:
            raise SystemError_(f"queue {queue or self.stream_name} has no known leader ({name!r})")
        return node

    async def replicas(self) -> list[str]:
        info = await self._queue_info()
        lead = self.node_of(info.get("leader") or info.get("node") or "")
        members = [self.node_of(m) for m in info.get("members") or []]
        rest = [m for m in members if m and m != lead]
        return ([lead] if lead else []) + rest

    async def whole(self) -> tuple[bool, str]:
        """Every node running, listening, and no partition seen by any."""
        ok, last = await self._cluster_ready()
        if not ok:
            return ok, last
        parts = await self.api(self.node_names[0], "/api/nodes?columns=name,partitions")
        split = [x["name"] for x in parts if x.get("partitions")]
        return not split, f"partitions seen by {split}" if split else "whole"

    async def close(self) -> None:
        pass


@SYSTEMS.register("rabbitmq")
class RabbitSystem(RabbitBase):
    name = "rabbitmq"
    description = "RabbitMQ cluster (rabbitmq-server 3.10): quorum, classic or stream queue, publisher confirms"
    supported_faults = EVERY_FAULT
    Options = RabbitOptions

    @classmethod
    def check(cls, scenario) -> None:
        from ..scenario import ScenarioError

        c = scenario.cluster
        qt = scenario.options.get("queue_type", "quorum")
        if qt == "classic" and c.replicas != 1 and "replicas" in c.model_fields_set:
            raise ScenarioError("scenario field 'cluster.replicas': a classic queue lives on one node; set it to 1")
        if c.replicas > c.nodes:
            raise ScenarioError(f"scenario field 'cluster.replicas': {c.replicas} is more than the {c.nodes} nodes")

    def __init__(self, *a, **k) -> None:
        super().__init__(*a, **k)
        self.admin = None

    async def _connection(self, node: str, timeout: float = 5.0):
        ip, port = self.amqp_addr(node)
        return await asyncio.wait_for(
            _aio_pika().connect(host=ip, port=port, login=AUTH[0], password=AUTH[1], timeout=timeout,
                                client_properties={"connection_name": "brokerchaos"}),
            timeout + 1)

    def queue_arguments(self) -> dict:
        qt = self.options.queue_type
        r = self.scenario.cluster.replicas
        if qt == "quorum":
            return {"x-queue-type": "quorum", "x-quorum-initial-group-size": r}
        if qt == "stream":
            return {"x-queue-type": "stream", "x-initial-cluster-size": r}
        return {}

    async def create_stream(self, timeout: float) -> str:
        # a node that has just booted may still be enabling feature flags ("the corresponding
        # feature flag is disabled" for a quorum queue); one CI run on a loaded machine saw
        # that last past 30 s, so the first declare gets as long as the cluster's start
        deadline = time.monotonic() + max(timeout, 90)
        last: object = None
        first = self.node_names[0]
        while time.monotonic() < deadline:
            conn = None
            try:
                conn = await self._connection(first)
                ch = await conn.channel()
                await ch.declare_queue(self.stream_name, durable=True, arguments=self.queue_arguments())
                return self.stream_name
            except Exception as e:  # noqa: BLE001 - a fresh cluster may still be settling
                last = e
                await asyncio.sleep(0.3)
            finally:
                if conn is not None:
                    await _close(conn)
        raise SystemError_(f"could not declare queue {self.stream_name} within {timeout}s: {last!r}")

    async def wait_stream_ready(self, timeout: float) -> bool:
        """True once the queue has a leader on a running node and every member is online."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                info = await self._queue_info()
                lead = info.get("leader") or info.get("node")
                members = set(info.get("members") or [lead])
                online = set(info.get("online") or [lead])
                if lead and self.node_alive(self.node_of(lead) or "") and members <= online \
                        and info.get("state") in (None, "running", "live"):
                    return True
            except Exception:  # noqa: BLE001
                pass
            await asyncio.sleep(0.25)
        return False

    async def drop_stream(self) -> None:
        conn = None
        try:
            conn = await self._connection(self.node_names[0], timeout=3.0)
            ch = await conn.channel()
            await asyncio.wait_for(ch.queue_delete(self.stream_name), 5)
        except Exception:  # noqa: BLE001 - best effort
            pass
        finally:
            if conn is not None:
                await _close(conn)

    def producer_nodes(self) -> list[str]:
        on = self.options.producers_on
        if on == "first" or len(self.node_names) == 1:
            return self.node_names[:1]
        return self.node_names[1:] if on == "others" else list(self.node_names)

    def producer(self, name: str) -> "RabbitProducer":
        nodes = self.producer_nodes()
        i = int(name[1:]) - 1 if name[1:].isdigit() else 0
        # round-robin, and fail over to the next node in the same order
        return RabbitProducer(self, name, nodes[i % len(nodes):] + nodes[:i % len(nodes)])

    def reader(self, name: str) -> "RabbitReader":
        return RabbitReader(self, name)


async def _close(conn) -> None:
    try:
        await asyncio.wait_for(conn.close(), 3)
    except Exception:  # noqa: BLE001
        pass


class RabbitProducer:
    """Persistent messages with publisher confirms; each publish is its own task, so as
    many are in flight as the producer loop allows. A lost connection makes the messages
    on it *unknown* and moves the producer to the next node."""

    def __init__(self, system: RabbitSystem, name: str, nodes: list[str]) -> None:
        self.system = system
        self.name = name
        self.nodes = nodes
        self.idx = 0
        self.conn = None
        self.exchange = None
        self.current: Optional[str] = None
        self.on_outcome: Optional[OutcomeCallback] = None
        self.tasks: set[asyncio.Task] = set()
        self.ready = asyncio.Event()
        self.reconnecting: Optional[asyncio.Task] = None
        self.generation = 0

    async def open(self, on_outcome: OutcomeCallback) -> None:
        self.on_outcome = on_outcome
        await self._reconnect(first=True)

    async def _reconnect(self, first: bool = False) -> None:
        self.ready.clear()
        old, self.conn, self.exchange, self.current = self.conn, None, None, None
        if old is not None:
            await _close(old)
        attempt = 0
        while True:
            node = self.nodes[self.idx % len(self.nodes)]
            try:
                conn = await self.system._connection(node, timeout=2.0)
                ch = await conn.channel(publisher_confirms=True)
                self.conn, self.exchange, self.current = conn, ch.default_exchange, node
                self.generation += 1
                self.ready.set()
                return
            except Exception as e:  # noqa: BLE001 - try the next node
                attempt += 1
                self.idx += 1
                if first and attempt >= 3 * len(self.nodes):
                    raise SystemError_(f"{self.name}: cannot connect to {self.nodes}: {e!r}") from e
                await asyncio.sleep(0.1 if attempt < len(self.nodes) else 0.5)

    def _lost(self, generation: int) -> None:
        if generation == self.generation and (self.reconnecting is None or self.reconnecting.done()):
            self.idx += 1
            self.reconnecting = asyncio.ensure_future(self._reconnect())

    async def send(self, value: int, payload: bytes) -> None:
        if not self.ready.is_set():
            # backpressure while we fail over; the producer loop's ack_timeout bounds it
            try:
                await asyncio.wait_for(self.ready.wait(), self.system.scenario.workload.ack_timeout)
            except asyncio.TimeoutError:
                raise ConnectionError("not connected to any node") from None
        t = asyncio.ensure_future(self._publish(value, payload, self.exchange, self.current, self.generation))
        self.tasks.add(t)
        t.add_done_callback(self.tasks.discard)

    async def _publish(self, value: int, payload: bytes, exchange, node: str, generation: int) -> None:
        ap = _aio_pika()
        o = self.system.options
        msg = ap.Message(payload, delivery_mode=ap.DeliveryMode.PERSISTENT if o.persistent
                         else ap.DeliveryMode.NOT_PERSISTENT)
        try:
            await exchange.publish(msg, routing_key=self.system.stream_name, mandatory=o.mandatory)
        except asyncio.CancelledError:
            raise
        except ap.exceptions.DeliveryError as e:
            # Basic.Nack: the broker failed to store it; Basic.Return: routed nowhere
            frame = getattr(e, "frame", None)
            text = getattr(frame, "reply_text", None)
            self.on_outcome(value, "nack", None, node, f"Basic.{type(frame).__name__}" + (f": {text}" if text else ""))
            return
        except Exception as e:  # noqa: BLE001 - connection or channel lost: the outcome is unknowable
            self.on_outcome(value, "unknown", None, node, f"{type(e).__name__}: {e}"[:200])
            self._lost(generation)
            return
        self.on_outcome(value, "ack", None, node, None)

    def node(self) -> Optional[str]:
        return self.current if self.ready.is_set() else None

    async def close(self) -> None:
        for t in list(self.tasks):
            t.cancel()
        if self.reconnecting is not None:
            self.reconnecting.cancel()
        await asyncio.gather(*self.tasks, *( [self.reconnecting] if self.reconnecting else []),
                             return_exceptions=True)
        if self.conn is not None:
            await _close(self.conn)


class RabbitReader:
    """Consumes the whole queue with manual acks (stream: from the first offset) until
    the broker reports nothing left."""

    def __init__(self, system: RabbitSystem, name: str) -> None:
        self.system = system
        self.name = name

    async def read(self, deliver: DeliverCallback, idle: float) -> str:
        s = self.system
        deadline = time.monotonic() + idle
        conn, node, last = None, None, ""
        while conn is None:
            # the leader's node first; a node just restarted may still be booting
            try:
                node = await s.leader()
            except Exception:  # noqa: BLE001 - any running node will do
                node = next((n for n in s.node_names if s.node_alive(n)), s.node_names[0])
            try:
                conn = await s._connection(node, timeout=2.0)
            except Exception as e:  # noqa: BLE001
                last = f"cannot connect to {node}: {type(e).__name__}: {e}"
                if time.monotonic() > deadline:
                    return f"incomplete: {last}"
                await asyncio.sleep(0.5)
        stream = s.options.queue_type == "stream"
        try:
            ch = await conn.channel()
            await ch.set_qos(prefetch_count=s.options.prefetch)
            try:
                q = await ch.declare_queue(s.stream_name, passive=True)
            except Exception as e:  # noqa: BLE001 - e.g. a classic queue whose node is down
                return f"incomplete: queue {s.stream_name} unavailable on {node}: {type(e).__name__}: {e}"
            expected = None
            if stream:
                expected = int((await s._queue_info()).get("messages") or 0)
            got = 0
            last_progress = time.monotonic()
            inbox: asyncio.Queue = asyncio.Queue()
            tag = await q.consume(inbox.put, no_ack=False,
                                  arguments={"x-stream-offset": "first"} if stream else None)
            try:
                while True:
                    try:
                        message = await asyncio.wait_for(inbox.get(), 0.5)
                    except asyncio.TimeoutError:
                        if stream:
                            if expected is not None and got >= expected:
                                return "complete"
                        else:
                            q2 = await ch.declare_queue(s.stream_name, passive=True)
                            if q2.declaration_result.message_count == 0:
                                return "complete"
                        if time.monotonic() - last_progress > idle:
                            return f"incomplete: no delivery for {idle:.0f}s ({got} read)"
                        continue
                    got += 1
                    last_progress = time.monotonic()
                    off = message.headers.get("x-stream-offset") if stream and message.headers else None
                    deliver(message.body, None if off is None else str(off), node)
                    if got % 500 == 0 or inbox.empty():
                        await message.ack(multiple=True)
            finally:
                try:
                    await asyncio.wait_for(q.cancel(tag), 3)
                except Exception:  # noqa: BLE001
                    pass
        finally:
            await _close(conn)
