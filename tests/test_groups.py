"""The consumer groups' verdicts (format 1.6) on small recorded histories whose answers are
known: a positive and a negative control for each, Spark and the oracle alike."""
import re

import oracle
from histories import H

from brokerchaos.analysis import policy
from brokerchaos.report import console

KEYS = ("groups", "group_recv_rows", "group_skips", "group_duplicates", "group_dup_stored", "group_dup_handover",
        "group_dup_same", "group_nonmonotonic", "group_commits", "group_commit_failures", "group_commit_backwards",
        "group_read_complete", "consumer_groups", "group_outage_ms", "result")


def _both(spark_analyze, h: H, tmp_path) -> dict:
    return oracle.agreed(spark_analyze, h.rows, tmp_path, KEYS)


def _clean(h: H) -> H:
    """1..10 sent and acked, read back whole by the end reader."""
    return h.sent_acked(range(1, 11))


def test_a_group_that_processed_everything_once_in_order_passes(spark_analyze, tmp_path):
    h = _clean(H().member("m1").member("m2"))
    h.ev("m1", "assign", group="g1", partition="0", epoch=1)
    h.processed("m1", range(1, 6)).commit("m1", 5)
    h.ev("m1", "revoke", group="g1", partition="0", epoch=1).ev("m2", "assign", group="g1", partition="0", epoch=2)
    h.processed("m2", range(6, 11)).commit("m2", 10)
    h.ev("m1", "read_end", detail="complete").ev("m2", "read_end", detail="complete")
    h.read(range(1, 11))
    v = _both(spark_analyze, h, tmp_path)
    assert (v["groups"], v["group_recv_rows"], v["group_skips"], v["group_duplicates"]) == (1, 10, 0, 0)
    assert (v["group_nonmonotonic"], v["group_commits"], v["group_commit_backwards"]) == (0, 2, 0)
    assert v["group_read_complete"] is True and v["result"] == "pass"
    # the members' deliveries are not the end read's: nothing counted twice, nothing stowed away
    assert (v["received"], v["duplicate_deliveries"], v["recv_rows"]) == (10, 0, 10)
    assert all(c.judge(v) == policy.PASS for c in policy.CHECKS if c.scope is policy.GROUP)
    # the run's block on the console shows the group's checks
    block = console.run_block(v)
    assert re.search(r"^Group skips: +0$", block, re.M) and re.search(r"^Commits backwards: +0$", block, re.M), block


def test_a_group_skip_is_a_stored_message_no_member_processed(spark_analyze, tmp_path):
    # committed before processing: m1 committed 6 with 4 and 5 in hand, and died; m2 took over at 6
    h = _clean(H().member("m1").member("m2"))
    h.processed("m1", range(1, 4)).commit("m1", 6)
    h.processed("m2", range(7, 11))
    h.ev("m1", "read_end", detail="complete").ev("m2", "read_end", detail="complete")
    for v in range(1, 11):  # the end read, at Kafka's partition:offset
        h.ev("c1", "recv", "p1", v, offset=f"0:{v - 1}")
    h.ev("c1", "read_end", detail="complete")
    v = _both(spark_analyze, h, tmp_path)
    # 4, 5 and 6 (m2 began at position 6, value 7): stored, never processed
    assert v["group_skips"] == 3 and v["result"] == "fail"
    assert policy.BY_NAME["group skips"].judge(v) == policy.FAIL
    assert re.search(r"^Group skips: +3 \(fail\)$", console.run_block(v), re.M), console.run_block(v)
    # skips.csv's rows: where each is stored, and the commit that went past it
    a = spark_analyze(h.rows, tmp_path / "again")
    t_commit = next(r["t_ns"] for r in h.rows if r["type"] == "commit") / 1e6
    got = sorted((r["group"], r["value"], r["stored_at"], r["committed_past"]) for r in a.skips.collect())
    assert got == [("g1", x, f"0:{x - 1}", f"m1@{t_commit:.1f}ms 6") for x in (4, 5, 6)]
    # a message the broker lost is acked loss, not a skip
    h2 = _clean(H("r2").member("m1")).processed("m1", range(1, 10)).ev("m1", "read_end", detail="complete")
    h2.read(range(1, 10))
    v2 = _both(spark_analyze, h2, tmp_path / "2")
    assert (v2["group_skips"], v2["acked_missing"]) == (0, 1)


