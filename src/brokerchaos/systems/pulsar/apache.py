"""Apache Pulsar from Maven Central (`options.broker: apache`, the default): ZooKeeper (host
`zk`), bookies (hosts `b1`…, `options.bookies`) and brokers (the nodes `n1`…), each in a
namespace of its own, as the seed's cluster (without its proxy: the client looks topics up
and connects to the owner itself).

Start-up is staged: ZooKeeper, the cluster metadata (PulsarClusterMetadataSetup, which also
initialises BookKeeper's), the bookies, then the brokers. Ledgers are written with the
seed's E-Qw-Qa (`options.ensemble_size`, `write_quorum`, `ack_quorum`), cursors included.
A bookie whose data was wiped (the `kill-wipe` fault) is formatted again before it starts,
as an operator replacing a disk would, so it comes back empty.
"""
from __future__ import annotations

import asyncio
import json
import re
import shutil
import signal
from pathlib import Path
from typing import Optional

from .. import jvm
from ..base import CLOCK, CORRUPT, POWER, WIPE, NodeExited, SystemError_
from ..cluster import LocalCluster
from ...sandbox import process
from ..runtime import http_get, port_open, quiet_logger, wait_until
from . import files, release
from .bookies import BookieMembership
from .copies import UnderReplication
from .roles import PulsarRoles

ZK = "zk"
CLUSTER = "bc"
ZK_HEAP_MB = 256
BOOKIE_HEAP_MB = 512
BROKER_HEAP_MB = 768
SETUP_TIMEOUT_S = 120
# a ledger's metadata as the broker prints it: ensembles={0=[ip:port, ip:port], 1234=[...]}
ENSEMBLES = re.compile(r"(?<=[{ ])\d+=\[([^\]]*)\]")

LOG4J2 = """\
status = error
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c{1})%n
rootLogger.level = info
rootLogger.appenderRef.stdout.ref = STDOUT
logger.zkcnx.name = org.apache.zookeeper.ClientCnxn
logger.zkcnx.level = warn
logger.zkenv.name = org.apache.zookeeper.ZooKeeper
logger.zkenv.level = warn
logger.zkenv2.name = org.apache.zookeeper.Environment
logger.zkenv2.level = warn
"""


def bookie_names(n: int) -> tuple[str, ...]:
    return tuple(f"b{i}" for i in range(1, n + 1))


