"""What a broker module fills in: three small parts and the entry that names them.

- a *cluster* (cluster.py): how nodes run and are acted on. One strategy per session, chosen
  once: the broker's own `LocalCluster` subclass (processes in the sandbox) or
  `ExternalCluster` (a cluster file's hooks). Broker code never asks which it has.
- *roles*: what the cluster says about itself — who leads the stream, its replicas, the
  coordinator, where the live consumers are, whether it is whole — the lookups faults target.
- a *client* driver: stream/queue set-up, producers and readers.

(cf. OpenChaos's ChaosNode / ChaosState / QueueDriver, Jepsen's DB / Client.) Process
control runs on the harness's main thread; everything that talks to brokers is a coroutine
run inside the client namespace (Sandbox.run_client).
"""
from __future__ import annotations

import abc
import asyncio
import copy
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Optional, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from ..sandbox import Sandbox
    from ..scenario import Scenario

# (value, "ack" | "nack" | "unknown", offset, node, detail)
OutcomeCallback = Callable[[int, str, Optional[str], Optional[str], Optional[str]], None]
# (payload, offset, node[, partition]): the partition of a partitioned topic the message was
# read from (history format 1.11: ordering is judged per partition), none for one partition
DeliverCallback = Callable[..., None]
# ("disconnect" | "reconnect", node, detail[, t]): the client library's own connection events
EventCallback = Callable[..., None]


class ClientEvents:
    """A producer whose client library reports its connection's life (disconnects,
    reconnects) from its own callbacks: the producer loop sets `on_event` before `open`,
    and each becomes a history row with its time (`t`: when the library saw it, on the
    monotonic clock, where it says; else now) and node."""

    def on_event(self, kind: str, node: Optional[str], detail: Optional[str], t: Optional[int] = None) -> None:
        pass


# capabilities: what a deployment offers and a fault needs. Node control first: a local
# cluster signals its processes; an external one runs the hooks its file has.
KILL, STOP, START, PAUSE = "kill", "stop", "start", "pause"
LOCAL_VERBS = frozenset({KILL, STOP, START, PAUSE})
NETNS, HOOKS, COORDINATOR, ENSEMBLE = "netns", "hooks", "coordinator", "ensemble"
WIPE, POWER, CORRUPT, STEPDOWN, UNLOAD, ELECT = "wipe", "power", "corrupt", "stepdown", "unload", "elect"
EVERY, LAMEDUCK, REPLICAS, REASSIGN, CLOCK = "stepdown-every", "lame-duck", "replicas", "reassign", "clock"
REPAIR, REPLACE = "repair", "replace"


@dataclass(frozen=True)
class Capability:
    """One capability, whole: what it means, the method a deployment offering it must write
    (on its Roles or its Cluster: the contract test holds every system to it), and what it
    needs of the machine (doctor's names)."""

    name: str
    meaning: str
    role_method: Optional[str] = None
    cluster_method: Optional[str] = None
    machine: tuple[str, ...] = ()


