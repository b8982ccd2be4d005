"""Java servers from pinned poms: resolved once into the cache, offline after; a failed
resolution is one clear line and leaves no half-filled cache behind."""
import shutil
import sys
import time

import pytest

from brokerchaos.systems import SystemError_, jvm

POM = """<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
<groupId>t</groupId><artifactId>{name}</artifactId><version>1</version><packaging>pom</packaging>
<dependencies><dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>
<version>{version}</version></dependency></dependencies></project>"""


@pytest.fixture
def poms(tmp_path, monkeypatch):
    monkeypatch.delenv("BROKERCHAOS_NO_DOWNLOAD", raising=False)  # these test the downloads
    d = tmp_path / "poms"
    d.mkdir()
    monkeypatch.setattr(jvm, "POMS", d)
    monkeypatch.setenv("BROKERCHAOS_CACHE", str(tmp_path / "cache"))
    return d


@pytest.mark.skipif(shutil.which("mvn") is None, reason="needs Maven")
def test_a_missing_artifact_is_one_line_and_no_cache(poms, tmp_path):
    (poms / "nope.xml").write_text(POM.format(name="nope", group="io.brokerchaos.none", artifact="none",
                                              version="0.0.1"))
    with pytest.raises(SystemError_) as e:
        jvm.classpath("nope")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("resolving nope from Maven Central failed"), msg
    assert "io.brokerchaos.none" in msg or "none" in msg
    assert not (tmp_path / "cache" / "maven" / "nope").exists()
    assert (tmp_path / "cache" / "maven" / "nope.failed.log").exists()


@pytest.mark.skipif(shutil.which("mvn") is None, reason="needs Maven")
def test_resolved_once_then_offline_until_the_pom_changes(poms, tmp_path, monkeypatch):
    (poms / "tiny.xml").write_text(POM.format(name="tiny", group="org.slf4j", artifact="slf4j-api",
                                              version="1.7.36"))
    cp = jvm.classpath("tiny")
    lib = tmp_path / "cache" / "maven" / "tiny" / "lib"
    assert cp == f"{lib}/*" and (lib / "slf4j-api-1.7.36.jar").exists()
    # a second call runs no Maven at all
    monkeypatch.setattr(jvm.shutil, "which", lambda name: None)
    assert jvm.classpath("tiny") == cp
    # a changed pom is resolved again (and here Maven is "missing": the clear line says so)
    (poms / "tiny.xml").write_text(POM.format(name="tiny", group="org.slf4j", artifact="slf4j-api",
                                              version="1.7.35"))
    with pytest.raises(SystemError_, match="^mvn not found"):
        jvm.classpath("tiny")


def test_unknown_set_names_the_known_ones():
    known = "kafka-3.9, kafka-4.1, kafka-4.4, pulsar-4.0, pulsar-4.2"
    with pytest.raises(SystemError_, match=f"no pinned pom for 'kafka-0.8' .known: {known}"):
        jvm.classpath("kafka-0.8")


def test_a_jvm_s_clock_is_read_from_the_output_it_was_started_with(tmp_path):
    """A cluster reused by a later run or session moves its logs on (ctx.logdir), but a
    running JVM still writes its thread dumps where it was started: the clock is read there
    (it was read from the new run's log once, and every later window said 'cannot say')."""
    from brokerchaos.sandbox import process

    script = ("import signal, sys, time\n"
              "def dump(*_):\n"
              "    print('2026-12-05 07:00:00\\nFull thread dump Fake', flush=True)\n"
              "signal.signal(signal.SIGQUIT, dump)\n"
              "print('started', flush=True)\n"
              "time.sleep(30)\n")
    proc = process.spawn("fake-jvm", [sys.executable, "-c", script], None, tmp_path / "first-run.log")
    try:
        deadline = time.monotonic() + 10
        while b"started" not in (tmp_path / "first-run.log").read_bytes() and time.monotonic() < deadline:
            time.sleep(0.05)
        said = jvm.wall_clock(proc)
        assert said == time.mktime(time.strptime("2026-12-05 07:00:00", "%Y-%m-%d %H:%M:%S"))
    finally:
        process.terminate(proc, grace=2.0)


def test_the_quick_jit_is_c1_alone_and_a_value_it_does_not_know_is_refused(monkeypatch, capsys):
    """`make test`'s servers compile with C1 alone; a user's keep both tiers; a misspelt
    value is one line and exit 2 before anything starts."""
    from brokerchaos.cli import main

    monkeypatch.setenv(jvm.JIT, "quick")
    assert "-XX:TieredStopAtLevel=1" in jvm.argv("cp", "Main", 256)
    monkeypatch.setenv(jvm.JIT, "full")
    assert not any("Tiered" in a for a in jvm.argv("cp", "Main", 256))
    monkeypatch.setenv(jvm.JIT, "fast")
    assert main(["faults"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "brokerchaos: BROKERCHAOS_BROKER_JIT='fast': expected one of full, quick", err
