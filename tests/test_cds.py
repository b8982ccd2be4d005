"""The Spark class archive: used only when whole and made for this JVM, and mapped when it is."""
from __future__ import annotations

import json

import pytest

from brokerchaos.analysis import spark as sp
from brokerchaos.analysis.spark import QUICK_JIT_BYTES, one_shot_options

IDENT = {"libjvm": "/jvm/lib/server/libjvm.so", "libjvm_size": 1, "libjvm_mtime_ns": 2,
         "pyspark": "4.0.1", "jars": "/jars", "jars_mtime_ns": 3}


@pytest.fixture
def archive(tmp_path, monkeypatch):
    a = tmp_path / "spark-classes.jsa"
    monkeypatch.setattr(sp, "ARCHIVE", a)
    monkeypatch.setattr(sp, "STAMP", a.with_suffix(".json"))
    monkeypatch.setattr(sp, "archive_identity", lambda: dict(IDENT))
    a.write_bytes(b"x" * 100)
    return a


def _stamp(a, **over):
    st = a.stat()
    d = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "identity": dict(IDENT)}
    d.update(over)
    a.with_suffix(".json").write_text(json.dumps(d))


def test_a_whole_archive_for_this_jvm_is_mapped_quietly(archive):
    _stamp(archive)
    assert sp.archive_options() == [f"-XX:SharedArchiveFile={archive}", sp.QUIET_CDS]


def test_no_stamp_no_archive(archive):
    # a build cut short leaves the archive without its stamp: mapping it could crash the JVM
    assert sp.archive_options() == []


def test_an_archive_cut_or_replaced_after_its_stamp_is_left_out(archive):
    _stamp(archive)
    archive.write_bytes(b"x" * 50)
    assert sp.archive_options() == []


def test_an_archive_of_another_jvm_or_pyspark_is_left_out(archive):
    _stamp(archive, identity=dict(IDENT, libjvm_mtime_ns=99))  # a JDK upgraded in place
    assert sp.archive_options() == []
    _stamp(archive, identity=dict(IDENT, pyspark="4.1.0"))
    assert sp.archive_options() == []


def test_a_garbled_stamp_is_no_archive(archive):
    archive.with_suffix(".json").write_text("{not json")
    assert sp.archive_options() == []


def test_only_small_histories_analysed_once_run_the_first_tier_only():
    assert one_shot_options(QUICK_JIT_BYTES)[0] == "-XX:TieredStopAtLevel=1"
    assert "-XX:ReservedCodeCacheSize=240m" in one_shot_options(QUICK_JIT_BYTES)  # C1 alone: 48 MB
    assert one_shot_options(QUICK_JIT_BYTES + 1) == []


def test_a_run_of_one_small_run_starts_spark_with_the_first_tier_only():
    """`brokerchaos run` of one run: its verdict comes after one warm-up round, which C1
    alone reaches sooner; several runs, or a large one, keep both tiers."""
    assert sp.one_run_options(1, 20_000) == one_shot_options(0) and one_shot_options(0)
    assert sp.one_run_options(1, sp.QUICK_JIT_MESSAGES + 1) == []
    assert sp.one_run_options(2, 1_000) == []


def test_the_session_jvm_maps_the_archive_make_setup_built(spark):
    """`make setup` builds the archive; the tests' JVM, started after it, must map it (the
    JVM leaves out an archive it cannot use, quietly: only its memory map tells)."""
    opts = sp.archive_options()
    assert opts, f"no valid class archive at {sp.ARCHIVE}: `make setup` builds it (python -m brokerchaos.analysis.cds)"
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    with open(f"/proc/{pid}/maps") as f:
        assert str(sp.ARCHIVE) in f.read()
