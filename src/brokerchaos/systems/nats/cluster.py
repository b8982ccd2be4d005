"""NATS's servers: their options (durability, lame-duck mode), the nats-server processes
the harness starts (one per node namespace, routed to each other), and the JetStream meta
group as their monitoring endpoints describe it. The client side is nats.py."""
from __future__ import annotations

import asyncio
import json
import re
import shutil
import signal
import urllib.request
from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..base import CLOCK, CORRUPT, LAMEDUCK, POWER, REPAIR, REPLACE, SystemError_
from ..cluster import LocalCluster, files_by_age
from ..runtime import http_get
from . import bin as natsbin

JOIN_S = 15.0  # a fresh server in touch with the JetStream meta leader (well under 1 s when routes do not race)
_DURATION = re.compile(r"^(\d+)(ms|s|m|h)$")
# a system account for its requests (a server peer-removed: members.py), only for a scenario
# that needs `replace`; `no_auth_user` keeps every other client in the global account
SYS_USER, SYS_PASSWORD = "sys", "brokerchaos"
SYSTEM_ACCOUNT = [
    "accounts {",
    f"  SYS: {{ users: [{{user: {SYS_USER}, password: {SYS_PASSWORD}}}] }}",
    "}",
    "system_account: SYS",
    "authorization { users: [{user: app, password: app}] }",
    "no_auth_user: app",
]


class NatsOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sync_interval: str = Field(
        "default", description="when JetStream fsyncs its files: default (the server's: every 2 minutes), always "
                               "(before each ack), or a duration such as 1s or 100ms; needs nats-server 2.10 or "
                               "later (cluster.version)")

    producers_connect: Literal["random", "leader"] = Field(
        "random", description="the server each producer connects to: random (nats-py's way: any server of the "
                              "cluster), or leader: the server leading the stream when the producer starts, the "
                              "others after it, in order, for its reconnects (a cut of the leader from its peers "
                              "then keeps the producer's publishes on the leader's side)")

    lame_duck_duration: str = Field(
        "default", description="lame-duck mode (the lame-duck fault): the time over which the server closes its "
                               "clients (at most one a second) before it exits; 30s at least; default is the "
                               "server's (2m)")
    lame_duck_grace_period: str = Field(
        "default", description="lame-duck mode: how long the server waits before it starts closing its clients; "
                               "default is the server's (10s); shorter than lame_duck_duration")

    @field_validator("sync_interval")
    @classmethod
    def _interval(cls, v: str) -> str:
        if v not in ("default", "always") and not _DURATION.match(v):
            raise ValueError(f"default, always or a duration such as 1s, 100ms or 2m, not {v!r}")
        return v

    @field_validator("lame_duck_duration", "lame_duck_grace_period")
    @classmethod
    def _duration(cls, v: str) -> str:
        if v != "default" and not _DURATION.match(v):
            raise ValueError(f"default or a duration such as 30s, 500ms or 2m, not {v!r}")
        return v

    @model_validator(mode="after")
    def _grace_within(self) -> "NatsOptions":
        # the server refuses to start otherwise
        if self.lame_duck_s() < 30:
            raise ValueError(f"lame_duck_duration must be 30s or more (nats-server's minimum), not "
                             f"{self.lame_duck_duration}")
        if self.lame_duck_s() <= self.lame_duck_grace_s():
            raise ValueError("lame_duck_grace_period must be shorter than lame_duck_duration")
        return self

    def lame_duck_s(self) -> float:
        return 120.0 if self.lame_duck_duration == "default" else seconds(self.lame_duck_duration)

    def lame_duck_grace_s(self) -> float:
        return 10.0 if self.lame_duck_grace_period == "default" else seconds(self.lame_duck_grace_period)


def seconds(duration: str) -> float:
    """A duration as the server's configuration writes it (`_DURATION`), in seconds."""
    n, unit = _DURATION.match(duration).groups()
    return int(n) * {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}[unit]


