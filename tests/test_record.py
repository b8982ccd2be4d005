"""run.json's record of a run (runner/record.py): the phases' small results go into it field
by field, and what it writes keeps its flat shape."""
import json
from dataclasses import dataclass

import pytest

from brokerchaos.runner.record import BringUp, Health, ReadEnd, RunRecord


def test_a_phase_result_goes_into_the_record_field_by_field_and_run_json_stays_flat(tmp_path):
    """The phases hand small results to the record (record.py); run.json keeps its flat shape,
    and a result naming a field the record lacks is refused, not dropped."""
    rec = RunRecord("r1", 1, "nats", "netns", {})
    rec.take(BringUp(1.5, {"n1": "2.9"}, {}, {"library": "nats-py"}))
    rec.take(ReadEnd("complete", 2.0, 123.0))
    rec.take(Health(True, "whole"))
    rec.write(tmp_path)
    doc = json.loads((tmp_path / "run.json").read_text())
    assert (doc["cluster_ready_s"], doc["servers"], doc["read_status"], doc["read_s"], doc["healthy_after"]) == \
        (1.5, {"n1": "2.9"}, "complete", 2.0, True)
    assert "t_read_end" not in doc and "topics" not in doc

    @dataclass(frozen=True)
    class Stray:
        reads: int

    with pytest.raises(AttributeError, match="no field 'reads'"):
        rec.take(Stray(3))
