import subprocess
import sys

import pytest

from brokerchaos import scenario as sc


def test_defaults_match_the_foundation_scenario():
    s = sc.load("scenarios/nats-kill-leader.yaml")
    assert (s.system, s.cluster.nodes, s.cluster.replicas, s.runs) == ("nats", 3, 3, 5)
    assert s.workload.messages == 100_000 and s.workload.in_flight == 10_000
    assert (s.fault.action, s.fault.target, s.fault.trigger.after_acks) == ("kill", "leader", 20_000)


def test_flags_override_the_file():
    s = sc.load("scenarios/nats-kill-leader.yaml", {"runs": 2, "messages": 500, "after_acks": 100, "dedup": True})
    assert s.runs == 2 and s.workload.messages == 500 and s.fault.trigger.after_acks == 100
    assert s.workload.dedup is True
    assert s.cluster.replicas == 3  # untouched


def test_fault_shorthand_splits_action_and_target():
    assert sc.split_fault("kill-leader", ["leader", "follower"]) == ("kill", "leader")
    assert sc.split_fault("kill", ["leader"]) == ("kill", None)
    s = sc.load(None, {"fault": "kill-follower"})
    assert (s.fault.action, s.fault.target) == ("kill", "follower")
    s = sc.load(None, {"fault": "kill-leader", "target": "n2"})
    assert s.fault.target == "n2"


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"runs": 0}, "runs"),
        ({"messages": -5}, "workload.messages"),
        ({"replicas": 4}, "cluster.replicas"),
        ({"fault": "explode"}, "fault.action"),
        ({"system": "kafka-9000"}, "system"),
        ({"fault": "kill", "target": "n7"}, "fault.target"),
        ({"fault": "kill", "after_acks": 10**9}, "fault.trigger.after_acks"),
        ({"fault": "kill-follower", "replicas": 1}, "fault.target"),
    ],
)
def test_bad_input_names_the_field(overrides, field):
    with pytest.raises(sc.ScenarioError) as e:
        sc.load(None, overrides)
    assert f"'{field}'" in str(e.value)
    assert "\n" not in str(e.value)


def test_unknown_yaml_field_and_bad_yaml(tmp_path):
    p = tmp_path / "x.yaml"
    p.write_text("workload:\n  mesages: 10\n")
    with pytest.raises(sc.ScenarioError, match="'workload.mesages': unknown field"):
        sc.load(p)
    p.write_text("workload: [1,\n")
    with pytest.raises(sc.ScenarioError, match="invalid YAML"):
        sc.load(p)


def test_trigger_needs_exactly_one_kind():
    with pytest.raises(sc.ScenarioError, match="fault.trigger"):
        sc.build({"fault": {"action": "kill", "trigger": {"after_acks": 5, "at_seconds": 1}}})


def test_every_shipped_scenario_is_valid():
    import glob

    for path in glob.glob("scenarios/*.yaml"):
        sc.load(path)


def test_cli_bad_input_is_one_line_and_exit_2_before_anything_starts(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "brokerchaos.cli", "run", "--messages", "0", "--out", str(tmp_path / "res")],
        capture_output=True, text=True, timeout=60,
    )
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "workload.messages" in r.stderr
    assert not (tmp_path / "res").exists()  # nothing started, nothing written


@pytest.mark.parametrize("doc, field", [
    ({"system": "redis", "options": {"wait_replicas": 3}}, "options.wait_replicas"),
    ({"system": "redis", "options": {"pipelining": 3}}, "options.pipelining"),
    ({"system": "redis", "cluster": {"nodes": 3, "replicas": 2}}, "cluster.replicas"),
    ({"system": "nats", "options": {"wait_replicas": 1}}, "options.wait_replicas"),
    ({"system": "rabbitmq", "options": {"queue_type": "mirrored"}}, "options.queue_type"),
    ({"system": "rabbitmq", "options": {"queue_type": "classic"}, "cluster": {"nodes": 3, "replicas": 2}},
     "cluster.replicas"),
    ({"system": "mqtt", "options": {"broker": "mosquitto"}}, "cluster.nodes"),
    ({"system": "mqtt", "options": {"rx_node": "n7"}}, "options.rx_node"),
    ({"system": "mqtt", "options": {"qos": 2}}, "options.qos"),
])
def test_system_options_are_checked_per_system(doc, field):
    with pytest.raises(sc.ScenarioError, match=rf"^scenario field '{field}'"):
        sc.build(doc)


def test_redis_options_have_defaults():
    s = sc.build({"system": "redis", "options": {"wait_replicas": 1}})
    assert s.options == {"wait_replicas": 1}


def test_option_flag_sets_system_options_and_is_validated():
    s = sc.load(None, {"system": "rabbitmq", "option": ["queue_type=classic", "prefetch=50"]})
    assert s.options == {"queue_type": "classic", "prefetch": 50}
    # a classic queue lives on one node: the default replication factor is not an error
    assert s.cluster.replicas == 3
    with pytest.raises(sc.ScenarioError, match=r"^scenario field 'options': expected KEY=VALUE"):
        sc.load(None, {"system": "rabbitmq", "option": ["queue_type"]})
    with pytest.raises(sc.ScenarioError, match=r"^scenario field 'options.tx_node'"):
        sc.load(None, {"system": "mqtt", "option": ["tx_node=n9"]})


def test_consumer_node_target_is_known():
    s = sc.load(None, {"system": "mqtt", "fault": "kill-consumer-node"})
    assert (s.fault.action, s.fault.target) == ("kill", "consumer-node")