class NatsServers(LocalCluster):
    """nats-server processes, one per node namespace, routed to each other."""

    ports = {"client": 4222, "cluster": 6222, "monitor": 8222}
    # a node's data directory is datadir/<node>: it can sit on the power-off layer, and
    # its stream's .blk files are known
    extra_offers = frozenset({POWER, CORRUPT, LAMEDUCK})
    set_up_needs = LocalCluster.set_up_needs | {REPLACE}  # a system account in the servers' configuration
    refuses = {
        CLOCK: "nats-server is a statically linked Go binary: LD_PRELOAD never loads libfaketime into it, and "
               "a time namespace offsets only the monotonic clocks (tried 2026-12-04 on 2.12.1: FAKETIME=+3600 "
               "preloaded, /varz's now and its log stayed true)",
        REPAIR: "nats-server ships no offline check or repair of its store: its recovery at start is the check",
    }

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._binary: Optional[str] = None
        self._versions: dict[str, str] = {}
        self._settings: dict = {}
        self._names: dict[str, str] = {}  # a node's server name when not the node's (renew)
        self._generation: dict[str, int] = {}
        self._fresh = False  # started by this object, its meta group not yet seen whole (ready)

    @property
    def binary(self) -> str:
        if self._binary is None:
            self._binary = natsbin.binary(self.ctx.scenario.cluster.version)
        return self._binary

    def _config(self, node: str) -> str:
        ip, port = self.address(node)
        store = self.datadir / node
        store.mkdir(parents=True, exist_ok=True)
        lines = [
            f"server_name: {self.server_name(node)}",
            f'listen: "{ip}:{port}"',
            'http: "{}:{}"'.format(*self.address(node, "monitor")),
            "jetstream {",
            f'  store_dir: "{store}"',
            "  max_memory_store: 256MB",
            "  max_file_store: 8GB",
        ]
        sync = getattr(self.options, "sync_interval", "default")
        if sync != "default":
            lines.append(f"  sync_interval: {sync}" if sync == "always" else f'  sync_interval: "{sync}"')
        lines += [
            "}",
        ]
        if REPLACE in self.ctx.needs:  # the system account's requests (members.py)
            lines += SYSTEM_ACCOUNT
        for key in ("lame_duck_duration", "lame_duck_grace_period"):
            if getattr(self.options, key, "default") != "default":
                lines.append(f'{key}: "{getattr(self.options, key)}"')
        if len(self.node_names) > 1:
            routes = ", ".join('"nats://{}:{}"'.format(*self.address(o, "cluster")) for o in self.node_names
                               if o != node)
            lines += [
                "cluster {",
                "  name: brokerchaos",
                '  listen: "{}:{}"'.format(*self.address(node, "cluster")),
                f"  routes: [{routes}]",
                "}",
            ]
        return "\n".join(lines + self.extra_config(node)) + "\n"

    def start(self) -> None:
        super().start()
        self._fresh = True

    async def ready(self, timeout: float) -> None:
        """A fresh cluster's servers each in touch with the meta leader. Seen on 2.10.23 (once
        in CI, once here, in a few hundred starts): the routes of three servers started
        together raced ("Duplicate Route" closed on both ends), one server never heard from
        the meta leader ("JetStream has not established contact with a meta leader" and
        nothing after), and every stream's placement failed ("no suitable peers"). Such a
        server, with nothing stored yet, is started again, once, and the run says so."""
        fresh, self._fresh = self._fresh, False
        if not fresh:
            return
        behind = await self._meta_behind(min(JOIN_S, timeout / 3))
        if not behind:
            return
        nodes, said = behind
        for n in nodes:
            await asyncio.to_thread(self.kill, n)
            self.start_node(n)
            self.start_notes[n] = (f"started again: no contact with the JetStream meta leader {JOIN_S:.0f} s after "
                                   f"a fresh start ({said}); nothing was stored yet")
        await self._meta_behind(timeout / 3)

    async def _meta_behind(self, within: float) -> Optional[tuple[list[str], str]]:
        """None once the meta group is whole within `within` seconds; else the nodes its
        leader does not count as current peers, and its view in words."""
        deadline = asyncio.get_running_loop().time() + within
        said, behind = "no answer", None
        while True:
            try:
                ok, said, behind = await meta_view(self)
                if ok:
                    return None
            except (OSError, ValueError, asyncio.TimeoutError, SystemError_) as e:
                said = f"{type(e).__name__}: {e}"
            if asyncio.get_running_loop().time() >= deadline:
                return (behind, said) if behind else None
            await asyncio.sleep(0.25)

    def extra_config(self, node: str) -> list[str]:
        """More server configuration (the MQTT listener of the mqtt system's NATS backend)."""
        return []

    def launch(self, node: str) -> None:
        conf = self.datadir / f"{node}.conf"
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text(self._config(node))
        self.spawn_node(node, [self.binary, "-c", str(conf)])

    def server_name(self, node: str) -> str:
        """The node's server name: the node's own, or after a replacement under a new identity
        the node's with its generation (n2-r1)."""
        return self._names.get(node, node)

    def renew(self, node: str, new_name: bool) -> str:
        """A stopped server's store deleted (a new machine in its place), the directory kept:
        it may be the power-off layer's mount point; with `new_name`, the server it starts
        next has a name of its own. The name it will start with."""
        if self.alive(node):
            raise SystemError_(f"{node} is running: renew a stopped server")
        for p in (self.datadir / node).iterdir() if (self.datadir / node).exists() else ():
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        if new_name:
            self._generation[node] = self._generation.get(node, 0) + 1
            self._names[node] = f"{node}-r{self._generation[node]}"
        return self.server_name(node)

    def lame_duck(self, node: str, timeout: float) -> bool:
        """SIGUSR2 is nats-server's lame-duck signal (`nats-server --signal ldm`): it hands its
        Raft leaderships over (JetStream's streams and the meta group), stops accepting clients,
        waits its grace period, closes its clients over the rest of lame_duck_duration, exits."""
        return self.signal_exit(node, signal.SIGUSR2, timeout)

    def _varz(self) -> None:
        """What the servers say they are, and the durability they run with (/varz)."""
        for n in self.node_names:
            if n in self._versions or not self.alive(n):
                continue
            try:
                url = "http://{}:{}/varz".format(*self.address(n, "monitor"))
                with urllib.request.urlopen(url, timeout=2) as r:
                    body = json.loads(r.read())
            except (OSError, ValueError):
                continue
            self._versions[n] = body.get("version", "?")
            js = (body.get("jetstream") or {}).get("config") or {}
            self._settings[n] = {"sync_always": js.get("sync_always", False),
                                 "sync_interval_s": js["sync_interval"] / 1e9 if "sync_interval" in js else None}

    def versions(self) -> dict[str, str]:
        self._varz()
        found = sorted(set(self._versions.values()))
        return {"nats-server": ", ".join(found)} if found else {}

    def settings(self) -> dict:
        """The JetStream durability each node reports: sync_always, and sync_interval in
        seconds (None: a server too old to report it, 2.9's fixed 2 minutes)."""
        self._varz()
        return dict(self._settings)

    def data_files(self, node: str) -> list[Path]:
        stream = self.ctx.stream_name
        found = (self.datadir / node).glob(f"jetstream/*/streams/{stream}/msgs/*.blk")
        return sorted(found, key=lambda p: int(p.stem) if p.stem.isdigit() else 0)

    def has_stream(self, node: str) -> bool:
        """The node's store has the run's stream (a copy of it, perhaps empty)."""
        return any((self.datadir / node).glob(f"jetstream/*/streams/{self.ctx.stream_name}"))

    def metadata_files(self, node: str) -> list[Path]:
        """The server's system account store ($SYS): the Raft groups' logs, term and vote
        files, peer lists and snapshots, the meta group's (which streams exist, on which
        peers) and each stream's own, oldest write first (Jepsen's nats-server#7556 flipped
        bits in these)."""
        return files_by_age((self.datadir / node).glob("jetstream/$SYS/**/*"))