def _queue(h: H, client: str, values, before: bool, processed=None) -> H:
    """A RabbitMQ queue's member: each message's ack names it; acked before processing
    (`before`) or after; only `processed` (default all) are processed."""
    done = set(values if processed is None else processed)
    for v in values:
        if before:
            h.ev(client, "commit", "p1", v, detail="acked", group="g1", partition="0")
        if v in done:
            h.ev(client, "recv", "p1", v, group="g1", partition="0")
            if not before:
                h.ev(client, "commit", "p1", v, detail="acked", group="g1", partition="0")
    return h


def test_a_queue_groups_takes_are_the_same_picked_by_a_join(spark_analyze, tmp_path, monkeypatch):
    """Past LITERAL_CLIENTS (run, group) pairs the taking groups are picked by a broadcast
    join instead of a filter of literals: the same figures."""
    from brokerchaos.analysis import job

    monkeypatch.setattr(job, "LITERAL_CLIENTS", 0)
    h = _queue_group(_clean(H()))
    _queue(h, "m1", range(1, 6), before=True, processed=range(1, 4))
    _queue(h, "m2", range(6, 9), before=True)
    h.ev("m2", "read_end", detail="complete", group="g1")
    h.read([9])
    v = _both(spark_analyze, h, tmp_path)
    assert (v["acked_missing"], v["received"], v["group_skips"]) == (1, 9, 3), v


def _queue_group(h: H) -> H:
    for m in ("m1", "m2"):
        h.ev(m, "subscribe", detail="rabbitmq queue; takes", group="g1")
    return h


def test_a_queue_groups_acks_are_read_from_the_broker_and_its_skips_are_what_it_acked_unprocessed(
        spark_analyze, tmp_path):
    # positive: acked on arrival, m1 killed with 4 and 5 in hand; 9 and 10 left for the end read
    h = _queue_group(_clean(H()))
    _queue(h, "m1", range(1, 6), before=True, processed=range(1, 4))
    _queue(h, "m2", range(6, 9), before=True)
    h.ev("m2", "read_end", detail="complete", group="g1")
    h.ev("c1", "recv", "p1", 9).ev("c1", "recv", "p1", 10).ev("c1", "read_end", detail="complete")  # no offsets
    v = _both(spark_analyze, h, tmp_path)
    # the broker lost nothing: what the group took counts as read, once each
    assert (v["acked_missing"], v["received"], v["duplicate_deliveries"]) == (0, 10, 0)
    assert v["group_skips"] == 4 and v["result"] == "fail"  # 4, 5 acked unprocessed; 9, 10 never given it
    skips = spark_analyze(h.rows, tmp_path / "skips").skips.collect()
    got = sorted((r["value"], r["stored_at"], r["committed_past"] and
                  r["committed_past"].split("@")[0] + " " + r["committed_past"].split()[-1]) for r in skips)
    assert got == [(4, "taken", "m1 acked"), (5, "taken", "m1 acked"),
                   (9, "read by c1", None), (10, "read by c1", None)]
    # negative: acked after processing; m1 killed with 4 and 5 unacked, which the broker gave m2
    h = _queue_group(_clean(H()))
    _queue(h, "m1", range(1, 6), before=False, processed=range(1, 4))
    _queue(h, "m2", range(4, 11), before=False)
    h.ev("m2", "read_end", detail="complete", group="g1")
    h.ev("c1", "read_end", detail="complete")
    v = _both(spark_analyze, h, tmp_path / "after")
    assert (v["acked_missing"], v["received"], v["group_skips"], v["result"]) == (0, 10, 0, "pass")
    # and what neither the group took nor the end read found is the broker's loss, not a skip
    h = _queue_group(_clean(H()))
    _queue(h, "m1", range(1, 9), before=False)
    h.ev("m1", "read_end", detail="complete", group="g1")
    h.read([10])
    v = _both(spark_analyze, h, tmp_path / "lost")
    assert (v["acked_missing"], v["group_skips"], v["result"]) == (1, 1, "fail")  # 9 lost; 10 the group's skip


