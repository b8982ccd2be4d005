import json
import subprocess
import sys
from pathlib import Path

import pytest

from brokerchaos import validation as sc


def test_defaults_match_the_foundation_scenario():
    s = sc.load("scenarios/nats-kill-leader.yaml")
    assert (s.system, s.cluster.nodes, s.cluster.replicas, s.runs) == ("nats", 3, 3, 5)
    assert s.workload.messages == 100_000 and s.workload.in_flight == 10_000
    assert (s.fault.action, s.fault.target, s.fault.trigger.after_acks) == ("kill", "leader", 20_000)


def test_flags_override_the_file():
    s = sc.load("scenarios/nats-kill-leader.yaml", {"runs": 2, "messages": 500, "after_acks": 100, "dedup": True,
                                                    "read_idle": 45})
    assert s.runs == 2 and s.workload.messages == 500 and s.fault.trigger.after_acks == 100
    assert s.workload.dedup is True and s.workload.read_idle == 45
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
        ({"processes": 2}, "workload.processes"),  # more processes than producers
        ({"processes": 0}, "workload.processes"),
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


def test_every_shipped_campaign_is_valid():
    # a campaign's own fields (its matrix labels above all) are checked only when it is
    # loaded: a shipped one with a bad label failed at its first use
    import glob

    from brokerchaos import campaign as cp

    for path in glob.glob("campaigns/*.yaml"):
        cp.load(path)


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
    ({"system": "kafka", "options": {"acks": 1}, "workload": {"dedup": True}}, "options.acks"),
    ({"system": "kafka", "options": {"acks": "2"}}, "options.acks"),
    ({"system": "kafka", "options": {"message_timeout_ms": 9000}}, "options.message_timeout_ms"),
    ({"system": "kafka", "workload": {"ack_timeout": 1}}, "workload.ack_timeout"),
    ({"system": "pulsar", "options": {"broker": "lite"}}, "cluster.nodes"),
    ({"system": "pulsar", "options": {"ensemble_size": 4}}, "options.ensemble_size"),
    ({"system": "pulsar", "options": {"ensemble_size": 3, "write_quorum": 2, "ack_quorum": 3}},
     "options.write_quorum"),
    ({"system": "pulsar", "options": {"broker": "lite"}, "cluster": {"nodes": 1, "replicas": 1},
      "fault": {"action": "kill", "target": "bookie"}}, "fault.target"),
    ({"system": "kafka", "cluster": {"version": "2.8"}}, "cluster.version"),
    ({"system": "kafka", "cluster": {"version": "4.x"}}, "cluster.version"),
    ({"system": "kafka", "cluster": {"version": "4.4.0"}, "options": {"metadata": "zookeeper"}}, "options.metadata"),
    ({"system": "kafka", "cluster": {"version": "3.2.3"}, "options": {"metadata": "kraft"}}, "options.metadata"),
    ({"system": "kafka", "options": {"broker": "tansu", "metadata": "kraft"}}, "options.metadata"),
    ({"system": "kafka", "options": {"broker": "tansu"}, "cluster": {"version": "4.1"}}, "cluster.version"),
    ({"system": "nats", "cluster": {"version": "2.10"}}, "cluster.version"),
    ({"system": "pulsar", "cluster": {"version": "2.9.1"}}, "cluster.version"),
    ({"system": "pulsar", "cluster": {"version": "4"}}, "cluster.version"),
    ({"system": "pulsar", "options": {"client_version": "3.0.7"}}, "options.client_version"),  # the C++ client
    ({"system": "pulsar", "options": {"client": "java", "client_version": "2.10.5"}}, "options.client_version"),
    ({"system": "kafka", "options": {"min_insync_replicas": 3}, "cluster": {"replicas": 2}},
     "options.min_insync_replicas"),
    ({"system": "nats", "fault": {"action": "kill-wipe", "target": "leader"}}, "fault.action"),
    ({"system": "pulsar", "cluster": {"nodes": 1, "replicas": 1}, "options": {"send_timeout_ms": 5000}},
     "options.send_timeout_ms"),
    ({"system": "pulsar", "cluster": {"nodes": 1, "replicas": 1}, "options": {"send_timeout_ms": 50}},
     "options.send_timeout_ms"),
    # a partitioned topic: made by the admin API, written by the C++ client, read at the end only
    ({"system": "pulsar", "cluster": {"nodes": 1, "replicas": 1}, "options": {"broker": "lite", "partitions": 2}},
     "options.partitions"),
    ({"system": "pulsar", "options": {"client": "java", "partitions": 2}}, "options.partitions"),
    ({"system": "pulsar", "options": {"partitions": 2}, "workload": {"consumers": 1}}, "options.partitions"),
    ({"system": "kafka", "fault": {"action": "pause", "target": "stor"}}, "fault.target"),
    ({"system": "kafka", "fault": {"action": "command", "params": {"inject": "x"}}}, "fault.action"),
    # nats-server refuses to start below 30 s, or with a grace period not shorter
    ({"system": "nats", "options": {"lame_duck_duration": "10s"}}, "options"),
    ({"system": "nats", "options": {"lame_duck_duration": "30s", "lame_duck_grace_period": "30s"}}, "options"),
    ({"system": "nats", "options": {"lame_duck_grace_period": "soon"}}, "options.lame_duck_grace_period"),
    ({"system": "kafka", "fault": {"action": "lame-duck", "target": "leader"}}, "fault.action"),
    ({"system": "redis", "fault": {"action": "stepdown", "target": "leader", "params": {"every": True}}},
     "fault.action"),
    # replicas read one by one where the system's client can read one node's copy
    ({"system": "rabbitmq", "options": {"queue_type": "classic"}, "cluster": {"replicas": 1},
      "workload": {"read_replicas": True}}, "workload.read_replicas"),
    ({"system": "rabbitmq", "options": {"queue_type": "stream"}, "workload": {"read_replicas": True}},
     "workload.read_replicas"),
    ({"system": "rabbitmq", "workload": {"read_replicas": True, "consumers": 1}}, "workload.read_replicas"),
    ({"system": "redis", "workload": {"read_replicas": True, "topics": 2}}, "workload"),
    ({"system": "pulsar", "cluster": {"nodes": 1, "replicas": 1}, "options": {"broker": "lite"},
      "workload": {"read_replicas": True}}, "workload.read_replicas"),
])
def test_system_options_are_checked_per_system(doc, field):
    with pytest.raises(sc.ScenarioError, match=rf"^scenario field '{field}'"):
        sc.build(doc)


