"""`--expect`: each run's verdict held against what a CI pipeline expects; pass, fail or
undecided, an exit code, a JUnit file. Small recorded verdicts, no Spark."""
import xml.etree.ElementTree as ET

import pytest

from brokerchaos.report import expect


def verdict(run="run-001", **kw):
    v = {"run": run, "read_complete": True, "read_status": "complete", "recv_rows": 10, "acked_missing": 0,
         "msgs_with_dups": 0, "duplicate_deliveries": 0, "out_of_order": 0, "jf": 0, "jb": 0, "djf": 0, "djb": 0,
         "received_after_nack": 0, "timing": True, "fault_ack_gaps_ms": [1200.0]}
    v.update(kw)
    return v


def test_group_expectations_are_undecided_without_a_group_and_judge_one_with_it():
    exps = expect.parse("no-skips,group-monotonic")
    cases = expect.evaluate("s", [verdict()], exps)
    assert [c.status for c in cases] == ["undecided", "undecided"]
    assert cases[0].detail == "no consumer group in this run"
    grouped = {"groups": 1, "group_read_complete": True, "group_skips": 3, "group_nonmonotonic": 0,
               "consumer_groups": {"g1": {"read_complete": True}}}
    assert [c.status for c in expect.evaluate("s", [verdict(**grouped)], exps)] == ["fail", "pass"]
    # a group whose read did not finish leaves its skips undecided, and says which group
    g = {**grouped, "group_read_complete": False,
         "consumer_groups": {"g1": {"read_complete": False, "read_status": "incomplete: no delivery for 10s"}}}
    case = expect.evaluate("s", [verdict(**g)], expect.parse("no-skips"))[0]
    assert case.status == "undecided" and "g1: incomplete: no delivery for 10s" in case.detail


def test_parse_takes_the_documented_list_and_names_what_it_refuses():
    exps = expect.parse("no-loss, no-duplicates,ordered,no-nack-received,max-outage=1.5s")
    assert [e.name for e in exps] == ["no-loss", "no-duplicates", "ordered", "no-nack-received", "max-outage"]
    assert exps[-1].arg == 1.5 and expect.parse("max-outage=500ms")[0].arg == 0.5
    assert expect.parse("max-outage=2m")[0].arg == 120
    for bad, named in (("no-loss,fast", "'fast'"), ("ordered=yes", "ordered takes no value"),
                       ("max-outage", "needs a duration"), ("max-outage=soon", "needs a duration"),
                       (",", "no expectation")):
        with pytest.raises(expect.ExpectError, match=named):
            expect.parse(bad)


def test_a_violation_seen_fails_even_in_an_unfinished_read_and_an_absence_needs_a_finished_one():
    exps = expect.parse("no-loss,no-duplicates,ordered,max-outage=2s")
    unfinished = dict(read_complete=False, read_status="incomplete: stream unavailable")
    cases = expect.evaluate("s", [
        verdict("clean"),
        verdict("lossy", acked_missing=3),
        verdict("dups-unfinished", msgs_with_dups=2, duplicate_deliveries=2, **unfinished),
        verdict("quiet-unfinished", **unfinished),
        verdict("slow", fault_ack_gaps_ms=[800.0, 2500.0]),
        verdict("never-back", fault_ack_gaps_ms=[None]),
        verdict("untimed", timing=False, fault_ack_gaps_ms=[None]),
    ], exps)
    got = {(c.run, c.expectation): c.status for c in cases}
    assert {k for k, s in got.items() if s == "fail"} == {
        ("lossy", "no-loss"), ("dups-unfinished", "no-duplicates"), ("slow", "max-outage=2s"),
        ("never-back", "max-outage=2s")}
    assert {k for k, s in got.items() if s == "undecided"} == {
        ("dups-unfinished", "no-loss"), ("dups-unfinished", "ordered"), ("quiet-unfinished", "no-loss"),
        ("quiet-unfinished", "no-duplicates"), ("quiet-unfinished", "ordered"), ("untimed", "max-outage=2s")}
    assert expect.exit_code(cases) == 3
    assert expect.exit_code([c for c in cases if c.run in ("clean", "quiet-unfinished")]) == 4
    assert expect.exit_code([c for c in cases if c.run == "clean"]) == 0
    slow = next(c for c in cases if c.run == "slow" and c.status == "fail")
    assert "2,500 ms" in slow.detail


