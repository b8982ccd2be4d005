"""The cluster's own end check of its copies (a `check` row, runner/endcheck.py): what it
last said decides the under-replication verdict; a run without one is undecided by it and
its rate is left out; the wait stops at the first all-clear or at its bound."""
import asyncio

from histories import H

from brokerchaos.analysis.policy import BY_NAME, rates
from brokerchaos.report import expect
from brokerchaos.report.files import summarize, wilson
from brokerchaos.runner.endcheck import describe, end_check
from brokerchaos.runner.record import RunRecord


def _history(run, *checks):
    h = H(run).sent_acked([1, 2, 3]).read([1, 2, 3])
    for value, detail in checks:
        h.ev("nemesis", "check", value=value, detail=detail)
    return h.rows


def test_the_last_check_row_decides_under_replication(spark_analyze, tmp_path):
    rows = (_history("short", (3, "3 at the first look"), (2, "under-replicated after 180 s: 2 ledger(s)"))
            + _history("whole", (4, "first"), (0, "replicated: none under-replicated after 41.0 s"))
            + _history("unasked", (None, "not known: the cluster never answered in 180 s"))
            + _history("none"))
    v = {x["run"]: x for x in spark_analyze(rows, tmp_path / "h").verdicts}
    assert [v[r]["under_replicated"] for r in ("short", "whole", "unasked", "none")] == [2, 0, None, None]
    assert v["short"]["end_check"].startswith("under-replicated after 180 s")
    check = BY_NAME["under-replication"]
    assert [check.judge(v[r]) for r in ("short", "whole", "unasked", "none")] == \
        ["fail", "pass", "undecided", "undecided"]
    # not a loss: the run's own result stands on its messages
    assert {v[r]["result"] for r in v} == {"pass"}
    (e,) = expect.parse("replicated")
    assert e.check(v["short"])[0] == "fail" and "2 ledger(s)" in e.check(v["short"])[1]
    assert e.check(v["none"]) == ("undecided", "no end check in this run")
    assert rates(list(v.values()), wilson)["under-replication"]["runs"] == 1
    assert rates(list(v.values()), wilson)["under-replication"]["of"] == 2
    # a session where no run had the cluster's word has no such rate (nor a console line)
    assert "under-replication" not in summarize([v["none"]])["verdicts"]


class _Roles:
    def __init__(self, answers, wait):
        self.answers, self.wait, self.asked = list(answers), wait, 0

    def copies_wait(self):
        return self.wait

    async def under_replicated(self):
        self.asked += 1
        a = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(a, Exception):
            raise a
        return a

    async def short_of_copies(self, ids):
        return [f"ledger {i}: OPEN" for i in ids]


class _Dep:
    def __init__(self, roles):
        self.roles = roles


class _Rec:
    def __init__(self):
        self.rows = []

    def record(self, type_, **kw):
        self.rows.append((type_, kw))


def _check(answers, wait, monkeypatch):
    monkeypatch.setattr("brokerchaos.runner.endcheck.EVERY_S", 0.01)
    roles, rec, nem = _Roles(answers, wait), RunRecord("r1", 1, "pulsar", "netns", {}), _Rec()
    lines = []
    asyncio.run(end_check(_Dep(roles), rec, nem, lines.append))
    return roles, rec, nem.rows, lines


def test_the_wait_ends_at_the_first_all_clear(monkeypatch):
    roles, rec, rows, lines = _check([["7", "9"], OSError("bookie down"), ["9"], []], 30, monkeypatch)
    assert roles.asked == 4 and rec.under_replicated == []
    assert rows == [("check", {"value": 0, "detail": rec.end_check})]
    assert rec.end_check.startswith("replicated: none under-replicated after") and "2 under-replicated at the first" \
        in rec.end_check and lines == [f"End check: {rec.end_check}"]


def test_what_is_still_short_at_the_bound_is_recorded(monkeypatch):
    roles, rec, rows, _ = _check([["7", "9"]], 0.05, monkeypatch)
    assert roles.asked >= 2 and rec.under_replicated == ["7", "9"] and rows[0][1]["value"] == 2
    assert "2 ledger(s) (7, 9;" in rec.end_check
    # what the system says each still-short ledger is, after the count
    assert rec.end_check.endswith("; ledger 7: OPEN; ledger 9: OPEN"), rec.end_check