CAPABILITIES: dict[str, Capability] = {c.name: c for c in (
    Capability(KILL, "a node's processes killed (SIGKILL, or the cluster file's `kill` hook)"),
    Capability(STOP, "a node stopped cleanly (SIGTERM, or its `stop` hook)"),
    Capability(START, "a node started again"),
    Capability(PAUSE, "a node's processes paused and resumed (SIGSTOP, SIGCONT)"),
    Capability(NETNS, "the nodes sit in namespaces of ours: network faults work",
               machine=("root", "netns", "veth", "iptables")),
    Capability(HOOKS, "named commands of a cluster file (the `command` fault)"),
    Capability(COORDINATOR, "the roles name the node coordinating the cluster", role_method="coordinator"),
    Capability(ENSEMBLE, "the roles name the storage nodes holding the stream's current data (bookies)",
               role_method="ensemble"),
    Capability(WIPE, "the cluster deletes a stopped node's data (its disk lost)", cluster_method="wipe"),
    Capability(POWER, "the nodes' data directories sit on a layer that drops unsynced writes",
               machine=("root", "fuse")),
    Capability(CORRUPT, "the cluster names a stopped node's data and metadata files (bits flipped, tails cut)",
               cluster_method="data_files"),
    Capability(REPAIR, "the cluster runs the system's own repair tool on a stopped node's damaged files",
               cluster_method="repair_data"),
    Capability(STEPDOWN, "the roles move leadership off a node gracefully (an operator's verb)",
               role_method="stepdown"),
    Capability(UNLOAD, "the roles close every topic of a group at once, to be served again (Pulsar's bundles)",
               role_method="unload"),
    Capability(ELECT, "the roles move every partition's leadership back to its preferred replica (Kafka)",
               role_method="elect_leaders"),
    Capability(EVERY, "the roles move every leadership a node holds off it at once (NATS, RabbitMQ)",
               role_method="stepdown_every"),
    Capability(LAMEDUCK, "the cluster puts a node in lame-duck mode: it hands over, sheds clients, exits (NATS)",
               cluster_method="lame_duck"),
    Capability(REPLICAS, "the roles change the stream's replica count under load (a membership change)",
               role_method="set_replicas"),
    Capability(REASSIGN, "the roles move the stream's replicas to other nodes under load (Kafka)",
               role_method="reassign"),
    Capability(REPLACE, "the roles replace a member: it leaves for good and a new empty one copies everything",
               role_method="remove_member"),
    Capability(CLOCK, "the cluster moves a node's wall clock for the processes it starts there (libfaketime)",
               machine=("libfaketime",)),
)}


class SystemError_(RuntimeError):
    """The broker could not be started or reached within its bound."""


class Hopeless(SystemError_):
    """An answer waiting will not change (wait_until gives up at once)."""


class NodeExited(Hopeless):
    """A node's process exited while the harness waited for it: no use waiting longer."""


class NoOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")


@dataclass
class Context:
    """What the parts of one deployment share: the scenario, the system's validated options,
    the sandbox, and the run being served (it changes when a cluster is reused)."""

    scenario: "Scenario"
    options: Any
    sandbox: "Sandbox"
    run_id: str
    logdir: Path
    # the session's own mark on an external cluster (a cluster we did not start may hold
    # the streams of earlier sessions, whose run ids are ours too); "" on a local cluster
    tag: str = ""
    # what the scenario's faults need of the deployment (faults.needs_of): a cluster sets
    # up only what is asked (the power layer costs write throughput)
    needs: frozenset = frozenset()
    # the topic a topic's own view serves (Client.for_topic): "" or "t1" is the run's first
    # stream, whose name has no suffix (the roles' `leader` and the faults' targets are its)
    topic: str = ""

    @property
    def prefix(self) -> str:
        """What every name the harness gives a cluster begins with (streams, client ids)."""
        return f"bc-{self.tag}" if self.tag else "bc"

    @property
    def stream_name(self) -> str:
        """The run's stream/topic/queue/key: fresh per run, also on a reused cluster, and
        per session on an external one; `-t<k>` after it for the k-th topic of
        `workload.topics` (k > 1)."""
        base = f"{self.prefix}-{self.run_id}"
        return base if self.topic in ("", "t1") else f"{base}-{self.topic}"

    @property
    def node_names(self) -> list[str]:
        return node_names(self.scenario.cluster.nodes)


def _topic_copy(obj, topic: str):
    out = copy.copy(obj)
    out.ctx = dataclasses.replace(obj.ctx, topic=topic)
    return out


def node_names(n: int) -> list[str]:
    """The broker nodes of a cluster of `n`: the one place their names are made."""
    return [f"n{i}" for i in range(1, n + 1)]


# -- the cluster ------------------------------------------------------------------------------

