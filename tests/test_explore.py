"""The exploration's parts that need no cluster (explore.py): the space a system offers, the
draws (the same for a seed, each one a scenario the harness runs), the policy as a check,
the journal cut short by a kill, the coverage, the page; bad input refused in one line. The
search on real runs is tests/test_integration_redis.py's."""
import json

import pytest

from brokerchaos import explore as ex
from brokerchaos import fault_space as fs
from brokerchaos import validation as sc
from brokerchaos.cli import main
from brokerchaos.errors import ScenarioError
from brokerchaos.faults import FAULTS


def test_the_space_is_what_the_system_offers_and_flags_narrow_it():
    redis, kafka = fs.offered("redis"), fs.offered("kafka")
    assert "kill" in redis and "isolate-from" in redis and "none" not in redis and "command" not in redis
    assert "reassign" in kafka and "reassign" not in redis  # Redis has no partition reassignment
    assert all(FAULTS.get(a).family for a in kafka)
    doc = fs.base_doc("redis")
    assert doc == {"name": "explore-redis", "system": "redis"}
    sp = fs.space_of(doc, ["kill", "pause"], ["leader"], 1)
    assert (sp.actions, sp.targets, sp.max_faults) == (("kill", "pause"), ("leader",), 1)
    with pytest.raises(ScenarioError, match="redis does not offer 'reassign'"):
        fs.space_of(doc, ["reassign"])
    with pytest.raises(ScenarioError, match="no target 'leaders'"):
        fs.space_of(doc, None, ["leaders"])
    with pytest.raises(ScenarioError, match="--max-faults"):
        fs.space_of(doc, None, None, 0)


@pytest.mark.parametrize("system", ["redis", "kafka", "nats", "pulsar", "rabbitmq"])
def test_a_seed_draws_the_same_schedules_and_each_is_one_the_harness_runs(system):
    doc = fs.base_doc(system)
    sp = fs.space_of(doc)
    messages = sc.build(doc).workload.messages
    drawn = [fs.draw(doc, sp, 7, i, messages, sc.accepts) for i in range(12)]
    assert drawn == [fs.draw(doc, sp, 7, i, messages, sc.accepts) for i in range(12)]
    assert drawn != [fs.draw(doc, sp, 8, i, messages, sc.accepts) for i in range(12)]
    for d in drawn:
        assert sc.accepts(d) and 1 <= len(d["faults"]) <= sp.max_faults and "fault" not in d
        for f in d["faults"]:
            assert f["action"] in sp.actions and f["target"] in sp.targets
            assert f["trigger"]["after_acks"] / messages in sp.moments
            assert f.get("duration") in sp.durations
    assert len({f["action"] for d in drawn for f in d["faults"]}) > 3  # the space is explored, not one corner
    assert fs.cells(drawn[0], messages)[0][2].endswith("%")


def test_coverage_first_every_pair_the_base_runs_is_drawn_once_before_any_twice():
    doc = fs.base_doc("kafka")
    sp = fs.space_of(doc)
    messages = sc.build(doc).workload.messages
    among = fs.pairs(doc, sp, messages, sc.accepts)
    assert ("reassign", "leader") not in among and ("kill", "leader") in among  # three brokers: nowhere to move
    # what destroys stored data is drawn on some nodes, never on every one: that loss is the fault's
    assert ("corrupt", "leader") in among and ("power-off", "all") in among
    assert not {("corrupt", "all"), ("truncate", "all"), ("kill-wipe", "all")} & set(among)
    # a step-down of nodes holding no leadership is no pair; an isolation drawn with settings
    # that leave something to cut (`from` the peers, or for every node the clients)
    nats = fs.base_doc("nats")
    on_nats = fs.pairs(nats, fs.space_of(nats), sc.build(nats).workload.messages, sc.accepts)
    assert ("stepdown", "leader") in on_nats and not {("stepdown", "followers"), ("stepdown", "all")} & set(on_nats)
    assert ("isolate-from", "followers") in on_nats and ("isolate-from", "all") in on_nats
    assert fs.FAULTS.get("isolate-from").example_for("followers") == {"from": "peers"}
    assert fs.FAULTS.get("isolate-from").example_for("all") == {"from": "clients"}
    assert fs.FAULTS.get("isolate-from").example_for("leader") == {"from": "followers"}
    entries, i = [], 0
    while sum(len(e["cells"]) for e in entries) < len(among):
        d = fs.draw(doc, sp, 3, i, messages, sc.accepts, fs.drawn_so_far(entries))
        entries.append({"cells": fs.cells(d, messages)})
        i += 1
    seen = fs.drawn_so_far(entries)
    # every pair once; only the last schedule's second fault may have started the next round
    assert set(seen) == set(among) and sum(seen.values()) - len(among) == sum(n - 1 for n in seen.values()) <= 1
    # a pair drawn is drawn again only once all the others were
    d = fs.draw(doc, sp, 3, i, messages, sc.accepts, seen)
    assert all(seen[(f["action"], f["target"])] <= 1 for f in d["faults"])