def test_skips_wait_for_the_groups_read_to_finish(spark_analyze, tmp_path):
    h = _clean(H().member("m1")).processed("m1", range(1, 6))
    h.ev("m1", "read_end", detail="incomplete: no delivery for 10s").read(range(1, 11))
    v = _both(spark_analyze, h, tmp_path)
    assert spark_analyze(h.rows, tmp_path / "again").skips is not None  # built where a run has skips
    assert v["group_skips"] == 5 and v["group_read_complete"] is False
    assert policy.BY_NAME["group skips"].judge(v) == policy.UNDECIDED and v["result"] == "unknown"


def test_a_member_that_left_does_not_speak_for_the_groups_read(spark_analyze, tmp_path):
    # m2 left the group (scale-in) after 1..5; m1 read on to the end: the group's read is m1's
    h = _clean(H().member("m1").member("m2")).processed("m2", range(1, 6)).ev("m2", "read_end", detail="left")
    h.processed("m1", range(6, 11)).ev("m1", "read_end", detail="complete").read(range(1, 11))
    v = _both(spark_analyze, h, tmp_path)
    assert v["group_read_complete"] is True and v["consumer_groups"]["g1"]["read_status"] == "complete"
    assert (v["group_skips"], v["result"]) == (0, "pass")
    # every member left: nobody read to the end, so skips are not decided
    h2 = _clean(H("r2").member("m1")).processed("m1", range(1, 6)).ev("m1", "read_end", detail="left")
    v2 = _both(spark_analyze, h2.read(range(1, 11)), tmp_path / "2")
    assert v2["group_read_complete"] is None and v2["group_skips"] == 5 and v2["result"] == "unknown"


def test_duplicates_are_split_by_cause(spark_analyze, tmp_path):
    h = _clean(H().member("m1").member("m2"))
    h.processed("m1", range(1, 6))
    h.processed("m2", [4, 5])  # handed over: the same copies to another member
    h.processed("m2", [5])  # the same copy to the same member again
    h.processed("m2", [6], position=20)  # 6 stored twice (positions 5 and 20)
    h.processed("m2", range(6, 11))
    h.ev("m1", "read_end", detail="complete").ev("m2", "read_end", detail="complete")
    h.read(range(1, 11))
    v = _both(spark_analyze, h, tmp_path)
    assert (v["group_duplicates"], v["group_dup_handover"], v["group_dup_same"], v["group_dup_stored"]) == (4, 2, 1, 1)
    assert v["group_skips"] == 0 and v["result"] == "pass"
    assert policy.BY_NAME["group duplicates"].judge(v) == policy.FAIL


def test_nonmonotonic_positions_but_not_across_an_assignment(spark_analyze, tmp_path):
    h = _clean(H().member("m1"))
    h.processed("m1", range(1, 6))
    h.ev("m1", "assign", group="g1", partition="0", epoch=2)
    h.processed("m1", range(4, 8))  # back to 4 after a new assignment: allowed
    h.processed("m1", [7, 6])  # back without one: two nonmonotonic deliveries
    h.processed("m1", range(8, 11), partition="1")  # another partition's positions are its own
    h.ev("m1", "read_end", detail="complete").read(range(1, 11))
    v = _both(spark_analyze, h, tmp_path)
    assert v["group_nonmonotonic"] == 2
    assert policy.BY_NAME["group nonmonotonic"].judge(v) == policy.FAIL


def test_a_commit_below_an_earlier_one_goes_backwards(spark_analyze, tmp_path):
    h = _clean(H().member("m1").member("m2")).processed("m1", range(1, 11))
    h.commit("m1", 8).commit("m2", 5).commit("m2", 3, detail="failed: REBALANCE_IN_PROGRESS")
    h.commit("m1", 10).commit("m1", 2, partition="1")
    h.ev("m1", "read_end", detail="complete").ev("m2", "read_end", detail="complete").read(range(1, 11))
    v = _both(spark_analyze, h, tmp_path)
    # 5 after 8 went back; the failed commit took nothing; partition 1 has its own positions
    assert (v["group_commits"], v["group_commit_failures"], v["group_commit_backwards"]) == (5, 1, 1)
    assert policy.BY_NAME["commits backwards"].judge(v) == policy.FAIL


