"""VerneMQ, the HA session seed's own system: a cluster of VerneMQ nodes, one per namespace,
from a VerneMQ release (its own Erlang runtime; no registry here ships it).

Which release: `$BROKERCHAOS_VERNEMQ` (a release directory, with `bin/vernemq`, or a release
tarball), else the tarball in `../shared/vernemq/` beside this checkout (what CI uses); a
tarball is unpacked once into the cache. Each node runs a copy of it (hard links to the
release, its own `etc/`, `data/` and `log/`), with a configuration written here: its
listeners on the node's address, anonymous clients (`vmq_passwd` off, `vmq_acl` on: with no
auth plugin every publish is refused), the netsplit settings and the inter-node buffer as
options. The node's process is the Erlang VM itself (`bin/vernemq console`, execs it, with no
shell on stdin); its epmd is a helper of ours, started first, so that the release starts
none that would outlive the node. Nodes join the first one with `vmq-admin cluster join`;
a node restarted on its own data rejoins by itself.
"""
from __future__ import annotations

import asyncio
import os
import re
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Optional

from ..base import CLOCK, POWER, REPLACE, SystemError_
from ..cluster import LocalCluster
from ...sandbox.mounts import MountError
from ..runtime import cache_dir, filling, http_get, port_open, wait_until
from . import vernemembers
from .backends import MqttRoles
from .vernemembers import subscribed_in

RELEASE_ENV = "BROKERCHAOS_VERNEMQ"
# ../shared/vernemq beside the checkout: src/brokerchaos/systems/mqtt/vernemq.py -> parents[4]
SHARED = Path(__file__).resolve().parents[4].parent / "shared" / "vernemq"
COOKIE = "brokerchaos"
# written last into an unpacked release's cache entry: the entry is whole
COMPLETE = "unpacked"


def release() -> Path:
    """The release directory to run (it has bin/vernemq); SystemError_ saying where it was
    looked for when there is none."""
    given = os.environ.get(RELEASE_ENV)
    if given:
        p = Path(given)
        if (p / "bin" / "vernemq").is_file():
            return p
        if p.is_file() and p.name.endswith((".tar.gz", ".tgz")):
            return _unpacked(p)
        raise SystemError_(f"{RELEASE_ENV}={given}: neither a VerneMQ release directory (bin/vernemq) nor a "
                           f"release tarball")
    found = sorted(SHARED.glob("vernemq-*.tar.gz")) if SHARED.is_dir() else []
    if not found:
        raise SystemError_(f"no VerneMQ release: set {RELEASE_ENV} to a release directory or tarball (looked in "
                           f"{SHARED} too)")
    return _unpacked(found[-1])


def missing() -> Optional[str]:
    """None when a release is found, else why not (`brokerchaos doctor`)."""
    try:
        release()
    except Exception as e:
        return str(e)[:200]
    return None


def version_found() -> str:
    """The release's version, by its file name (nothing is unpacked to say it)."""
    found = [os.environ.get(RELEASE_ENV, "")] + sorted(p.name for p in SHARED.glob("vernemq-*"))
    verne = next((m.group(1) for f in found if (m := re.search(r"vernemq-(\d[\w.]*?)-", f))), None)
    return verne or f"no release found (../shared/vernemq, or {RELEASE_ENV})"


def _unpacked(tarball: Path) -> Path:
    """A release tarball unpacked once into the cache (its name and size say which). The
    test workers' first VerneMQ runs come at once: one unpacks, under the entry's lock, into
    a directory of its own that becomes the entry whole (its COMPLETE mark last); the other
    finds it done. An entry without the mark (an unpack cut short) is unpacked again."""
    d = cache_dir("vernemq") / f"{tarball.name.removesuffix('.tar.gz')}-{tarball.stat().st_size}"
    if (d / COMPLETE).is_file():
        return d / "release"
    with filling(d):
        if not (d / COMPLETE).is_file():
            _unpack(tarball, d)
    return d / "release"


def _unpack(tarball: Path, d: Path) -> None:
    tmp = Path(tempfile.mkdtemp(prefix=f".{d.name}.", dir=d.parent))
    try:
        with tarfile.open(tarball) as tf:
            tf.extractall(tmp, filter="tar")
        if not (tmp / "release" / "bin" / "vernemq").is_file():
            raise SystemError_(f"{tarball}: no release/bin/vernemq in it")
        (tmp / COMPLETE).write_text(f"{tarball}\n")
        tmp.chmod(0o755)  # mkdtemp's 0700 otherwise: the cache readable as a directory made by hand is
        shutil.rmtree(d, ignore_errors=True)
        tmp.rename(d)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def version_of(rel: Path) -> str:
    """The release's version, from its releases/<version>/ directory."""
    vs = [p.name for p in (rel / "releases").iterdir() if p.is_dir() and p.name[:1].isdigit()]
    return vs[0] if vs else "unknown"


