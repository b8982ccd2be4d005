"""The session's warm-up analyses: the first waited for, later ones cut short when a write is
about to begin, and nothing of them left in the session that analyses the runs."""
from __future__ import annotations

import threading

from brokerchaos.analysis import metrics, warmup
from brokerchaos.analysis.warmup import WarmUp, warm_up_async


def test_stop_waits_for_the_process_first_round_and_starts_no_other(spark, monkeypatch):
    monkeypatch.setattr(metrics, "_ended", 0)
    w = warm_up_async(rounds=3)
    w.stop(300)
    assert not w.is_alive()
    # the first analysis is never cancelled (a run's verdict would be the cold one), and
    # stop() said the write begins: no second round
    assert metrics.ended() == 1


def test_a_later_round_is_cancelled_within_its_jobs(spark, monkeypatch):
    monkeypatch.setattr(metrics, "_ended", 1)
    started = threading.Event()
    real = metrics.analyze

    def analyze(*a, **k):
        started.set()
        return real(*a, **k)

    monkeypatch.setattr(metrics, "analyze", analyze)
    w = warm_up_async(rounds=warmup.CAP)
    assert started.wait(120), "no warm-up round began"
    w.stop(60)  # the round has just begun: its jobs are cancelled as they come
    assert not w.is_alive(), "the warm-up did not stop within 60 s"
    # the round under way was cut, not finished (it is counted when it ends)
    assert metrics.ended() == 1
    # the tag stays with the warm-up's thread: this thread's jobs run and are not cancelled
    assert WarmUp.TAG not in spark.sparkContext.getJobTags()
    monkeypatch.setattr(metrics, "analyze", real)
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        warmup._history(Path(d))
        (v,) = metrics.analyze(spark, metrics.read_history(spark, d)).verdicts
    assert v["send_count"] == 2_000 and v["acked_missing"] == 1


def test_no_more_than_cap_rounds_in_a_process(spark, monkeypatch):
    monkeypatch.setattr(metrics, "_ended", warmup.cap(spark))
    assert warmup.warm_up(spark, rounds=5) == 0
    # the test run's JVM compiles with C1 alone (conftest): warm after a few analyses
    assert warmup.cap(spark) == warmup.C1_CAP < warmup.CAP


def test_a_run_s_own_analysis_counts_toward_the_cap(spark, monkeypatch, tmp_path):
    """The JIT warms on every analysis: a process that has analysed enough histories of its
    own (a campaign's sessions, a test run's) starts no more warm-up rounds."""
    warmup._history(tmp_path, messages=300)
    monkeypatch.setattr(metrics, "_ended", warmup.cap(spark) - 1)
    metrics.analyze(spark, metrics.read_history(spark, str(tmp_path))).release()
    assert metrics.ended() == warmup.cap(spark)
    assert warmup.warm_up(spark, rounds=2, history=str(tmp_path)) == 0


def test_a_gap_warms_on_the_history_it_is_given(spark, monkeypatch, tmp_path):
    """After a run larger than the small history, the gap analyses that run's own history:
    what the next run's verdict will most likely go through."""
    warmup._history(tmp_path, messages=300)
    monkeypatch.setattr(metrics, "_ended", 1)
    seen: list = []
    real = metrics.analyze

    def analyze(spark_, df, **k):
        a = real(spark_, df, **k)
        seen.extend(v["send_count"] for v in a.verdicts)
        return a

    monkeypatch.setattr(metrics, "analyze", analyze)
    assert warmup.warm_up(spark, rounds=2, history=str(tmp_path)) == 2
    assert seen == [300, 300]  # the run's, not the small history's 2,000
    assert metrics.ended() == 3
