"""The two ways nodes run and are acted on (base.Cluster): one strategy per session, chosen once.

`LocalCluster`: the broker processes the harness starts in the sandbox (a broker module
subclasses it with how its servers are configured and launched); node control is signals to
processes we hold. `ExternalCluster`: a cluster the user runs, reached at the addresses of a
cluster file, node control through its hooks. What each can do is its `offers`; faults
declare what they need (faults/base.py), and `brokerchaos faults` derives its table from both.
"""
from __future__ import annotations

import abc
import asyncio
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import ClassVar, Iterable, Optional

from ..sandbox import Host, Proc, process
from ..sandbox.mounts import LazyDisk
from .base import (
    CLOCK,
    HOOKS,
    KILL,
    LOCAL_VERBS,
    NETNS,
    PAUSE,
    POWER,
    START,
    STOP,
    Cluster,
    Context,
    NodeExited,
    SystemError_,
)
from .localnode import PowerAndClock, Supervised

__all__ = ["Cluster", "LocalCluster", "ExternalCluster", "HOOKS", "KILL", "NETNS", "PAUSE", "START", "STOP"]

# what a local cluster sets up at its start, only for the faults that need it
SET_UP = frozenset({POWER, CLOCK})
PAUSE_S = 2.0  # a paused node's threads have all stopped within this (milliseconds, under load)