class Cluster(abc.ABC):
    """The nodes of a deployment: addresses, and the verbs faults use on them.

    Two strategies write the abstract methods (cluster.py): LocalCluster, our processes in
    the sandbox, and ExternalCluster, a cluster file's hooks. A broker module writes
    neither: it subclasses LocalCluster with its `ports` and `launch(node)` (and, where it
    has them, a staged `ready`, `versions`, `settings`, and for the disk faults
    `data_files`/`wipe` with the matching `extra_offers`)."""

    # hosts that are not brokers but that faults may target by name (tansu's S3 store)
    service_hosts: ClassVar[tuple[str, ...]] = ()

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.node_names = ctx.node_names
        # what a node's last start had to wait for, by node (a Kafka 3.9 broker restarted
        # within its old ZooKeeper session): the fault that started it says so (run.json)
        self.start_notes: dict[str, str] = {}
        # nodes that exited on their own and were started again by the cluster's supervisor
        # (LocalCluster.supervised), for run.json: node, exit code, when
        self.restarts: list[dict] = []

    def metadata_store(self) -> Optional[tuple[str, int]]:
        """Where the servers keep who owns what, if the harness may read it there directly
        (Pulsar's ZooKeeper on a cluster of ours); None: ask the servers (an external cluster)."""
        return None

    @property
    def step_bound_s(self) -> float:
        """How long one step of this cluster's own may take beyond the harness's bounds (an
        external cluster's hooks: its `hook_timeout`); 0 for processes the harness starts."""
        return 0.0

    @property
    def host_names(self) -> list[str]:
        """Broker nodes and service hosts: everything a fault can reach."""
        return self.node_names + list(self.service_hosts)

    @property
    @abc.abstractmethod
    def offers(self) -> frozenset[str]:
        raise NotImplementedError

    @property
    @abc.abstractmethod
    def label(self) -> str:
        """How run.json names this cluster's origin."""
        raise NotImplementedError

    # -- addresses -----------------------------------------------------------------------
    @abc.abstractmethod
    def address(self, node: str, service: str = "client") -> tuple[str, int]:
        """(host, port) of a node's service, as a client in the client namespace reaches it."""
        raise NotImplementedError

    def node_at(self, host: str, port: int, service: str = "client") -> Optional[str]:
        """The node or service host at an address (as a client library, a sentinel or a
        ledger's metadata reports it)."""
        for n in self.host_names:
            try:
                if self.address(n, service) == (host, int(port)):
                    return n
            except LookupError:
                continue
        return None

    # -- life cycle ----------------------------------------------------------------------
    # (optional: an external cluster is up already and never stopped; a local one writes them)
    def start(self) -> None:
        """Bring the cluster up (main thread, bounded)."""
        return None

    async def ready(self, timeout: float) -> None:
        """What start-up does from the client namespace (a staged boot), before the client connects."""
        return None

    def stop(self) -> None:
        """Take down what start() brought up."""
        return None

    def begin_run(self, run_id: str, logdir: Path) -> None:
        """Serve another run on this (healthy) cluster: new names, logs of restarts go there."""
        self.ctx.run_id = run_id
        self.ctx.logdir = logdir

    # -- node control --------------------------------------------------------------------
    @abc.abstractmethod
    def start_node(self, node: str) -> None:
        raise NotImplementedError

    @abc.abstractmethod
    def kill(self, node: str, timeout: float = 10.0) -> None:
        raise NotImplementedError

    async def kill_nodes(self, nodes: list[str], timeout: float = 10.0) -> Optional[int]:
        """`kill` each node, off the event loop (the producers share it): here one after
        another (a cluster file's hooks), in effect when they return (None). A LocalCluster
        signals them all at once and returns when it did (monotonic ns)."""
        for n in nodes:
            await asyncio.to_thread(self.kill, n, timeout)
        return None

    @abc.abstractmethod
    def stop_node(self, node: str, timeout: float = 30.0) -> bool:
        """Graceful stop; True if the node exited cleanly."""
        raise NotImplementedError

    @abc.abstractmethod
    def pause(self, node: str) -> None:
        raise NotImplementedError

    @abc.abstractmethod
    def resume(self, node: str) -> None:
        raise NotImplementedError

    @abc.abstractmethod
    def alive(self, node: str) -> bool:
        raise NotImplementedError

    def run_hook(self, node: str, hook: str) -> None:
        raise LookupError(f"no hook {hook!r}: hooks come from an external cluster file")

    def pid_of(self, node: str) -> Optional[int]:
        """The pid of the node's process where the harness holds it (a local cluster's, while
        it runs); None elsewhere (an external cluster's nodes are seen at their addresses)."""
        return None

    def versions(self) -> dict[str, str]:
        """Server versions as the servers report them (kept in run.json); {} if unknown."""
        return {}

    def settings(self) -> dict:
        """Durability settings in effect, as the servers report them (kept in run.json)."""
        return {}

    def settle(self) -> None:
        """What the servers wrote so far counts as written back by the OS (power-off's
        layer, at the start of a run's write, with params.setup_synced: a cluster in service
        has been up longer than the OS keeps dirty pages); nothing to do elsewhere."""
        return None

    def down_why(self, node: str) -> Optional[str]:
        """Why `node` is not up (None: it is): the question a heal and a health check ask,
        which may take longer than `alive` (an external cluster also tries the node's port)."""
        return None if self.alive(node) else "not running"

    def not_running(self) -> list[str]:
        return [n for n in self.host_names if self.down_why(n)]

    def exited(self, node: str) -> "NodeExited":
        """The error for a node found down while the harness waits for it to serve."""
        return NodeExited(f"{node} exited while starting; see {self.ctx.logdir / (node + '.log')}")