class ApachePulsar(LocalCluster):
    ports = {"client": 6650, "admin": 8080, "zk": 2181, "bookie": 3181, "bookie_admin": 8000}
    # power: the bookies' and ZooKeeper's data directories (the brokers keep none); clock:
    # every process (brokers, bookies, ZooKeeper) is a JVM, whose wall clock
    # (System.currentTimeMillis: ledger rollover, retention, publish times) libfaketime moves;
    # corrupt: a bookie's journal and entry logs (data), its cookies, or ZooKeeper's files
    extra_offers = frozenset({WIPE, POWER, CLOCK, CORRUPT})

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.bookies = bookie_names(self.options.bookies)
        self.service_hosts = (ZK, *self.bookies)
        self.cp: Optional[str] = None
        self.initialised = False
        self.wiped: set[str] = set()
        self._versions: dict[str, str] = {}

    @property
    def lazy_hosts(self) -> tuple[str, ...]:
        return (ZK, *self.bookies)

    def metadata_store(self) -> Optional[tuple[str, int]]:
        """Where the brokers keep who owns what (ZooKeeper): PulsarClient.bundle_owner reads
        a bundle's owner there."""
        return self.address(ZK, "zk")

    @property
    def supervised(self) -> tuple[str, ...]:
        """With options.session_expired shutdown, a broker exits when its ZooKeeper session
        expires; it is started again (the seed's brokers ran under a restart policy)."""
        return tuple(self.node_names) if self.options.session_expired == "shutdown" else ()

    # -- configuration -------------------------------------------------------------------
    def zk_url(self) -> str:
        return "{}:{}".format(*self.address(ZK, "zk"))

    def java(self, main: str, heap_mb: int, *args: str) -> list[str]:
        return jvm.argv(self.cp, main, heap_mb, *args,
                        props={"log4j2.configurationFile": str(self.datadir / "log4j2.properties"),
                               "pulsar.allocator.exit_on_oom": "true"})

    def bookie_conf(self, node: str):
        ip, port = self.address(node, "bookie")
        d = self.datadir / node
        return jvm.properties(d / "bookkeeper.conf", {
            "bookiePort": port, "advertisedAddress": ip, "allowLoopback": "true",
            "useHostNameAsBookieID": "false", "journalDirectories": d / "journal", "ledgerDirectories": d / "ledgers",
            "metadataServiceUri": f"zk://{self.zk_url()}/ledgers", "zkTimeout": self.options.zk_session_timeout_ms,
            "journalSyncData": str(self.options.journal_sync).lower(), "gcWaitTime": 60_000,
            **self.autorecovery_conf(node),
        })

    def autorecovery_conf(self, node: str) -> dict:
        """AutoRecovery in the bookie (options.autorecovery): the auditor, elected among the
        bookies, marks the ledgers of a bookie it sees leave as under-replicated at once
        (lostBookieRecoveryDelay 0), and each bookie's replication worker copies them again
        (a ledger still open after options.rereplication_grace_s: it fences it first); the
        HTTP admin API answers the end check."""
        if not self.options.autorecovery:
            return {"httpServerEnabled": "false", "autoRecoveryDaemonEnabled": "false"}
        ip, port = self.address(node, "bookie_admin")
        return {"autoRecoveryDaemonEnabled": "true", "lostBookieRecoveryDelay": 0,
                "openLedgerRereplicationGracePeriod": int(self.options.rereplication_grace_s * 1000),
                "httpServerEnabled": "true", "httpServerPort": port, "httpServerHost": ip,
                "httpServerClass": "org.apache.bookkeeper.http.vertx.VertxHttpServer"}

    def broker_conf(self, node: str):
        o = self.options
        ip, port = self.address(node)
        _, admin = self.address(node, "admin")
        return jvm.properties(self.datadir / node / "broker.conf", {
            "metadataStoreUrl": f"zk:{self.zk_url()}", "configurationMetadataStoreUrl": f"zk:{self.zk_url()}",
            "clusterName": CLUSTER, "bindAddress": ip, "advertisedAddress": ip,
            "brokerServicePort": port, "webServicePort": admin,
            "metadataStoreSessionTimeoutMillis": o.zk_session_timeout_ms,
            "zookeeperSessionExpiredPolicy": o.session_expired,
            "managedLedgerDefaultEnsembleSize": o.ensemble_size,
            "managedLedgerDefaultWriteQuorum": o.write_quorum,
            "managedLedgerDefaultAckQuorum": o.ack_quorum,
            "brokerDeduplicationEnabled": str(self.ctx.scenario.workload.dedup).lower(),
            "functionsWorkerEnabled": "false", "webSocketServiceEnabled": "false",
            # the reader comes after the writes, with no subscription before it: without
            # retention a ledger with no subscription is trimmed when it rolls over, and an
            # idle topic deleted; what the run wrote must stay until it is read
            "defaultRetentionTimeInMinutes": -1, "defaultRetentionSizeInMB": -1,
            "brokerDeleteInactiveTopicsEnabled": "false",
            "autoSkipNonRecoverableData": str(o.skip_lost_data).lower(),
            # one topic, one bundle owner: no bundle splits or load shedding mid-run
            "loadBalancerAutoBundleSplitEnabled": "false", "loadBalancerSheddingEnabled": "false",
            "numIOThreads": 2, "numHttpServerThreads": 4, "bookkeeperClientNumWorkerThreads": 2,
            "managedLedgerNumSchedulerThreads": 2,
            # workload.transactions: the coordinator (its log in pulsar/system, set up by
            # the metadata setup) and the buffers of pending transactional writes
            "transactionCoordinatorEnabled": str(self.ctx.scenario.workload.transactions is not None).lower(),
        })

    # -- processes -----------------------------------------------------------------------
    def start(self) -> None:
        # the release cluster.version names (release.py); a failed download stops here, before any process
        self.cp = release.resolve(self.ctx.scenario.cluster.version).classpath()
        self.datadir.mkdir(parents=True, exist_ok=True)
        (self.datadir / "log4j2.properties").write_text(LOG4J2)
        self.start_node(ZK)  # the rest is staged in ready(): each stage waits for the one before

    def launch(self, node: str) -> None:
        if node == ZK:
            conf = jvm.zookeeper_conf(self.datadir / ZK, *self.address(ZK, "zk"),
                                      force_sync=self.options.zk_force_sync)
            self.spawn_node(ZK, self.java(jvm.ZOOKEEPER_MAIN, ZK_HEAP_MB, str(conf)))
        elif node in self.bookies:
            conf = self.bookie_conf(node)
            if node in self.wiped:
                # an empty disk: its cookie must go too, or the bookie refuses to start
                rc = self.run_tool(node, f"{node}-format", self.java(
                    "org.apache.bookkeeper.bookie.BookieShell", 256, "-conf", str(conf), "bookieformat",
                    "-nonInteractive", "-force", "-deleteCookie"), SETUP_TIMEOUT_S)
                if rc != 0:
                    raise SystemError_(f"formatting wiped bookie {node} failed (exit {rc}); "
                                       f"see {self.log(node + '-format')}")
                self.wiped.discard(node)
            self.spawn_node(node, self.java("org.apache.bookkeeper.server.Main", BOOKIE_HEAP_MB, "--conf", str(conf)))
        else:
            self.spawn_node(node, self.java("org.apache.pulsar.PulsarBrokerStarter", BROKER_HEAP_MB,
                                            "--broker-conf", str(self.broker_conf(node))))

    def data_files(self, node: str) -> list[Path]:
        return files.bookie_data(self.datadir / node) if node in self.bookies else []

    def metadata_files(self, node: str) -> list[Path]:
        if node == ZK:
            return jvm.zookeeper_files(self.datadir / ZK)
        return files.bookie_metadata(self.datadir / node) if node in self.bookies else []

    def preallocates(self, path: Path) -> bool:
        return files.preallocated(path)

    def wipe(self, node: str) -> None:
        """Delete a stopped bookie's journal and ledgers (its disk lost); the next start
        formats it empty."""
        if node not in self.bookies:
            raise LookupError(f"{node} is not a bookie: only a bookie's data can be wiped here")
        if self.alive(node):
            raise SystemError_(f"{node} is running: wipe a stopped bookie")
        for sub in ("journal", "ledgers"):
            shutil.rmtree(self.datadir / node / sub, ignore_errors=True)
        self.wiped.add(node)

    async def ready(self, timeout: float) -> None:
        async def zk():
            if not self.alive(ZK):
                raise self.exited(ZK)
            return await jvm.ruok(self.address(ZK, "zk")), "ruok"

        await wait_until(zk, timeout, "ZooKeeper", every=0.25)
        if not self.initialised:
            ip, port = self.address(self.node_names[0])
            _, admin = self.address(self.node_names[0], "admin")
            argv = self.java("org.apache.pulsar.PulsarClusterMetadataSetup", 256, "--cluster", CLUSTER,
                             "--metadata-store", f"zk:{self.zk_url()}",
                             "--configuration-metadata-store", f"zk:{self.zk_url()}",
                             "--web-service-url", f"http://{ip}:{admin}", "--broker-service-url", f"pulsar://{ip}:{port}")
            rc = await asyncio.to_thread(self.run_tool, ZK, "metadata-setup", argv, SETUP_TIMEOUT_S)
            if rc != 0:
                raise SystemError_(f"Pulsar metadata setup failed (exit {rc}); see {self.log('metadata-setup')}")
            self.initialised = True
            # brokers start with the bookies, not after them: a broker needs bookies only for
            # its first ledger (its health check), and its JVM start (~8 s on two cores)
            # overlaps theirs
            for n in (*self.bookies, *self.node_names):
                self.start_node(n)

            async def bookies():
                self._check_running()
                closed = [b for b in self.bookies if not await port_open(self.address(b, "bookie"))]
                return not closed, f"not listening yet: {', '.join(closed)}"

            await wait_until(bookies, timeout, "bookies", every=0.25)
        await wait_until(self.brokers_healthy, timeout, "Pulsar brokers", every=0.5)
        await self.broker_version()

    def _check_running(self) -> None:
        down = [n for n in self.procs if not self.alive(n)]
        if down:
            raise NodeExited(f"{', '.join(down)} exited while starting; see {self.ctx.logdir}")

    async def brokers_healthy(self) -> tuple[bool, str]:
        self._check_running()
        for n in self.node_names:
            await http_get(*self.address(n, "admin"), "/admin/v2/brokers/health", 5.0)
        return True, "every broker healthy"

    def clock_of(self, host: str) -> Optional[float]:
        """The JVM's own clock, from the head of a thread dump it prints on SIGQUIT."""
        return jvm.wall_clock(self.procs[host])

    def thread_dumps(self) -> str:
        """Each running broker's JVM prints its threads to its log (SIGQUIT; it goes on
        running): what a broker that answers nothing was doing, for a start that timed out."""
        dumped = [n for n in self.node_names if self.alive(n)]
        for n in dumped:
            process.send_signal(self.procs[n], signal.SIGQUIT)
        return f"thread dumps of {', '.join(dumped)} in their logs" if dumped else "no broker running"

    def versions(self) -> dict[str, str]:
        if "zookeeper" not in self._versions:
            v = jvm.log_version(self.log(ZK), r"zookeeper\.version=([0-9.]+)")
            if v:
                self._versions["zookeeper"] = v
        if "bookkeeper" not in self._versions and self.cp:
            # the bookie does not print its version; the jar it runs from names it
            jars = sorted(Path(self.cp[:-1]).glob("bookkeeper-server-*.jar"))
            if jars:
                self._versions["bookkeeper"] = jars[0].stem.removeprefix("bookkeeper-server-")
        return dict(self._versions)

    def settings(self) -> dict:
        """Each bookie's journalSyncData as it printed its configuration at start, and
        ZooKeeper's forceSync as its zoo.cfg says (it does not print it)."""
        out = {}
        for b in self.bookies:
            said = jvm.log_version(self.log(b), r'"journalSyncData" : "(\w+)"')
            if said is not None:
                out[b] = {"journalSyncData": said}
        cfg = jvm.log_version(self.datadir / ZK / "zoo.cfg", r"^forceSync=(\w+)")
        if cfg is not None:
            out[ZK] = {"forceSync (zoo.cfg)": cfg}
        return out

    async def broker_version(self) -> Optional[str]:
        if "pulsar" not in self._versions:
            for n in self.node_names:
                try:
                    body = await http_get(*self.address(n, "admin"), "/admin/v2/brokers/version", 5.0)
                    self._versions["pulsar"] = body.decode().strip().strip('"')
                    break
                except OSError:
                    continue
        return self._versions.get("pulsar")


