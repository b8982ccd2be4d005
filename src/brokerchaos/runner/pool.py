"""Clusters kept between sessions: a session whose servers would be configured exactly as a
kept cluster's were (`System.server_config`, what it set up for the faults, the sandbox)
takes that cluster, whole and with its old streams dropped, instead of starting its own — as the runs
of one session already do (run.py's Clusters). A test module of many short sessions on one
system, or a campaign, saves a cluster start per session (RabbitMQ ~27 s, Pulsar ~45 s,
Kafka ~15 s here).

A cluster is kept only when its session's last run left it whole (the same check as
between runs) and the pool is open; the sessions that share it each mark their names with
a tag of their own, so that no run can meet another session's stream. At most `size`
clusters are kept (an idle cluster still costs the machine's cores): the oldest goes first.
Everything kept is stopped, and its sandbox removed, when the pool closes.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, ClassVar, Optional

from ..faults.base import needs_of
from ..sandbox import Sandbox
from ..systems import SYSTEMS
from ..systems.base import node_names
from ..systems.cluster import SET_UP
from .run import Clusters

if TYPE_CHECKING:
    from ..scenario import Scenario


@dataclass
class Kept:
    key: str
    sandbox: "Sandbox"
    clusters: "Clusters"
    where: str  # the session and run that started it, for run.json ("reused (started in …)")

    def close(self) -> None:
        try:
            self.clusters.drop()
        finally:
            self.sandbox.teardown()


class ClusterPool:
    """`with ClusterPool():` keeps clusters for the sessions started inside it (Session's
    `pool` defaults to the open one)."""

    current: ClassVar[Optional["ClusterPool"]] = None

    def __init__(self, size: int = 1) -> None:
        self.size = size
        self.kept: list[Kept] = []
        self.taken = 0  # sessions that took a kept cluster (the tests read it)

    def __enter__(self) -> "ClusterPool":
        self._outer, ClusterPool.current = ClusterPool.current, self
        return self

    def __exit__(self, *exc) -> None:
        ClusterPool.current = self._outer
        self.close()

    @classmethod
    def open_or_new(cls):
        """The pool already open (a campaign's, a test module's), or a new one: a search run
        inside one keeps its clusters there."""
        import contextlib

        return contextlib.nullcontext(cls.current) if cls.current is not None else cls()

    @staticmethod
    def admits(s: "Scenario") -> bool:
        """A local cluster a session may leave behind: reuse on, a system whose clusters serve
        another run (not an external cluster: it is not ours to keep)."""
        return not s.external and s.cluster.reuse and SYSTEMS.get(s.system).reusable

    @staticmethod
    def key(s: "Scenario") -> str:
        return json.dumps({"server": SYSTEMS.get(s.system).server_config(s), "sandbox": s.sandbox,
                           "set_up": sorted(needs_of(s) & _set_up(s))}, sort_keys=True, default=str)

    def take(self, s: "Scenario", line: Callable[[str], None] = lambda _: None) -> Optional[Kept]:
        """The kept cluster this session may run on, or None; then the oldest kept ones are
        stopped now, not after this session (it starts a cluster of its own beside them),
        and `line` says what of theirs differs."""
        key = self.key(s) if self.admits(s) else None
        for k in self.kept:
            if k.key == key:
                self.kept.remove(k)
                self.taken += 1
                return k
        while len(self.kept) >= self.size:
            k = self.kept.pop(0)
            why = "this session keeps no cluster" if key is None else f"its servers differ: {differ(k.key, key)}"
            line(f"Cluster pool: the cluster started in {k.where} is stopped ({why})")
            k.close()
        return None

    def keep(self, kept: Kept) -> None:
        self.kept.append(kept)
        while len(self.kept) > self.size:
            self.kept.pop(0).close()

    def close(self) -> None:
        errors = []
        while self.kept:
            try:
                self.kept.pop(0).close()
            except Exception as e:  # every other kept cluster must still go
                errors.append(str(e))
        if errors:
            raise RuntimeError("cluster pool: " + "; ".join(errors))


def differ(a: str, b: str, most: int = 3) -> str:
    """The first settings in which two keys differ, as `where: a vs b`."""
    out: list[str] = []

    def walk(x, y, path: str) -> None:
        if isinstance(x, dict) and isinstance(y, dict):
            for k in sorted(set(x) | set(y)):
                walk(x.get(k), y.get(k), f"{path}.{k}" if path else k)
        elif x != y:
            out.append(f"{path.removeprefix('server.')}: {x!r} vs {y!r}")

    walk(json.loads(a), json.loads(b), "")
    return "; ".join(out[:most]) + (f" (and {len(out) - most} more)" if len(out) > most else "")


def place(pool: Optional[ClusterPool], s: "Scenario", tag: str,
          line: Callable[[str], None]) -> tuple[Sandbox, Clusters]:
    """A session's sandbox and clusters: the pool's kept ones when it has a cluster configured
    as this scenario's, else new ones (an external cluster is reached from the root
    namespace, like any other client)."""
    pooled = pool is not None and pool.admits(s)
    kept = pool.take(s, line) if pool is not None else None
    if kept is not None:
        line(f"Cluster pool: this session takes the cluster started in {kept.where}")
        kept.clusters.started_in = kept.where
        return kept.sandbox, kept.clusters.serve(s, tag)
    hosts = node_names(s.cluster.nodes)
    if not s.external:
        hosts += list(SYSTEMS.get(s.system).service_hosts(s))
    sb = Sandbox(hosts, "loopback" if s.external else s.sandbox).__enter__()
    return sb, Clusters(s, sb, tag, pooled)


def leave(pool: Optional[ClusterPool], sb: Sandbox, clusters: Clusters, ended: bool, session: str) -> None:
    """A session's cluster to the pool when the session ended and its last run left it whole
    (and reuse is on), else stopped with its sandbox."""
    if ended and clusters.pooled and clusters.dep is not None and pool is not None:
        where = clusters.started_in if "/" in clusters.started_in else f"{session}/{clusters.started_in}"
        pool.keep(Kept(ClusterPool.key(clusters.s), sb, clusters, where))
        return
    try:
        clusters.drop()
    finally:
        sb.teardown()


def _set_up(s: "Scenario") -> frozenset:
    """What this scenario's cluster sets up at its start for the faults that need it."""
    return SET_UP if s.external else SYSTEMS.get(s.system).local_cluster(s).set_up_needs
