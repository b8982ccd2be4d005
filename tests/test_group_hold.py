"""A member told to hold (`workload.group.hold_after`) holds exactly where a control needs
work in hand, tells the harness, and goes on when a pause's heal resumes it; fast, no broker."""
import multiprocessing
import os
import signal
import threading
import time
from functools import partial

import pytest

from brokerchaos import validation as sc
from brokerchaos.errors import ScenarioError
from brokerchaos.scenario import GroupSpec
from brokerchaos.workload import group as groupmod
from brokerchaos.workload.group import GroupEvents
from brokerchaos.workload.payload import encode


class Rows:
    def __init__(self):
        self.rows = []

    def record(self, type_, producer=None, value=None, **kw):
        self.rows.append((type_, value))


def _held_at(commit: str, monkeypatch) -> list:
    """The rows written when the member began to hold, processing 1..5 with hold_after 3."""
    rows, seen = Rows(), []
    def hold(_limit, held):
        seen.append(list(rows.rows))
        held()

    monkeypatch.setattr(groupmod, "_until_resumed", hold)
    events = GroupEvents(rows, GroupSpec(commit=commit, hold_after=3), lambda: True)
    told = []
    events.on_hold = lambda: told.append(len(rows.rows))
    for v in range(1, 6):
        events.process(encode("p1", v), "0", v, str(v))
    assert len(seen) == 1 and told == [len(seen[0])], (seen, told)  # once, and the harness told
    assert [v for _, v in rows.rows] == [1, 2, 3, 4, 5]  # then it went on
    return [v for _, v in seen[0]]


@pytest.mark.parametrize("commit", ["after", "transaction"])
def test_a_member_committing_after_its_work_holds_the_nth_processed_and_not_committed(commit, monkeypatch):
    assert _held_at(commit, monkeypatch) == [1, 2, 3]


@pytest.mark.parametrize("commit", ["before", "auto"])
def test_a_member_acking_before_its_work_holds_the_next_one_handed_over_unprocessed(commit, monkeypatch):
    # the 4th was handed over (acked, its offset stored) and is not processed: a skip if killed
    assert _held_at(commit, monkeypatch) == [1, 2, 3]


def test_only_a_first_incarnation_and_only_the_first_member_to_get_there_holds(monkeypatch):
    seen = []
    monkeypatch.setattr(groupmod, "_until_resumed", lambda limit, _held: seen.append(limit))
    again = GroupEvents(Rows(), GroupSpec(hold_after=1))  # an incarnation started again: no claim
    again.process(encode("p1", 1), "0", 1, "1")
    assert seen == []
    point = groupmod.HoldPoint()
    members = [GroupEvents(Rows(), GroupSpec(hold_after=1), partial(point.claim, i)) for i in (1, 2)]
    for m in members[::-1]:
        m.process(encode("p1", 1), "0", 1, "1")
    assert seen == [groupmod.HOLD_S] and point.slot.value == 2  # g1-m2 got there first, alone


def _hold_in_a_child(point):
    # as a member's finish thread: another thread, in a read, which the kernel may hand SIGCONT
    r, _w = os.pipe()
    threading.Thread(target=os.read, args=(r, 1), daemon=True).start()
    events = GroupEvents(Rows(), GroupSpec(commit="after", hold_after=1), partial(point.claim, 1))
    events.on_hold = point.began
    events.process(encode("p1", 1), "0", 1, "1")
    os._exit(0)


def test_a_held_member_tells_the_harness_across_the_fork_and_a_pause_healed_ends_its_hold():
    """Even with another thread in a read, which the kernel may hand SIGCONT: a clean-clone
    run's paused member held its 60 s, its wait never woken by the handler."""
    point = groupmod.HoldPoint()
    held = point.t
    p = multiprocessing.get_context("fork").Process(target=_hold_in_a_child, args=(point,), daemon=True)
    p.start()
    try:
        deadline = time.monotonic() + 10
        while not held.value and time.monotonic() < deadline:
            time.sleep(0.01)
        assert held.value and p.is_alive(), "the member never said it held"
        os.kill(p.pid, signal.SIGSTOP)  # at once: the handler must already be there
        time.sleep(0.2)
        t = time.monotonic()
        os.kill(p.pid, signal.SIGCONT)
        p.join(5)
        assert p.exitcode == 0 and time.monotonic() - t < 5, "the hold outlived the pause's heal"
    finally:
        if p.is_alive():
            p.kill()
            p.join(5)


def _refused(doc: dict) -> str:
    with pytest.raises(ScenarioError) as e:
        sc.build({"name": "x", **doc})
    return str(e.value)


def test_a_trigger_on_a_member_that_never_holds_or_a_fault_not_before_it_is_refused():
    kill = {"action": "kill", "target": "holding-consumer", "trigger": {"member_holding": 0}, "duration": 1}
    assert _refused({"system": "kafka", "workload": {"group": {}},
                     "fault": {**kill, "trigger": {"at_seconds": 1}}}).startswith(
        "scenario field 'fault.target': no member holds its work")
    assert _refused({"system": "kafka", "workload": {"group": {}},
                     "fault": {**kill, "target": "consumer"}}).startswith(
        "scenario field 'fault.trigger.member_holding': no member holds")
    sc.build({"name": "x", "system": "kafka", "workload": {"group": {"hold_after": 10}}, "fault": kill})
    assert "a second window would find no holder" in _refused(
        {"system": "kafka", "workload": {"group": {"hold_after": 10}},
         "fault": {**kill, "repeat": {"every": 5, "for": 20}}})
    first = {"action": "kill", "target": "n1", "trigger": {"at_seconds": 1}, "duration": 1}
    assert _refused({"system": "kafka", "faults": [first, {**first, "trigger": {"after_fault": 2}}]}).startswith(
        "scenario field 'faults.1.trigger.after_fault': 2 is not one of faults 1..1")
    assert _refused({"system": "kafka", "fault": {**first, "trigger": {"after_fault": 1}}}).startswith(
        "scenario field 'fault.trigger.after_fault': 1 is not an earlier fault")
    assert "fault 1 has no duration" in _refused({"system": "kafka", "faults": [
        {**first, "duration": None}, {**first, "trigger": {"after_fault": 1}}]})
    assert "give exactly one of" in _refused({"system": "kafka", "fault": {**first, "trigger": {
        "at_seconds": 1, "after_acks": 3}}})
    sc.build({"name": "x", "system": "kafka", "faults": [first, {**first, "trigger": {"after_fault": 1}}]})
