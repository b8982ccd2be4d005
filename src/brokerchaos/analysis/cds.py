"""Builds the class-data-sharing archive of the classes an analysis loads, once per virtualenv.

Every command that analyses starts a JVM, and that JVM loads ~14,600 classes from Spark's
jars for its first analysis, each read, parsed, verified and linked again at every start:
4.3 s to a SparkSession and 2.1 s to its first job on this machine. Java 17 can dump the
classes an application loaded into an archive (`-XX:ArchiveClassesAtExit`) and map it at
the next start (`-XX:SharedArchiveFile`): 2.6 s and 1.1 s. `make setup` runs this module:
the warm-up history analysed both ways a run's is, and the report's queries on it, in a JVM
that dumps what it loaded as it exits. When a JVM may map it: spark.archive_options.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from . import spark as spark_mod


def build(timeout: float = 300.0) -> str:
    """Make the archive unless a valid one is there; returns what happened, one line. The
    process's JVM must be the one that dumps: run as `python -m brokerchaos.analysis.cds`."""
    if spark_mod.archive_options():
        return f"up to date: {spark_mod.ARCHIVE}"
    ident = spark_mod.archive_identity()
    if ident is None:
        raise RuntimeError("no Java or no PySpark: run `make setup`")
    archive, stamp = spark_mod.ARCHIVE, spark_mod.STAMP
    archive.parent.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)  # readers stop using the old archive before it is replaced
    tmp = archive.with_name(archive.name + ".part")
    tmp.unlink(missing_ok=True)
    from . import metrics, timeline
    from .tuning import Tuning
    from .warmup import _history

    spark = spark_mod.get_spark(java_options=[f"-XX:ArchiveClassesAtExit={tmp}", spark_mod.QUIET_CDS])
    proc = spark.sparkContext._gateway.proc
    try:
        with tempfile.TemporaryDirectory(prefix="brokerchaos-cds-") as d:
            _history(Path(d))
            for tuning in (Tuning(small_bytes=0), Tuning()):
                df = metrics.read_history(spark, d)
                a = metrics.analyze(spark, df, tuning=tuning)
                # what report.html asks of the history
                timeline.collect(spark, df, a.verdicts, a.jumps, a.losses, a.meta.get("send_ns_runs"))
                a.release()
    finally:
        spark.stop()
        # the gateway JVM ends when its stdin closes, and dumps the archive as it exits
        proc.stdin.close()
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()  # the project's own child, by its Popen
            proc.wait(10)
            raise RuntimeError(f"the JVM did not exit within {timeout:.0f} s of its stdin closing") from None
    if code != 0 or not tmp.exists() or tmp.stat().st_size == 0:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"the JVM exited with {code} and no archive")
    os.replace(tmp, archive)
    st = archive.stat()
    stamp.write_text(json.dumps({"size": st.st_size, "mtime_ns": st.st_mtime_ns, "identity": ident}, indent=1))
    return f"built: {archive} ({st.st_size / 2**20:.0f} MB)"


def main() -> int:
    try:
        print(f"Spark class archive {build()}")
    except Exception as e:  # the analysis works without it, only slower to start
        print(f"Spark class archive not built ({type(e).__name__}: {e}); analyses start without it",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