async def jsz(cluster, node: str) -> dict:
    """The JetStream meta cluster as `node`'s monitoring endpoint reports it."""
    body = await http_get(*cluster.address(node, "monitor"), "/jsz", 2.0)
    return json.loads(body).get("meta_cluster") or {}


async def meta_whole(cluster) -> tuple[bool, str]:
    """A JetStream meta leader, and every other peer current, in the leader's own view
    (only the leader's /jsz lists the peers: asked of a follower, an empty list passed)."""
    ok, said, _ = await meta_view(cluster)
    return ok, said


async def meta_view(cluster) -> tuple[bool, str, Optional[list[str]]]:
    """meta_whole's answer, and the nodes the leader does not count as current peers (None:
    no leader that says so)."""
    asked, lead, meta, error = None, None, None, None
    for n in cluster.node_names:  # the first that names a leader (a server cut off names none)
        try:
            meta, asked = await jsz(cluster, n), n
        except (OSError, ValueError, asyncio.TimeoutError) as e:
            error = e
            continue
        if (lead := meta.get("leader")) or len(cluster.node_names) == 1:
            break
    if meta is None:
        raise error
    if len(cluster.node_names) == 1:
        return True, f"meta leader {lead!r}", []
    if not lead:
        return False, "no meta leader", None
    node = await node_of_server(cluster, lead)
    if node != asked:
        meta = await jsz(cluster, node)
        if meta.get("leader") != lead:
            return False, f"{node} is named the meta leader but names {meta.get('leader')!r}", None
    peers = meta.get("replicas") or []
    # every server we started, not only the leader's cluster_size: a fresh meta group's expected
    # size is its configured routes (2 of 3 servers), so a leader that never heard from the
    # third called itself whole and placement found "no suitable peers" (CI, 2.10.23)
    size = max(int(meta.get("cluster_size") or 0), len(cluster.node_names))
    ok = len(peers) >= size - 1 and all(p.get("current") and not p.get("offline") for p in peers)
    current = {p.get("name") for p in peers if p.get("current") and not p.get("offline")}
    behind = [n for n in cluster.node_names
              if n != node and getattr(cluster, "server_name", str)(n) not in current]
    return ok, f"meta leader {lead!r}, peers {[(p.get('name'), p.get('current')) for p in peers]}", behind


