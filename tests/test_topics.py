"""Many topics per run (`workload.topics`, history format 1.8) and each outage taken apart,
on small recorded histories: every verdict per topic (Spark's against the oracle run on each
topic's rows), a loss in one topic found in that topic alone, offsets of two topics never
taken for one, and outage parts that add up to the outage."""
import random

import oracle
import pytest
from histories import H

from brokerchaos.analysis.parts import PARTS, split
from brokerchaos.analysis.topics import SEP
from brokerchaos.errors import ScenarioError
from brokerchaos.history import Recorder
from brokerchaos.scenario import topic_names
from brokerchaos.validation import load

KEYS = ("send_count", "pos_ack_count", "acked_missing", "missing", "msgs_with_dups", "stored_duplicates", "jf", "jb",
        "read_complete", "fault_outages_ms", "fault_ack_gaps_ms", "result")


def _topic(h: H, topic: str, values, lost=(), t_ms: int = 1) -> H:
    """p1's stream of `topic` (`p1.<topic>`): sent, acked at offset = value (as every topic
    numbers its own), and read back but for `lost`, each row naming its topic."""
    name = f"p1.{topic}"
    for v in values:
        h.ev("p1", "send", name, v, dt=t_ms * 1_000_000, topic=topic)
        h.ev("p1", "ack", name, v, offset=f"{topic}/{v}", dt=1000, topic=topic)
    return h


def _read(h: H, topic: str, values) -> H:
    for v in values:
        h.ev("c1", "recv", f"p1.{topic}", v, offset=f"{topic}/{v}", topic=topic)
    return h.ev("c1", "read_end", detail="complete", topic=topic)


def _per_topic_oracle(rows: list[dict], topics: list[str]) -> dict:
    """The oracle on each topic's rows and the rows about no topic (faults), as topics.py
    views them: what the Spark job's per-topic verdicts must say."""
    out = {}
    for t in topics:
        mine = [{**r, "run": f"{r['run']}{SEP}{t}"} for r in rows if r.get("topic") in (t, None)]
        (out[t],) = oracle.analyze(mine)
    return out


def test_a_loss_in_one_topic_is_that_topics_alone(spark_analyze, tmp_path):
    h = H()
    for t in ("t1", "t2", "t3"):
        _topic(h, t, range(1, 21))
    for t in ("t1", "t2", "t3"):
        _read(h, t, [v for v in range(1, 21) if not (t == "t2" and v == 7)])
    (v,) = spark_analyze(h.rows, tmp_path).verdicts
    assert v["acked_missing"] == 1 and v["result"] == "fail", v
    assert set(v["topics"]) == {"t1", "t2", "t3"}
    assert [v["topics"][t]["acked_missing"] for t in ("t1", "t2", "t3")] == [0, 1, 0], v["topics"]
    assert [v["topics"][t]["result"] for t in ("t1", "t2", "t3")] == ["pass", "fail", "pass"]
    assert sum(x["send_count"] for x in v["topics"].values()) == v["send_count"] == 60
    o = _per_topic_oracle(h.rows, ["t1", "t2", "t3"])
    for t in o:
        for k in KEYS:
            assert v["topics"][t][k] == o[t][k], (t, k, v["topics"][t][k], o[t][k])


def test_the_same_offset_in_two_topics_is_not_a_stored_duplicate(spark_analyze, tmp_path):
    # every topic has its own offsets 1..20: prefixed by the topic (Recorder.for_topic), two
    # topics' messages at "offset 5" are two places, not one message stored twice
    h = H()
    for t in ("t1", "t2"):
        _topic(h, t, range(1, 21))
        _read(h, t, range(1, 21))
    (v,) = spark_analyze(h.rows, tmp_path).verdicts
    assert v["stored_duplicates"] == v["msgs_with_dups"] == 0 and v["result"] == "pass", v
    assert all(x["result"] == "pass" for x in v["topics"].values())
    # the positive control: one topic's message really read twice at two offsets
    h.ev("c1", "recv", "p1.t2", 5, offset="t2/21", topic="t2").ev("c1", "read_end", detail="complete", topic="t2")
    (v,) = spark_analyze(h.rows, tmp_path / "2").verdicts
    assert v["topics"]["t2"]["stored_duplicates"] == 1 and v["topics"]["t1"]["stored_duplicates"] == 0, v["topics"]