def test_junit_has_a_case_per_run_and_expectation_with_the_figures(tmp_path):
    cases = expect.evaluate("nats-kill-leader-20261123T000000Z", [verdict("run-001"), verdict(
        "run-002", acked_missing=49), verdict("run-003", read_complete=False, read_status="incomplete: x")],
        expect.parse("no-loss,ordered"))
    f = tmp_path / "out" / "junit.xml"
    expect.write_junit(f, cases)
    (suite,) = ET.parse(f).getroot().findall("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("6", "1", "2")
    by_name = {t.get("name"): t for t in suite.findall("testcase")}
    assert set(by_name) == {f"run-00{i}: {e}" for i in (1, 2, 3) for e in ("no-loss", "ordered")}
    assert by_name["run-002: no-loss"].find("failure").get("message") == "49 acked messages missing"
    assert by_name["run-003: no-loss"].find("error").get("type") == "undecided"
    assert by_name["run-001: ordered"].find("failure") is None and by_name["run-001: ordered"].find("error") is None


def test_run_and_campaign_refuse_a_bad_expectation_before_anything_starts(capsys):
    from brokerchaos import cli

    assert cli.main(["run", "scenarios/nats-kill-leader.yaml", "--expect", "no-loss,max-outage=forever"]) == 2
    assert cli.main(["campaign", "campaigns/kafka-dedup.yaml", "--junit", "x.xml"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "max-outage needs a duration" in err[0] and "--junit needs --expect" in err[1]


def test_sessions_results_map_to_the_same_exit_codes_as_expectations():
    assert expect.result_exit(["pass", "pass"]) == 0
    assert expect.result_exit(["pass", "unknown"]) == 4
    assert expect.result_exit(["unknown", "fail", "pass"]) == 3
    assert expect.result_exit(r for r in ["pass"]) == 0  # any iterable, once


# -- one policy: the run's result, the session's rates and --expect say the same ------------

def test_a_run_that_read_nothing_and_never_said_so_is_out_of_the_acked_loss_rate():
    """No read_end row and nothing read: `unknown` by its own result, so it is out of the
    acked-loss rate as it is out of the pass/fail count (it was counted in the rate's
    runs, as a run without loss, before the policy was one table)."""
    from brokerchaos.analysis.policy import result_of
    from brokerchaos.report.files import summarize

    silent = verdict("silent", read_complete=None, read_status=None, recv_rows=0, acked_missing=7)
    lossy = verdict("lossy", acked_missing=3)
    rest = [verdict(f"ok-{i}") for i in range(3)]
    runs = [silent, lossy, *rest]
    for v in runs:
        v.update(result=result_of(v), send_count=10, pos_ack_count=10)
    assert [v["result"] for v in runs] == ["unknown", "fail", "pass", "pass", "pass"]
    su = summarize([{**_totals(), **v} for v in runs])
    assert su["results"] == {"pass": 3, "fail": 1, "unknown": 1}
    assert (su["verdicts"]["acked loss"]["runs"], su["verdicts"]["acked loss"]["of"]) == (1, 4)
    # --expect no-loss reads the same table: the silent run undecided, not passed
    cases = {c.run: c.status for c in expect.evaluate("s", runs, expect.parse("no-loss"))}
    assert cases == {"silent": "undecided", "lossy": "fail", "ok-0": "pass", "ok-1": "pass", "ok-2": "pass"}


def _totals() -> dict:
    """The figures summarize adds up (the verdict's figures marked TOTAL), at zero."""
    from brokerchaos.report.files import TOTALS

    return {k: 0 for k in TOTALS}


def test_every_check_of_the_policy_is_a_rate_an_expectation_and_a_csv_column():
    from brokerchaos.analysis.policy import CHECKS
    from brokerchaos.report.files import EXTRA_COLUMNS, SEED_COLUMNS, summarize

    grouped = {"groups": 1, "group_read_complete": True, "group_skips": 0, "group_duplicates": 0,
               "group_nonmonotonic": 0, "group_commit_backwards": 0}
    txns = {"txns": 3, "aborted_reads": 0, "torn_txns": 0, "offset_conflicts": 0}
    eos = {"eos_outputs": 1, "eos_read_complete": True, "eos_duplicates": 0, "eos_missing": 0, "eos_nacked": 0}
    evidence = {"faults_not_in_effect": 0, "not_whole": 0, "mechanisms_missing": 0}
    stored = {"send_count": 10, "msgs_stored_twice": 0, "dups_without_offsets": 0}
    replicas = {"replica_reads": 3, "replica_reads_complete": True, "replicas_diverged": 0, "acked_on_no_replica": 0}
    su = summarize([{**_totals(), **verdict(result="pass", under_replicated=0, **grouped, **txns, **eos,
                                            **evidence, **stored, **replicas)}])
    assert list(su["verdicts"]) == [c.name for c in CHECKS]
    # a cluster's own check is a rate only where some run had it, a group's where a run had a
    # group, a transaction's where a run had transactions, an exactly-once one where a run
    # read a consume-transform-produce group's output
    su = summarize([{**_totals(), **verdict(result="pass")}])
    assert list(su["verdicts"]) == [c.name for c in CHECKS if not c.scope.optional]
    assert {c.expect for c in CHECKS if c.expect} <= set(expect.KINDS)
    columns = set(EXTRA_COLUMNS) | {k for _, k in SEED_COLUMNS}
    assert all(c.key in columns for c in CHECKS)


def test_where_a_figure_shows_is_declared_by_the_verdict_type():
    """summary.json's totals and each topic's figures are the ones Verdict marks: every total
    a count, every count and every figure a whole-run check reads kept per topic."""
    from brokerchaos.analysis.policy import CHECKS, RUN, Way
    from brokerchaos.analysis.topics import TOPIC_KEYS
    from brokerchaos.analysis.verdicts import COUNT_KEYS, type_words
    from brokerchaos.report.files import TOTALS

    assert TOTALS and all(type_words(k) == "int" for k in TOTALS)
    assert set(COUNT_KEYS) | set(TOTALS) <= set(TOPIC_KEYS)
    assert {c.key for c in CHECKS if c.scope is RUN and c.way is not Way.READ} <= set(TOPIC_KEYS)
    assert type_words("read_complete") == "Optional[bool]"
