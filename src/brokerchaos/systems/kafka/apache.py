"""Apache Kafka from Maven Central (`options.broker: apache`, the default): three brokers,
one per node namespace, replicating for real, and their metadata quorum on a host of its own.

- Kafka 3.9 (`cluster.version` 3.9, the default) runs in ZooKeeper mode, the seeds' setup:
  one ZooKeeper server on host `zk`. `coordinator` is that host, so `isolate-from` with
  `from: coordinator` is the seed's "leader isolated from ZooKeeper only".
- Kafka 4.1 (`cluster.version` 4.1) has no ZooKeeper: one KRaft controller on host
  `controller`, which is then the coordinator.
- Any other release from 3.0 (release.py) runs the same way by its major: ZooKeeper before
  4.0, KRaft from 4.0; `options.metadata` chooses KRaft on 3.3 and later.

The jars come from the pinned poms in systems/maven, or a pom written for the release
(release.py, jvm.py); configuration files are
written here, one per process, in the cluster's data directory. The defaults of the
replication settings are the seed's era (ISR lag 10 s, ZooKeeper session 6 s), each an
option.
"""
from __future__ import annotations

import asyncio
import base64
import re
import subprocess
import time
import uuid
from pathlib import Path
from typing import ClassVar, Optional

from .. import jvm
from ..base import CLOCK, CORRUPT, POWER, NodeExited, SystemError_
from ..cluster import LocalCluster, files_by_age
from ..runtime import port_open, quiet_logger, wait_until
from . import release

ZK = "zk"
CONTROLLER = "controller"
BROKER_HEAP_MB = 768
META_HEAP_MB = 256
KRAFT_CONTROLLER_ID = 100

LOG4J = """\
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.kafka.log.LogCleaner=WARN
log4j.logger.org.apache.kafka.common.utils.AppInfoParser=INFO
"""


LOG4J2 = """\
status = error
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.stdout.ref = STDOUT
logger.request.name = kafka.request.logger
logger.request.level = warn
"""


FLUSH_KEYS = ("log.flush.interval.messages", "log.flush.interval.ms")


def broker_id(node: str) -> int:
    return int(node.lstrip("n"))


def _node_name(broker: Optional[int]) -> Optional[str]:
    return f"n{broker}" if broker is not None and broker >= 0 else None