def test_each_topics_outage_and_its_parts(spark_analyze, tmp_path):
    # a fault at 50 ms: t1's acks stop until 450 ms, t2's go on; the roles saw t1's owner
    # gone at 60 ms and served again at 200 ms, t1's client reconnected at 300 ms
    h = H()
    ms = 1_000_000
    for v in range(1, 101):  # one message of each topic every 5 ms
        for t in ("t1", "t2"):
            h.t = v * 5 * ms + (0 if t == "t1" else ms)
            if t == "t1" and 10 < v < 90:
                continue
            h.ev("p1", "send", f"p1.{t}", v, dt=0, topic=t)
            h.ev("p1", "ack", f"p1.{t}", v, offset=f"{t}/{v}", dt=100, topic=t)
    rows = h.rows
    nem = [dict(client="nemesis", type="fault", t_ns=50 * ms + 500, node="n1", detail="kill leader", window=1),
           dict(client="nemesis", type="owner", t_ns=60 * ms, node=None, detail="changed: n1 -> none", window=1,
                topic="t1"),
           dict(client="nemesis", type="owner", t_ns=200 * ms, node="n2", detail="serving", window=1, topic="t1"),
           dict(client="p1", type="reconnect", t_ns=300 * ms, node="n2", detail="cb", topic="t1"),
           dict(client="nemesis", type="heal", t_ns=600 * ms, node="n1", detail="kill leader", window=1)]
    for i, r in enumerate(nem):
        rows.append(dict(run="r1", seq=10_000 + i, producer=None, value=None, offset=None, **r))
    for t in ("t1", "t2"):
        rows.append(dict(run="r1", client="c1", seq=20_000 + int(t[1]), t_ns=900 * ms, type="read_end",
                         producer=None, value=None, offset=None, node=None, detail="complete", topic=t))
    (v,) = spark_analyze(rows, tmp_path).verdicts
    t1, t2 = v["topics"]["t1"], v["topics"]["t2"]
    assert t1["fault_outages_ms"][0] == pytest.approx(450 - 50.0005, abs=0.01), t1
    assert t2["fault_outages_ms"][0] < 10, t2
    (p,) = t1["outage_parts"]
    assert p["order"] == ["detect", "serve", "reconnect"] and not p["unseen"], p
    assert (p["detect_ms"], p["serve_ms"], p["reconnect_ms"]) == pytest.approx((9.9995, 140, 100), abs=0.01), p
    assert sum(p[f"{k}_ms"] for k in PARTS) == pytest.approx(t1["fault_ack_gaps_ms"][0]), p
    assert p["dominant"] == "resume" and p["resume_ms"] == pytest.approx(150, abs=0.01)
    # t2 saw no mark within its outage: all of it is the resume
    (q,) = t2["outage_parts"]
    assert q["resume_ms"] == pytest.approx(t2["fault_ack_gaps_ms"][0]) and q["order"] == [], q
    assert v["outage_parts"] == [None]  # the run's own outage is over both topics' acks


def test_parts_add_up_to_the_outage_whatever_the_marks():
    rng = random.Random(7)
    for _ in range(2000):
        tf, outage = rng.randrange(0, 10**9), rng.randrange(0, 10**10)
        gap = None if rng.random() < 0.3 else rng.randrange(0, outage + 1)
        marks = {k: (None if rng.random() < 0.3 else tf + rng.randrange(-10**9, 2 * 10**10)) for k in PARTS[:-1]}
        p = split(tf, outage, marks, gap)
        length = outage if gap is None else gap
        assert sum(p[f"{k}_ms"] for k in PARTS) == pytest.approx(length / 1e6, abs=1e-6), (marks, p)
        assert p["outage_ms"] + p["starts_ms"] == pytest.approx(outage / 1e6, abs=1e-6), p
        assert all(p[f"{k}_ms"] >= 0 for k in PARTS)
        assert set(p["order"]) | set(p["unseen"]) | set(p["after"]) == set(PARTS[:-1])
    assert split(0, None, {}) is None  # an outage that never ended has no parts


def test_a_mark_long_after_the_outage_belongs_to_something_else():
    ms = 1_000_000
    p = split(0, 400 * ms, {"detect": 3000 * ms, "serve": None, "reconnect": 100 * ms})
    assert p["after"] == ["detect"] and p["unseen"] == ["serve"] and p["order"] == ["reconnect"], p
    assert (p["reconnect_ms"], p["resume_ms"], p["detect_ms"]) == (100, 300, 0)
    # a mark just after the end (a look answered late) counts at the end
    p = split(0, 400 * ms, {"detect": 450 * ms, "serve": None, "reconnect": None})
    assert p["detect_ms"] == 400 and p["resume_ms"] == 0 and p["dominant"] == "detect", p