def test_a_base_file_keeps_its_settings_and_loses_its_faults():
    doc = sc.load_document("scenarios/redis-split-brain.yaml")
    sp = fs.space_of(doc, ["kill"], ["leader"], 1)
    d = fs.draw(doc, sp, 0, 4, 60_000, sc.accepts)
    assert d["options"] == doc["options"] and d["workload"] == doc["workload"]
    assert d["name"] == "redis-split-brain-x005" and [f["action"] for f in d["faults"]] == ["kill"]
    # an action no target of the space can run is said, not drawn for ever
    with pytest.raises(ScenarioError, match="no fault of the space is one redis can run"):
        fs.draw(doc, fs.space_of(doc, ["kill"], ["coordinator"], 1), 0, 0, 60_000, sc.accepts)


def _v(result, **kw):
    return {"run": "run-001", "result": result, "result_why": [], **kw}


def test_the_policy_as_a_check_counts_a_pass_only_when_the_fault_was_seen_to_happen():
    check = ex.PolicyCheck()
    assert check.check(_v("fail", result_why=["acked missing 3"])) == ("fail", "acked missing 3")
    assert check.check(_v("unknown", result_why=["the read did not finish"]))[0] == "undecided"
    assert check.check(_v("pass")) == ("pass", "")  # nothing short: a verdict without evidence rows has no fault
    short = check.check(_v("pass", not_whole=True, whole_detail="n2 down"))
    assert short[0] == "undecided" and "did not test what it names" in short[1], short


def _entry(i, outcome, cells, runs=1):
    return {"i": i, "faults": [{"action": a, "target": t, "trigger": {"after_acks": 10}} for a, t, _ in cells],
            "cells": cells, "dir": f"s{i}", "outcome": outcome, "runs": runs, "failed": int(outcome == "fails"),
            "decided": int(outcome != "undecided"), "why": ["run-001: lost"] if outcome == "fails" else [],
            "undecided_why": ["run-001: not whole"] if outcome == "undecided" else []}


def test_the_journal_survives_a_cut_last_line_and_the_coverage_counts_explored_apart(tmp_path):
    entries = [_entry(1, "holds", [["kill", "leader", "10%"]]),
               _entry(2, "undecided", [["kill", "leader", "10%"], ["pause", "all", "50%"]]),
               _entry(3, "fails", [["pause", "all", "50%"]])]
    (tmp_path / ex.JOURNAL).write_text("".join(json.dumps(e) + "\n" for e in entries) + '{"i": 4, "fau')
    assert ex.read_journal(tmp_path) == entries
    (tmp_path / ex.JOURNAL).write_text('{"i": 1, "fau\n' + json.dumps(entries[0]) + "\n")
    with pytest.raises(json.JSONDecodeError):  # a broken line before the last is not a kill's: said
        ex.read_journal(tmp_path)
    cov = {(c["action"], c["target"], c["moment"]): (c["tried"], c["explored"], c["failed"])
           for c in ex.coverage(entries)}
    assert cov == {("kill", "leader", "10%"): (2, 1, 0), ("pause", "all", "50%"): (2, 1, 1)}