class LocalCluster(Supervised, PowerAndClock, Cluster):
    """Broker processes started by us in the sandbox, one host (namespace) per node.

    What a broker's subclass must write: `ports` (service -> port inside a namespace; at
    least "client") and `launch(node)` (start or restart that node's process with
    spawn_node). What it may write: `ready` (a staged start-up, from the client namespace),
    `versions` and `settings` (as the servers report them), `service_hosts` (helpers a
    fault may target), and `extra_offers` with what backs them (`data_files` for corrupt,
    with `check_data` where the system has a tool that checks them; `wipe`, the power
    layer). Processes started beside a node's broker (a sentinel, an
    epmd) go through `spawn_helper` and are stopped with the cluster, never by a fault.
    """
    set_up_needs: frozenset = SET_UP  # what it sets up at its start for the faults needing it (pool.py)

    ports: ClassVar[dict[str, int]] = {}
    # verbs beyond LOCAL_VERBS this cluster's servers support (WIPE: their data can go)
    extra_offers: ClassVar[frozenset[str]] = frozenset()
    # capabilities its servers cannot have, and why (what was tried): the refusal a scenario
    # asking for one gets, and `brokerchaos faults`'s
    refuses: ClassVar[dict[str, str]] = {}

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.sandbox = ctx.sandbox
        # the cluster's data stays where the run that started it put it, even when reused
        self.datadir = ctx.sandbox.dir / ctx.run_id
        self.procs: dict[str, Proc] = {}
        self.helpers: list[Proc] = []
        # data directories on the layer that can drop unsynced writes, only where a fault
        # will cut the power: it costs write throughput (BENCHMARKS.md)
        self.lazy = POWER in self.extra_offers and POWER in ctx.needs
        self.disks: dict[str, LazyDisk] = {}
        # the processes' wall clocks follow a file per host, only where a fault will move one
        self.clocked = CLOCK in self.extra_offers and CLOCK in ctx.needs
        # nodes the harness took down on purpose (a fault): the supervisor leaves them down
        self.on_purpose: set[str] = set()
        self._lock = threading.RLock()
        self._supervisor: Optional[threading.Thread] = None
        self._stopping = threading.Event()

    @property
    def supervised(self) -> tuple[str, ...]:
        """Nodes whose process is started again when it exits on its own, as a service
        manager or a container's restart policy would (Pulsar's brokers with
        options.session_expired shutdown, RabbitMQ's nodes with options.restart_on_failure);
        none by default: a node that exits stays down,
        and the run's whole check says so."""
        return ()
    @property
    def options(self):
        return self.ctx.options

    @property
    def offers(self) -> frozenset[str]:
        return LOCAL_VERBS | self.extra_offers | ({NETNS} if self.sandbox.network_faults else set())

    @property
    def label(self) -> str:
        return "started"

    def host(self, node: str) -> Host:
        return self.sandbox.hosts[node]

    def address(self, node: str, service: str = "client") -> tuple[str, int]:
        try:
            port = self.ports[service]
        except KeyError:
            raise LookupError(f"no {service!r} service on {node}") from None
        h = self.host(node)
        return h.ip, self.sandbox.port(h, port)

    def log(self, name: str) -> Path:
        return self.ctx.logdir / f"{name}.log"

    # -- processes -----------------------------------------------------------------------
    def start(self) -> None:
        for n in self.host_names:
            self.start_node(n)

    @property
    def lazy_hosts(self) -> tuple[str, ...]:
        """The hosts whose data directory a power cut can reach (the layer goes under these)."""
        return tuple(self.node_names)

    def start_node(self, node: str) -> None:
        with self._lock:
            old = self.procs.get(node)
            if old is not None and old.alive():  # started meanwhile by another fault's heal (faults combined)
                self.on_purpose.discard(node)
                return
            if self.lazy and node in self.lazy_hosts:
                self._disk(node).mount()
            self.launch(node)
            self.on_purpose.discard(node)
        if node in self.supervised:
            self.supervise()

    @abc.abstractmethod
    def launch(self, node: str) -> None:
        """Start `node`'s broker process (first start or restart), with spawn_node."""

    def spawn_node(self, node: str, argv: list[str], env: Optional[dict] = None) -> None:
        old = self.procs.get(node)
        if old is not None and old.alive():
            raise SystemError_(f"{node} is already running (pid {old.pid})")
        if old is not None:
            self.sandbox.forget(old)
        self.procs[node] = self.sandbox.spawn(self.host(node), node, argv, self.log(node),
                                              env=self._process_env(node, env))

    def spawn_helper(self, node: str, name: str, argv: list[str], env: Optional[dict] = None) -> Proc:
        p = self.sandbox.spawn(self.host(node), name, argv, self.log(name), env=self._process_env(node, env))
        self.helpers.append(p)
        return p

    def run_tool(self, host: str, name: str, argv: list[str], timeout: float, env: Optional[dict] = None) -> int:
        """A one-shot command in `host`'s namespace (a metadata setup, a disk format, an
        operator's CLI), waited for; its output goes to the log `name`. Killed after `timeout`."""
        p = self.sandbox.spawn(self.host(host), name, argv, self.log(name), env=env)
        try:
            if not process.wait_exit(p, timeout):
                process.terminate(p, grace=2.0)
                raise SystemError_(f"{name} did not finish within {timeout:.0f}s; see {self.log(name)}")
            return p.popen.returncode
        finally:
            self.sandbox.forget(p)

    def exited(self, node: str) -> NodeExited:
        return NodeExited(f"{node} exited while starting; see {self.log(node)}")

    # a killed process whose exit is held up in the kernel (seen once: a RabbitMQ node still
    # there 10 s after SIGKILL, its log silent from the signal on) is waited for this much
    # longer, as long as /proc says it is on its way out
    DYING_S = 60.0

    def kill(self, node: str, timeout: float = 10.0) -> None:
        self.on_purpose.add(node)
        proc = self.procs[node]
        process.send_signal(proc, signal.SIGKILL)
        why = None if process.wait_exit(proc, timeout) else process.outlast(proc, timeout, self.DYING_S)
        if why:
            raise SystemError_(f"{node} (pid {proc.pid}) still alive after SIGKILL ({why})")

    async def kill_nodes(self, nodes: list[str], timeout: float = 10.0) -> Optional[int]:
        # every signal first: a JVM takes 50-100 ms to be torn down after SIGKILL (its heap
        # unmapped, then its sockets closed), which one after the other would put between the
        # nodes of a `majority` kill. None of them runs an instruction after its signal.
        self.on_purpose.update(nodes)
        procs = [self.procs[n] for n in nodes]
        for proc in procs:
            process.send_signal(proc, signal.SIGKILL)
        t = time.monotonic_ns()
        gone = await asyncio.gather(*(process.exited(p, timeout) for p in procs))
        # held up in the kernel: the signal is in effect, their exit (the window's exit_ms) comes later
        held = [(n, p) for n, p, ok in zip(nodes, procs, gone) if not ok]
        whys = await asyncio.gather(*(asyncio.to_thread(process.outlast, p, timeout, self.DYING_S) for _, p in held))
        alive = [f"{n} (pid {p.pid}, {why})" for (n, p), why in zip(held, whys) if why]
        if alive:
            raise SystemError_(f"{', '.join(alive)} still alive after SIGKILL")
        return t

    def stop_node(self, node: str, timeout: float = 30.0) -> bool:
        """SIGTERM and wait for a clean exit; SIGKILL after `timeout`."""
        return self.signal_exit(node, signal.SIGTERM, timeout)

    def signal_exit(self, node: str, sig: int, timeout: float) -> bool:
        """Send `sig` and wait for the node to exit on its own; SIGKILL after `timeout`.
        Whether it exited on its own."""
        self.on_purpose.add(node)
        proc = self.procs[node]
        process.send_signal(proc, sig)
        if process.wait_exit(proc, timeout):
            return True
        self.kill(node)
        return False

    def lame_duck(self, node: str, timeout: float) -> bool:
        """Put the node in lame-duck mode (it hands its leaderships over, stops taking
        clients, closes its own over its lame-duck period, exits) and wait for the exit;
        SIGKILL after `timeout`. Whether it exited on its own. Needs LAMEDUCK in extra_offers."""
        raise LookupError("this cluster has no lame-duck mode")

    def data_files(self, node: str) -> list[Path]:
        """The files of `node` holding the stream's messages, oldest first (the `corrupt`
        fault's choice); needs CORRUPT in extra_offers."""
        raise LookupError("this cluster does not name its data files")

    def metadata_files(self, node: str) -> list[Path]:
        """The files of `node` holding the cluster's own state (Raft snapshots and logs of its
        metadata, cookies, manifests), oldest first: `corrupt` and `truncate` with
        params.files metadata; none where the node keeps none."""
        raise LookupError("this cluster does not name its metadata files")

    def preallocates(self, path: Path) -> bool:
        """Whether the system preallocates `path` (zeros past its written end): a cut and
        the bits then measure from the written end, not the file's size."""
        return False

    def repair_data(self, node: str) -> Optional[dict]:
        """The system's own repair tool on a stopped node's files, before it starts again
        (REPAIR in extra_offers): {"tool", "exit", "said"} as check_data."""
        raise LookupError("this cluster has no repair tool")

    def check_data(self, node: str) -> Optional[dict]:
        """What the system's own check tool says of a stopped node's data files (the `corrupt`
        fault records it before the restart): {"tool", "exit", "said": its verdict lines}, or
        None where the system has no such tool."""
        return None

    def wipe(self, node: str) -> None:
        """Delete a stopped node's data; needs `wipe` in extra_offers."""
        raise LookupError("this cluster cannot wipe a node's data")

    def pause(self, node: str) -> None:
        """SIGSTOP the node's whole process group (a broker's helpers were started in it),
        returning once every thread of the broker has stopped (process.wait_stopped), or
        after PAUSE_S: a thread in an uninterruptible wait stops when it ends, and the
        window's look says whether the node was stopped (effect.stopped)."""
        process.send_signal(self.procs[node], signal.SIGSTOP, group=True)
        process.wait_stopped(self.procs[node], PAUSE_S)

    def resume(self, node: str) -> None:
        process.send_signal(self.procs[node], signal.SIGCONT, group=True)

    def alive(self, node: str) -> bool:
        p = self.procs.get(node)
        return p is not None and p.alive()

    def pid_of(self, node: str) -> Optional[int]:
        p = self.procs.get(node)
        return p.pid if p is not None and p.alive() else None

    def stop(self) -> None:
        """The whole cluster gone, its data deleted: nothing a graceful shutdown would save is
        kept, so no grace (a JVM broker never exited within the 2 s it had: every Kafka,
        Pulsar and RabbitMQ session waited them out, ~1 min of `make test`)."""
        self._stopping.set()
        if self._supervisor is not None:
            self._supervisor.join(5.0)
        procs = list(self.procs.values()) + self.helpers
        process.terminate_all(procs, grace=0.0)
        for p in procs:
            self.sandbox.forget(p)
        self.procs.clear()
        self.helpers.clear()
        for d in self.disks.values():  # after the servers: nothing writes any more
            d.unmount()
        self.disks.clear()
        shutil.rmtree(self.datadir, ignore_errors=True)


