"""External mode: a real cluster the harness does not start, driven through command hooks.

The cluster file names each node's client address and the shell commands that kill, stop,
start, pause and resume it (run here, or over SSH), plus any named hooks a `command` fault
can run (an iptables snippet that isolates the node, `docker network disconnect`, …).
The harness never stops such a cluster at the end; it only heals what it did.
"""
from __future__ import annotations

import shlex
import socket
import subprocess
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from ..errors import ScenarioError, first_error
from ..inputs import read_yaml
from .base import HOOKS, KILL, PAUSE, START, STOP, node_names

PROCESS_HOOKS = ("kill", "stop", "start", "pause", "resume")


class HookError(RuntimeError):
    pass


def _host_port(v: str) -> str:
    host, _, port = v.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{v!r} is not host:port")
    return v


class ExternalNode(BaseModel):
    model_config = ConfigDict(extra="forbid")
    address: str = Field(..., description="host:port clients use for this node")
    ssh: Optional[str] = Field(None, description="run this node's hooks over `ssh <this>`")
    kill: Optional[str] = None
    stop: Optional[str] = None
    start: Optional[str] = None
    pause: Optional[str] = None
    resume: Optional[str] = None
    alive: Optional[str] = Field(None, description="exit 0 while the broker runs (optional)")
    hooks: dict[str, str] = Field(default_factory=dict, description="named commands for the `command` fault")
    services: dict[str, str] = Field(
        default_factory=dict, description="host:port of the node's other services the harness asks for its "
                                          "roles (NATS: monitor; Redis: sentinel; RabbitMQ: mgmt, mqtt; "
                                          "Pulsar: admin)")

    @field_validator("services")
    @classmethod
    def _services(cls, v: dict) -> dict:
        for addr in v.values():
            _host_port(addr)
        return v

    @field_validator("address")
    @classmethod
    def _addr(cls, v: str) -> str:
        return _host_port(v)


class ExternalCluster(BaseModel):
    model_config = ConfigDict(extra="forbid")
    system: Optional[str] = Field(None, description="the system this cluster runs (checked against --system)")
    nodes: dict[str, ExternalNode]
    ssh: Optional[str] = Field(None, description="default `ssh` destination for every node's hooks")
    admin_url: Optional[str] = Field(None, description="Pulsar: the admin REST URL for topic-owner lookups")
    hook_timeout: float = Field(60.0, gt=0, le=3600, description="seconds a hook may take; also how long a node "
                                                                 "started by its `start` hook has to answer")
    # hooks run in the cluster file's directory (relative paths in them are the file's)
    _dir: Path = PrivateAttr(default_factory=Path.cwd)

    @field_validator("nodes")
    @classmethod
    def _names(cls, v: dict) -> dict:
        want = node_names(len(v))
        if sorted(v) != sorted(want):
            raise ValueError(f"nodes must be named {', '.join(want)}")
        return v

    # -- use ---------------------------------------------------------------------
    def address(self, node: str, service: str = "client") -> tuple[str, int]:
        n = self.nodes[node]
        addr = n.address if service == "client" else n.services.get(service)
        if addr is None and service == "admin" and self.admin_url:
            from urllib.parse import urlsplit

            u = urlsplit(self.admin_url)
            return u.hostname or "", u.port or 80
        if addr is None:
            raise LookupError(f"the cluster file gives no {service!r} address for {node} (nodes.{node}.services)")
        host, _, port = addr.rpartition(":")
        return host, int(port)

    def offers(self) -> frozenset[str]:
        """The node-control capabilities whose hooks every node has, and named hooks."""
        names = list(self.nodes)
        verbs = {v for v in (KILL, STOP, START) if all(self.has(n, v) for n in names)}
        if all(self.has(n, "pause") and self.has(n, "resume") for n in names):
            verbs.add(PAUSE)
        return frozenset(verbs | {HOOKS})

    def has_service(self, node: str, service: str) -> bool:
        return service in self.nodes[node].services or (service == "admin" and bool(self.admin_url))

    def missing_services(self, needed: tuple[str, ...]) -> Optional[str]:
        """The first service the system's roles ask for that a node does not give, as the
        field it belongs in (None when every node gives every one)."""
        for n in self.nodes:
            for svc in needed:
                if not self.has_service(n, svc):
                    return f"nodes.{n}.services.{svc}"
        return None

    def answers(self, node: str, timeout: float = 2.0) -> bool:
        """The harness's own look: does something accept connections at the node's client
        address? (A killed broker's port is closed when its process exits, however late
        its parent reaps it.)"""
        try:
            socket.create_connection(self.address(node), timeout).close()
            return True
        except OSError:
            return False

    def has(self, node: str, hook: str) -> bool:
        n = self.nodes[node]
        return bool(getattr(n, hook, None) if hook in PROCESS_HOOKS or hook == "alive" else n.hooks.get(hook))

    def command(self, node: str, hook: str) -> list[str]:
        n = self.nodes[node]
        cmd = getattr(n, hook, None) if hook in PROCESS_HOOKS or hook == "alive" else n.hooks.get(hook)
        if not cmd:
            raise HookError(f"external cluster: node {node} has no {hook!r} command")
        dest = n.ssh or self.ssh
        if dest:
            return ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", dest, "--", cmd]
        return ["/bin/sh", "-c", cmd]

    def run(self, node: str, hook: str, check: bool = True) -> int:
        argv = self.command(node, hook)
        try:
            r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=self.hook_timeout,
                               cwd=self._dir)
        except subprocess.TimeoutExpired:
            raise HookError(f"external cluster: {node} {hook!r} did not finish within {self.hook_timeout:.0f}s: "
                            f"{shlex.join(argv)}") from None
        if check and r.returncode != 0:
            err = (r.stderr or r.stdout).decode(errors="replace").strip().splitlines()
            raise HookError(f"external cluster: {node} {hook!r} exited {r.returncode}"
                            + (f": {err[-1][:200]}" if err else ""))
        return r.returncode


def load(path: str | Path) -> ExternalCluster:
    """Read and validate a cluster file; raises ScenarioError naming the field."""

    doc = read_yaml(path, "scenario field 'external': cluster file")
    if not isinstance(doc, dict):
        raise ScenarioError(f"scenario field 'external': cluster file '{path}' is not a mapping (nodes: ...)")
    try:
        ext = ExternalCluster.model_validate(doc)
    except ValidationError as e:
        raise ScenarioError(first_error(e, "external")) from None
    ext._dir = Path(path).resolve().parent
    return ext