class VerneServers(LocalCluster):
    """One VerneMQ node per namespace; n1 is the node the others join."""

    ports = {"client": 1883, "mqtt": 1883, "cluster": 44053, "http": 8888, "dist": 9100}
    # clock: the Erlang VM (its os:system_time: retained-message and session expiry, the
    # Plumtree/SWC exchange's timestamps) follows libfaketime as RabbitMQ's does; replace:
    # a node decommissioned with `vmq-admin cluster leave -k` and a new one joined (vernemembers.py)
    extra_offers = frozenset({POWER, CLOCK, REPLACE})

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.release = release()

    def nodename(self, node: str) -> str:
        return f"VerneMQ@{self.address(node)[0]}"

    def home(self, node: str) -> Path:
        return self.datadir / node / "vernemq"

    def _install(self, node: str) -> Path:
        """The node's copy of the release: hard links to it, but what the node writes (etc,
        data, log) its own."""
        d = self.home(node)
        if (d / "bin" / "vernemq").is_file():
            return d
        d.mkdir(parents=True, exist_ok=True)
        for part in self.release.iterdir():
            if part.name in ("etc", "data", "log"):
                shutil.copytree(part, d / part.name, dirs_exist_ok=True)
            elif part.is_dir():
                shutil.copytree(part, d / part.name, copy_function=_link, dirs_exist_ok=True)
            elif not (d / part.name).exists():
                _link(part, d / part.name)
        # the software is the machine's, installed long before any cut: on the power-off
        # layer it counts as written back (a cut dropped the whole unsynced install once,
        # 780 MB, and the node could not start again: "File exists")
        if node in self.disks:
            try:
                self.disks[node].settle()
            except MountError as e:
                raise SystemError_(str(e)) from None
        return d

    def _conf(self, node: str) -> str:
        o = self.options
        ip, port = self.address(node, "mqtt")
        flag = "on" if o.netsplit_writes else "off"
        return "\n".join([
            f"nodename = {self.nodename(node)}", f"distributed_cookie = {COOKIE}",
            f"listener.tcp.default = {ip}:{port}",
            "listener.vmq.clustering = {}:{}".format(*self.address(node, "cluster")),
            "listener.http.default = {}:{}".format(*self.address(node, "http")),
            f"erlang.distribution.port_range.minimum = {self.address(node, 'dist')[1]}",
            f"erlang.distribution.port_range.maximum = {self.address(node, 'dist')[1]}",
            "allow_anonymous = on", "plugins.vmq_passwd = off", "plugins.vmq_acl = on",
            "vmq_acl.acl_file = ./etc/vmq.acl", "metadata_plugin = vmq_swc",
            *[f"allow_{verb}_during_netsplit = {flag}" for verb in ("register", "publish", "subscribe", "unsubscribe")],
            f"outgoing_clustering_buffer_size = {o.outgoing_clustering_buffer_size}",
            f"shared_subscription_policy = {o.shared_subscription_policy}",
            f"max_online_messages = {o.max_queued_messages}", f"max_offline_messages = {o.max_queued_messages}",
            # three nodes on one machine: LevelDB's default takes 70% of its memory each
            "leveldb.maximum_memory.percent = 5",
            # beside the node's output in the run's logs (its home goes with the cluster)
            "log.console = file", f"log.console.file = {self.log(node + '-console')}", "log.console.level = info",
            "log.error = on", f"log.error.file = {self.log(node + '-error')}",
        ]) + "\n"

    def launch(self, node: str) -> None:
        d = self._install(node)
        conf = d / "etc" / "vernemq.conf"
        conf.unlink(missing_ok=True)  # never a link into the release
        conf.write_text(self._conf(node))
        if not any(p.name == f"{node}-epmd" and p.alive() for p in self.helpers):
            self.spawn_helper(node, f"{node}-epmd", [str(next(d.glob("erts-*/bin/epmd")))])
        env = {**os.environ, "ERL_FLAGS": "-noinput", "HOME": str(d)}
        self.spawn_node(node, [str(d / "bin" / "vernemq"), "console"], env=env)

    def _tool(self, node: str, name: str, argv: list[str], what: str, timeout: float) -> str:
        """One of the release's scripts run in the node's namespace; its output, or a
        SystemError_ naming `what` when it exits non-zero."""
        self.log(name).unlink(missing_ok=True)
        code = self.run_tool(node, name, argv, timeout)
        out = self.log(name).read_text(errors="replace")
        if code != 0:
            raise SystemError_(f"{what} on {node} exited {code}: {out.strip()[-300:]}")
        return out

    def admin(self, node: str, *args: str, timeout: float = 30.0) -> str:
        """`vmq-admin ARGS` on the node (in its namespace); its output."""
        return self._tool(node, f"{node}-vmq-admin", [str(self.home(node) / "bin" / "vmq-admin"), *args],
                          f"vmq-admin {' '.join(args)}", timeout)

    def rpc(self, node: str, module: str, function: str, *args: str, timeout: float = 30.0) -> str:
        """`module:function(args)` called on the node (each argument an Erlang term ending in
        a dot) through the release's nodetool, from the node's namespace; what it returned,
        as printed."""
        script = self.home(node) / "bin" / "bc-rpc"
        if not script.exists():
            script.write_text(RPC_SCRIPT)
            script.chmod(0o755)
        return self._tool(node, f"{node}-rpc", [str(script), module, function, *args], f"{module}:{function}",
                          timeout).strip()

    def clock_of(self, host: str) -> Optional[float]:
        """The node's OS clock as its Erlang VM reads it (`os:system_time(second)`), asked over
        the distribution by nodetool from the node's namespace (itself on true time)."""
        if host not in self.node_names:
            return None
        try:
            said = self.rpc(host, "os", "system_time", "second.", timeout=20.0)
        except SystemError_:
            return None
        return float(said) if said.isdigit() else None

    async def subscription_known(self, client_id: str, node: str, topic: str) -> tuple[bool, str]:
        """Whether every running node's subscriber store holds `client_id`'s subscription to
        `topic` on `node`, and which do not. VerneMQ replicates its subscriptions between
        nodes (SWC) and its SUBACK speaks only of the node that sent it: a broadcast that is
        lost (seen for about 1 subscription in 5 on 2.1.2) waits for an exchange to repair
        it, once more than 60 s, and until then a message published on another node is
        acked and routed to nobody."""
        term = "{[], <<\"%s\">>}." % client_id
        missing = []
        for n in (n for n in self.node_names if self.alive(n)):
            out = await asyncio.to_thread(self.rpc, n, "vmq_subscriber_db", "read", term)
            if not subscribed_in(out, self.nodename(node), topic):
                missing.append(n)
        return not missing, f"not known on {', '.join(missing)}" if missing else "known on every node"

    def members(self, node: str) -> dict[str, bool]:
        """The cluster as `node` sees it: member node name -> running."""
        out = self.admin(node, "cluster", "show")
        rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in out.splitlines()
                if line.strip().startswith("|") and "VerneMQ@" in line]
        return {r[0]: r[1].lower() == "true" for r in rows if len(r) >= 2}

    async def ready(self, timeout: float) -> None:
        """Every node's MQTT port open, then every node a running member of n1's cluster."""
        for n in self.node_names:
            async def up(n=n):
                if not self.alive(n):
                    raise self.exited(n)
                return await port_open(self.address(n, "mqtt")), "MQTT port"
            await wait_until(up, timeout, f"VerneMQ on {n}", every=0.5)
        first = self.node_names[0]

        async def joined():
            # vmq-admin answers "Usage information not found" for a while after the MQTT
            # port opens (its commands register late): that is "not yet", as is a join
            members = await asyncio.to_thread(self.members, first)
            missing = [n for n in self.node_names[1:] if self.nodename(n) not in members]
            for n in missing:
                await asyncio.to_thread(self.admin, n, "cluster", "join", f"discovery-node={self.nodename(first)}")
            return not missing, f"joining {', '.join(missing)}" if missing else "joined"

        await wait_until(joined, timeout, "VerneMQ nodes joining n1", every=1.0)
        await wait_until(self.whole, timeout, "the VerneMQ cluster", every=1.0)

    async def whole(self) -> tuple[bool, str]:
        """Every node a running member, as the first running node sees it."""
        up = [n for n in self.node_names if self.alive(n)]
        if len(up) < len(self.node_names):
            return False, f"not running: {', '.join(n for n in self.node_names if n not in up)}"
        members = await asyncio.to_thread(self.members, up[0])
        want = {self.nodename(n) for n in self.node_names}
        running = {m for m, ok in members.items() if ok}
        return running >= want, f"running members: {len(running & want)} of {len(want)}"

    def versions(self) -> dict[str, str]:
        return {n: f"VerneMQ {version_of(self.release)}" for n in self.node_names}

    def settings(self) -> dict:
        """What the nodes were configured with (the release reads its file at start)."""
        o = self.options
        return {n: {"netsplit_writes": o.netsplit_writes,
                    "outgoing_clustering_buffer_size": o.outgoing_clustering_buffer_size,
                    "max_queued_messages": o.max_queued_messages,
                    "shared_subscription_policy": o.shared_subscription_policy} for n in self.node_names}


