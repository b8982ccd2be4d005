"""One SparkSession per process, started once and reused by every run of a session.

Local mode by default; `--spark-master URL` or BROKERCHAOS_SPARK_MASTER sends the same job
to a standalone/YARN/k8s master, and an `sc://` URL to a Spark Connect endpoint.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import threading
from pathlib import Path
from typing import Optional, Sequence

_lock = threading.Lock()
_session = None
_master: Optional[str] = None

JAVA17 = "/usr/lib/jvm/java-17-openjdk-amd64"
LOG4J = Path(__file__).with_name("log4j2.properties")


def _java_home() -> str:
    # Spark 4 needs Java 17 or 21; machines here also carry a newer JDK it does not support.
    if not os.environ.get("JAVA_HOME") and os.path.isdir(JAVA17):
        os.environ["JAVA_HOME"] = JAVA17
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        raise RuntimeError(
            "the analysis needs Java 17 for Spark: run `make setup` (installs openjdk-17-jre-headless) "
            "or set JAVA_HOME"
        )
    return java


# The class archive analysis/cds.py builds (docs/guide/spark.md, "Spark"): where it is, and when a JVM may
# map it. An archive cut short crashes the JVM that maps it (measured: SIGSEGV in
# FileMapInfo::relocate_pointers_in_core_regions), so it is used only while the stamp beside
# it matches its size and time and names this JVM and these jars: a JDK or PySpark upgraded
# under the same path leaves it out until it is built again.
ARCHIVE = Path(sys.prefix) / "brokerchaos" / "spark-classes.jsa"
STAMP = ARCHIVE.with_suffix(".json")
# the JVM's own warnings would go to the command's stdout, which --format json keeps for the
# verdicts: a jar changed since the dump (the archive is then not used), and at the dump one
# line for each of the ~1,400 classes it leaves out (Janino's signed jar, generated classes)
QUIET_CDS = "-Xlog:cds*=off"


def archive_identity() -> Optional[dict]:
    """What the archive is made for: this JVM (its libjvm's path, size and time: an upgrade
    in place changes them) and this PySpark's jars."""
    try:
        java = _java_home()
        import pyspark
    except (RuntimeError, ImportError):
        return None
    jvm = Path(os.path.realpath(java)).parent.parent / "lib" / "server" / "libjvm.so"
    jars = Path(pyspark.__file__).resolve().parent / "jars"
    try:
        st, jst = jvm.stat(), jars.stat()
    except OSError:
        return None
    return {"libjvm": str(jvm), "libjvm_size": st.st_size, "libjvm_mtime_ns": st.st_mtime_ns,
            "pyspark": pyspark.__version__, "jars": str(jars), "jars_mtime_ns": jst.st_mtime_ns}


def archive_options() -> list[str]:
    """The options that map the archive, or none when there is no whole archive for this JVM."""
    try:
        stamp = json.loads(STAMP.read_text())
        st = ARCHIVE.stat()
    except (OSError, ValueError):
        return []
    if (stamp.get("size"), stamp.get("mtime_ns")) != (st.st_size, st.st_mtime_ns):
        return []
    if stamp.get("identity") != archive_identity():
        return []
    return [f"-XX:SharedArchiveFile={ARCHIVE}", QUIET_CDS]


def check_java(master: Optional[str] = None) -> None:
    """Raise RuntimeError with the fix when local Spark could not start for want of Java."""
    if not (master or default_master()).startswith("sc://"):
        _java_home()


def default_master() -> str:
    return os.environ.get("BROKERCHAOS_SPARK_MASTER") or "local[*]"


# A process that analyses once (`brokerchaos analyze`) spends most of a small history's
# analysis warming the JIT up. With C1 alone it compiles sooner and cheaper: a 100,000-message
# history 11.7 -> 8.5 s cold, 3 M messages even, 10 M messages 37 -> 43 s (C2's code pays on
# long passes). Sessions keep both tiers: their later analyses run C2's code.
QUICK_JIT_BYTES = 64 << 20


def fast_start() -> bool:
    """False with BROKERCHAOS_SPARK_FAST_START=0: no class archive, no quick JIT (to compare,
    or to rule them out)."""
    return os.environ.get("BROKERCHAOS_SPARK_FAST_START", "1") != "0"


C1_ONLY = "-XX:TieredStopAtLevel=1"  # the JIT's first tier alone


def c1_only(spark) -> bool:
    """This session's JVM compiles with C1 alone (one_shot_options)."""
    opts = spark.sparkContext.getConf().get("spark.driver.extraJavaOptions", "") or ""
    return C1_ONLY in opts.split()