def cluster_id() -> str:
    """A random cluster id as Kafka's own Uuid.randomUuid() makes it: never starting with '-'
    (one in 64 would), which the storage tool's argument parser takes for an option."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


class ApacheKafka(LocalCluster):
    """What both modes share: broker processes, their properties, versions and durability
    settings from their logs, the brokers' data (`power-off`, `corrupt`)."""

    ports = {"client": 9092, "zk": 2181, "controller": 9093}
    # a broker's whole directory (properties, log dirs) on the layer: power-off; its topic's
    # segment files: corrupt. ZooKeeper's and the KRaft controller's data stay off it.
    # clock: every process of the cluster (brokers, ZooKeeper, the controller) is a JVM, whose
    # wall clock (System.currentTimeMillis: retention, ISR lag) libfaketime moves
    extra_offers = frozenset({POWER, CORRUPT, CLOCK})

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.cp: Optional[str] = None
        self._versions: dict[str, str] = {}

    def start(self) -> None:
        # the release cluster.version names (release.py); a failed download stops here, before any process
        self.cp = release.resolve(self.ctx.scenario.cluster.version).classpath()
        (self.datadir).mkdir(parents=True, exist_ok=True)
        (self.datadir / "log4j.properties").write_text(LOG4J)  # 3.9: reload4j
        (self.datadir / "log4j2.properties").write_text(LOG4J2)  # 4.x: log4j 2
        self.prepare()
        super().start()

    def prepare(self) -> None:
        """What a new cluster needs before its processes start."""

    def _first_check(self) -> dict:
        """With a retention check interval set, the first check comes after it too, not 30 s
        after the broker's start (Kafka's fixed delay, an internal setting from 3.8): a clock
        jump 18 s into the write of a cluster that came up in 3 s ended before the first
        check, and the positive control deleted nothing (a clean-clone run, 2026-12-04)."""
        o = self.options
        version = self.ctx.scenario.cluster.version
        if not o.retention_check_ms or release.resolve(version, fetch=False).parts < (3, 8, 0):
            return {}
        return {"log.initial.task.delay.ms": min(o.retention_check_ms, 30_000)}

    def java(self, name: str, main: str, heap_mb: int, *args: str) -> list[str]:
        return jvm.argv(self.cp, main, heap_mb, *args,
                        props={"log4j.configuration": f"file:{self.datadir / 'log4j.properties'}",
                               "log4j2.configurationFile": str(self.datadir / "log4j2.properties"),
                               "kafka.logs.dir": str(self.datadir / name / "logs")})

    def broker_properties(self, node: str) -> dict:
        o = self.options
        ip, port = self.address(node)
        rf = min(3, len(self.node_names))
        props = {
            "broker.id" if self.zookeeper else "node.id": broker_id(node),
            "listeners": f"PLAINTEXT://{ip}:{port}",
            "advertised.listeners": f"PLAINTEXT://{ip}:{port}",
            "log.dirs": self.datadir / node / "data",
            "num.partitions": 1,
            "default.replication.factor": rf,
            "offsets.topic.replication.factor": rf,
            "offsets.topic.num.partitions": 1,
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": 1,
            "transaction.state.log.num.partitions": 1,
            "unclean.leader.election.enable": str(o.unclean_leader_election).lower(),
            # Kafka's own default: never (the page cache is written back when the OS decides)
            **({"log.flush.interval.messages": o.flush_messages} if o.flush_messages else {}),
            **({"log.retention.check.interval.ms": o.retention_check_ms} if o.retention_check_ms else {}),
            **self._first_check(),
            "replica.lag.time.max.ms": o.replica_lag_time_max_ms,
            "auto.leader.rebalance.enable": str(o.auto_leader_rebalance).lower(),
            "auto.create.topics.enable": "false",
            "delete.topic.enable": "true",
            "group.initial.rebalance.delay.ms": 0,
            # a consumer group's member may ask for a session down to 1 s (workload.group)
            "group.min.session.timeout.ms": 1000,
            # two cores for the whole cluster, Spark and the client
            "num.network.threads": 2, "num.io.threads": 2, "background.threads": 2, "num.replica.fetchers": 1,
        }
        if not self.zookeeper:
            # KIP-848's consumer groups (workload.group.kind: consumer): the session is the
            # broker's (45 s by default, also its floor); a killed member is seen after 6 s here
            props.update({"group.consumer.min.session.timeout.ms": 3000, "group.consumer.session.timeout.ms": 6000,
                          "group.consumer.min.heartbeat.interval.ms": 500,
                          "group.consumer.heartbeat.interval.ms": 1000})
        return props

    zookeeper: ClassVar[bool] = True

    def launch_broker(self, node: str, extra: dict) -> None:
        conf = jvm.properties(self.datadir / node / "server.properties", {**self.broker_properties(node), **extra})
        self.spawn_node(node, self.java(node, "kafka.Kafka", BROKER_HEAP_MB, str(conf)))

    def versions(self) -> dict[str, str]:
        for n in self.node_names:
            if "kafka" not in self._versions:
                v = jvm.log_version(self.log(n), r"Kafka version: (\S+)")
                if v:
                    self._versions["kafka"] = v
        return dict(self._versions)

    def settings(self) -> dict:
        """Each broker's flush settings as its log printed them at start (KafkaConfig values):
        `log.flush.interval.messages` (9223372036854775807: never) and `log.flush.interval.ms`
        (None: the scheduler's, log.flush.scheduler.interval.ms, also never by default)."""
        out = {}
        for n in self.node_names:
            got = {k: jvm.log_version(self.log(n), rf"\b{re.escape(k)} = (\S+)") for k in FLUSH_KEYS}
            if any(v is not None for v in got.values()):
                out[n] = {k: (None if v in (None, "null") else int(v)) for k, v in got.items()}
        return out

    def clock_of(self, host: str) -> Optional[float]:
        """The JVM's own clock, from the head of a thread dump it prints on SIGQUIT."""
        return jvm.wall_clock(self.procs[host])

    def data_files(self, node: str) -> list[Path]:
        """The segment files of the run's topic on `node`, every partition, oldest first."""
        found = (self.datadir / node / "data").glob(f"{self.ctx.stream_name}-*/*.log")
        return sorted(found, key=lambda p: (p.parent.name, int(p.stem) if p.stem.isdigit() else 0))

    def has_stream(self, node: str) -> bool:
        """The broker's log dirs hold a partition of the run's topic."""
        return any(p.name.rpartition("-")[2].isdigit()
                   for p in (self.datadir / node / "data").glob(f"{self.ctx.stream_name}-*"))

    def metadata_files(self, node: str) -> list[Path]:
        """The cluster's metadata as `node` keeps it, oldest first: ZooKeeper's snapshots and
        transaction logs on the ZooKeeper node; on a KRaft controller or broker its copy of
        the metadata log (__cluster_metadata: segments and snapshots) and its meta.properties."""
        if node == ZK:
            return jvm.zookeeper_files(self.datadir / ZK)
        data = self.datadir / node / "data"
        return files_by_age([*data.glob("__cluster_metadata-0/*"), data / "meta.properties"])

    def preallocates(self, path: Path) -> bool:
        return path.parent.name == "version-2" and jvm.zookeeper_preallocates(path)

    async def brokers_listening(self, timeout: float) -> None:
        async def look():
            down = [n for n in self.not_running() if not await self.started_again(n)]
            if down:
                raise NodeExited(f"{', '.join(down)} exited while starting; see {self.ctx.logdir}")
            closed = [n for n in self.node_names if not await port_open(self.address(n))]
            return not closed, f"not listening yet: {', '.join(closed)}"

        await wait_until(look, timeout, "Kafka brokers", every=0.25)

    async def started_again(self, node: str) -> bool:
        """A broker that exited while starting for a cause that is the machine's, not the
        cluster's, started once more (the cluster's start_notes say why); nothing by default."""
        return False