def test_an_outage_that_began_after_the_fault_is_taken_apart_from_where_it_began():
    """Acks went on for 3 s after the fault (a lame-duck server hands its streams over and
    only later sheds its clients), then stopped for 200 ms: the outage is those 200 ms, and
    the cluster's change seen at 0.1 s takes no part of it."""
    ms = 1_000_000
    p = split(0, 3200 * ms, {"detect": 100 * ms, "serve": 150 * ms, "reconnect": 3050 * ms}, 200 * ms)
    assert p["outage_ms"] == 200 and p["starts_ms"] == 3000 and p["before"] == ["detect", "serve"], p
    assert (p["detect_ms"], p["serve_ms"], p["reconnect_ms"], p["resume_ms"]) == (0, 0, 50, 150), p
    assert p["dominant"] == "resume" and p["order"] == ["detect", "serve", "reconnect"]
    # an outage from the fault on: the same as without the interval
    assert split(0, 400 * ms, {"detect": 50 * ms}, 400 * ms) == split(0, 400 * ms, {"detect": 50 * ms})


def test_a_topic_recorder_names_its_topic_and_prefixes_its_offsets(tmp_path):
    import pyarrow.parquet as pq

    rec = Recorder(tmp_path, "r1", "p1", 0)
    rec.for_topic("t2").record("ack", "p1.t2", 1, "17", "n1")
    rec.for_topic("t3").record("ack", "p1.t3", 1, None, "n1")
    rec.record("ack", "p1", 2, "17")
    rec.for_topic("t2").close()  # a view's close flushes, the recorder stays open
    rec.record("send", "p1", 3)
    # the producer's two rows (send_row, outcome_row) alike, through a view or not
    rec.for_topic("t2").send_row("p1.t2", 4, "n1", None, 9)
    rec.for_topic("t2").outcome_row("ack", "p1.t2", 4, "18", "n1", None, 7, None)
    rec.outcome_row("nack", "p1", 3, None, "n2", "why", None, 2)
    rec.close()
    rows = sorted(pq.read_table(tmp_path).to_pylist(), key=lambda r: r["seq"])
    assert [(r["seq"], r["topic"], r["offset"]) for r in rows] == [
        (1, "t2", "t2/17"), (2, "t3", None), (3, None, "17"), (4, None, None), (5, "t2", None),
        (6, "t2", "t2/18"), (7, None, None)]
    assert [(r["type"], r["value"], r["node"], r["intended_ns"], r["send_ns"], r["txn"], r["detail"])
            for r in rows[4:]] == [("send", 4, "n1", 9, None, None, None), ("ack", 4, "n1", None, 7, None, None),
                                   ("nack", 3, "n2", None, None, 2, "why")]
    assert rec.for_topic(None) is rec


def test_topics_names_and_what_they_do_not_combine_with(tmp_path):
    assert topic_names(1) == [] and topic_names(3) == ["t1", "t2", "t3"]
    f = tmp_path / "s.yaml"
    f.write_text("system: kafka\nworkload: {topics: 3, group: {name: g}}\n")
    with pytest.raises(ScenarioError, match="'workload'.*topics > 1 is not yet combined with group"):
        load(f)
    f.write_text("system: nats\nworkload: {topics: 3, consumers: 1, producers: 2, processes: 2}\n")
    assert load(f).workload.processes == 2  # live consumers and producer processes take topics
    f.write_text("system: mqtt\noptions: {broker: mosquitto}\ncluster: {nodes: 1, replicas: 1}\n"
                 "workload: {topics: 3}\n")
    with pytest.raises(ScenarioError, match="'workload.topics'"):
        load(f)
    f.write_text("system: nats\nworkload: {topics: 3}\n")
    assert load(f).workload.topics == 3


def test_the_report_draws_each_outage_in_parts_and_a_table_per_topic():
    from brokerchaos.report.console import _parts_rows
    from brokerchaos.report.parts_html import parts_figure, topics_table

    p = split(0, 400_000_000, {"detect": 50_000_000, "serve": 200_000_000, "reconnect": None})
    topic = {"send_count": 10, "pos_ack_count": 10, "acked_missing": 0, "msgs_with_dups": 0, "jb": 0,
             "max_ack_gap_ms": 400.0, "result": "pass", "fault_ack_gaps_ms": [400.0], "outage_parts": [p]}
    v = {"outage_parts": [None], "topics": {"t1": topic, "t2": {**topic, "outage_parts": [None]}}}
    fig = parts_figure(v)
    assert [t.name for t in fig.data] == list(PARTS) and list(fig.data[0].y) == ["t1 window 1"]
    assert list(fig.data[0].x) == [50.0] and list(fig.data[3].x) == [200.0]
    assert "<td>t2</td>" in topics_table(v) and "400 ms" in topics_table(v)
    assert parts_figure({"outage_parts": [None]}) is None and topics_table({}) == ""
    rows = dict(_parts_rows(v))
    assert rows["Topic t1"].startswith("PASS") and "detect 50 ms" in rows["Topic t1"], rows
