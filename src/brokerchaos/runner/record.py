"""What run.json says of one run: a typed record, written when the run starts (so that a
harness killed during it leaves it marked `running`) and again when it ends.

The phases of a run (phases.py) fill it in as they go; nothing else carries a run's facts.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, Optional


@dataclass(frozen=True)
class BringUp:
    """The bring-up phase: the cluster ready and the run's streams created, the servers and
    the client as they report themselves."""

    cluster_ready_s: float
    servers: dict
    server_settings: dict
    client: dict
    topics: Optional[list] = None  # workload.topics > 1: every topic's stream
    # a node the cluster had to start again while it came up, and why (Kafka 3.9: its
    # ZooKeeper session expired while it started)
    bring_up_notes: Optional[dict] = None


@dataclass(frozen=True)
class WriteEnd:
    """The write phase: how long it took, producers that stopped before their last message,
    and the late sends of a steady rate."""

    write_s: float
    write_stopped_early: Optional[str]
    late_sends: Optional[int]


@dataclass(frozen=True)
class GroupEnd:
    """The consumer group finished: how its read ended, each incarnation's pid, the member
    that held its work."""

    group_read_status: str
    group_members: dict
    group_held: Optional[str]


@dataclass(frozen=True)
class ReadEnd:
    """The end read: how it ended, how long it took, when it ended."""

    read_status: str
    read_s: float
    t_read_end: float


@dataclass(frozen=True)
class Health:
    """May the next run take the cluster: whether, and what the health check said."""

    healthy_after: Optional[bool]
    health_after: Optional[str]


@dataclass
class RunRecord:
    run: str
    index: int
    system: str
    sandbox: str
    scenario: dict
    sandbox_dir: str = ""  # where the run's nodes keep their data, configuration and mounts
    started: float = field(default_factory=time.time)
    status: str = "running"  # running, finished; incomplete (a resumed soak: the harness stopped in it)
    cluster: str = ""  # started, reused (started in run-NNN), external (file), started (rebuilt: why)
    stream: str = ""  # the run's stream, topic, queue or key on the cluster
    topics: Optional[list] = None  # workload.topics > 1: every topic's stream, the first `stream`
    # each fault's nemesis state (windows, nodes, precision); `fault` is the first one
    faults: list = field(default_factory=list)
    fault: Optional[dict] = None
    # bring-up: the cluster ready and the stream created, servers as they report themselves
    cluster_ready_s: Optional[float] = None
    bring_up_notes: Optional[dict] = None
    servers: dict = field(default_factory=dict)
    server_settings: dict = field(default_factory=dict)
    client: dict = field(default_factory=dict)  # the producers' client library and its version
    leader_at_start: Optional[str] = None
    producer_processes: Optional[list[int]] = None
    # the write, with its nemeses
    write_s: Optional[float] = None
    write_stopped_early: Optional[str] = None
    late_sends: Optional[int] = None
    # after the write: heals, the stream ready again, the read
    stream_ready_before_read: Any = None
    # the cluster whole again before the read (whole.py): whether, what was seen, how long it took
    whole: Optional[dict] = None
    # nodes that exited on their own and the cluster's supervisor started again (LocalCluster.supervised)
    restarts: Optional[list] = None
    leader_before_read: Optional[str] = None
    live_read_status: Optional[str] = None
    group_members: Optional[dict[str, int]] = None  # workload.group: each incarnation's pid
    group_held: Optional[str] = None  # workload.group.hold_after: the member that held its work, if one did
    group_read_status: Optional[str] = None
    output_read_status: Optional[str] = None  # the end read of a consume-transform-produce group's output
    replica_reads: Optional[dict] = None  # per node, how its copy's own read ended (workload.read_replicas)
    group_scaled: Optional[list] = None  # workload.group.schedule: each step, when, and the slots it changed
    read_status: Optional[str] = None
    read_s: Optional[float] = None
    # the end check of the copies (endcheck.py): what was still short at its last look
    under_replicated: Optional[list[str]] = None
    end_check: Optional[str] = None
    copies_during: Optional[dict] = None  # the background looks from the write's start: looks, most, first_ms, changes
    drops: Optional[dict] = None  # what the broker counted of its own drops over the run (drops.py)
    # may the next run take this cluster?
    healthy_after: Optional[bool] = None
    health_after: Optional[str] = None
    finished: Optional[float] = None
    phases: dict = field(default_factory=dict)
    incomplete: Optional[str] = None
    # when the read ended (monotonic): the verdict's wait is measured from it; not in run.json
    t_read_end: Optional[float] = field(default=None, repr=False)

    def take(self, part) -> None:
        """A phase's result (BringUp, WriteEnd, GroupEnd, ReadEnd, Health), into the record."""
        for f in fields(part):
            if not hasattr(self, f.name):
                raise AttributeError(f"RunRecord has no field {f.name!r} ({type(part).__name__})")
            setattr(self, f.name, getattr(part, f.name))

    def to_json(self) -> dict:
        """run.json's content: every field that has a value (an unset one is left out, as the
        dict this record replaced left it out); a typed part says what it keeps (as_json:
        a fault's windows)."""
        d = {f.name: jsonable(getattr(self, f.name)) for f in fields(self) if f.name != "t_read_end"}
        return {k: v for k, v in d.items() if v is not None}

    def write(self, run_dir: Path) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "run.json").write_text(json.dumps(self.to_json(), indent=2, default=str))

    def time_phases(self, t_run: float) -> None:
        """Where the run's time went: the brokers' own phases (cluster ready, write, read) and
        the harness's (before the write: clients, leader lookup; between write and read:
        heals, waiting for the stream; after the read: heal, health check, the stream
        dropped, the cluster stopped unless reused). `harness_s` is everything but write and read."""
        run_s = time.monotonic() - t_run
        p = {"run_s": round(run_s, 3)}
        for k in ("cluster_ready_s", "write_s", "read_s"):
            if getattr(self, k) is not None:
                p[k] = getattr(self, k)
        p["harness_s"] = round(run_s - (self.write_s or 0) - (self.read_s or 0), 3)
        if self.t_read_end is not None:
            p["after_read_s"] = round(time.monotonic() - self.t_read_end, 3)
        self.phases.update(p)


def jsonable(x: Any) -> Any:
    """A copy of `x` made of dicts, lists and scalars: what has `as_json` gives that, a
    dataclass its fields."""
    if hasattr(x, "as_json"):
        return jsonable(x.as_json())
    if is_dataclass(x) and not isinstance(x, type):
        return {f.name: jsonable(getattr(x, f.name)) for f in fields(x)}
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    return x
