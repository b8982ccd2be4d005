"""RabbitMQ nodes: Debian's rabbitmq-server 3.10 run by us, and its management API.

One Erlang node per namespace, named rabbit@<namespace IP> (long names: no /etc/hosts
work), one shared cookie, and an epmd we start ourselves in each namespace so none is
left daemonised behind us. The first node boots blank; the others join it through
classic-config peer discovery once it serves (`ready`). Leaders and health come from the
management API, never from cluster-wide `rabbitmqctl` calls (slow, and they can hang
while a node is cut off).
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
from pathlib import Path
from typing import Optional

from ..base import CLOCK, CORRUPT, POWER, SystemError_
from ..runtime import http_get, port_open
from ..cluster import Cluster, LocalCluster, files_by_age

SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"
UPGRADE = "/usr/lib/rabbitmq/bin/rabbitmq-upgrade"
QUEUES = "/usr/lib/rabbitmq/bin/rabbitmq-queues"
CTL = "/usr/lib/rabbitmq/bin/rabbitmqctl"
EPMD = "/usr/bin/epmd"
AUTH = ("guest", "guest")


class RabbitServers(LocalCluster):
    """The local cluster; `plugins` and `joiners_together` differ for the MQTT plugin."""

    ports = {"client": 5672, "dist": 25672, "mgmt": 15672, "epmd": 4369, "mqtt": 1883}
    # clock: the Erlang VM reads the OS clock through the C library, which libfaketime moves;
    # power: each node's directory (its Mnesia, quorum queue WAL and segments, message store);
    # corrupt: the queue's files of a node (data_files)
    extra_offers = frozenset({CLOCK, CORRUPT, POWER})
    plugins: tuple[str, ...] = ("rabbitmq_management",)
    # joiners boot side by side once the first node serves; the MQTT plugin's Raft cluster
    # needs them one by one
    joiners_together = True

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.home = self.datadir / "home"
        self._unstarted: list[str] = []

    @property
    def supervised(self) -> tuple[str, ...]:
        """Every node with options.restart_on_failure (the package's systemd unit restarts a
        failed broker): RabbitMQ 3.10 nodes started together after a power cut of all of them
        can fail their boot on a feature-flag sync with a peer still booting
        (docs/findings/power-cuts.md)."""
        return tuple(self.node_names) if getattr(self.options, "restart_on_failure", True) else ()

    def data_files(self, node: str) -> list[Path]:
        """The files of `node` holding its queues' messages, oldest write first, whatever the
        queue's type (sessions of every type share a cluster): a quorum queue's Raft log
        (each member's segment files, and the write-ahead log Ra appends every member on the
        node to), a stream's segments, a classic queue's index, journal and message store.
        The newest is the one the run's queue was writing (the WAL's tail: its last entries).
        Queues of earlier runs on a reused cluster were deleted with their files."""
        home = self.datadir / node / "mnesia" / self.erl_name(node)
        ra = home / "quorum" / self.erl_name(node)
        stores = home / "msg_stores" / "vhosts"
        return files_by_age([*ra.glob("*/*.segment"), *ra.glob("*.wal"), *(home / "stream").glob("*/*.segment"),
                        *stores.glob("*/queues/*/*.idx"), *stores.glob("*/queues/*/journal.jif"),
                        *stores.glob("*/msg_store_persistent/*.rdq")])

    def ra_dir(self, node: str) -> Path:
        """Where `node` keeps its quorum queues' Ra logs: the WAL and a directory per member."""
        return self.datadir / node / "mnesia" / self.erl_name(node) / "quorum" / self.erl_name(node)

    def metadata_files(self, node: str) -> list[Path]:
        """The node's Mnesia tables (schema, queues, bindings, users: RabbitMQ 3.x's metadata
        store), their logs and its decision table, oldest first."""
        home = self.datadir / node / "mnesia" / self.erl_name(node)
        return files_by_age(f for pat in ("*.DCD", "*.DCL", "*.DAT", "*.LOG") for f in home.glob(pat))

    def erl_name(self, node: str) -> str:
        h = self.host(node)
        # on loopback every node shares 127.0.0.1, so the name part must differ
        return f"rabbit@{h.ip}" if h.ns else f"rabbit-{node}@{h.ip}"

    def _conf(self, node: str) -> str:
        ip, amqp = self.address(node)
        lines = [
            f"listeners.tcp.1 = {ip}:{amqp}",
            "loopback_users = none",
            f"management.tcp.ip = {ip}",
            f"management.tcp.port = {self.address(node, 'mgmt')[1]}",
            "log.console = true", "log.console.level = warning", "log.file = false",
            # the machine has 24 GB; three nodes at the default 40 % each would overcommit it
            "vm_memory_high_watermark.absolute = 2GB",
        ]
        if "rabbitmq_mqtt" in self.plugins:
            lines.append("mqtt.listeners.tcp.1 = {}:{}".format(*self.address(node, "mqtt")))
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

    def _epmd_port(self) -> int:
        # one epmd per namespace on 4369; on loopback one shared epmd on a free port
        return self.address(self.node_names[0], "epmd")[1]

    def _env(self, node: str) -> dict:
        ip, _ = self.address(node)
        d = self.datadir / node
        env = dict(os.environ)
        env.update({
            "HOME": str(self.home),  # the shared .erlang.cookie
            "RABBITMQ_NODENAME": self.erl_name(node),
            "RABBITMQ_USE_LONGNAME": "true",
            "RABBITMQ_NODE_IP_ADDRESS": ip,
            "RABBITMQ_DIST_PORT": str(self.address(node, "dist")[1]),
            "RABBITMQ_MNESIA_BASE": str(d / "mnesia"),
            "RABBITMQ_LOG_BASE": str(d / "log"),
            "RABBITMQ_CONFIG_FILE": str(d / "rabbitmq.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.datadir / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(d / "pid"),
            # exec the VM in place of the start script, so the PID we hold is beam.smp and
            # SIGKILL/SIGSTOP hit the broker itself; -noinput keeps the shell off
            "RABBITMQ_ALLOW_INPUT": "true",
            # Mnesia dumps its core (a table it cannot read: corrupt metadata) into the
            # node's directory, not the harness's working directory (default: the cwd)
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": f'-noinput -mnesia core_dir "{d}"',
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
            self.spawn_helper(n, f"{n}-epmd", [EPMD, "-port", str(self._epmd_port())])
        # only the first node now: the joiners boot in ready(), once it serves. Booted side by
        # side, a joiner could fail the schema check while the first still enabled feature
        # flags, and the MQTT plugin's client-id Raft cluster stalled all three nodes for 80 s
        # (a CI run) in add_member calls to peers whose Raft servers were not up yet
        self.start_node(self.node_names[0])
        self._unstarted = list(self.node_names[1:])

    def _booted(self, node: str):
        """Marks a node that has joined once, beside its directory: on the power-off layer a
        marker inside it would go with the next cut."""
        return self.datadir / f"{node}.booted"

    def launch(self, node: str) -> None:
        d = self.datadir / node
        d.mkdir(parents=True, exist_ok=True)
        (d / "rabbitmq.conf").write_text(self._conf(node))
        self.spawn_node(node, [SERVER], env=self._env(node))

    def clock_of(self, host: str) -> Optional[float]:
        """The node's OS clock as its Erlang VM reads it (`os:system_time`), asked over the
        distribution by rabbitmqctl from the node's own namespace (itself on true time)."""
        if host not in self.node_names:
            return None
        out = self.sandbox.dir / f"{host}-clock.out"
        argv = ["sh", "-c", f'{CTL} -n {self.erl_name(host)} -l eval "os:system_time(second)." > {out}']
        if self.run_tool(host, f"{host}-clock", argv, 30, env=self._env(host)) != 0:
            return None
        said = out.read_text().strip()
        return float(said) if said.isdigit() else None

    def queue_member(self, via: str, verb: str, queue: str, member: str, timeout: float = 60.0) -> None:
        """`rabbitmq-queues add_member|delete_member` of `member`'s node for `queue`, asked of
        `via` from its own namespace: a quorum queue's membership changed."""
        argv = [QUEUES, "-n", self.erl_name(via), "-l", "-t", str(int(timeout)), verb, "-p", "/", queue,
                self.erl_name(member)]
        rc = self.run_tool(via, f"{via}-{verb}", argv, timeout + 10, env=self._env(via))
        if rc != 0:
            raise SystemError_(f"rabbitmq-queues {verb} {queue} {member} exited {rc}; see {self.log(f'{via}-{verb}')}")

    def maintenance(self, node: str, verb: str, timeout: float = 60.0) -> None:
        """`rabbitmq-upgrade drain|revive` against `node`, from its own namespace: drain moves
        its quorum-queue leaders away and closes its client listeners (maintenance mode)."""
        argv = [UPGRADE, "-n", self.erl_name(node), "-l", "-t", str(int(timeout)), verb]
        rc = self.run_tool(node, f"{node}-{verb}", argv, timeout + 10, env=self._env(node))
        if rc != 0:
            raise SystemError_(f"rabbitmq-upgrade {verb} on {node} exited {rc}; see {self.log(f'{node}-{verb}')}")

    async def ready(self, timeout: float) -> None:
        """Boot the joiners once the nodes before them serve, and wait until the cluster is
        whole. Each boot gets `timeout` of its own."""
        api = Management(self)
        deadline = time.monotonic() + timeout
        last = "not started"
        retried: set[str] = set()
        while time.monotonic() < deadline:
            if self._unstarted:
                before = [n for n in self.node_names if n not in self._unstarted][-1]
                if self.alive(before) and await port_open(self.address(before)):
                    for n in self._unstarted[:None if self.joiners_together else 1]:
                        self.start_node(n)
                        self._unstarted.remove(n)
                    deadline = max(deadline, time.monotonic() + timeout)
                    continue
                last = f"{before} not serving yet ({self._unstarted[0]} joins after it)"
            for n in self.node_names:
                if n in self._unstarted or self.alive(n):
                    continue
                if n == self.node_names[0] or n in retried or self._booted(n).exists():
                    raise self.exited(n)
                # a joiner that exits while booting (seen here, when joiners booted beside the
                # first node: table_attributes_mismatch) gets one more boot on empty data
                retried.add(n)
                shutil.rmtree(self.datadir / n / "mnesia", ignore_errors=True)
                self.launch(n)
                # that second boot was once seen to take 74 s (a CI run): it gets a window of
                # its own, once, instead of what was left of the first
                deadline = max(deadline, time.monotonic() + timeout)
            try:
                ok, last = await api.running()
                if ok:
                    for n in self.node_names:
                        self._booted(n).touch()
                    return
            except Exception as e:  # still booting
                last = f"{type(e).__name__}: {e}"
            await asyncio.sleep(0.25)
        raise SystemError_(f"RabbitMQ cluster not ready within {timeout}s: {last}")


class RabbitMqttServers(RabbitServers):
    """The same cluster with the MQTT plugin (the mqtt system's RabbitMQ backend)."""

    plugins = ("rabbitmq_management", "rabbitmq_mqtt")
    joiners_together = False


def node_of(cluster: Cluster, erl_name: str) -> Optional[str]:
    """Our node for an Erlang node name: `rabbit-<node>@…` (loopback), else by host."""
    name, _, host = (erl_name or "").partition("@")
    for n in cluster.node_names:
        if name == f"rabbit-{n}":
            return n
    for n in cluster.node_names:
        if cluster.address(n)[0] == host:
            return n
    return None


class Management:
    """The management API of whichever nodes answer (address `mgmt`)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    async def api(self, node: str, path: str, timeout: float = 2.0):
        return json.loads(await http_get(*self.cluster.address(node, "mgmt"), path, timeout, auth=AUTH))

    async def running(self) -> tuple[bool, str]:
        """Every node running (as n1 sees it) and serving AMQP."""
        nodes = await self.api(self.cluster.node_names[0], "/api/nodes?columns=name,running")
        running = {node_of(self.cluster, x["name"]) for x in nodes if x.get("running")}
        if not set(self.cluster.node_names) <= running:
            return False, f"running: {sorted(x['name'] for x in nodes if x.get('running'))}"
        for n in self.cluster.node_names:  # the AMQP listener opens after the node reports running
            if not await port_open(self.cluster.address(n)):
                return False, f"{n} AMQP port not open"
        return True, "ready"

    async def whole(self) -> tuple[bool, str]:
        """Every node running, listening, and no partition seen by any."""
        ok, last = await self.running()
        if not ok:
            return ok, last
        parts = await self.api(self.cluster.node_names[0], "/api/nodes?columns=name,partitions")
        split = [x["name"] for x in parts if x.get("partitions")]
        return not split, f"partitions seen by {split}" if split else "whole"

    async def queue(self, queue: str) -> dict:
        """The queue as most reachable nodes see it (a node cut off may hold a stale view)."""
        alive = [n for n in self.cluster.node_names if self.cluster.alive(n)]
        path = f"/api/queues/%2F/{urllib.parse.quote(queue, safe='')}?disable_stats=true"
        answers = await asyncio.gather(*(self.api(n, path, 1.5) for n in alive), return_exceptions=True)
        got = [a for a in answers if isinstance(a, dict)]
        if not got:
            why = ", ".join(f"{n}: {type(a).__name__}" for n, a in zip(alive, answers))
            raise SystemError_(f"no management API answered for queue {queue} ({why})")
        votes = collections.Counter(a.get("leader") or a.get("node") for a in got)
        best = votes.most_common(1)[0][0]
        return next(a for a in got if (a.get("leader") or a.get("node")) == best)

    async def queue_leader(self, queue: str) -> str:
        """The node leading the queue (quorum, stream) or holding it (classic)."""
        info = await self.queue(queue)
        name = info.get("leader") or info.get("node")
        node = node_of(self.cluster, name or "")
        if node is None:
            raise SystemError_(f"queue {queue} has no known leader ({name!r})")
        return node
