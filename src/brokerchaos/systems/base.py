"""The contract every broker module fills in (cf. OpenChaos's ChaosNode + QueueDriver).

Process control runs on the harness's main thread; everything that talks to the
brokers is a coroutine run inside the client namespace (Sandbox.run_client).
"""
from __future__ import annotations

import abc
import signal
from pathlib import Path
from typing import Any, Callable, ClassVar, Optional, Protocol

from pydantic import BaseModel, ConfigDict

from ..sandbox import Host, Proc, Sandbox, process
from ..scenario import Scenario

# (value, "ack" | "nack" | "unknown", offset, node, detail)
OutcomeCallback = Callable[[int, str, Optional[str], Optional[str], Optional[str]], None]
# (payload, offset, node)
DeliverCallback = Callable[[bytes, Optional[str], Optional[str]], None]


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


class NoOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")


class System(abc.ABC):
    name: ClassVar[str]
    description: ClassVar[str]
    supported_faults: ClassVar[frozenset[str]]
    has_coordinator: ClassVar[bool] = False
    # the system's own scenario settings (`options:` in the YAML)
    Options: ClassVar[type[BaseModel]] = NoOptions

    @classmethod
    def check(cls, scenario: Scenario) -> None:
        """Static checks of a scenario for this system (raise scenario.ScenarioError)."""
        return None

    def __init__(self, scenario: Scenario, sandbox: Sandbox, run_id: str, logdir: Path) -> None:
        self.scenario = scenario
        self.sandbox = sandbox
        self.run_id = run_id
        self.logdir = logdir
        self.datadir = sandbox.dir / run_id
        self.node_names = [f"n{i}" for i in range(1, scenario.cluster.nodes + 1)]
        self.procs: dict[str, Proc] = {}
        self.options: Any = self.Options.model_validate(scenario.options)

    def host(self, node: str) -> Host:
        return self.sandbox.hosts[node]

    # -- process control (main thread or client thread; all bounded) ----------
    def start(self) -> None:
        for n in self.node_names:
            self.start_node(n)

    @abc.abstractmethod
    def start_node(self, node: str) -> None: ...

    def kill_node(self, node: str, timeout: float = 10.0) -> None:
        proc = self.procs[node]
        process.send_signal(proc, signal.SIGKILL)
        if not process.wait_exit(proc, timeout):
            raise SystemError_(f"{node} (pid {proc.pid}) still alive {timeout}s after SIGKILL")

    def stop_node(self, node: str, timeout: float = 30.0) -> bool:
        """SIGTERM and wait for a clean exit; SIGKILL after `timeout`. True if it exited cleanly."""
        proc = self.procs[node]
        process.send_signal(proc, signal.SIGTERM)
        if process.wait_exit(proc, timeout):
            return True
        self.kill_node(node)
        return False

    def pause_node(self, node: str) -> None:
        """SIGSTOP the node's whole process group (a broker's helpers were started in it)."""
        process.send_signal(self.procs[node], signal.SIGSTOP, group=True)

    def resume_node(self, node: str) -> None:
        process.send_signal(self.procs[node], signal.SIGCONT, group=True)

    def node_alive(self, node: str) -> bool:
        p = self.procs.get(node)
        return p is not None and p.alive()

    def stop(self) -> None:
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

    @abc.abstractmethod
    async def replicas(self) -> list[str]:
        """All nodes holding a replica of the stream, leader included."""

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