def test_a_pulsar_send_timeout_of_0_is_none_and_needs_no_room_below_ack_timeout():
    from brokerchaos.systems.pulsar import PulsarOptions

    s = sc.build({"system": "pulsar", "options": {"send_timeout_ms": 0}, "workload": {"ack_timeout": 2}})
    assert PulsarOptions.model_validate(s.options).send_timeout(s.workload.ack_timeout) == 0
    assert PulsarOptions().send_timeout(20) == 19_000 and PulsarOptions(send_timeout_ms=500).send_timeout(20) == 500


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


def test_service_hosts_are_targets_of_their_system_only():
    tansu = {"broker": "tansu"}
    sc.build({"system": "kafka", "options": tansu, "fault": {"action": "isolate-from", "target": "client-node",
                                                             "params": {"from": "store"}}})
    sc.build({"system": "kafka", "options": tansu, "fault": {"action": "pause", "target": "store"}})
    # Apache Kafka 3.9 has ZooKeeper, 4.x (the default 4.4) a KRaft controller, Pulsar ZooKeeper and bookies
    sc.build({"system": "kafka", "cluster": {"version": "3.9"}, "fault": {"action": "isolate-from", "target": "leader",
                                                                          "params": {"from": "zk"}}})
    sc.build({"system": "kafka", "fault": {"action": "pause", "target": "controller"}})
    sc.build({"system": "kafka", "cluster": {"version": "4.1"}, "fault": {"action": "pause", "target": "controller"}})
    sc.build({"system": "pulsar", "fault": {"action": "kill-wipe", "target": "b1,b2"}})
    sc.build({"system": "pulsar", "options": {"bookies": 5}, "fault": {"action": "kill", "target": "b5"}})
    for system, options, host in [("nats", {}, "store"), ("kafka", {}, "store"), ("kafka", tansu, "zk"),
                                  ("kafka", {}, "zk"), ("pulsar", {"bookies": 3}, "b4")]:
        with pytest.raises(sc.ScenarioError, match=rf"^scenario field 'fault.target': unknown target '{host}'"):
            sc.build({"system": system, "options": options, "fault": {"action": "pause", "target": host}})


