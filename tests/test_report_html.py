"""report.html from small recorded histories, through the real Spark job, opened in a real
headless browser; and the statistics the campaign page states."""
import json

import pytest

from brokerchaos.analysis import metrics, timeline
from brokerchaos.analysis.timeline import BUCKET_NS, RunTimeline
from brokerchaos.report import campaign_html, files, html, session_table
from brokerchaos.report.stats import fisher_exact
from browser import check_report
from histories import SEED_SEQUENCE, H

MS = 1_000_000


def test_fisher_exact_matches_published_values():
    # R's fisher.test / scipy.stats.fisher_exact, two-sided
    assert fisher_exact(8, 2, 1, 5) == pytest.approx(0.034965, abs=1e-6)
    assert fisher_exact(3, 1, 1, 3) == pytest.approx(0.485714, abs=1e-6)
    assert fisher_exact(10, 0, 0, 10) == pytest.approx(1.0825e-05, rel=1e-3)
    assert fisher_exact(0, 5, 0, 5) == 1.0
    assert fisher_exact(2, 3, 3, 2) == pytest.approx(1.0) and fisher_exact(3, 2, 2, 3) == pytest.approx(1.0)


def test_the_longest_ack_gap_is_found_between_buckets():
    tl = RunTimeline(counts={"ack": [(0, 5, 10, 90 * MS), (BUCKET_NS, 1, 110 * MS, 110 * MS),
                                     (9 * BUCKET_NS, 3, 930 * MS, 990 * MS)],
                             "send": [(0, 5, 5, 80 * MS)]})
    assert tl.t0 == 5
    assert tl.longest_gap("ack") == (110 * MS, 930 * MS)
    assert RunTimeline().longest_gap("ack") is None and RunTimeline().t0 is None


def test_a_lost_message_sits_where_the_read_went_past_it():
    stream = [(1, 1, 10), (11, 11, 20), (21, 25, 30)]
    assert html._passed_at(stream, 5) == 1
    assert html._passed_at(stream, 21) == 21
    assert html._passed_at(stream, 99) == 21  # never passed: the end of the read


def _session(tmp_path, spark):
    """Two runs: one clean, one with a fault window, a ready mark, an ack gap, losses and the
    dedup seed's jump sequence."""
    h = H("run-001")
    h.sent_acked(range(1, 201))
    h.read(range(1, 201))
    g = H("run-002")
    g.sent_acked(range(1, 46), producer="p1")
    g.ev("nemesis", "fault", node="n1", detail="kill leader", dt=150 * MS)
    g.rows[-1]["window"] = 1
    g.ev("nemesis", "heal", node="n1", detail="kill leader", dt=2000 * MS)
    g.rows[-1]["window"] = 1
    g.sent_acked(range(46, 60))
    g.ev("nemesis", "ready", detail="healthy", dt=500 * MS)
    g.rows[-1]["window"] = 1
    g.read(SEED_SEQUENCE)  # 45 to 59: acked, never read
    rows = h.rows + g.rows
    import pyarrow as pa
    import pyarrow.parquet as pq

    from brokerchaos.history.schema import SCHEMA

    (tmp_path / "h").mkdir()
    pq.write_table(pa.Table.from_pylist([{"window": None, "intended_ns": None, **r} for r in rows], schema=SCHEMA),
                   tmp_path / "h" / "h.parquet")
    (tmp_path / "scenario.json").write_text(json.dumps({
        "name": "recorded", "system": "nats", "runs": 2, "seed": 7, "cluster": {"nodes": 3, "replicas": 3},
        "workload": {"messages": 200, "in_flight": 10, "producers": 1, "dedup": False},
        "fault": {"action": "kill", "target": "leader", "trigger": {"after_acks": 45}}}))
    df = metrics.read_history(spark, str(tmp_path / "h"))
    analysis = metrics.analyze(spark, df)
    analysis.verdicts[:] = session_table.complete(analysis.verdicts)
    summary = files.write_session(analysis, tmp_path, {}, history=df)
    return df, analysis, summary


