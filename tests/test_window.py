"""A fault window's life (faults/window.py): each step follows the one it must, and what
run.json keeps of it is every field set, in the record a run writes."""
import json

import pytest

from brokerchaos.faults.window import Phase, Window, WindowError
from brokerchaos.runner.record import RunRecord


def _in_effect(w: Window) -> Window:
    w.resolved(1.5)
    w.injecting(2.0)
    w.took_effect(nodes=["n1"], label="n1", groups=[None], acks=12, t_ms=100.0, delay_ms=3.0, effect={"signal": 9})
    return w


def test_a_window_goes_open_injecting_in_effect_healed():
    w = Window(1001, 0)
    assert w.phase is Phase.OPEN and not w.begun and not w.in_effect and not w.ended
    _in_effect(w)
    assert w.phase is Phase.IN_EFFECT and w.begun and w.in_effect and not w.ended
    w.healed(250.0)
    assert w.phase is Phase.HEALED and w.ended and w.healed_ms == 250.0
    assert w.as_json() == {"id": 1001, "window": 0, "nodes": ["n1"], "resolve_ms": 1.5, "inject_at_ms": 2.0,
                           "label": "n1", "acks_at_effect": 12, "t_ms": 100.0, "delay_ms": 3.0,
                           "effect": {"signal": 9}, "healed_ms": 250.0}


def test_a_fault_that_opens_its_window_first_is_in_effect_before_its_inject():
    w = Window(1, 0)
    w.took_effect(nodes=["n1", "n2"], label="n1,n2", groups=["a", "b"], acks=0, t_ms=5.0, delay_ms=0.1, effect={})
    w.injecting(0.2)
    assert w.phase is Phase.IN_EFFECT and w.begun and w["groups"] == ["a", "b"]


def test_steps_out_of_order_are_refused():
    w = _in_effect(Window(1, 0))
    with pytest.raises(WindowError, match="in effect in phase in effect"):
        w.took_effect(nodes=[], label="", groups=[], acks=0, t_ms=0.0, delay_ms=0.0, effect=None)
    w.healed(9.0)
    for step in (lambda: w.healed(10.0), lambda: w.failed("late"), lambda: w.injecting(1.0)):
        with pytest.raises(WindowError):
            step()
    with pytest.raises(WindowError, match="resolved in phase injecting"):
        x = Window(2, 1)
        x.injecting(1.0)
        x.resolved(2.0)


def test_a_failed_inject_is_healed_without_a_heal_time():
    w = Window(3, 0)
    w.injecting(1.0)
    w.failed("RuntimeError: no such process")
    assert w.ended and w.phase is Phase.FAILED
    w.healed(None)
    assert "healed_ms" not in w and w["error"] == "RuntimeError: no such process"


def test_run_json_keeps_the_windows_as_the_dicts_they_were():
    w = _in_effect(Window(1001, 0))
    state = {"index": 0, "action": "kill", "windows": [w]}
    rec = RunRecord(run="run-001", index=1, system="nats", sandbox="bc-x", scenario={"name": "x"}, faults=[state],
                    fault=state)
    out = json.loads(json.dumps(rec.to_json()))
    assert out["faults"][0]["windows"] == [w.as_json()] and out["fault"]["windows"][0]["t_ms"] == 100.0
    assert "phase" not in out["faults"][0]["windows"][0]
    w.healed(300.0)  # the record is a copy: what it wrote does not change under it
    assert "healed_ms" not in out["faults"][0]["windows"][0]
    assert rec.to_json()["fault"]["windows"][0]["healed_ms"] == 300.0
