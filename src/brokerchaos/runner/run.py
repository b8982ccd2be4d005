"""One run on the main thread: the cluster it runs on (the previous run's, if that ended
whole and reuse is on; else a new one), its record, and its client side in the client
namespace (phases.py)."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Awaitable, Callable, Optional

from ..faults.base import needs_of
from ..sandbox import Sandbox
from ..scenario import Scenario
from ..systems import SYSTEMS, Deployment
from .journal import mark_cut_short
from .observe import Observer
from .phases import RunContext, client_side
from .record import RunRecord


class RunRefused(Exception):
    """A run that must not start: its external cluster is not whole (a node a heal did not
    bring back). The session ends there; the runs before it are analysed."""


class Clusters:
    """The session's cluster between runs: kept while each run leaves it whole (and reuse is
    on), else stopped, and the next run builds a new one."""

    def __init__(self, scenario: Scenario, sandbox: Sandbox, tag: str, pooled: bool = False) -> None:
        self.s, self.sandbox, self.tag = scenario, sandbox, tag
        self.dep: Optional[Deployment] = None
        self.started_in = ""  # the run that started the kept cluster
        self.rebuild_why = ""
        # the session's last run may leave its cluster to a pool (pool.py): it is checked
        # whole after it, as a run before another is
        self.pooled = pooled

    def serve(self, scenario: Scenario, tag: str) -> "Clusters":
        """This session's clusters, kept from another session (pool.py): its deployment now
        serves this scenario (same servers, new clients and roles), and is kept again after."""
        self.s, self.tag, self.pooled = scenario, tag, True
        if self.dep is not None:
            self.dep.serve(scenario, tag, needs_of(scenario))
        return self

    def take(self, run_id: str, index: int, logdir: Path) -> tuple[Deployment, bool, str]:
        """The run's deployment, whether it is new, and how run.json names its cluster."""
        if self.dep is None:
            dep = Deployment(SYSTEMS.get(self.s.system), self.s, self.sandbox, run_id, logdir, self.tag,
                             needs_of(self.s))
            label = dep.cluster.label
            return dep, True, label if index == 1 or label != "started" else f"started ({self.rebuild_why})"
        self.dep.begin_run(run_id, logdir)
        return self.dep, False, f"reused (started in {self.started_in})"

    def adopt(self, dep: Deployment, run_id: str) -> None:
        self.dep, self.started_in = dep, run_id

    def forget(self) -> None:
        """An external cluster is not ours to stop: the session lets go of it."""
        self.dep = None

    def drop(self, why: str = "") -> None:
        dep, self.dep = self.dep, None
        self.rebuild_why = why
        if dep is not None:
            dep.stop()


def check_whole(dep: Deployment, run_id: str, line: Callable[[str], None]) -> None:
    """An external cluster must be whole before a run: one the harness cannot rebuild, left
    degraded by a heal that did not bring a node back, would make every later run a test of
    another cluster than the user's. A node still coming up (a cluster started just before
    the session) has the cluster file's `hook_timeout` to answer."""
    down = dep.down()
    if down:
        bound = dep.cluster.file.hook_timeout
        line(f"Waiting up to {bound:.0f} s for the external cluster: {'; '.join(down)}")
        deadline = time.monotonic() + bound
        while down and time.monotonic() < deadline:
            time.sleep(0.5)
            down = dep.down()
    if down:
        raise RunRefused(f"{run_id} not started: the external cluster is not whole ({'; '.join(down)}); "
                         f"bring it back (its `start` hooks) and run again")


def run_bound(s: Scenario) -> float:
    w = s.workload
    # connecting gets 90 s per node boot (RabbitMQ boots its nodes one by one) and one more
    # for a joiner booted a second time
    return 90 * (s.cluster.nodes + 1) + 30 + w.write_timeout + w.read_timeout + 60 + \
        SYSTEMS.get(s.system).end_check_s(s)


def run_one(s: Scenario, sandbox: Sandbox, clusters: Clusters, session_dir: Path, run_id: str, index: int,
            observer: Observer, line: Callable[[str], None], quiet: Callable[[], Awaitable[None]]) -> RunRecord:
    """One run; the cluster is stopped here unless the next run may take it."""
    run_dir = session_dir / run_id
    rec = RunRecord(run_id, index, s.system, sandbox.mode, s.model_dump(), sandbox_dir=str(sandbox.dir))
    dep, fresh, rec.cluster = clusters.take(run_id, index, run_dir / "logs")
    if s.external:
        try:
            check_whole(dep, run_id, line)
        except RunRefused:
            clusters.forget()
            raise
    rec.write(run_dir)  # now, so that a harness killed during the run leaves it marked as such
    if fresh:
        clusters.adopt(dep, run_id)
    rec.stream = dep.ctx.stream_name
    line(f"Cluster: {rec.cluster}")
    keep = False
    t_run = time.monotonic()
    cut: Optional[BaseException] = None
    try:
        if fresh:
            dep.cluster.start()
        more = index < s.runs or clusters.pooled
        c = RunContext(s, dep, sandbox, run_id, run_dir, t_run, more, line, observer, quiet)
        sandbox.run_client(lambda: client_side(c, rec), timeout=run_bound(s))
        keep = bool(rec.healthy_after)
    except BaseException as e:  # Ctrl-C, SIGTERM, a harness error: the run is cut short
        cut = e
        raise
    finally:
        try:
            if not keep:
                clusters.drop(f"rebuilt: {rec.health_after or 'the run did not finish'}")
        finally:
            _ended(rec, run_dir, t_run, cut)
    return rec


def _ended(rec: RunRecord, run_dir: Path, t_run: float, cut: Optional[BaseException]) -> None:
    """run.json at the run's end: finished, or incomplete when something cut it short (its
    history then says so too: journal.mark_cut_short)."""
    rec.finished = time.time()
    rec.status = "finished" if cut is None else "incomplete"
    if cut is not None:
        rec.incomplete = f"cut short: {type(cut).__name__}" + (f": {cut}" if str(cut) else "")
        mark_cut_short(run_dir, rec.run, rec.incomplete)
    rec.time_phases(t_run)
    rec.write(run_dir)  # a cluster that failed to start made no run directory