@pytest.mark.parametrize("action, target, params, why", [
    ("stepdown", "followers", {}, "a follower holds no leadership"),
    ("stepdown", "follower", {}, "a follower holds no leadership"),
    ("stepdown", "all", {}, "'all' names the others too"),
    ("isolate-from", "all", {"from": "followers"}, "leaves no node to cut it from"),
    ("isolate-from", "all", {"from": "peers"}, "leaves no node to cut it from"),
])
def test_a_target_the_fault_can_never_act_on_is_refused_before_the_run(action, target, params, why):
    with pytest.raises(sc.ScenarioError, match=rf"^scenario field 'fault.target': .*{why}"):
        sc.build({"system": "nats", "fault": {"action": action, "target": target, "params": params}})


@pytest.mark.parametrize("action, target, why", [
    ("kill", "followers", "a stream with 1 replica has no follower"),
    ("kill", "minority", "1 nodes have no minority"),
    ("partition", "leader", "a partition needs at least 2 nodes"),
])
def test_a_one_node_cluster_refuses_targets_it_does_not_have(action, target, why):
    one = {"system": "mqtt", "cluster": {"nodes": 1, "replicas": 1}, "options": {"broker": "mosquitto"}}
    with pytest.raises(sc.ScenarioError, match=rf"^scenario field 'fault.target': {why}"):
        sc.build({**one, "fault": {"action": action, "target": target}})
    sc.build({**one, "fault": {"action": "kill", "target": "leader"}})


@pytest.mark.parametrize("action, target, params", [
    ("stepdown", "leader", {}), ("stepdown", "n2", {}), ("stepdown", "client-node", {}),
    ("stepdown", "followers", {"role": "coordinator"}), ("stepdown", "all", {"every": True}),
    ("isolate-from", "all", {"from": "clients"}), ("isolate-from", "followers", {"from": "leader"}),
    ("isolate-from", "leader", {"from": "followers"}), ("isolate-from", "n1,n2", {"from": "peers,clients"}),
    # nothing to cut, found at the inject: the failed-fault control (kafka-no-effect-controls.yaml)
    ("isolate-from", "leader", {"from": "leader"}),
])
def test_targets_a_fault_may_act_on_pass_the_same_check(action, target, params):
    sc.build({"system": "nats", "fault": {"action": action, "target": target, "params": params}})


@pytest.mark.parametrize("text, extra, field", [
    ("nodes: {n1: {address: 'h:1'}, n2: {address: 'h:2'}, n3: {address: 'h'}}", {}, "external.nodes.n3.address"),
    ("nodes: {n1: {address: 'h:1'}, n3: {address: 'h:2'}}", {}, "external.nodes"),
    ("nodes: {n1: {address: 'h:1'}, n2: {address: 'h:2'}}", {}, "cluster.nodes"),
    ("system: pulsar\nnodes: {n1: {address: 'h:1'}, n2: {address: 'h:2'}, n3: {address: 'h:3'}}", {}, "external"),
    ("nodes: {n1: {address: 'h:1', kil: x}, n2: {address: 'h:2'}, n3: {address: 'h:3'}}", {},
     "external.nodes.n1.kil"),
    ("nodes: [", {}, "external"),
    ("nodes: {n1: {address: 'h:1'}, n2: {address: 'h:2'}, n3: {address: 'h:3'}}",
     {"fault": {"action": "command", "params": {"inject": "isolate"}}}, "fault.params"),
    ("nodes: {n1: {address: 'h:1'}, n2: {address: 'h:2'}, n3: {address: 'h:3'}}",
     {"fault": {"action": "delay", "params": {"delay_ms": 5}}}, "fault.action"),
])
def test_external_cluster_file_is_checked(tmp_path, text, extra, field):
    f = tmp_path / "cluster.yaml"
    f.write_text(text)
    with pytest.raises(sc.ScenarioError, match=rf"^scenario field '{field}'"):
        sc.build({"system": "kafka", "external": str(f), **extra})