class ApachePulsarRoles(UnderReplication, BookieMembership, PulsarRoles):
    """The topic's owner by lookup; its ledgers and their bookies from the topic's internal
    stats (the seed read the first ledger's ensemble from ZooKeeper; this asks for the
    current one)."""

    # a topic unload closes and reopens the topic; its bundle (and so the owner) stays
    stepdown_moves = False

    async def leader(self) -> str:
        return await self.client.owner()

    async def txn_coordinator(self) -> str:
        """The broker coordinating the first producer's open (or last) transaction: the owner
        of the transaction_coordinator_assign partition its TxnID names. The Java client
        spreads its transactions over the coordinators, so this is the one of the
        transaction open when the fault lands."""
        n = self.client.txn_coordinators.get("p1")
        if n is None:
            raise SystemError_("p1 has begun no transaction whose id this harness read (the Java client "
                               "in the harness's process names it)")
        return await self.client.owner_of(f"pulsar/system/transaction_coordinator_assign-partition-{n}")

    async def coordinator(self) -> str:
        """ZooKeeper: what brokers and bookies must reach to keep their sessions."""
        if ZK not in self.cluster.service_hosts:
            raise LookupError("this cluster has no ZooKeeper host")
        return ZK

    async def ledgers(self) -> list[dict]:
        ns = self.client.options.namespace
        body = await self.client.admin_get(
            f"/admin/v2/persistent/{ns}/{self.client.owned_name}/internalStats?metadata=true", 5.0)
        return json.loads(body).get("ledgers", [])

    async def ensemble(self) -> list[str]:
        """The bookies of the current ledger's last ensemble (its last fragment)."""
        ledgers = await self.ledgers()
        if not ledgers:
            raise LookupError(f"{self.client.owned_name} has no ledger yet")
        return self.bookies_of(ledgers[-1])

    def bookies_of(self, ledger: dict) -> list[str]:
        found = ENSEMBLES.findall(ledger.get("metadata") or "")
        if not found:
            raise LookupError(f"ledger {ledger.get('ledgerId')}: no ensemble in its metadata")
        return [self.bookie_name(addr.strip()) for addr in found[-1].split(",")]

    async def describe(self) -> dict:
        out: dict = {"leader": await self.leader()}
        ledgers = await self.ledgers()
        out["ledgers"] = [lg.get("ledgerId") for lg in ledgers]
        if ledgers:
            out["ensemble"] = self.bookies_of(ledgers[-1])
        return out

    async def whole(self) -> tuple[bool, str]:
        c = self.cluster
        if ZK in c.service_hosts and not await jvm.ruok(c.address(ZK, "zk")):
            return False, "ZooKeeper does not answer ruok"
        for b in getattr(c, "bookies", ()):
            if not await port_open(c.address(b, "bookie")):
                return False, f"bookie {b} not listening"
        if ZK in c.service_hosts and getattr(c, "bookies", ()):
            # a bookie restarted within its old ZooKeeper session listens, but waits for its
            # old registration to expire before it registers (30 s by default): until then no
            # ledger can use it, and a topic with fewer writable bookies than E takes no write
            missing = await self.unregistered()
            if missing:
                return False, f"bookies not registered as writable: {', '.join(missing)}"
        for n in c.node_names:
            await http_get(*c.address(n, "admin"), "/admin/v2/brokers/health", 5.0)
        return True, "ZooKeeper, every bookie and every broker up"

    async def unregistered(self) -> list[str]:
        """The bookies not registered as writable (`/ledgers/available/<address>`, read-only
        ones apart), as ZooKeeper lists them."""
        def read() -> list[str]:
            from kazoo.client import KazooClient

            zk = KazooClient(hosts="{}:{}".format(*self.cluster.address(ZK, "zk")), timeout=3.0,
                             logger=quiet_logger("kazoo"))
            zk.start(timeout=3.0)
            try:
                listed = set(zk.get_children("/ledgers/available"))
            finally:
                zk.stop()
                zk.close()
            return [b for b in self.cluster.bookies if "{}:{}".format(*self.cluster.address(b, "bookie")) not in listed]

        return await asyncio.to_thread(read)

    async def stepdown(self, node: str, role: str) -> str:
        """A topic unload (the availability seed's graceful operation): the owner closes the
        topic, its producers and consumers reconnect, and the load manager assigns it again,
        possibly to the same broker. ZooKeeper leads nothing here to step down from."""
        if role != "leader":
            raise LookupError("Pulsar's coordinator (ZooKeeper) has no leadership to hand over")
        holder = await self.leader()
        if holder != node:
            raise LookupError(f"{node} does not own the topic ({holder} does)")
        ns = self.client.options.namespace
        path = f"/admin/v2/persistent/{ns}/{self.client.owned_name}/unload"
        await http_get(*self.cluster.address(node, "admin"), path, 30.0, method="PUT")
        return f"PUT {path} on {node}"

    async def unload(self, node: str, scope: str, split: bool) -> str:
        """The namespace, or the bundle holding the run's first topic (split in two first
        with `split`: the halves unloaded), unloaded by the admin API of `node`."""
        ns, admin = self.client.options.namespace, self.cluster.address(node, "admin")
        if scope == "namespace":
            path = f"/admin/v2/namespaces/{ns}/unload"
        else:
            bundle = await self.client.bundle_of(10.0, admin)
            path = f"/admin/v2/namespaces/{ns}/{bundle}/" + ("split?unload=true" if split else "unload")
        await http_get(*admin, path, 30.0, method="PUT")
        return f"PUT {path} on {node}"

    async def serving(self) -> str:
        """The broker owning the topic's bundle, as the brokers say (PulsarClient.bundle_owner:
        asking does not load the topic)."""
        return await self.client.bundle_owner()

    async def stream_ready(self) -> bool:
        """The topic has an owner and its current ledger is open for writes, or, idle, it has
        closed its last one and will open a new one at the next write (ClosedLedger: after a
        bookie's failure left it no ledger to write, with nobody writing since)."""
        await self.leader()
        ns = self.client.options.namespace
        stats = json.loads(await self.client.admin_get(
            f"/admin/v2/persistent/{ns}/{self.client.owned_name}/internalStats", 5.0))
        return stats.get("state") in ("LedgerOpened", "ClosedLedger")
