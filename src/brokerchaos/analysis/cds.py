"""A class-data-sharing archive of the classes an analysis loads, built once per virtualenv.

Every command that analyses starts a JVM, and that JVM loads ~14,600 classes from Spark's
jars for its first analysis, each read, parsed, verified and linked again at every start:
4.3 s to a SparkSession and 2.1 s to its first job on this machine. Java 17 can dump the
classes an application loaded into an archive (`-XX:ArchiveClassesAtExit`) and map it at
the next start (`-XX:SharedArchiveFile`): 2.6 s and 1.1 s. `make setup` builds it
(`python -m brokerchaos.analysis.cds`) by running the warm-up's analyses and a report in a
JVM that dumps what it loaded as it exits.

An archive cut short crashes the JVM that maps it (measured: SIGSEGV in
FileMapInfo::relocate_pointers_in_core_regions), so it is written under another name and
renamed once its JVM has exited cleanly, and used only while the stamp beside it matches
its size and time and names this JVM and these jars. A JDK or PySpark upgraded under the
same path changes the stamp's identity: the archive is then left out until rebuilt.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

ARCHIVE = Path(sys.prefix) / "brokerchaos" / "spark-classes.jsa"
STAMP = ARCHIVE.with_suffix(".json")
# the JVM's own warnings would go to the command's stdout, which --format json keeps for the
# verdicts: a jar changed since the dump (the archive is then not used), and at the dump one
# line for each of the ~1,400 classes it leaves out (Janino's signed jar, generated classes)
QUIET = "-Xlog:cds*=off"


def _java() -> Optional[Path]:
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return Path(os.path.realpath(java)) if java and os.path.exists(java) else None


def identity() -> Optional[dict]:
    """What the archive was made for: this JVM (its libjvm's path, size and time: an upgrade
    in place changes them) and this PySpark's jars."""
    java = _java()
    if java is None:
        return None
    try:
        import pyspark
    except ImportError:
        return None
    jvm = java.parent.parent / "lib" / "server" / "libjvm.so"
    jars = Path(pyspark.__file__).resolve().parent / "jars"
    try:
        st, jst = jvm.stat(), jars.stat()
    except OSError:
        return None
    return {"libjvm": str(jvm), "libjvm_size": st.st_size, "libjvm_mtime_ns": st.st_mtime_ns,
            "pyspark": pyspark.__version__, "jars": str(jars), "jars_mtime_ns": jst.st_mtime_ns}


def java_options() -> list[str]:
    """The options that map the archive, or none when there is no whole archive for this JVM."""
    try:
        stamp = json.loads(STAMP.read_text())
        st = ARCHIVE.stat()
    except (OSError, ValueError):
        return []
    if (stamp.get("size"), stamp.get("mtime_ns")) != (st.st_size, st.st_mtime_ns):
        return []
    if stamp.get("identity") != identity():
        return []
    return [f"-XX:SharedArchiveFile={ARCHIVE}", QUIET]


def build(timeout: float = 300.0) -> str:
    """Make the archive unless a valid one is there; returns what happened, one line. Runs in a
    process of its own: the JVM that dumps must be the process's first (`python -m`)."""
    from .spark import _java_home

    _java_home()  # the JVM the analyses will use, not whichever `java` comes first
    if java_options():
        return f"up to date: {ARCHIVE}"
    ident = identity()
    if ident is None:
        raise RuntimeError("no Java or no PySpark: run `make setup`")
    ARCHIVE.parent.mkdir(parents=True, exist_ok=True)
    STAMP.unlink(missing_ok=True)  # readers stop using the old archive before it is replaced
    tmp = ARCHIVE.with_name(ARCHIVE.name + ".part")
    tmp.unlink(missing_ok=True)
    from . import metrics
    from .spark import get_spark
    from .warmup import _history

    spark = get_spark(java_options=[f"-XX:ArchiveClassesAtExit={tmp}", QUIET])
    proc = spark.sparkContext._gateway.proc
    try:
        with tempfile.TemporaryDirectory(prefix="brokerchaos-cds-") as d:
            _history(Path(d))
            from ..report import files, html, session_table
            from .tuning import Tuning

            # both ways a run's analysis reads its history, then what `analyze` writes
            for tuning in (Tuning(small_bytes=0), Tuning()):
                df = metrics.read_history(spark, d)
                a = metrics.analyze(spark, df, tuning=tuning)
            session_table.complete(a.verdicts)
            out = Path(d) / "out"
            summary = files.write_session(a, out, {}, {}, history=df)
            html.write_session(spark, df, a, out, {}, summary)
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
    os.replace(tmp, ARCHIVE)
    st = ARCHIVE.stat()
    STAMP.write_text(json.dumps({"size": st.st_size, "mtime_ns": st.st_mtime_ns, "identity": ident}, indent=1))
    return f"built: {ARCHIVE} ({st.st_size / 2**20:.0f} MB)"


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