# -- the client driver ---------------------------------------------------------------------

class Producer(Protocol):
    """A client's producer as the producer loop drives it (workload/producer.py). It may also
    have `send_now(value, payload) -> bool`: the message handed to the library without
    waiting, True when it was (False: the loop awaits `send` instead), for a library whose
    send never blocks in the common case: one or two coroutines less per message."""

    async def open(self, on_outcome: OutcomeCallback) -> None: ...
    async def send(self, value: int, payload: bytes) -> None: ...
    def node(self) -> Optional[str]: ...
    async def close(self) -> None: ...


@runtime_checkable
class Reader(Protocol):
    """Reads after the write phase."""

    async def read(self, deliver: DeliverCallback, idle: float) -> str:
        """Read everything from the beginning; returns "complete" or "incomplete: why"."""
        ...


@runtime_checkable
class LiveReader(Protocol):
    """Reads during the write phase: started before the producers, finished after them."""

    async def start(self, deliver: DeliverCallback) -> None: ...

    async def finish(self, idle: float, all_acked_seen: Callable[[], bool]) -> str:
        """Keep reading until every acked message arrived or nothing did for `idle` s."""
        ...

    async def close(self) -> None: ...


class Client:
    """The workload's side of a broker: the run's stream, producers and readers."""

    def __init__(self, ctx: Context, cluster: Cluster) -> None:
        self.ctx = ctx
        self.cluster = cluster

    @property
    def options(self) -> Any:
        return self.ctx.options

    @property
    def stream_name(self) -> str:
        return self.ctx.stream_name

    # when the client library tries to reconnect after a lost connection, in ms after the
    # loss (its configured back-off, summed); summary.json counts the outages near each step;
    # the jitter of each delay after the first, as fractions (earlier, later), widens the step
    reconnect_steps_ms: ClassVar[tuple[float, ...]] = ()
    reconnect_jitter: ClassVar[tuple[float, float]] = (0.0, 0.0)

    async def connect(self, timeout: float) -> None:
        """Open the control-plane connection and wait until the cluster serves requests."""

    async def create_stream(self, timeout: float) -> str:
        return self.stream_name

    async def drop_stream(self) -> None:
        """Free the run's stream/queue on a cluster that will be reused (best effort)."""

    def forked(self) -> None:
        """In a producer process forked from the harness (`workload.processes`): let go of
        what belongs to the harness's event loop (tasks, connections), without closing it."""

    def library(self) -> dict:
        """The producers' client library and its version (`client` in run.json; {} if not
        said): `options.client` where a system has more than one."""
        return {}

    def producer(self, name: str) -> Producer:
        raise NotImplementedError

    def for_topic(self, topic: str) -> "Client":
        """This client seen from one topic of `workload.topics` (`t1`, `t2`…): a shallow copy
        whose context names that topic's stream, sharing the connections made so far. A
        system whose clients keep per-stream state in `__init__` overrides it."""
        return _topic_copy(self, topic)

    def reader(self, name: str) -> Reader | LiveReader:
        raise NotImplementedError

    def consumer(self, name: str) -> LiveReader:
        """A live consumer (`workload.consumers`): a LiveConsumer, or the system's LiveReader."""
        raise NotImplementedError

    # it reads each replica's copy of the stream on its own (`workload.read_replicas`):
    # `replica_nodes` names the nodes holding one, `replica_reader` reads one of them
    replica_reads: ClassVar[bool] = False
    # its end read takes the messages out of the store (a RabbitMQ queue's, whose members
    # then drop what was settled): its copies are read before the end read, not after
    replicas_before_read: ClassVar[bool] = False

    async def replica_nodes(self) -> list[str]:
        """The nodes holding a copy of the run's stream, once the cluster is whole: those
        whose store has it where the cluster can tell (`has_stream(node)`), else every node."""
        have = getattr(self.cluster, "has_stream", None)
        nodes = self.cluster.node_names
        return [n for n in nodes if have(n)] if have is not None else list(nodes)

    def replica_reader(self, name: str, node: str) -> Reader:
        """A reader of what `node`'s own copy of the stream holds, at the positions it gives."""
        raise NotImplementedError

    # it can serve `workload.topics` > 1: a reader after the write (for_topic's copies read
    # one topic each); a system whose end reader reads live (MQTT) cannot yet
    many_topics: ClassVar[bool] = True

    # the kinds of consumer group `workload.group.kind` may name, the first the default; none:
    # the system has no group member here yet
    group_kinds: ClassVar[tuple[str, ...]] = ()
    # a member's ack takes the message out of the store (a RabbitMQ queue's): it names the
    # message (GroupEvents.commit's `message`), and the end read finds only what is left
    group_takes: ClassVar[bool] = False

    # its group members can consume, transform and produce in transactions
    # (`workload.group.commit: transaction`): `output_reader` reads what they wrote
    group_transactions: ClassVar[bool] = False

    @classmethod
    def group_error(cls, scenario: Any) -> Optional[tuple[str, str]]:
        """(field under workload.group, why) when this scenario's group cannot run here."""
        return None

    def output_reader(self, name: str) -> Reader:
        """The end read of what a consume-transform-produce group wrote (its output stream)."""
        raise NotImplementedError

    # its producers can write in transactions (`workload.transactions`, format 1.7)
    transactions: ClassVar[bool] = False

    @classmethod
    def txn_error(cls, scenario: Any) -> Optional[tuple[str, str]]:
        """(field, why) when this scenario's transactions cannot run here."""
        return None

    def group_member(self, name: str, spec: Any, events: Any) -> Any:
        """A member of `workload.group` (workload/group.py), run in a process of its own: its
        `run(finishing, idle)` tells `events` (GroupEvents: process, commit, assign, revoke,
        flush) what its library does until `finishing` is set and the group has made every
        position durable, and returns its read_end detail; `close()` lets go of it."""
        raise NotImplementedError

    async def close(self) -> None:
        pass