def _startup_session_expired(log: Path) -> bool:
    """The broker's log ends in Kafka's fatal start-up error for an expired ZooKeeper session."""
    try:
        with open(log, "rb") as fh:
            fh.seek(0, 2)
            fh.seek(max(0, fh.tell() - 64_000))
            tail = fh.read().decode(errors="replace")
    except OSError:
        return False
    _, fatal, after = tail.rpartition("Fatal error during KafkaServer startup")
    return bool(fatal) and "SessionExpiredException" in after[:4000]


class ZooKeeperKafka(ApacheKafka):
    """Kafka brokers (3.9 by default) on one ZooKeeper server (host `zk`)."""

    service_hosts = (ZK,)
    zookeeper = True
    started_once: set[str]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.started_once = set()  # the brokers started again at the bring-up

    async def started_again(self, node: str) -> bool:
        """A broker whose ZooKeeper session expired while it started exits ("Fatal error during
        KafkaServer startup … Session expired"): with a short session (3 s in the suite) on a
        loaded machine, its JVM starting beside others missed the session's heartbeats
        (a busy-core clean-clone run, 2026-11-29). It is started once more, its old session's
        registration waited out; a second such exit is the cluster's."""
        if node == ZK or node in self.started_once or not _startup_session_expired(self.log(node)):
            return False
        self.started_once.add(node)
        await asyncio.to_thread(self.start_node, node)
        waited = self.start_notes.get(node)
        self.start_notes[node] = (f"exited while starting, its ZooKeeper session ({self.options.zk_session_timeout_ms}"
                                  f" ms) expired; started again" + (f" ({waited})" if waited else ""))
        return True

    def launch(self, node: str) -> None:
        if node == ZK:
            conf = jvm.zookeeper_conf(self.datadir / ZK, *self.address(ZK, "zk"))
            self.spawn_node(ZK, self.java(ZK, jvm.ZOOKEEPER_MAIN, META_HEAP_MB, str(conf)))
            return
        o = self.options
        zip_, zport = self.address(ZK, "zk")
        if node in self.procs:  # a restart: never within the killed process's ZooKeeper session
            self.wait_registration_gone(node)
        self.launch_broker(node, {"zookeeper.connect": f"{zip_}:{zport}",
                                  "zookeeper.session.timeout.ms": o.zk_session_timeout_ms,
                                  "zookeeper.connection.timeout.ms": max(o.zk_session_timeout_ms, 10_000)})

    def wait_registration_gone(self, node: str) -> None:
        """Until the broker's registration (`/brokers/ids/<id>`, an ephemeral node of its
        previous process's session) is gone: a broker started while it is there exits at once
        ("NodeExists"), and a kill shorter than the session (6 s here) would leave it down for
        the rest of the run. Bounded by the session and a margin; a ZooKeeper that cannot be
        asked is not waited for (the start then says what it finds)."""
        from kazoo.client import KazooClient

        if not self.alive(ZK):
            return
        t0 = time.monotonic()
        bound = self.options.zk_session_timeout_ms / 1000 + 10
        zk = KazooClient(hosts="{}:{}".format(*self.address(ZK, "zk")), timeout=3.0, logger=quiet_logger("kazoo"))
        try:
            zk.start(timeout=3.0)
            path = f"/brokers/ids/{broker_id(node)}"
            while zk.exists(path) and time.monotonic() - t0 < bound:
                time.sleep(0.1)
            waited = time.monotonic() - t0
            if zk.exists(path):
                self.start_notes[node] = f"its ZooKeeper registration still there after {waited:.1f} s"
            elif waited >= 0.2:
                self.start_notes[node] = f"waited {waited:.1f} s for its previous session's registration to expire"
        except Exception as e:  # ZooKeeper itself down (another fault): the start says what follows
            self.start_notes[node] = f"ZooKeeper not asked ({type(e).__name__})"
        finally:
            zk.stop()
            zk.close()

    async def ready(self, timeout: float) -> None:
        async def zk():
            if not self.alive(ZK):
                raise self.exited(ZK)
            return (await jvm.ruok(self.address(ZK, "zk"))), "ruok"

        await wait_until(zk, timeout, "ZooKeeper", every=0.25)
        await self.brokers_listening(timeout)

    def versions(self) -> dict[str, str]:
        if "zookeeper" not in self._versions:
            v = jvm.log_version(self.log(ZK), r"zookeeper\.version=([0-9.]+)")
            if v:
                self._versions["zookeeper"] = v
        return super().versions()


