"""Redis's servers: their options and the redis-server and sentinel processes the harness
starts, one of each per node namespace (n1 the first primary)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..base import CLOCK, CORRUPT, POWER, REPAIR, SystemError_
from ..cluster import LocalCluster

CHECK_AOF = "/usr/bin/redis-check-aof"
# the lines of its output that say what it found: each file's analysis and verdict, an RDB error
_VERDICT = re.compile(r"AOF analyzed|is valid|is not valid|ERROR|Internal error|Expected|truncated", re.I)


class RedisOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    master_name: str = Field(
        "bc", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
        description="the name the sentinels monitor the primary under (`sentinel monitor NAME ...`); an external "
                    "cluster's own, e.g. mymaster")
    wait_replicas: int = Field(0, ge=0, le=8, description="WAIT for this many replicas after each batch (0: no WAIT)")
    wait_timeout_ms: int = Field(1000, ge=1, le=60_000, description="WAIT timeout")
    follow_failover: bool = Field(
        True, description="producers move to the new primary after a failover; false pins them to the first one")
    down_after_ms: int = Field(2000, ge=100, le=60_000, description="sentinel down-after-milliseconds")
    batch: int = Field(256, ge=1, le=10_000, description="XADDs per pipelined batch")
    # one connection keeps each producer's writes in send order, so the ordering verdicts are
    # about the broker; more connections are faster but interleave batches
    connections: int = Field(1, ge=1, le=64, description="connections per producer, each with one batch in flight")
    appendfsync: Literal["always", "everysec", "no"] = Field(
        "everysec", description="when the AOF is fsynced: always (before each reply), everysec (Redis's default), "
                                "no (when the OS flushes)")

    @field_validator("appendfsync", mode="before")
    @classmethod
    def _no(cls, v):
        return "no" if v is False else v  # YAML (a file's, or --option's) reads a bare `no` as false


def _seq(p: Path) -> int:
    """An AOF file's sequence number (appendonly.aof.3.incr.aof: 3)."""
    m = re.search(r"\.aof\.(\d+)\.", p.name)
    return int(m.group(1)) if m else 0


def _bin() -> str:
    return shutil.which("redis-server") or "/usr/bin/redis-server"


