"""Java servers from Maven Central: a pinned pom per server set (maven/*.xml), resolved once
into a cache outside the work tree, offline afterwards.

A set's jars land in `<cache>/<set>/lib` with the pom's digest beside them; a later call
whose pom is unchanged runs no Maven at all. The cache is `$BROKERCHAOS_CACHE/maven`, else
`~/.cache/brokerchaos/maven`. `python -m brokerchaos.systems.jvm` resolves every set
(`make setup` does).
"""
from __future__ import annotations

import asyncio
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from ..sandbox import process
from .base import SystemError_
from .runtime import cache_dir, filling, retried

POMS = Path(__file__).parent / "maven"
RESOLVE_TIMEOUT_S = 900


def cache_root() -> Path:
    return cache_dir("maven")


def sets() -> list[str]:
    return sorted(p.stem for p in POMS.glob("*.xml"))


def java() -> str:
    return tool("java", "openjdk-17-jre-headless")


def tool(name: str, package: str) -> str:
    """A JDK program (java, javac) from JAVA_HOME, else on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / name).exists():
        return str(Path(home) / "bin" / name)
    found = shutil.which(name)
    if not found:
        raise SystemError_(f"{name} not found: run `make setup` (Debian {package}) or set JAVA_HOME")
    return found


def pom_of(name: str) -> Path:
    """Set `name`'s pom: pinned (maven/), else one written into the cache for a release a
    scenario names (kafka/release.py)."""
    pinned = POMS / f"{name}.xml"
    return pinned if pinned.exists() else cache_root() / "poms" / f"{name}.xml"


def classpath(name: str) -> str:
    """The classpath of server set `name` (a `dir/*` wildcard), resolving it first if its
    jars are missing or were resolved from another pom."""
    pom = pom_of(name)
    if not pom.exists():
        raise SystemError_(f"no pinned pom for {name!r} (known: {', '.join(sets())})")
    digest = _digest(pom)
    root = cache_root() / name
    stamp = root / "pom.sha256"
    if not _current(stamp, digest):
        with filling(root):  # two sessions resolving at once: one does it
            if not _current(stamp, digest):
                _resolve(pom, root, digest)
    return str(root / "lib" / "*")


def fetched(name: str) -> bool:
    """Whether set `name`'s jars are in the cache, resolved from its pom as it is now."""
    pom = pom_of(name)
    return pom.exists() and _current(cache_root() / name / "pom.sha256", _digest(pom))


def _digest(pom: Path) -> str:
    return hashlib.sha256(pom.read_bytes()).hexdigest()


def _current(stamp: Path, digest: str) -> bool:
    try:
        return stamp.read_text().strip() == digest
    except OSError:
        return False


def _resolve(pom: Path, root: Path, digest: str) -> None:
    mvn = shutil.which("mvn")
    if not mvn:
        raise SystemError_("mvn not found: run `make setup` (Debian maven), needed once to fetch the server jars")
    tmp = root.with_name(root.name + ".part")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    log = tmp / "maven.log"
    # -U: a transfer that failed before (a DNS failure, seen in CI) is not remembered as
    # final in ~/.m2 (Maven's .lastUpdated) but tried again
    argv = [mvn, "-B", "-q", "-U", "-f", str(pom), "dependency:copy-dependencies", "-DincludeScope=runtime",
            f"-DoutputDirectory={tmp / 'lib'}"]
    print(f"resolving {pom.stem} from Maven Central (once) ...", file=sys.stderr, flush=True)
    rc, out = retried(lambda: (_maven(argv, log), log.read_text(errors="replace")), f"resolving {pom.stem}")
    if rc != 0:
        if not log.exists():  # Maven never ran (no download allowed)
            log.write_text(out)
        keep = root.with_name(root.name + ".failed.log")
        shutil.copy(log, keep)
        shutil.rmtree(tmp, ignore_errors=True)
        raise SystemError_(f"resolving {pom.stem} from Maven Central failed ({rc}): {_first_error(keep)}; "
                           f"see {keep}")
    (tmp / "pom.sha256").write_text(digest + "\n")
    shutil.rmtree(root, ignore_errors=True)
    tmp.rename(root)


def _maven(argv: list[str], log: Path):
    """Maven's exit code, or "timeout"; its output in `log`."""
    try:
        with open(log, "w") as fh:
            return subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT, timeout=RESOLVE_TIMEOUT_S).returncode
    except subprocess.TimeoutExpired:
        return "timeout"


def _first_error(log: Path) -> str:
    for line in log.read_text(errors="replace").splitlines():
        if "[ERROR]" in line:
            return line.replace("[ERROR]", "").strip()[:240]
    return next((ln.strip()[:240] for ln in log.read_text(errors="replace").splitlines() if ln.strip()),
                "no [ERROR] line")