def test_a_cluster_that_never_answers_is_not_an_all_clear(monkeypatch):
    _, rec, rows, _ = _check([LookupError("no auditor elected")], 0.05, monkeypatch)
    assert rows[0][1]["value"] is None and rec.under_replicated is None
    assert "never answered" in rec.end_check and "no auditor elected" in rec.end_check


def test_no_check_where_the_system_keeps_no_account(monkeypatch):
    roles, rec, rows, lines = _check([[]], None, monkeypatch)
    assert roles.asked == 0 and rows == [] and lines == [] and rec.end_check is None


def test_describe_shortens_a_long_list():
    d = describe([str(i) for i in range(30)], [str(i) for i in range(25)], 180.0, None)
    assert "25 ledger(s)" in d and "and 5 more" in d and "30 under-replicated at the first look" in d


def test_the_background_watch_keeps_what_a_repair_before_the_first_look_would_hide(monkeypatch):
    # a loaded machine: AutoRecovery marked 2 ledgers and copied them again before the end
    # check first looked; the watch from the write's start saw them
    from brokerchaos.runner.endcheck import CopiesWatch

    monkeypatch.setattr("brokerchaos.runner.endcheck.EVERY_S", 0.01)
    roles = _Roles([[], OSError("bookie down"), ["7", "9"], ["9"], []], 30)
    rec, nem, lines = RunRecord("r1", 1, "pulsar", "netns", {}), _Rec(), []

    async def main():
        watch = CopiesWatch(_Dep(roles), 0)
        watch.start()
        while roles.asked < 6:
            await asyncio.sleep(0.01)
        await end_check(_Dep(roles), rec, nem, lines.append, watch)
        assert watch.task is None and await watch.stop() is None

    asyncio.run(main())
    assert rec.copies_during["most"] == 2 and rec.copies_during["looks"] >= 4 and rec.copies_during["first_ms"] > 0
    # the timeline: named at first_ms, one copied, then none (the failed look is no change)
    changes = rec.copies_during["changes"]
    assert [c for _, c in changes] == [2, 1, 0] and changes[0][0] == rec.copies_during["first_ms"], changes
    assert changes == sorted(changes), changes
    assert "0 under-replicated at the first look; during the run at most 2, first named at" in rec.end_check
    assert rec.under_replicated == [] and nem.rows[0][1]["value"] == 0


def test_no_watch_where_the_system_keeps_no_account():
    from brokerchaos.runner.endcheck import CopiesWatch

    async def main():
        watch = CopiesWatch(_Dep(_Roles([[]], None)), 0)
        watch.start()
        return watch.task, await watch.stop()

    assert asyncio.run(main()) == (None, None)


def test_a_pulsar_ledger_still_short_is_named_by_its_topic_state_and_ensembles():
    """The line for a ledger the auditor still lists: BookKeeper's metadata as its bookies'
    HTTP admin API gives it (`/api/v1/ledger/metadata`), the bookies by node name."""
    import base64

    from brokerchaos.systems.pulsar.copies import UnderReplication

    class Cluster:
        def node_at(self, host, port, service):
            return {"198.18.0.13": "b2", "198.18.0.15": "b4", "198.18.0.14": "b3"}.get(host)

    roles = UnderReplication()
    roles.cluster = Cluster()
    ml = base64.b64encode(b"pulsar/198.18.0.11:8080/persistent/healthcheck").decode()
    md = {"ledgerId": 0, "state": "OPEN", "lastEntryId": -1, "customMetadata": {"pulsar/managed-ledger": ml},
          "allEnsembles": {"0": [{"id": "198.18.0.13:3181"}, {"id": "198.18.0.15:3181"}, {"id": "198.18.0.14:3181"}],
                           "12": [{"id": "198.18.0.13:3181"}, {"id": "198.18.0.15:3181"}, {"id": "10.0.0.9:3181"}]}}
    assert roles.ledger_line("0", md) == ("ledger 0 (pulsar/198.18.0.11:8080/persistent/healthcheck): OPEN, "
                                          "ensembles 0: b2 b4 b3; 12: b2 b4 10.0.0.9:3181")
    closed = {**md, "state": "CLOSED", "lastEntryId": 2, "customMetadata": {}}
    assert roles.ledger_line("0", closed) == \
        "ledger 0: CLOSED, last entry 2, ensembles 0: b2 b4 b3; 12: b2 b4 10.0.0.9:3181"