# nodetool's `rpcterms` with the node's name and cookie, as the release's vmq-admin calls it
RPC_SCRIPT = """#!/bin/sh
. "$(cd `dirname $0` ; /bin/pwd)/../lib/env.sh"
cd "$RUNNER_BASE_DIR"
exec $NODETOOL rpcterms "$@"
"""


def _link(src, dst) -> None:
    """A hard link where the file system allows it, else a copy."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


# the counters of what VerneMQ drops on purpose (its /metrics, Prometheus text), and their unit
DROP_COUNTERS = {"queue_message_drop": "messages", "cluster_bytes_dropped": "bytes"}


def drop_counts_of(metrics: str) -> dict[str, tuple[int, str]]:
    """The drop counters in one node's /metrics (`vernemq_queue_message_drop{node="…"} 12`:
    the names carry `prometheus_namespace`, "vernemq_" by default), summed over their label
    sets; a counter the text lacks is left out."""
    out: dict[str, tuple[int, str]] = {}
    for line in metrics.splitlines():
        name, _, rest = line.partition("{")
        name = name.removeprefix("vernemq_")
        if name in DROP_COUNTERS and "} " in rest:
            count = int(float(rest.rsplit("} ", 1)[1]))
            out[name] = (out.get(name, (0, ""))[0] + count, DROP_COUNTERS[name])
    return out


class VerneRoles(MqttRoles):
    """The node holding the receiver's session is where the receiver is connected. Whole:
    every node's HTTP `/health` answers, and (a cluster of ours) every node is a running
    member as `vmq-admin cluster show` says; an external cluster is asked over HTTP only."""

    async def backend_whole(self) -> tuple[bool, str]:
        for n in self.cluster.node_names:
            try:
                await http_get(*self.cluster.address(n, "http"), "/health", 3.0)
            except (OSError, asyncio.TimeoutError) as e:
                return False, f"{n}: /health {type(e).__name__}"
        if isinstance(self.cluster, VerneServers):
            return await self.cluster.whole()
        return True, "every node healthy"

    async def remove_member(self, node: str, same_name: bool = False) -> dict:
        """The node decommissioned (vernemembers.py): its sessions cut and its offline queues
        migrated to the others by `vmq-admin cluster leave -k`, then stopped, its data deleted."""
        c = self._ours("replace a node")
        through = vernemembers.other_live(c, node)
        before = await asyncio.to_thread(c.members, through)
        left = await asyncio.to_thread(vernemembers.leave, c, node)
        await asyncio.to_thread(vernemembers.renew, c, node)
        return {"verb": f"vmq-admin cluster leave node={c.nodename(node)} -k (through {through}): its sessions cut, "
                        f"its offline queues migrated, then it stopped; its data deleted",
                "name": c.nodename(node), "members_before": sorted(before),
                "members_after": sorted(await asyncio.to_thread(c.members, through)), **left}

    async def add_member(self, node: str, timeout: float) -> dict:
        """A new, empty node in the removed one's place (under its name: its address), joined
        to the cluster, in sync once every member runs and it knows the receiver's subscription."""
        c = self._ours("replace a node")
        r = self.client.receiver
        rx = r.current if r is not None and r.current else self.client.rx_node
        cid = r.client_id if r is not None else ""
        got = await vernemembers.rejoin(c, node, cid, rx, self.client.topic, timeout)
        members = await asyncio.to_thread(c.members, got["through"])
        knows = f"its subscriber store knows {cid}'s subscription on {rx}" if cid else "every member running"
        return {"verb": f"a new VerneMQ node on {node}, its data empty, joined through {got['through']}",
                "name": c.nodename(node), "members_after": sorted(m for m, up in members.items() if up), **got,
                "copied": f"the cluster's metadata ({knows})" if got["in_sync_s"] is not None
                          else f"not in sync: {got.get('last')}"}

    def _ours(self, what: str) -> VerneServers:
        if not isinstance(self.cluster, VerneServers):
            raise LookupError(f"cannot {what} of an external VerneMQ cluster")
        return self.cluster

    async def drop_counts(self) -> dict[str, dict[str, tuple[int, str]]]:
        """Each node's `queue_message_drop` (messages dropped because a session's queue held
        max_online_messages already) and `cluster_bytes_dropped` (bytes the inter-node buffer,
        outgoing_clustering_buffer_size, dropped while a peer was away), from its /metrics."""
        out = {}
        for n in self.cluster.node_names:
            body = await http_get(*self.cluster.address(n, "http"), "/metrics", 5.0)
            out[n] = drop_counts_of(body.decode(errors="replace"))
        return out