def test_the_exploration_is_written_with_its_violation_as_a_scenario_to_shrink(tmp_path):
    head = {"scenario": "b", "system": "redis", "seed": 3, "check": "the policy",
            "space": fs.Space(("kill", "pause")).to_json(), "command": "brokerchaos explore b.yaml",
            "base": {"name": "b", "system": "redis", "options": {"wait_replicas": 0}, "fault": {"action": "kill"}}}
    entries = [_entry(1, "holds", [["kill", "leader", "10%"]]),
               _entry(2, "fails", [["pause", "all", "50%"]])]
    found = ex._written(tmp_path, head, entries, "1 violation found")
    doc = sc.load_document(found["violation_file"])
    assert doc["faults"] == entries[1]["faults"] and doc["options"] == {"wait_replicas": 0} and "fault" not in doc
    assert json.loads((tmp_path / ex.EXPLORE_FILE).read_text())["explored"] == 2
    assert "2 schedules tried (2 explored, 2 runs), 1 failed the policy; stopped: 1 violation found" in ex.table(found)
    page = (tmp_path / "report.html").read_text()
    assert "Found:</b> schedule 2" in page and "href='s1/report.html'" in page and "brokerchaos shrink" in page


@pytest.mark.parametrize("argv,said", [
    (["explore", "redis", "--budget", "0"], "--budget: at least 1"),
    (["explore", "redis", "--actions", "kil"], "--actions: no fault action 'kil'"),
    (["explore", "redis", "--actions", "reassign"], "redis does not offer 'reassign'"),
    (["explore", "redis", "--actions", "kill", "--targets", "coordinator"],
     "--actions: kill: not on this scenario: this system has no coordinator"),
    (["explore", "nosuch.yaml"], "nosuch.yaml"),
    (["explore"], "give a scenario file or a system's name"),
    (["explore", "redis", "--resume", "/tmp"], "not an exploration"),
])
def test_bad_input_is_one_line_and_exit_2(argv, said, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0], err


def test_a_setting_varied_is_drawn_with_the_faults_and_kept_in_the_violation(tmp_path):
    doc = {"name": "k", "system": "kafka", "options": {"acks": "all"}}
    with pytest.raises(ScenarioError, match="--vary: 'acks=1'"):
        fs.vary_of(["acks=1"])
    with pytest.raises(ScenarioError, match="--vary: acks=2"):
        fs.space_of(doc, ["kill"], ["leader"], 1, fs.vary_of(["acks=1,2"]))
    sp = fs.space_of(doc, ["kill"], ["leader"], 1, fs.vary_of(["acks=1,all"]))
    assert fs.Space.from_json(json.loads(json.dumps(sp.to_json()))) == sp
    drawn = [fs.draw(doc, sp, 0, i, 100_000, sc.accepts)["options"]["acks"] for i in range(12)]
    assert set(drawn) == {1, "all"}, drawn
    entry = {**_entry(1, "fails", [["kill", "leader", "10%"]]), "drawn": {"acks": 1}}
    head = {"scenario": "k", "system": "kafka", "seed": 0, "check": "no-loss", "space": sp.to_json(), "base": doc}
    other = {**_entry(2, "fails", [["kill", "leader", "30%"]]), "drawn": {"acks": "all"}}
    found = ex._written(tmp_path, head, [entry, other], "2 violations found")
    assert sc.load_document(found["violation_file"])["options"] == {"acks": 1}
    # each violation collected is a file of its own, the page naming the others too
    assert found["violation_files"] == [str(tmp_path / "violation-001.yaml"), str(tmp_path / "violation-002.yaml")]
    assert sc.load_document(found["violation_files"][1])["options"] == {"acks": "all"}
    assert "Also failed:</b> schedule 2" in (tmp_path / "report.html").read_text()
    assert "[acks=1]" in ex.table(found) and "acks: 1" in (tmp_path / "report.html").read_text()