def test_a_run_without_a_group_is_outside_the_group_checks(spark_analyze, tmp_path):
    h = _clean(H()).read(range(1, 11))
    a = spark_analyze(h.rows, tmp_path)
    v = _both(spark_analyze, h, tmp_path / "again")
    assert v["groups"] == 0 and v["result"] == "pass" and a.skips is None
    assert all(c.judge(v) == policy.NA for c in policy.CHECKS if c.scope is policy.GROUP)
    assert "Group skips" not in console.run_block(v) and "Torn transactions" not in console.run_block(v)
    from brokerchaos.report.stats import wilson

    assert not any(c in policy.rates([v], wilson) for c in ("group skips", "commits backwards"))


def test_two_groups_are_judged_each_on_their_own(spark_analyze, tmp_path):
    h = _clean(H().member("a1", "a").member("b1", "b"))
    h.processed("a1", range(1, 11), group="a").processed("b1", range(1, 9), group="b")
    h.ev("a1", "read_end", detail="complete").ev("b1", "read_end", detail="complete").read(range(1, 11))
    v = _both(spark_analyze, h, tmp_path)
    assert v["groups"] == 2 and v["group_skips"] == 2
    assert (v["consumer_groups"]["a"]["group_skips"], v["consumer_groups"]["b"]["group_skips"]) == (0, 2)


def test_the_report_draws_a_group_and_lists_its_skips(spark, tmp_path):
    """report.html with a consumer group: its plot per member and lag, its skips table; and
    skips.csv. The end read starts past 1 (a JF0 jump, which the report also draws)."""
    import csv
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from brokerchaos.analysis import metrics, timeline
    from brokerchaos.history.schema import SCHEMA
    from brokerchaos.report import files, html, session_table

    h = _clean(H().member("m1").member("m2"))
    h.ev("m1", "assign", group="g1", partition="0").processed("m1", range(1, 4)).commit("m1", 6)
    h.ev("nemesis", "fault", node="g1-m1", detail="kill consumer").ev("nemesis", "heal", node="g1-m1",
                                                                      detail="kill consumer")
    h.processed("m2", range(7, 11))
    h.ev("m1", "read_end", detail="complete").ev("m2", "read_end", detail="complete")
    for v in [2, 1] + list(range(3, 11)):
        h.ev("c1", "recv", "p1", v, offset=f"0:{v - 1}")
    h.ev("c1", "read_end", detail="complete")
    (tmp_path / "h").mkdir()
    pq.write_table(pa.Table.from_pylist(h.rows, schema=SCHEMA), tmp_path / "h" / "h.parquet")
    (tmp_path / "scenario.json").write_text(json.dumps({"name": "grouped", "system": "kafka", "runs": 1}))
    df = metrics.read_history(spark, str(tmp_path / "h"))
    analysis = metrics.analyze(spark, df)
    try:
        analysis.verdicts[:] = session_table.complete(analysis.verdicts)
        summary = files.write_session(analysis, tmp_path, {}, history=df)
        path = html.write_session(spark, df, analysis, tmp_path, {}, summary)
        tl = timeline.collect(spark, df, analysis.verdicts, analysis.jumps, analysis.losses, None, analysis.skips)
    finally:
        analysis.release()
    (v,) = analysis.verdicts
    assert v["jf0"] == 1 and v["group_skips"] == 3
    page = path.read_text()
    assert "Consumer group g1" in page and "Skipped by g1" in page and "id=\"group-r1-g1\"" in page
    (run,) = tl.values()
    assert sorted(run.group_recv) == [("g1", "m1"), ("g1", "m2")]
    assert sum(n for _, n in run.group_done["g1"]) == 7 and len(run.skips) == 3
    with open(tmp_path / "skips.csv", newline="") as fh:
        assert [int(r["value"]) for r in csv.DictReader(fh)] == [4, 5, 6]
    assert summary["verdicts"]["group skips"]["runs"] == 1


