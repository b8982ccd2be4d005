"""The shrinker's search (shrink.py), with a probe that stands for a session: the cuts it
tries, the bookkeeping of `after_fault`, the runs a hold needs, and a schedule of one
useful fault among useless ones cut down to the useful one. The same search on real runs is
tests/test_integration_redis.py's."""
import random

from brokerchaos import shrink
from brokerchaos import validation as sc
from brokerchaos.errors import ScenarioError

USEFUL = {"action": "isolate-from", "target": "leader", "params": {"from": "peers"},
          "trigger": {"after_acks": 8000}, "duration": 8}


def _doc(faults, messages=40_000, nodes=3):
    return {"name": "x", "system": "redis", "runs": 1, "cluster": {"nodes": nodes},
            "options": {"wait_replicas": 0, "follow_failover": False},
            "workload": {"messages": messages}, "faults": faults}


def _useless(i):
    return {"action": "pause", "target": "followers[1]", "trigger": {"after_acks": 1000 * i}, "duration": 2}


def test_runs_to_see_a_failure_at_half_the_rate():
    assert shrink.runs_to_see(10, 10) == 5  # half of always: 1 - 0.5**5 > 0.95
    assert shrink.runs_to_see(1, 2) == 11  # 25% per run: 1 - 0.75**11 > 0.95
    assert shrink.runs_to_see(1, 1000) == shrink.MOST_RUNS
    assert shrink.runs_to_see(0, 5) == shrink.MOST_RUNS


def test_a_fault_removed_renumbers_the_triggers_that_wait_for_the_ones_after_it():
    faults = [_useless(1), USEFUL, {**_useless(2), "trigger": {"after_fault": 2}},
              {**_useless(3), "trigger": {"after_fault": 1}}]
    out = shrink.with_faults(_doc(faults), [1, 2, 3])
    assert [f["trigger"] for f in out["faults"]] == [{"after_acks": 8000}, {"after_fault": 1}, {"at_seconds": 0}]
    one = shrink.with_faults(_doc(faults), [1])
    assert "faults" not in one and one["fault"] == USEFUL
    cuts = {cut: _valid(doc) for cut, doc in shrink.candidates(_doc(faults))}
    # every candidate is a scenario the harness runs, but a cluster smaller than its replicas
    assert cuts.pop("nodes 3 -> 2") is False and all(cuts.values()), cuts


def test_the_cuts_come_largest_first_and_each_is_smaller():
    cuts = [c for c, _ in shrink.candidates(_doc([_useless(1), _useless(2), USEFUL, _useless(3)]))]
    assert cuts[:2] == ["without faults 1-2", "without faults 3-4"]
    assert "without fault 3" in cuts and "fault 3: duration 8 -> 4" in cuts
    assert "fault 3: after_acks 8000 -> 4000" in cuts
    assert cuts[-2:] == ["messages 40000 -> 20000", "nodes 3 -> 2"]
    small = _doc([{**USEFUL, "duration": 1.0, "trigger": {"after_acks": 1}}], messages=shrink.MIN_MESSAGES, nodes=1)
    assert list(shrink.candidates(small)) == []


RNG = random.Random(3)


def _fails_while_useful(doc, runs, rate=1.0, rng=RNG):
    """A stand-in session: the check fails while the isolation of the leader is in the
    schedule, lasts 3 s or more and fires before the write's last quarter; at `rate` per run."""
    for f in shrink.faults_of(doc):
        after = (f.get("trigger") or {}).get("after_acks", 0)
        if f["action"] == "isolate-from" and f.get("duration", 0) >= 3 \
                and after < 0.75 * doc["workload"]["messages"]:
            for n in range(1, runs + 1):
                if rng.random() < rate:
                    return shrink.FAILS, 1, n, n, ""
            return shrink.HOLDS, 0, runs, runs, ""
    return shrink.HOLDS, 0, runs, runs, ""


def _valid(doc):
    try:
        sc.build(doc)
        return True
    except ScenarioError:
        return False


def test_one_useful_fault_among_useless_ones_is_what_is_left():
    faults = [_useless(1), _useless(2), USEFUL, _useless(3), _useless(4)]
    out = shrink.shrink(_doc(faults), _fails_while_useful, failed=3, runs=3, budget=500, valid=_valid)
    assert out.stopped == "no smaller scenario fails", out.stopped
    assert shrink.faults_of(out.doc) == [{**USEFUL, "duration": 4, "trigger": {"after_acks": 1}}], out.doc
    # 3 replicas need 3 nodes: the cut to 2 is not a scenario, so not probed
    assert out.doc["workload"]["messages"] == shrink.MIN_MESSAGES and out.doc["cluster"]["nodes"] == 3
    assert out.kept[0] == "without faults 1-2" and all(s.failed <= s.decided for s in out.steps)
    assert out.runs == sum(s.decided for s in out.steps)


def test_a_rare_failure_is_probed_long_enough_and_the_budget_bounds_the_search():
    faults = [_useless(1), USEFUL]

    def rare(doc, runs):
        return _fails_while_useful(doc, runs, rate=0.3)

    out = shrink.shrink(_doc(faults), rare, failed=3, runs=10, budget=400, valid=_valid)
    assert shrink.faults_of(out.doc)[0]["action"] == "isolate-from"
    held = [s for s in out.steps if s.outcome == shrink.HOLDS]
    assert held and all(s.decided == shrink.runs_to_see(3, 10) for s in held)
    tight = shrink.shrink(_doc(faults), rare, failed=3, runs=10, budget=5, valid=_valid)
    assert tight.runs <= 5 and tight.stopped == "the budget of 5 runs was spent"
    # the last candidate passed the runs the budget left, fewer than a hold needs: undecided
    assert tight.steps[-1].outcome == shrink.UNDECIDED and tight.steps[-1].decided < shrink.runs_to_see(3, 10)


def test_a_cut_that_held_is_tried_once_per_pass():
    out = shrink.shrink(_doc([_useless(1), USEFUL]), _fails_while_useful, failed=1, runs=1, budget=500,
                        valid=_valid)
    held = [s.cut for s in out.steps if s.outcome == shrink.HOLDS]
    # "duration 4 -> 2" held in the pass that made the window 4 s, and once more in the last
    # pass, which kept nothing; every other cut that held, in the last pass only
    assert held.count("fault 1: duration 4 -> 2") == 2 and len(held) == len(set(held)) + 1, held


def test_the_command_refuses_bad_input_in_one_line_before_anything_runs(tmp_path, capsys):
    from brokerchaos.cli import main

    f = tmp_path / "s.yaml"
    f.write_text("system: redis\nworkload: {messages: 5000}\nfault: {action: kill, target: leader}\n")
    for argv, said in ((["--runs", "0"], "--runs: at least 1"), (["--budget", "0"], "--budget: at least 1"),
                       (["--check", "no-such"], "no-such"),
                       (["--out", str(f / "x")], "--out")):
        assert main(["shrink", str(f), *argv]) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and said in err[0], err
    f.write_text("system: redis\nworkload: {messages: -1}\n")
    assert main(["shrink", str(f)]) == 2
    assert "workload.messages" in capsys.readouterr().err