def test_external_hooks_run_and_fail_with_one_line(tmp_path):
    from brokerchaos.systems.external import HookError, load

    f = tmp_path / "cluster.yaml"
    f.write_text("hook_timeout: 2\nnodes:\n  n1: {address: 'h:1', kill: 'echo killed > %s/k', "
                 "stop: 'echo no >&2; exit 3', pause: 'sleep 5', hooks: {cut: 'true'}}\n" % tmp_path)
    ext = load(f)
    assert ext.run("n1", "kill") == 0 and (tmp_path / "k").read_text() == "killed\n"
    assert ext.has("n1", "cut") and not ext.has("n1", "start")
    with pytest.raises(HookError, match="n1 'stop' exited 3: no$"):
        ext.run("n1", "stop")
    with pytest.raises(HookError, match="did not finish within 2s"):
        ext.run("n1", "pause")
    with pytest.raises(HookError, match="has no 'start' command"):
        ext.run("n1", "start")


def test_campaign_file_is_checked_before_anything_runs(tmp_path):
    from brokerchaos import campaign as cp

    spec, scenarios = cp.load("campaigns/kafka-dedup.yaml", {"runs": 2})
    assert [s.workload.dedup for s in scenarios] == [False, True] and {s.runs for s in scenarios} == {2}
    f = tmp_path / "c.yaml"
    f.write_text("name: x\nscenarios: [missing.yaml]\n")
    with pytest.raises(sc.ScenarioError, match=r"^campaign field 'scenarios.0' \(missing.yaml\): scenario file"):
        cp.load(f)
    f.write_text("name: x\nscenarios: []\n")
    with pytest.raises(sc.ScenarioError, match=r"^campaign field 'scenarios'"):
        cp.load(f)
    f.write_text("name: x\nscenarios: [a.yaml]\noverrides: {runz: 3}\n")
    with pytest.raises(sc.ScenarioError, match=r"^campaign field 'overrides.runz'"):
        cp.load(f)


def test_a_campaign_matrix_makes_one_cell_per_scenario_and_label_of_each_axis(tmp_path):
    from brokerchaos import campaign as cp

    spec, cells = cp.load("campaigns/tansu-seed.yaml", {"runs": 1, "option": ["max_in_flight=1"]})
    assert len(cells) == 9 and {s.runs for s in cells} == {1}
    by = {s.name: s for s in cells}
    c = by["tansu-seed-acks1-isolate-from-store"]
    # the axis's option joins the file's and the command line's; the fault's settings together
    assert c.options == {"broker": "tansu", "acks": 1, "max_in_flight": 1}
    assert (c.fault.action, c.fault.target, c.fault.params, c.fault.duration) == \
        ("isolate-from", "client-node", {"from": "store"}, 10.0)
    assert by["tansu-seed-acks0-kill"].options["acks"] == 0 and by["tansu-seed-acksall-kill"].fault.action == "kill"
    assert spec._axes["tansu-seed-acks0-isolate"] == {"acks": "acks0", "fault": "isolate"}
    f = tmp_path / "c.yaml"
    f.write_text("name: x\nscenarios: [%s]\nmatrix: {acks: {0: {option: [acks=0]}, 1: {runz: 2}}}\n"
                 % Path("scenarios/tansu-seed.yaml").resolve())
    with pytest.raises(sc.ScenarioError, match=r"^campaign field 'matrix.acks.1.runz': unknown setting"):
        cp.load(f)
    f.write_text("name: x\nscenarios: [%s]\nmatrix: {fault: {a b: {fault: kill-leader}}}\n"
                 % Path("scenarios/tansu-seed.yaml").resolve())
    with pytest.raises(sc.ScenarioError, match=r"^campaign field 'matrix.fault.a b': a label"):
        cp.load(f)
    # a cell the system cannot run is refused before anything starts, naming the cell
    f.write_text("name: x\nscenarios: [%s]\nmatrix: {fault: {sd: {fault: stepdown-leader}}}\n"
                 % Path("scenarios/tansu-seed.yaml").resolve())
    with pytest.raises(sc.ScenarioError, match=r"^campaign field 'scenarios.0' \(.*, fault=sd\): .*stepdown"):
        cp.load(f)