def test_a_journal_keeps_every_line_written_and_drops_one_cut_off(tmp_path):
    """A member's rows as written to its journal reach its Parquet files; a last line cut
    off by a kill is left out, not taken for a row."""
    import pyarrow.dataset as ds

    from brokerchaos.history import Recorder
    from brokerchaos.workload.group import Journal, collect

    j = Journal(tmp_path / "g1-m1.journal", 0)
    j.record("subscribe", detail="kafka classic", group="g1")
    j.record("recv", "p1", 7, offset="0:6", group="g1", partition="0", position=6)
    j.record("commit", detail="ok", group="g1", partition="0", position=7)
    j.close()
    with open(tmp_path / "g1-m1.journal", "a") as fh:
        fh.write('[123,"recv","p1",8')  # the process died mid-line
    n = collect(tmp_path / "g1-m1.journal", Recorder(tmp_path / "history", "r1", "g1-m1", 0))
    rows = ds.dataset(str(tmp_path / "history")).to_table().to_pylist()
    assert n == 3 and not (tmp_path / "g1-m1.journal").exists()
    assert [(r["type"], r["value"], r["partition"], r["position"], r["group"]) for r in rows] == [
        ("subscribe", None, None, None, "g1"), ("recv", 7, "0", 6, "g1"), ("commit", None, "0", 7, "g1")]
    assert [r["seq"] for r in rows] == [1, 2, 3] and all(r["t_ns"] >= 0 for r in rows)


def test_a_group_scenario_is_refused_where_it_cannot_run():
    import pytest

    from brokerchaos import validation as sc
    from brokerchaos.errors import ScenarioError

    def refused(doc):
        with pytest.raises(ScenarioError) as e:
            sc.build({"name": "x", **doc})
        return str(e.value)

    stream = refused({"system": "rabbitmq", "options": {"queue_type": "stream"}, "workload": {"group": {}}})
    assert stream.startswith("scenario field 'workload.group.kind': competing consumers"), stream
    assert "no_ack" in refused({"system": "rabbitmq", "workload": {"group": {"commit": "auto"}}})
    sc.build({"name": "x", "system": "rabbitmq", "workload": {"group": {"commit": "before"}},
              "fault": {"action": "kill", "target": "group-coordinator"}})
    assert "'workload.group.commit'" in refused({"system": "pulsar", "workload": {"group": {"commit": "auto"}}})
    assert "pulsar-lite" in refused({"system": "pulsar", "options": {"broker": "lite"},
                                     "cluster": {"nodes": 1, "replicas": 1}, "workload": {"group": {}}})
    assert "shared subscriptions on mosquitto" in refused({"system": "mqtt", "workload": {"group": {}}})
    assert "'workload.group.kind'" in refused({"system": "redis", "workload": {"group": {"kind": "durable"}}})
    assert "KIP-848" in refused({"system": "kafka", "cluster": {"version": "3.9"},
                                 "workload": {"group": {"kind": "consumer"}}})
    assert "'workload.group.kind'" in refused({"system": "kafka", "workload": {"group": {"kind": "shared"}}})
    assert "'fault.target'" in refused({"system": "kafka", "fault": {"action": "kill", "target": "consumer"}})
    assert "act on a consumer group" in refused({"system": "kafka", "workload": {"group": {}},
                                        "fault": {"action": "isolate", "target": "consumers[1]"}})
    assert "'fault.target'" in refused({"system": "kafka", "fault": {"action": "kill", "target": "group-coordinator"}})
    assert "no group coordinator" in refused({"system": "mqtt", "options": {"broker": "mosquitto"},
                                              "cluster": {"nodes": 1, "replicas": 1}, "workload": {"group": {}},
                                              "fault": {"action": "kill", "target": "group-coordinator"}})
    for action in ("pause", "restart", "stop"):
        sc.build({"name": "x", "system": "redis", "workload": {"group": {}}, "fault": {"action": action,
                                                                                     "target": "consumers[1]"}})
    assert "'workload.group.commit'" in refused({"system": "kafka", "workload": {"group": {"commit": "never"}}})
    s = sc.build({"name": "x", "system": "kafka", "cluster": {"version": "4.1"},
                  "workload": {"group": {"kind": "consumer"}}, "fault": {"action": "kill", "target": "consumer"}})
    assert s.workload.group.consumers == 2 and s.workload.group.commit == "after"
    sc.build({"name": "x", "system": "kafka", "workload": {"group": {"kind": "consumer"}}})  # the default, 4.4