class RedisServers(LocalCluster):
    """One redis-server and one sentinel per node namespace; n1 the first primary. A fault
    hits the server: the node's sentinel is a helper, stopped only with the cluster."""

    ports = {"client": 6379, "sentinel": 26379}
    # a server's `dir` (its AOF) on the layer: power-off; its config file, which the
    # sentinels rewrite, and the sentinels' own stay off it. Its AOF's files: corrupt
    extra_offers = frozenset({POWER, CORRUPT, REPAIR})
    refuses = {CLOCK: "redis-server hangs at start under libfaketime (0.9.10, Debian's): its jemalloc and "
                      "libfaketime call each other while the process starts"}

    def _server_conf(self, node: str) -> str:
        ip, port = self.address(node)
        d = self.datadir / node
        d.mkdir(parents=True, exist_ok=True)
        lines = [f"bind {ip}", f"port {port}", "protected-mode no", "daemonize no", f'dir "{d}"',
                 "appendonly yes", f"appendfsync {self.options.appendfsync}", 'save ""', f"replica-announce-ip {ip}",
                 f"replica-announce-port {port}", "repl-diskless-sync no"]
        first = self.node_names[0]
        if node != first:
            lines.append("replicaof {} {}".format(*self.address(first)))
        return "\n".join(lines) + "\n"

    def _sentinel_conf(self, node: str) -> str:
        ip, port = self.address(node, "sentinel")
        d = self.datadir / f"{node}-sentinel"
        d.mkdir(parents=True, exist_ok=True)
        pip, pport = self.address(self.node_names[0])
        quorum = len(self.node_names) // 2 + 1
        name = self.options.master_name
        return "\n".join([
            f"bind {ip}", f"port {port}", "daemonize no", "protected-mode no", f'dir "{d}"',
            f"sentinel announce-ip {ip}", f"sentinel announce-port {port}",
            f"sentinel monitor {name} {pip} {pport} {quorum}",
            f"sentinel down-after-milliseconds {name} {self.options.down_after_ms}",
            # a first attempt often finds no replica whose INFO is fresh enough (sentinels
            # refresh it every 10 s until the primary is down) and the next attempt waits
            # 2 x failover-timeout: 3 s keeps that wait at 6 s instead of 20 s
            f"sentinel failover-timeout {name} 3000",
            f"sentinel parallel-syncs {name} 1",
            # otherwise a sentinel learns of replicas only from the primary's INFO, every 10 s
            *[f"sentinel known-replica {name} {r_ip} {r_port}"
              for r_ip, r_port in (self.address(n) for n in self.node_names[1:])],
        ]) + "\n"

    def data_files(self, node: str) -> list[Path]:
        """The server's append-only files (Redis 7's multi-part AOF): its base, then its
        increments in order, the newest writes last; the manifest naming them is left alone.
        One AOF holds the server's every key: on a reused cluster, earlier runs' streams were
        deleted, so its tail is this run's writes."""
        d = self.datadir / node / "appendonlydir"
        return sorted(d.glob("*.base.*"), key=_seq) + sorted(d.glob("*.incr.aof"), key=_seq)

    def renew(self, node: str, primary: tuple[str, int]) -> None:
        """A stopped server made new: its data deleted and its configuration written afresh,
        replicating from `primary` (a machine put in a replaced replica's place)."""
        if self.alive(node):
            raise SystemError_(f"{node} is running: renew a stopped server")
        shutil.rmtree(self.datadir / node, ignore_errors=True)
        lines = [x for x in self._server_conf(node).splitlines() if not x.startswith("replicaof ")]
        (self.datadir / f"{node}.conf").write_text("\n".join([*lines, "replicaof {} {}".format(*primary)]) + "\n")

    def metadata_files(self, node: str) -> list[Path]:
        """The AOF's manifest: which files make the append-only file, in what order."""
        return [p for p in (self.datadir / node / "appendonlydir").glob("*.manifest") if p.is_file()]

    def check_data(self, node: str) -> dict:
        """redis-check-aof on the node's manifest, read-only (no --fix): per file whether it
        is valid, and up to where it reads (`ok_up_to`), as Redis will load it."""
        return self._check_aof(node, fix=False)

    def repair_data(self, node: str) -> dict:
        """redis-check-aof --fix: the AOF cut back to its last whole command (the tool asks
        before it truncates; the answer is yes)."""
        return self._check_aof(node, fix=True)

    def _check_aof(self, node: str, fix: bool) -> dict:
        manifest = self.datadir / node / "appendonlydir" / "appendonly.aof.manifest"
        argv = [CHECK_AOF, *(["--fix"] if fix else []), str(manifest)]
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=60, input="y\n" if fix else None)
        except (OSError, subprocess.TimeoutExpired) as e:
            return {"tool": " ".join(argv[:-1]), "exit": None, "said": [f"{type(e).__name__}: {e}"[:200]]}
        said = [line.replace("Continue? [y/N]:", "").strip() for line in (r.stdout + r.stderr).splitlines()
                if _VERDICT.search(line)]
        return {"tool": " ".join(argv[:-1]), "exit": r.returncode, "said": said[-8:]}

    def settings(self) -> dict:
        """appendonly and appendfsync as each running server reports them (CONFIG GET)."""
        import redis

        out = {}
        for n in self.node_names:
            if not self.alive(n):
                continue
            ip, port = self.address(n)
            try:
                with redis.Redis(host=ip, port=port, socket_timeout=2, socket_connect_timeout=2) as r:
                    got = {**r.config_get("appendonly"), **r.config_get("appendfsync")}
            except (redis.RedisError, OSError):
                continue
            out[n] = {k: v.decode() if isinstance(v, bytes) else v for k, v in got.items()}
        return out

    def start(self) -> None:
        if not os.path.exists(_bin()):
            raise SystemError_("redis-server not found: run `make setup` (apt-get install redis-server redis-sentinel)")
        super().start()
        for n in self.node_names:
            conf = self.datadir / f"{n}-sentinel.conf"
            conf.write_text(self._sentinel_conf(n))
            self.spawn_helper(n, f"{n}-sentinel", [_bin(), str(conf), "--sentinel"])

    def launch(self, node: str) -> None:
        conf = self.datadir / f"{node}.conf"
        if not conf.exists():  # a restart keeps the file the sentinels may have rewritten
            conf.parent.mkdir(parents=True, exist_ok=True)
            conf.write_text(self._server_conf(node))
        self.spawn_node(node, [_bin(), str(conf)])