async def streams_whole(cluster, prefix: str) -> tuple[bool, str]:
    """Every stream whose name starts with `prefix` led, and every replica current, as the
    leader itself reports it (a follower's /jsz names the leader it last heard of); and every
    consumer of those streams led. NATS's MQTT keeps its sessions and QoS 1 messages in such
    streams: a meta group that is whole says nothing of them (seen: `$MQTT_msgs` without a
    leader 17 s after its leader's node was killed and back, and every PUBACK waiting for it),
    and a led stream says nothing of a session's consumer (seen: one created 0.6 s before its
    leader's node was killed had none for 15 s, and its session was handed nothing). A
    consumer's followers are not asked to be current: an idle one's was still called behind
    8 s after its node came back, and delivery needs only the leader."""
    views: dict[str, dict] = {}
    short = []
    for n in cluster.node_names:
        try:
            body = json.loads(await http_get(*cluster.address(n, "monitor"),
                                             "/jsz?accounts=true&streams=true&consumers=true", 5.0))
        except (OSError, ValueError, asyncio.TimeoutError) as e:
            short.append(f"{n}: no answer ({type(e).__name__})")
            continue
        views[n] = _groups(body, prefix)
    names = sorted({name for view in views.values() for name in view})
    for name in names:
        led = [(n, view[name]) for n, view in views.items() if name in view and view[name].get("leader")
               and await node_of_server(cluster, view[name]["leader"]) == n]
        if not led and len(cluster.node_names) > 1:
            short.append(f"{name}: no leader")
            continue
        behind = [r.get("name") for _, c in led[:1] for r in c.get("replicas") or []
                  if " > " not in name and (not r.get("current") or r.get("offline"))]
        if behind:
            short.append(f"{name}: led by {led[0][0]}, not current: {', '.join(map(str, behind))}")
    streams = [x for x in names if " > " not in x]
    if not streams:
        short.append(f"no {prefix} stream yet")
    if short:
        return False, "; ".join(short)
    return True, f"{', '.join(streams)} led, every replica current; {len(names) - len(streams)} consumers led"


def _groups(body: dict, prefix: str) -> dict[str, dict]:
    """The Raft groups of one node's /jsz answer, each its cluster view: the streams whose
    name starts with `prefix`, and their consumers as `stream > consumer`."""
    out = {}
    for acc in body.get("account_details") or []:
        for st in acc.get("stream_detail") or []:
            name = str(st.get("name", ""))
            if name.startswith(prefix):
                out[name] = st.get("cluster") or {}
                for c in st.get("consumer_detail") or []:
                    out[f"{name} > {c.get('name')}"] = c.get("cluster") or {}
    return out


async def _whole(cluster) -> bool:
    try:
        return (await meta_whole(cluster))[0]
    except (OSError, ValueError, asyncio.TimeoutError):
        return False


async def node_of_server(cluster, server: str) -> str:
    """Our node for a server name: the same name (ours are called n1, n2, …), else the node
    whose monitoring endpoint reports it (an external cluster names its servers itself)."""
    if server in cluster.node_names and getattr(cluster, "server_name", str)(server) == server:
        return server
    named = getattr(cluster, "_names", {})
    if server in named.values():  # a replaced server's new name (renew)
        return next(n for n, name in named.items() if name == server)
    for n in cluster.node_names:
        try:
            body = json.loads(await http_get(*cluster.address(n, "monitor"), "/varz", 2.0))
        except (OSError, ValueError, LookupError, asyncio.TimeoutError):
            continue
        if body.get("server_name") == server:
            return n
    raise SystemError_(f"no node of the cluster is the server {server!r}")


async def meta_leader(cluster) -> str:
    """The JetStream meta leader, as the first node that answers /jsz says."""
    last = "no node answered"
    for n in cluster.node_names:
        if not cluster.alive(n):
            continue
        try:
            leader = (await jsz(cluster, n)).get("leader")
        except (OSError, ValueError, asyncio.TimeoutError) as e:
            last = f"{n}: {type(e).__name__}: {e}"
            continue
        if leader:
            return await node_of_server(cluster, leader)
        last = f"{n}: no meta leader"
    raise SystemError_(f"JetStream meta leader unknown ({last})")