class ExternalCluster(Cluster):
    """A cluster the harness does not start: addresses and hooks from a cluster file. Nothing
    is ever stopped at the end; only what a fault did is healed (by its hooks).

    `alive` is the quick look the roles and clients take (the `alive` hook, else whether the
    harness took the node down); `down_why`, which the heal and the health checks ask, adds
    the harness's own look: a node is up only if it answers at its client address *and* its
    hook agrees. A hook can lie (an orphan's `kill -0` succeeds until it is reaped, seen for
    over a second after `kill -9`); a closed port does not. A node started by its `start`
    hook must be up within the file's `hook_timeout`, else the start, and the heal that
    asked for it, fails."""

    UP_EVERY = 0.25  # seconds between two looks while a started node comes up

    @property
    def step_bound_s(self) -> float:
        return self.file.hook_timeout

    def __init__(self, ctx: Context, path: str) -> None:
        from .external import load

        super().__init__(ctx)
        self.path = path
        self.file = load(path)
        self._down: set[str] = set()  # nodes we took down and did not start yet

    @property
    def offers(self) -> frozenset[str]:
        return self.file.offers()

    @property
    def label(self) -> str:
        return f"external ({self.path})"

    def address(self, node: str, service: str = "client") -> tuple[str, int]:
        return self.file.address(node, service)

    def start_node(self, node: str) -> None:
        from .external import HookError

        self.file.run(node, "start")
        self._down.discard(node)
        deadline = time.monotonic() + self.file.hook_timeout
        while True:
            why = self.down_why(node)
            if why is None:
                return
            if time.monotonic() >= deadline:
                raise HookError(f"external cluster: {node} is not up {self.file.hook_timeout:.0f}s after its 'start' "
                                f"hook ({why})")
            time.sleep(self.UP_EVERY)

    def kill(self, node: str, timeout: float = 10.0) -> None:
        self._down.add(node)
        self.file.run(node, "kill")

    def stop_node(self, node: str, timeout: float = 30.0) -> bool:
        self._down.add(node)
        return self.file.run(node, "stop") == 0

    def pause(self, node: str) -> None:
        self.file.run(node, "pause")

    def resume(self, node: str) -> None:
        self.file.run(node, "resume")

    def alive(self, node: str) -> bool:
        if self.file.has(node, "alive"):
            return self.file.run(node, "alive", check=False) == 0
        return node not in self._down

    def down_why(self, node: str) -> Optional[str]:
        if not self.file.answers(node):
            host, port = self.address(node)
            return f"nothing answers at {host}:{port}"
        if self.file.has(node, "alive") and self.file.run(node, "alive", check=False) != 0:
            return "its 'alive' hook says it is not running"
        return None

    def exited(self, node: str) -> NodeExited:
        return NodeExited(f"external cluster: {node} is down ({self.down_why(node) or 'taken down by a fault'})")

    def run_hook(self, node: str, hook: str) -> None:
        self.file.run(node, hook)


def files_by_age(files: Iterable[Path]) -> list[Path]:
    """Oldest first: by the last write, then by name (Ra, osiris and BookKeeper number their
    files); files gone since they were listed are left out."""
    aged = []
    for f in files:
        try:
            if f.is_file():
                aged.append((f.stat().st_mtime_ns, f.name, f))
        except OSError:
            continue
    return [f for *_, f in sorted(aged)]