def one_shot_options(history_bytes: int) -> list[str]:
    """JVM options for a process that analyses one history of this size, once. C1 alone
    reserves 48 MB of code cache (240 MB with both tiers), which the per-topic passes of
    many-topic sessions filled ("CodeCache is full. Compiler has been disabled", analysing
    sessions of 10 and 100 topics one after the other): it gets 240 MB too."""
    quick = [C1_ONLY, "-XX:ReservedCodeCacheSize=240m"]
    return quick if fast_start() and history_bytes <= QUICK_JIT_BYTES else []


QUICK_JIT_MESSAGES = 1_000_000


def one_run_options(runs: int, messages: int) -> list[str]:
    """JVM options for a process that runs one session of `runs` runs of `messages` messages
    (`brokerchaos run`): C1 alone for one run of up to QUICK_JIT_MESSAGES, whose verdict comes
    after a single warm-up round. Measured on an idle machine (2026-12-07, two alternated
    pairs): the write waits for the JVM and its first analysis, 15.3 s with C1 against 21.6 s
    with both tiers, and the next three analyses take 11.1 against 18.0 s. More runs keep
    both tiers: from a few analyses on, C2's code is faster (1.2 against 1.64 s a small
    analysis, docs/benchmarks/history.md)."""
    return one_shot_options(0) if runs == 1 and messages <= QUICK_JIT_MESSAGES else []


def _environment(master: str) -> None:
    """The Python Spark's workers run, and (local mode: no other host reaches it) the address
    it binds, so that it need not look for one and warn."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def get_spark(master: Optional[str] = None, java_options: Sequence[str] = ()):
    """The process's SparkSession (created on first use; `java_options` are added to the JVM
    if this call starts it)."""
    global _session, _master
    master = master or default_master()
    with _lock:
        if _session is not None:
            if master != _master:
                raise RuntimeError(f"a Spark session for {_master} is already running; cannot switch to {master}")
            return _session
        if not master.startswith("sc://"):
            _java_home()
        _environment(master)
        from pyspark.sql import SparkSession

        if master.startswith("sc://"):
            spark = SparkSession.builder.remote(master).getOrCreate()
        else:
            cores = os.cpu_count() or 2
            quiet = f"-Dlog4j2.configurationFile=file:{LOG4J}"
            driver = " ".join([quiet, *(archive_options() if fast_start() else ()), *java_options])
            spark = (
                SparkSession.builder.master(master)
                .appName("brokerchaos")
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .config("spark.driver.memory", os.environ.get("BROKERCHAOS_SPARK_DRIVER_MEMORY", "4g"))
                .config("spark.driver.extraJavaOptions", driver)
                .config("spark.executor.extraJavaOptions", quiet)
                # small histories: few shuffle partitions, and let AQE coalesce/split the rest
                .config("spark.sql.shuffle.partitions", str(max(4, cores * 2)))
                # more, smaller scan tasks than the 128 MB default: 2 cores finish evenly
                .config("spark.sql.files.maxPartitionBytes", "48m")
                # a session is a file per run: at the default 4 MB a file, 2,000 runs of 500
                # messages were 167 scan tasks and 3.8 s a pass; at 256 KB, 12 and 1.6 s
                .config("spark.sql.files.openCostInBytes", "256k")
                .config("spark.sql.adaptive.enabled", "true")
                .config("spark.sql.adaptive.coalescePartitions.enabled", "true")
                .config("spark.sql.session.timeZone", "UTC")
                # an analysis compiles ~270 generated classes; at the default of 100 cached the
                # next run's analysis compiled them all again (9.5 s -> 6 s warm, 100k messages)
                .config("spark.sql.codegen.cache.maxEntries", "4000")
                # PySpark otherwise records the Python call site of every function and column
                # operator (a stack walk and four more py4j round trips each, ~0.6 ms): an
                # analysis builds ~2,000 of them, 0.3-0.4 s of a small run's verdict. What it
                # buys is the Python line in a runtime error's query context.
                .config("spark.python.sql.dataFrameDebugging.enabled", "false")
                .config("spark.sql.warehouse.dir",
                        os.path.join(os.environ.get("TMPDIR", "/tmp"), "brokerchaos-spark-warehouse"))
                .getOrCreate()
            )
            spark.sparkContext.setLogLevel("ERROR")
            if master.startswith("local"):
                # list the files here, not with a Spark job of one task per directory: 12 s
                # for a session of 2,000 runs, against 0.3 s
                spark.conf.set("spark.sql.sources.parallelPartitionDiscovery.threshold", "1000000")
        _session, _master = spark, master
        return spark


def stop() -> None:
    global _session
    with _lock:
        if _session is not None:
            _session.stop()
            _session = None
