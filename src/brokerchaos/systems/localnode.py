"""What a local cluster does to its nodes beyond signals, as two mixins of LocalCluster
(cluster.py), on its `procs`, `datadir`, `disks`, `on_purpose` and lock:

- `Supervised`: a node whose process exits on its own is started again, as a service
  manager or a container's restart policy would (`LocalCluster.supervised` names which);
- `PowerAndClock`: the power cut (each node's data directory on the layer that drops what
  was not fsynced: sandbox/mounts.py) and the wall clocks a fault can move (libfaketime).
"""
from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Optional

from ..sandbox import Host, clock, process
from ..sandbox.mounts import LazyDisk, MountError
from .base import SystemError_


class Supervised:
    procs: dict
    on_purpose: set
    restarts: list
    _lock: threading.RLock
    _supervisor: Optional[threading.Thread]
    _stopping: threading.Event

    def supervise(self) -> None:
        """Start the supervisor (once): it watches `supervised` from then on."""
        if self._supervisor is None:
            self._supervisor = threading.Thread(target=self._supervise, name="supervisor", daemon=True)
            self._supervisor.start()

    SUPERVISE_EVERY_S = 0.5
    RESTART_DELAY_S = (1.0, 2.0, 4.0, 8.0)  # after each exit in a row; reset once a process ran 30 s

    def _supervise(self) -> None:
        """Start again every supervised node whose process exited on its own (not taken down
        by the harness), after a delay growing with each exit in a row; each restart is kept
        in `restarts` (run.json)."""
        due: dict[str, float] = {}
        streak: dict[str, int] = {}
        while not self._stopping.wait(self.SUPERVISE_EVERY_S):
            for n in self.supervised:
                with self._lock:
                    p = self.procs.get(n)
                    if p is None or n in self.on_purpose or p.alive():
                        if p is not None and time.monotonic() - p.started > 30:
                            streak.pop(n, None)
                        due.pop(n, None)
                        continue
                    if n not in due:
                        k = streak.get(n, 0)
                        due[n] = time.monotonic() + self.RESTART_DELAY_S[min(k, len(self.RESTART_DELAY_S) - 1)]
                        streak[n] = k + 1
                        continue
                    if time.monotonic() < due[n]:
                        continue
                    del due[n]
                    entry = {"node": n, "exit_code": p.popen.returncode, "at": round(time.time(), 3)}
                    try:
                        self.start_node(n)
                    except Exception as e:  # tried again at the next look
                        entry["error"] = f"{type(e).__name__}: {e}"[:200]
                    self.restarts.append(entry)


class PowerAndClock:
    datadir: Path
    disks: dict
    clocked: bool

    def settle(self) -> None:
        for disk in self.disks.values():
            try:
                disk.settle()
            except MountError as e:
                raise SystemError_(str(e)) from None

    def _disk(self, node: str) -> LazyDisk:
        if node not in self.disks:
            self.disks[node] = LazyDisk(
                self.datadir / node, self.ctx.logdir,
                # in the root namespaces: `ip netns exec` would give the layer a mount
                # namespace of its own, and its mount would be seen by no broker
                lambda name, argv: self.sandbox.spawn(Host(name, "", None), name, argv, self.log(name)),
                self.sandbox.forget)
        return self.disks[node]

    def power_off(self, nodes: list[str]) -> dict[str, dict]:
        """SIGKILL every node at once, then drop what each had not fsynced (per node: the
        files the layer put back, and how; a host that keeps no data, a Pulsar broker, is
        only killed)."""
        self.on_purpose.update(nodes)
        for n in nodes:  # the same instant for all, before any is waited for
            process.send_signal(self.procs[n], signal.SIGKILL)
        for n in nodes:
            self.kill(n)
        try:
            return {n: self._disk(n).power_cut() if n in self.lazy_hosts else {"files": [], "keeps_no_data": True}
                    for n in nodes}
        except MountError as e:
            raise SystemError_(str(e)) from None

    # -- clocks (the clock fault) ------------------------------------------------------------
    def clock_file(self, host: str) -> Path:
        return self.datadir / "clocks" / host

    def _process_env(self, host: str, env: Optional[dict]) -> Optional[dict]:
        """A process's environment: with `clocked`, its wall clock follows its host's file
        (true time until a fault moves it; a restart keeps what the file says)."""
        if not self.clocked:
            return env
        f = self.clock_file(host)
        if not f.exists():
            clock.set_offset(f, 0)
        try:
            return clock.env(f, env)
        except clock.ClockError as e:
            raise SystemError_(str(e)) from None

    def set_clock(self, host: str, seconds: float) -> None:
        """Move `host`'s wall clock `seconds` from true time for its processes (0: true again);
        each sees it within clock.REREAD_S."""
        if not self.clocked:
            raise SystemError_("this cluster's processes were not started with a movable clock")
        clock.set_offset(self.clock_file(host), seconds)

    def clock_of(self, host: str) -> Optional[float]:
        """What `host`'s process says its wall clock reads now (epoch seconds), where it can
        be asked without disturbing it; None where it cannot (the clock fault then records
        only what it set)."""
        return None