def test_a_groups_outage_is_its_longest_partition_without_a_delivery_in_a_fault_window(spark_analyze, tmp_path):
    h = _clean(H().member("m1").member("m2"))
    h.processed("m1", range(1, 4), partition="1")
    h.processed("m1", range(1, 4), partition="0")
    h.ev("nemesis", "fault", node="m1", detail="kill consumer")
    h.ev("nemesis", "heal", node="m1", detail="kill consumer", dt=500_000_000)
    h.processed("m2", range(4, 6), partition="1", position=9)  # partition 1 again after 0.5 s
    h.ev("m2", "recv", "p1", 6, offset="0:5", group="g1", partition="0", position=5, dt=1_500_000_000)
    h.processed("m2", range(7, 11))
    h.ev("m1", "read_end", detail="complete").ev("m2", "read_end", detail="complete").read(range(1, 11))
    v = _both(spark_analyze, h, tmp_path)
    # partition 0 went 2 s without a delivery (from its last before the fault), 2 s less the
    # few µs before the fault counted from the fault on
    (gap,) = v["group_outage_ms"]
    assert 1999 < gap <= 2000.01, gap
    # no group, no outage figure; a window no partition outlived has its own
    assert _both(spark_analyze, _clean(H("r2")).read(range(1, 11)), tmp_path / "2")["group_outage_ms"] == []


def test_a_member_that_cannot_start_is_said_in_one_line(tmp_path):
    """A member whose process fails to build (its library, its broker) ends the group's start
    with MemberError naming it and why (the run turns it into one line, not a traceback)."""
    import asyncio

    import pytest

    from brokerchaos.history import Recorder
    from brokerchaos.scenario import GroupSpec
    from brokerchaos.workload.group import ConsumerGroup, MemberError

    def make(client, hold=None):
        raise ConnectionError("no broker at 10.9.9.9:6379")

    g = ConsumerGroup(GroupSpec(consumers=1), 5.0, make, lambda c: Recorder(tmp_path / "history", "r1", c, 0),
                      lambda c: tmp_path / f"{c}.journal")
    with pytest.raises(MemberError, match=r"g1-m1 \(pid \d+\) did not start: g1-m1: ConnectionError: no broker"):
        asyncio.run(g.start(timeout=20))
    assert not any(inc.proc.is_alive() for s in g.slots.values() for inc in s.runs)


class _BusyLoopMember:
    """A member in an event loop that is almost always inside a plain callback (as it is
    inside a socket transport's send, whose `except BaseException` once took a Leave)."""

    def run(self, finishing, idle: float) -> str:
        import asyncio
        import time

        async def main() -> str:
            loop = asyncio.get_running_loop()

            def busy() -> None:
                t = time.monotonic()
                while time.monotonic() - t < 0.05:
                    pass
                loop.call_soon(busy)

            loop.call_soon(busy)
            while not finishing.is_set():
                await asyncio.sleep(0.01)
            return "complete"

        return asyncio.run(main())

    def close(self) -> None:
        pass


class _PlainMember:
    def run(self, finishing, idle: float) -> str:
        import time

        while not finishing.is_set():
            time.sleep(0.01)
        return "complete"

    def close(self) -> None:
        pass


def test_a_member_asked_to_leave_leaves_in_an_event_loop_or_out_of_one(tmp_path):
    """LEAVE_SIGNAL ends a member with read_end `left` wherever the signal lands; in an event
    loop busy in a plain callback, an exception raised by the handler was caught by asyncio
    and the member stayed (the fix cancels the loop's tasks instead)."""
    import asyncio

    from brokerchaos.history import Recorder
    from brokerchaos.scenario import GroupSpec
    from brokerchaos.workload.group import ConsumerGroup, GroupEvents, Journal

    spec = GroupSpec(consumers=2)
    kinds = {"g1-m1": _BusyLoopMember, "g1-m2": _PlainMember}

    def make(client, hold=None):
        return GroupEvents(Journal(tmp_path / f"{client}.journal", 0), spec, hold), kinds[client]()

    g = ConsumerGroup(spec, 5.0, make, lambda c: Recorder(tmp_path / "history", "r1", c, 0),
                      lambda c: tmp_path / f"{c}.journal")

    async def body() -> dict:
        await g.start(timeout=20)
        try:
            await asyncio.sleep(0.5)
            for name in ("g1-m1", "g1-m2"):
                await g.leave(name, timeout=5)
            return {n: s.now.ended for n, s in g.slots.items()}
        finally:
            await g.close()

    assert asyncio.run(body()) == {"g1-m1": "left", "g1-m2": "left"}