def test_an_action_the_base_cannot_run_is_left_out_and_said_unless_asked_for_by_name(tmp_path):
    doc = {"name": "k", "system": "kafka", "options": {"acks": 1}}  # 3 nodes: no node to move a replica to
    sp = fs.space_of(doc)
    kept, firsts = fs.runnable(doc, sp, 0, 100_000, named=False)
    assert "reassign" in sp.actions and "reassign" not in kept.actions and len(firsts) == len(kept.actions)
    assert "no node to move a replica to" in dict(kept.left_out)["reassign"], kept.left_out
    assert fs.Space.from_json(kept.to_json()) == kept
    with pytest.raises(ScenarioError, match="--actions: reassign: not on this scenario: .*no node to move"):
        fs.runnable(doc, fs.space_of(doc, ["reassign", "kill"]), 0, 100_000, named=True)
    found = ex._written(tmp_path, {"scenario": "k", "system": "kafka", "seed": 0, "check": "no-loss",
                                   "space": kept.to_json(), "base": doc}, [], "the budget of 1 run was spent")
    assert "Left out: reassign" in (tmp_path / "report.html").read_text() and found["violations"] == []


def _stand_in(fails_on: str, log: list, interrupt_at: int = 0):
    """A session that stands for a real one: its one run fails the check when a fault of the
    schedule is `fails_on`; at the `interrupt_at`-th call it is killed instead."""
    def session(cand, runs, stop):
        log.append(cand)
        if len(log) == interrupt_at:
            raise KeyboardInterrupt
        bad = any(f["action"] == fails_on for f in cand["faults"])
        v = {"run": "run-001", "result": "fail" if bad else "pass", "result_why": ["acked loss: 3"] if bad else []}
        return f"s{len(log)}", [v]
    return session


def test_a_schedule_whose_session_did_not_run_is_tried_with_why_and_two_in_a_row_stop_the_search(tmp_path):
    doc = {"name": "b", "system": "redis", "workload": {"messages": 10_000}}
    space = fs.space_of(doc, ["pause", "kill", "delay"], ["leader"], 1)
    calls: list = []

    def never(cand, runs, stop):
        calls.append(cand)
        raise ex.NotRun(f"s{len(calls)}", "the cluster never served: n2 exited")

    found = ex.search(doc, space, ex.PolicyCheck(), 5, ex.Terms(budget_runs=10), tmp_path, never)
    assert len(calls) == 2 == found["runs"] and found["explored"] == 0, found
    assert found["stopped"] == "the last 2 schedules' sessions did not run: the cluster never served: n2 exited"
    e = ex.read_journal(tmp_path)[0]
    assert e["outcome"] == "undecided" and e["dir"] == "s1" and e["runs"] == 1
    assert e["undecided_why"] == ["the session did not run: the cluster never served: n2 exited"]


def test_a_search_killed_mid_schedule_resumes_with_the_same_draws_and_stops_at_its_terms(tmp_path):
    doc = {"name": "b", "system": "redis", "workload": {"messages": 10_000}}
    space = fs.space_of(doc, ["pause", "kill", "delay"], ["leader"], 1)
    check = ex.PolicyCheck()
    first: list = []
    with pytest.raises(KeyboardInterrupt):
        ex.search(doc, space, check, 5, ex.Terms(budget_runs=30), tmp_path, _stand_in("kill", first, 3))
    assert len(ex.read_journal(tmp_path)) == 2  # the schedule it was killed in is not journalled
    assert json.loads((tmp_path / ex.EXPLORE_FILE).read_text())["stopped"] == "still running"
    again: list = []
    found = ex.search(doc, space, check, 5, ex.Terms(budget_runs=30), tmp_path, _stand_in("kill", again))
    assert again[0] == first[2], "the schedule killed is drawn again, the same"
    entries = ex.read_journal(tmp_path)
    assert [e["i"] for e in entries] == list(range(1, len(entries) + 1))
    assert [e["outcome"] for e in entries][-1] == "fails" and found["stopped"] == "1 violation found"
    assert all(f["action"] != "kill" for e in entries[:-1] for f in e["faults"])
    # the budget stops a search that finds nothing, and a resumed one with the budget spent
    other = tmp_path / "other"
    other.mkdir()
    found = ex.search(doc, space, check, 5, ex.Terms(budget_runs=4), other, _stand_in("nothing", []))
    assert found["runs"] == 4 and found["stopped"] == "the budget of 4 runs was spent"
    assert ex.search(doc, space, check, 5, ex.Terms(budget_runs=4), other, _stand_in("nothing", []))["runs"] == 4
