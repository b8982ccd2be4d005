"""The evidence that a run tested what it names (history format 1.9: `effect`, `whole` and
`mechanism` rows), judged by the policy through the real Spark job: a window whose fault
failed, was not seen, or was not undone, a cluster not whole before the read, a required
mechanism that did not occur: each leaves the run unknown (never a pass), named by its
`--expect`, counted in its rate; a loss stays a fail whatever the evidence."""
from histories import H

from brokerchaos.analysis.policy import BY_NAME, rates
from brokerchaos.report import console, expect, session_table
from brokerchaos.report.html import _evidence_html
from brokerchaos.report.files import summarize, wilson


def _run(name, *evidence, acked=(1, 2, 3), read=(1, 2, 3), dups=()):
    h = H(name).sent_acked(list(acked))
    h.ev("nemesis", "fault", node="n2", detail="kill leader")
    h.ev("nemesis", "heal", node="n2", detail="kill leader (after duration)")
    for type_, value, detail in evidence:
        h.ev("nemesis", type_, value=value, detail=detail, window=1)
    h.read(list(read) + list(dups))
    return h.rows


SEEN = ("effect", 1, "observed: kill leader: gone: n2 (pid 11); running again: n2 as pid 12")
WHOLE = ("whole", 0, "whole after 0.4 s: serving n1, n2, n3")
READY = ("ready", None, "kill leader: stream served again")


def test_a_run_passes_only_on_the_evidence_that_its_fault_happened_and_the_cluster_came_back(spark_analyze, tmp_path):
    rows = (_run("clean", SEEN, READY, WHOLE)
            + _run("failed", ("effect", 0, "failed: command n2: inject: HookError: hook 'cut' exited 1"), WHOLE)
            + _run("no-effect", ("effect", 0, "not observed: partition n2|n3: none of the cluster's packets "
                                              "crossed the cut (0 dropped)"), WHOLE)
            + _run("not-back", ("effect", 0, "not healed: kill leader: gone: n2; not running again: n2"), READY,
                   ("whole", 1, "not whole after 90 s: n2: not running"))
            + _run("unknowable", ("effect", None, "not known: pause n2: no pid held"), WHOLE)
            + _run("lossy", ("effect", 0, "failed: kill leader: never injected: trigger not reached"), WHOLE,
                   read=(1, 2))
            + _run("old"))
    v = {x["run"]: x for x in spark_analyze(rows, tmp_path / "h").verdicts}
    assert v["clean"]["result"] == "pass" and v["clean"]["faults_not_in_effect"] == 0 and v["clean"]["not_whole"] == 0
    for run in ("failed", "no-effect", "not-back"):
        assert v[run]["result"] == "unknown", v[run]
        assert v[run]["faults_not_in_effect"] == 1
    assert v["not-back"]["not_whole"] == 1 and "n2: not running" in v["not-back"]["whole_detail"]
    assert any("HookError" in why for why in v["failed"]["result_why"]), v["failed"]["result_why"]
    # what cannot be told is said, and does not hold the run back
    assert v["unknowable"]["result"] == "pass" and v["unknowable"]["effects_not_known"] == 1
    # a loss is a fail whatever the evidence says of the fault
    assert v["lossy"]["result"] == "fail" and v["lossy"]["acked_missing"] == 1
    # a history written before the evidence rows is judged as before
    assert v["old"]["result"] == "pass" and v["old"]["faults_not_in_effect"] is None and v["old"]["not_whole"] is None
    check = BY_NAME["fault not in effect"]
    assert [check.judge(v[r]) for r in ("clean", "failed", "old")] == ["pass", "fail", "n/a"]
    r = rates(list(v.values()), wilson)
    assert (r["fault not in effect"]["runs"], r["fault not in effect"]["of"]) == (4, 6)
    assert (r["cluster not whole"]["runs"], r["cluster not whole"]["of"]) == (1, 6)
    # --expect: the check by its own name, and a data expectation the run passes is undecided
    exps = expect.parse("no-loss,fault-in-effect,cluster-whole")
    got = {(c.run, c.expectation): (c.status, c.detail) for c in expect.evaluate("s", list(v.values()), exps)}
    assert got[("failed", "no-loss")][0] == "undecided" and "HookError" in got[("failed", "no-loss")][1]
    assert got[("failed", "fault-in-effect")][0] == "fail"
    assert got[("clean", "no-loss")][0] == "pass" and got[("lossy", "no-loss")][0] == "fail"
    assert got[("old", "fault-in-effect")] == ("undecided", "no fault window in this run")
    assert got[("not-back", "cluster-whole")][0] == "fail"
    assert expect.exit_code(expect.evaluate("s", [v["failed"]], expect.parse("no-loss"))) == expect.EXIT_UNDECIDED
    # the console says what was seen and why the run is not a pass
    block = console.run_block(v["no-effect"])
    assert "Fault effect:" in block and "0 dropped" in block, block
    assert "Result: UNKNOWN  (fault not in effect: window 1: not observed: partition" in block, block
    assert "Fault effect:                 not observed: partition n2|n3" in block, block
    assert "fault not in effect" in summarize(list(v.values()))["verdicts"]
    # a downtime ends when the cluster is whole: one never whole again has none, whatever a
    # heal's "ready" said (the stream served by the others)
    assert session_table.columns(v["clean"])["downtime_s"] > 0
    assert session_table.columns(v["not-back"])["downtime_s"] is None
    back = console.run_block({**v["not-back"], **session_table.columns(v["not-back"])})
    assert "Downtime (fault to cluster whole): none: the cluster was not whole before the read" in back, back


def test_a_required_mechanism_that_did_not_occur_leaves_the_run_unknown(spark_analyze, tmp_path):
    moved = ("mechanism", 1, "owner-moved: window 1001: n1 -> n2")
    stayed = ("mechanism", 0, "owner-moved: the stream's owner never moved in a fault window")
    dups = ("mechanism", None, "duplicates: judged by the analysis")
    rows = (_run("moved-dups", SEEN, WHOLE, moved, dups, dups=(2,)) + _run("stayed", SEEN, WHOLE, stayed)
            + _run("no-dups", SEEN, WHOLE, moved, dups) + _run("asks-nothing", SEEN, WHOLE))
    v = {x["run"]: x for x in spark_analyze(rows, tmp_path / "h").verdicts}
    assert v["moved-dups"]["result"] == "pass" and v["moved-dups"]["mechanisms_missing"] == 0
    assert [m["occurred"] for m in v["moved-dups"]["mechanisms"]] == [True, True]
    assert v["moved-dups"]["mechanisms"][1]["evidence"] == "msgs_with_dups 1"
    for run in ("stayed", "no-dups"):
        assert v[run]["result"] == "unknown" and v[run]["mechanisms_missing"] == 1, v[run]
    assert any("the mechanism under test did not occur: owner-moved" in w for w in v["stayed"]["result_why"])
    assert v["asks-nothing"]["mechanisms_missing"] is None and v["asks-nothing"]["result"] == "pass"
    (e,) = expect.parse("mechanism")
    assert e.check(v["no-dups"])[0] == "fail" and "duplicates (msgs_with_dups 0)" in e.check(v["no-dups"])[1]
    assert e.check(v["asks-nothing"]) == ("undecided", "the scenario requires no mechanism")
    # the report's run section lists the same evidence, and why the run is not a pass
    html = _evidence_html(v["stayed"])
    assert "required owner-moved: DID NOT OCCUR" in html and "why unknown:" in html, html
    assert "why" not in _evidence_html(v["moved-dups"]) and "occurred" in _evidence_html(v["moved-dups"])