# The JIT of the servers' and Java clients' JVMs: `full` (both tiers, the default) or `quick`
# (C1 alone; `make test` sets it). Measured 2026-12-07, idle, one cluster started: 3 Pulsar
# brokers, 3 bookies and ZooKeeper ready in 38 s against 57 s (58 s of CPU against 90 s),
# 3 Kafka brokers in 21 s against 28 s (40 s of CPU against 54 s): a test's cluster lives a
# minute or two, and most of its start is C2 compiling code it never runs again. A user's
# cluster keeps both tiers: over a long session C2's code is the faster.
JIT = "BROKERCHAOS_BROKER_JIT"
JIT_OPTIONS = {"full": [], "quick": ["-XX:TieredStopAtLevel=1"]}


def _jit() -> str:
    return os.environ.get(JIT, "full")


def jit_error() -> Optional[str]:
    """The line that says $BROKERCHAOS_BROKER_JIT is none of its values, or None."""
    v = _jit()
    return None if v in JIT_OPTIONS else f"{JIT}={v!r}: expected one of {', '.join(JIT_OPTIONS)}"


def argv(cp: str, main: str, heap_mb: int, *args: str, props: Optional[dict] = None) -> list[str]:
    """A JVM command line: a fixed heap (the whole cluster and Spark share 24 GB and 2 cores)."""
    out = [java(), f"-Xms{heap_mb // 2}m", f"-Xmx{heap_mb}m", "-XX:+UseSerialGC", "-XX:+ExitOnOutOfMemoryError",
           "-Djava.net.preferIPv4Stack=true", "-Djava.awt.headless=true"]
    out += JIT_OPTIONS.get(_jit(), [])
    out += [f"-D{k}={v}" for k, v in (props or {}).items()]
    return out + ["-cp", cp, main, *args]


def properties(path: Path, values: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return path


def log_version(path: Path, pattern: str) -> Optional[str]:
    """The version a server printed in its log (what it says it is, not what we asked for)."""
    rx = re.compile(pattern)
    try:
        with open(path, errors="replace") as fh:
            for line in fh:
                m = rx.search(line)
                if m:
                    return m.group(1)
    except OSError:
        pass
    return None


ZOOKEEPER_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"


_DUMP = re.compile(rb"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\nFull thread dump")


def wall_clock(proc, timeout: float = 5.0) -> Optional[float]:
    """What a JVM's own wall clock says now (epoch seconds, to the second), or None if it
    did not say within `timeout`: sent SIGQUIT, the JVM prints a thread dump headed by its
    local time to its output (it goes on running). Its output is the file it was started
    with (`proc.log`): on a cluster reused by a later run or session, not that run's log."""
    log = proc.log
    start = log.stat().st_size if log.exists() else 0
    process.send_signal(proc, signal.SIGQUIT)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.1)
        with open(log, "rb") as fh:
            fh.seek(start)
            m = _DUMP.search(fh.read())
        if m:
            return time.mktime(time.strptime(m.group(1).decode(), "%Y-%m-%d %H:%M:%S"))
    return None


def zookeeper_conf(d: Path, ip: str, port: int, force_sync: bool = True) -> Path:
    """A standalone ZooKeeper's zoo.cfg in `d` (Kafka 3.9 and Pulsar each run one): a short
    tick so sessions of a few seconds are allowed, `ruok` for health checks; `force_sync`
    off: its transaction log is not fsynced before a write is answered."""
    return properties(d / "zoo.cfg", {
        "dataDir": d / "data", "clientPort": port, "clientPortAddress": ip, "tickTime": 500,
        "maxSessionTimeout": 120_000, "admin.enableServer": "false", "4lw.commands.whitelist": "ruok,srvr",
        "forceSync": "yes" if force_sync else "no"})


def zookeeper_files(d: Path) -> list[Path]:
    """A ZooKeeper's snapshots and transaction logs (dataDir/version-2), oldest first: the
    metadata of the cluster it serves."""
    from .cluster import files_by_age

    return files_by_age((d / "data" / "version-2").glob("*"))


def zookeeper_preallocates(path: Path) -> bool:
    """ZooKeeper preallocates its transaction logs (log.*, 64 MB at a time)."""
    return path.name.startswith("log.")


async def ruok(addr: tuple[str, int], timeout: float = 2.0) -> bool:
    """ZooKeeper's four-letter health word (both Kafka 3.9 and Pulsar run one)."""
    async def ask() -> bytes:
        r, w = await asyncio.open_connection(*addr)
        try:
            w.write(b"ruok")
            await w.drain()
            return await r.read()
        finally:
            w.close()

    return await asyncio.wait_for(ask(), timeout) == b"imok"


def fetch(names: list[str]) -> int:
    """Resolve server sets (all by default); one line per set, exit 1 on the first failure."""
    for n in names or sets():
        try:
            print(f"{n}: {classpath(n)}")
        except SystemError_ as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
    return 0
