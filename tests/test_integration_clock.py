"""The clock fault on real brokers (libfaketime in each process), while the producers write.

Kafka (in each JVM): time-based retention is judged by the broker's clock against the
records' timestamps (the producers'), so a jump past log.retention.hours (7 days) deletes
acknowledged messages on the leader and the followers alike: the positive control. A jump
of an hour breaches nothing: the negative.

RabbitMQ (in the Erlang VM): a classic queue stamps a message's expiry (x-message-ttl) by
the OS clock, so a step back longer than the TTL stamps what arrives meanwhile as already
expired once the clock is true again: acknowledged and never delivered. A step shorter
than the TTL loses nothing.

Pulsar (in each JVM): an owner whose clock runs fast loses nothing acknowledged (a negative
control; the family's positive ones are Kafka's and RabbitMQ's).

Each checks that the step reached the brokers themselves: what they say the time is."""
import os
import shutil

import pytest

from brokerchaos import validation as sc
from brokerchaos.runner import Session
from brokerchaos.sandbox import clock
from observers import Quiet

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
    pytest.mark.skipif(shutil.which("java") is None, reason="java not installed (make setup)"),
]
TWO_HOURS_BACK, TEN_MINUTES_BACK = -7_200, -600
EIGHT_DAYS, ONE_HOUR = 691_200, 3_600


def _jump(tmp_path, offset: int):
    # the scenario's timing (the jump 18 s into the write, past the brokers' first retention
    # check 30 s after their start), at half its rate
    s = sc.load("scenarios/kafka-clock-retention.yaml", {"runs": 1, "name": f"it-clock-{offset}",
                                                        "messages": 7000, "rate": 250,
                                                        "fault_param": [f"offset={offset}"]})
    result = Session(s, tmp_path / str(offset), observer=Quiet(), report=False).run()
    (v,) = result.verdicts
    (w,) = result.metas["run-001"]["faults"][0]["windows"]
    assert w["nodes"] == ["n1", "n2", "n3"] and w["effect"]["offset_s"] == offset, w
    # each broker's JVM said (the head of a thread dump) its clock was moved, and true again
    # after the heal, to the second
    e = w["effect"]
    assert all(abs(e["seen_offset_s"][n] - offset) <= 2 for n in w["nodes"]), e
    assert all(abs(e["seen_after_heal_s"][n]) <= 2 for n in w["nodes"]), e
    assert v["read_complete"] is True and v["pos_ack_count"] == 7000, v
    return v, result.dir / "run-001" / "logs"


def _faketime() -> bool:
    try:
        return bool(clock.library())
    except clock.ClockError:
        return False


@pytest.mark.skipif(not _faketime(), reason="libfaketime not installed (make setup)")
def test_a_clock_jump_past_retention_deletes_acked_messages_and_an_hour_deletes_none(tmp_path, spark):
    v, logs = _jump(tmp_path, EIGHT_DAYS)
    assert v["acked_missing"] > 1000 and v["result"] == "fail", v
    # the leader deleted them as expired (the followers then follow its log start)
    assert any(b"due to log retention time 604800000ms breach" in (logs / f"n{i}.log").read_bytes()
               for i in (1, 2, 3))

    v, logs = _jump(tmp_path, ONE_HOUR)
    assert v["acked_missing"] == 0 and v["result"] == "pass", v
    assert not any(b"log retention time" in (logs / f"n{i}.log").read_bytes() for i in (1, 2, 3))


def _step_back(tmp_path, offset: int):
    s = sc.load("scenarios/rabbitmq-clock-ttl.yaml", {"runs": 1, "name": f"it-rabbitmq-clock{offset}",
                                                      "messages": 3000, "rate": 300, "after_acks": 1000,
                                                      "duration": 4, "fault_param": [f"offset={offset}"]})
    result = Session(s, tmp_path / str(offset), observer=Quiet(), report=False).run()
    (v,) = result.verdicts
    (w,) = result.metas["run-001"]["faults"][0]["windows"]
    e = w["effect"]
    # the node's Erlang VM said (os:system_time) its clock was moved, and true after the heal
    assert w["nodes"] == ["n1"] and abs(e["seen_offset_s"]["n1"] - offset) <= 2, e
    assert abs(e["seen_after_heal_s"]["n1"]) <= 2, e
    assert v["read_complete"] is True and v["pos_ack_count"] == 3000, v
    return v


@pytest.mark.skipif(not _faketime(), reason="libfaketime not installed (make setup)")
def test_a_clock_step_back_past_a_classic_queue_s_ttl_expires_acked_messages_and_a_short_one_none(tmp_path, spark):
    v = _step_back(tmp_path, TWO_HOURS_BACK)
    # what was enqueued during the 4 s step (~1,200 at 300 msg/s) was stamped already expired
    assert v["acked_missing"] >= 600 and v["result"] == "fail", v
    assert v["acked_missing"] <= 2000, v  # and only that: the messages before and after it kept their hour

    v = _step_back(tmp_path, TEN_MINUTES_BACK)
    assert v["acked_missing"] == 0 and v["result"] == "pass", v


def _skewed(tmp_path, scenario: str, name: str) -> None:
    """A run whose leader's clock runs at 5x for 12 s: its process says its clock is ahead by
    the drift so far, twice, the second further, then true after the heal; nothing
    acknowledged is lost."""
    s = sc.load(scenario, {"runs": 1, "name": name})
    result = Session(s, tmp_path, observer=Quiet(), report=False).run()
    (v,) = result.verdicts
    (w,) = result.metas["run-001"]["faults"][0]["windows"]
    (node,) = w["nodes"]
    assert node in ("n1", "n2", "n3"), w
    first, second = (r[node] for r in w["effect"]["readings"])
    assert 0 < first["said_s"] < second["said_s"] <= 4 * second["after_s"] + 1.5, w["effect"]
    assert second["said_s"] - first["said_s"] >= 0.5 * 4 * (second["after_s"] - first["after_s"]), w["effect"]
    assert abs(w["effect"]["seen_after_heal_s"][node]) <= 2, w["effect"]
    assert v["faults_not_in_effect"] == 0 and v["not_whole"] == 0, v["effects"]
    assert v["read_complete"] is True and v["acked_missing"] == 0 and v["result"] == "pass", v


@pytest.mark.skipif(not _faketime(), reason="libfaketime not installed (make setup)")
def test_a_leader_whose_clock_runs_fast_is_seen_drifting_and_set_true_and_loses_nothing_acked(tmp_path, spark):
    # the skew fault's run on a real cluster (Kafka's JVMs), acks=all
    _skewed(tmp_path, "scenarios/kafka-clock-skew.yaml", "it-clock-skew")


@pytest.mark.skipif(not _faketime(), reason="libfaketime not installed (make setup)")
def test_a_pulsar_owner_whose_clock_runs_fast_is_seen_drifting_and_loses_nothing_acked(tmp_path, spark):
    # the clock reaches Pulsar's JVMs: the topic owner's
    _skewed(tmp_path, "scenarios/pulsar-clock-skew.yaml", "it-clock-skew-pulsar")