class KRaftKafka(ApacheKafka):
    """Kafka brokers (4.x, or 3.3 on with options.metadata kraft) on one KRaft controller
    (host `controller`)."""

    service_hosts = (CONTROLLER,)
    zookeeper = False
    # power: the storage tool writes bootstrap.checkpoint without an fsync, so a format made
    # through the layer is emptied by a cut (the broker then exits: "No FeatureLevelRecord
    # for metadata.version"). A format is provisioning, done long before any power cut: every
    # storage is formatted before the cluster starts (prepare), and the layer takes what its
    # directory held then as durable (LazyDisk.mount).
    extra_offers = frozenset({POWER, CORRUPT, CLOCK})

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        # one cluster id for every process's storage, formatted before its first start
        self.cluster_id = cluster_id()

    def voters(self) -> str:
        ip, port = self.address(CONTROLLER, "controller")
        return f"{KRAFT_CONTROLLER_ID}@{ip}:{port}"

    def conf(self, node: str):
        """The node's server.properties, written."""
        common = {"controller.quorum.voters": self.voters(), "controller.listener.names": "CONTROLLER"}
        if node == CONTROLLER:
            ip, port = self.address(CONTROLLER, "controller")
            props = {"process.roles": "controller", "node.id": KRAFT_CONTROLLER_ID,
                     "listeners": f"CONTROLLER://{ip}:{port}", "log.dirs": self.datadir / CONTROLLER / "data",
                     **common}
        else:
            props = {**self.broker_properties(node), **common, "process.roles": "broker",
                     "inter.broker.listener.name": "PLAINTEXT",
                     "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"}
        return jvm.properties(self.datadir / node / "server.properties", props)

    def launch(self, node: str) -> None:
        conf = self.conf(node)
        self.format([node])
        heap = META_HEAP_MB * 2 if node == CONTROLLER else BROKER_HEAP_MB
        self.spawn_node(node, self.java(node, "kafka.Kafka", heap, str(conf)))

    def prepare(self) -> None:
        # every storage at once: one after the other, with each node started after its own,
        # the four storage tools' JVMs were 16 s of a cluster's 35 s start on a slow machine
        self.format(self.host_names)

    def format(self, names: list[str]) -> None:
        """KRaft storage is formatted once per log directory (a restart keeps it); several
        at once, each by its own storage tool."""
        todo = [n for n in names if not (self.datadir / n / "data" / "meta.properties").exists()]
        running = []
        try:
            for name in todo:
                # the storage tool only writes files: no network, so it runs here, not in a namespace
                argv = self.java(name, "kafka.tools.StorageTool", 256, "format", "-t", self.cluster_id,
                                 "-c", str(self.conf(name)), "--ignore-formatted")
                self.log(name).parent.mkdir(parents=True, exist_ok=True)
                with open(self.log(f"{name}-format"), "w") as fh:
                    running.append((name, subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT,
                                                           stdin=subprocess.DEVNULL)))
            deadline = time.monotonic() + 120
            for name, p in running:
                try:
                    rc = p.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    raise SystemError_(f"formatting {name}'s KRaft storage took over 120 s; "
                                       f"see {self.log(name + '-format')}") from None
                if rc != 0:
                    raise SystemError_(f"formatting {name}'s KRaft storage failed (exit {rc}); "
                                       f"see {self.log(name + '-format')}")
        finally:
            for _, p in running:  # our own children, by their Popen: none outlives the start
                if p.poll() is None:
                    p.kill()
                    p.wait()

    async def ready(self, timeout: float) -> None:
        async def ctrl():
            if not self.alive(CONTROLLER):
                raise self.exited(CONTROLLER)
            return await port_open(self.address(CONTROLLER, "controller")), "controller port"

        await wait_until(ctrl, timeout, "the KRaft controller", every=0.25)
        await self.brokers_listening(timeout)
