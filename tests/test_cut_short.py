"""A run the harness stopped in is never taken for a finished one: its history gets a
read_end row saying so (runner/journal.mark_cut_short), also when a live receiver had read
everything acked so far (the MQTT session test), which a history without read_end rows
would otherwise decide on."""
from histories import H

from brokerchaos.runner.journal import CUT_SHORT, mark_cut_short


def test_a_cut_short_run_is_unknown_not_pass(spark_analyze, tmp_path):
    rows = H().sent_acked([1, 2, 3]).read([1, 2, 3], end=None).rows
    (v,) = spark_analyze(rows, tmp_path / "history").verdicts
    assert v["result"] == "pass" and v["read_complete"] is None  # no read_end: the reads decide

    assert mark_cut_short(tmp_path, "r1", "cut short: KeyboardInterrupt")
    assert not mark_cut_short(tmp_path, "r1", "cut short: again")  # marked once
    (v,) = spark_analyze(rows, tmp_path / "history").verdicts
    assert v["read_complete"] is False and v["result"] == "unknown"
    assert v["read_status"] == "incomplete: cut short: KeyboardInterrupt"
    assert [f.name for f in (tmp_path / "history").glob(f"{CUT_SHORT}-*.parquet")] == [f"{CUT_SHORT}-00000.parquet"]


def test_a_run_that_wrote_no_history_is_not_marked(tmp_path):
    assert not mark_cut_short(tmp_path, "r1", "cut short: the cluster did not start")
    assert not (tmp_path / "history").exists()