@pytest.mark.spark
def test_the_report_shows_each_run_and_draws_offline(tmp_path, spark):
    df, analysis, summary = _session(tmp_path, spark)
    try:
        tls = timeline.collect(spark, df, analysis.verdicts, analysis.jumps, analysis.losses)
        path = html.write_session(spark, df, analysis, tmp_path, {}, summary)
    finally:
        analysis.release()
    # the same history as a producer of format 1.4 writes it (each message's first ack
    # carries its first send's time): the latency plot reads the acks alone, and is the same
    import pyarrow as pa
    import pyarrow.parquet as pq

    from brokerchaos.history.schema import SCHEMA

    rows = [r.asDict() for r in df.orderBy("run", "client", "seq").collect()]
    first: dict = {}
    for r in rows:
        k = (r["run"], r["producer"], r["value"])
        if r["type"] == "send":
            first.setdefault(k, r["t_ns"])
        elif r["type"] == "ack" and first.get(k) is not None:
            r["send_ns"], first[k] = first[k], None
    assert sum(r["send_ns"] is not None for r in rows) >= 200
    (tmp_path / "h14").mkdir()
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), tmp_path / "h14" / "h.parquet")
    carried = timeline.collect(spark, metrics.read_history(spark, str(tmp_path / "h14")), analysis.verdicts,
                               send_ns_runs=["run-001", "run-002"])
    assert [carried[r].latency for r in tls] == [tls[r].latency for r in tls] and tls["run-001"].latency
    clean, hit = tls["run-001"], tls["run-002"]
    # positions and first rows only for the run that has something to show
    assert clean.positions == {} and clean.jumps == [] and clean.lost == []
    assert sum(n for _, n, *_ in clean.counts["ack"]) == 200 and clean.events[-1]["type"] == "read_end"
    assert [r["value"] for r in hit.lost] == list(range(45, 60))
    v = analysis.verdicts[1]
    # every jump the seed's sequence makes (fewer than the first rows kept), of each class counted
    assert len(hit.jumps) == v["jf"] + v["jb"] + v["djf"] + v["djb"] and v["jb"] > 0 and v["djb"] > 0
    assert {j["class"] for j in hit.jumps} == {k.upper() for k in ("jf", "jb", "djf", "djb") if v[k]}
    assert [e["type"] for e in hit.events if e["client"] == "nemesis"] == ["fault", "heal", "ready"]
    gap = hit.longest_gap("ack")
    assert gap is not None and gap[1] - gap[0] >= 2150 * MS  # fault to heal, no ack in it

    # the seeds' own logs: the dedup seed's order output, the Pulsar seed's duplicates log
    # (the history's offsets are the values here)
    order = (tmp_path / "order_output.txt").read_text().splitlines()
    assert "Test run: 2 DUPLICATE BLOCK - JUMP BACKWARDS 9 (14 -> 5)" in order
    assert "Test run: 2 JUMP FORWARDS 37 (4 -> 41)" in order and len(order) == len(hit.jumps)
    assert (tmp_path / "duplicates.txt").read_text().splitlines() == [
        "run|last_msg_id|last_value|curr_msg_id|curr_value", "2|14|14|5|5", "2|10|10|2|2"]
    table = (tmp_path / "session_table.csv").read_text().splitlines()
    assert table[0].split(",")[13] == "Rx error" and [r.split(",")[13] for r in table[1:]] == ["nil", "nil"]
    page = path.read_text()
    assert page.count("<section id='run-") == 2
    assert "kill leader \\u2192 n1" in page and "whole again" in page and "longest ack gap" in page
    assert "Acked, never read" in page and "JUMP BACKWARDS" in page
    assert "<tr class='fail'>" in page  # run-002 highlighted in the per-run tables
    assert "brokerchaos run" in page and "scenario.json" in page
    got = check_report(path, "recorded-session")
    # outages, two timelines, one value-against-position plot
    assert got.plots == 4, got


def test_the_campaign_page_states_the_difference_in_words(tmp_path):
    def session(name, dups, runs, dedup):
        (tmp_path / name).mkdir()
        (tmp_path / name / "scenario.json").write_text(json.dumps({"name": name, "workload": {"dedup": dedup}}))
        return {"scenario": name, "dir": name, "summary": {"runs": runs, "result": "pass", "verdicts": {
            "duplicates": {"runs": dups, "of": runs, "wilson95": [0.1, 0.9]},
            "acked loss": {"runs": 0, "of": runs, "wilson95": [0.0, 0.3]}}}}

    sessions = [session("dedup-off", 8, 10, False), session("dedup-on", 1, 6, True)]
    verdicts = {"dedup-off": [{"fault_outages_ms": [1200.0, None]}], "dedup-on": [{"fault_outages_ms": [900.0]}]}
    page = campaign_html.write_campaign(tmp_path, "c", sessions, verdicts).read_text()
    assert "workload.dedup: False vs True" in page
    assert "8 of 10 runs of dedup-off against 1 of 6 of dedup-on; Fisher's exact test p = 0.035" in page
    assert "unlikely to be chance" in page
    assert "acked loss</b>: no run of either arm had it (0 of 10, 0 of 6)" in page
    assert "href='dedup-off/report.html'" in page


def test_a_matrix_compares_the_cells_that_differ_on_one_two_valued_axis_only():
    def cell(acks, dedup):
        return {"scenario": f"k-{acks}-{dedup}", "base": "k", "axes": {"acks": acks, "dedup": dedup},
                "summary": {}}

    cells = [cell(a, d) for a in ("0", "1", "all") for d in ("off", "on")]
    got = [(what, x["scenario"], y["scenario"]) for what, x, y in campaign_html.pairs(cells)]
    # acks has three values: no two-armed test along it; dedup pairs each acks with itself
    assert got == [("dedup: off vs on", f"k-{a}-off", f"k-{a}-on") for a in ("0", "1", "all")]
    # a partial matrix: where acks has two values, the cells that agree on dedup are a pair too
    assert campaign_html.pairs(cells[:3]) == [("acks: 0 vs 1", cells[0], cells[2]),
                                              ("dedup: off vs on", cells[0], cells[1])]


def test_a_long_session_draws_its_failures_first_and_a_bounded_number_of_runs():
    vs = [{"run": f"run-{i:04d}", "result": "fail" if i in (7, 900) else "unknown" if i == 950 else "pass"}
          for i in range(1, 1001)]
    drawn = html.drawn_runs(vs, limit=5)
    assert drawn == ["run-0001", "run-0002", "run-0007", "run-0900", "run-0950"]
    # a run without a section is named, not linked (a link to nothing is a broken page)
    assert html._link("run-0003", set(drawn)) == "run-0003"
    assert "href='#run-0007'" in html._link("run-0007", set(drawn))