def test_a_campaign_resumes_only_its_own_directory(tmp_path):
    from brokerchaos import campaign as cp

    spec, cells = cp.load("campaigns/kafka-dedup.yaml", {"runs": 1})
    with pytest.raises(sc.ScenarioError, match="not a campaign directory"):
        cp.check_resume(spec, cells, tmp_path)
    (tmp_path / "campaign.json").write_text(json.dumps({"name": "kafka-dedup", "cells": [s.name for s in cells]}))
    cp.check_resume(spec, cells, tmp_path)
    (tmp_path / "campaign.json").write_text(json.dumps({"name": "kafka-dedup", "cells": ["other"]}))
    with pytest.raises(sc.ScenarioError, match="other cells"):
        cp.check_resume(spec, cells, tmp_path)
    r = subprocess.run([sys.executable, "-m", "brokerchaos.cli", "campaign", "campaigns/kafka-dedup.yaml",
                        "--resume", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--resume" in r.stderr, r.stderr


def test_fault_mix_draws_one_fault_per_run_with_the_seed_and_is_checked():
    doc = {"system": "nats", "fault_mix": [{"action": "kill"}, {"action": "stepdown"}, {"action": "none"}]}
    s = sc.build(doc)
    draws = [s.faults_for_run(f"run-{i:03d}")[0].action for i in range(1, 61)]
    assert draws == [s.faults_for_run(f"run-{i:03d}")[0].action for i in range(1, 61)]  # replayable
    assert set(draws) == {"kill", "stepdown", "none"}
    assert [f.action for f in sc.build({**doc, "seed": 1}).faults_for_run("run-001")] != [] and \
        [sc.build({**doc, "seed": k}).faults_for_run("run-001")[0].action for k in range(20)] != [draws[0]] * 20
    with pytest.raises(sc.ScenarioError, match="fault_mix.1"):
        sc.build({"system": "nats", "fault_mix": [{"action": "kill"}, {"action": "stepdown", "target": "n7"}]})
    with pytest.raises(sc.ScenarioError, match="fault and fault_mix"):
        sc.build({**doc, "fault": {"action": "kill"}})
    with pytest.raises(sc.ScenarioError, match="stepdown"):  # tansu-backed kafka has no such verb
        sc.build({"system": "kafka", "options": {"broker": "tansu"}, "fault_mix": [{"action": "stepdown"}]})


@pytest.mark.parametrize("args, says", [
    (["soak", "scenarios/nats-soak.yaml", "--duration", "soon"], "--duration"),
    (["soak", "scenarios/nats-soak.yaml"], "--runs N or --duration"),
    (["soak", "--resume", "/nonexistent", "--runs", "2"], "not a session directory"),
])
def test_soak_bad_input_is_one_line_and_exit_2(tmp_path, args, says):
    r = subprocess.run([sys.executable, "-m", "brokerchaos.cli", *args, "--out", str(tmp_path / "res")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and says in r.stderr, r.stderr
    assert not (tmp_path / "res").exists()


def test_a_bare_no_is_redis_appendfsync_no_not_false():
    from brokerchaos.systems.redis import RedisOptions

    s = sc.load("scenarios/redis-power-off-all.yaml", {"option": ["appendfsync=no"]})
    assert RedisOptions.model_validate(s.options).appendfsync == "no"
    with pytest.raises(sc.ScenarioError, match="options.appendfsync"):
        sc.load("scenarios/redis-power-off-all.yaml", {"option": ["appendfsync=true"]})
