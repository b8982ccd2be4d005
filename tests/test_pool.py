"""The cluster pool's key (runner/pool.py): which sessions may share a cluster, with no
broker running. Two scenarios share one when their servers would be configured alike:
the same system, servers, options that reach a server, faults' needs and sandbox; the
clients' settings, the fault and the workload's shape may differ. Each system's claim of
which options are its clients' alone is held against its cluster classes' code."""
import inspect
import re

import pytest

from brokerchaos import validation as sc
from brokerchaos.runner.pool import ClusterPool, differ
from brokerchaos.systems import SYSTEMS, releases
from brokerchaos.systems.cluster import LocalCluster
from brokerchaos.systems.system import WORKLOAD_SHAPE


def _s(**doc):
    return sc.build({"name": "p", "runs": 1, **doc})


KAFKA = {"system": "kafka", "fault": {"action": "kill", "target": "leader"}}


def test_scenarios_differing_in_clients_fault_and_shape_share_a_cluster():
    a = _s(**KAFKA, options={"acks": "all", "partitions": 1})
    b = _s(name="other", system="kafka", options={"acks": "1", "partitions": 3, "linger_ms": 5},
           workload={"messages": 9, "producers": 2, "dedup": False, "group": {"consumers": 3}},
           fault={"action": "pause", "target": "random", "duration": 2}, runs=4)
    assert ClusterPool.key(a) == ClusterPool.key(b)


@pytest.mark.parametrize("change", [
    {"options": {"unclean_leader_election": True}},  # a broker setting
    {"options": {"broker": "tansu"}},  # another server altogether
    {"cluster": {"nodes": 5}},
    {"cluster": {"version": "4.1"}},
    {"sandbox": "loopback"},
    {"fault": {"action": "power-off", "target": "leader"}},  # its data on the power-cut layer
    {"fault": {"action": "clock", "target": "leader", "params": {"offset": 60}}},  # its clock file
])
def test_what_reaches_a_server_keeps_clusters_apart(change):
    assert ClusterPool.key(_s(**KAFKA)) != ClusterPool.key(_s(**{**KAFKA, **change}))


def test_a_pool_says_what_differs():
    a, b = _s(**KAFKA), _s(**KAFKA, options={"flush_messages": 1}, cluster={"nodes": 5})
    assert differ(ClusterPool.key(a), ClusterPool.key(b)) == "cluster.nodes: 3 vs 5; options.flush_messages: None vs 1"


def test_a_streams_replica_count_is_its_clients_but_a_nats_mqtt_stream_is_the_servers():
    assert ClusterPool.key(_s(**KAFKA)) == ClusterPool.key(_s(**KAFKA, cluster={"replicas": 1}))
    mqtt = {"system": "mqtt", "options": {"broker": "nats"}}
    assert ClusterPool.key(_s(**mqtt)) != ClusterPool.key(_s(**mqtt, cluster={"replicas": 1}))


def test_pulsars_brokers_are_configured_for_dedup_and_transactions_so_those_keep_clusters_apart():
    base = {"system": "pulsar"}
    assert ClusterPool.key(_s(**base)) != ClusterPool.key(_s(**base, workload={"dedup": True}))
    assert ClusterPool.key(_s(**base)) == ClusterPool.key(_s(**base, options={"batching": True}))
    # the bookies' copies are read from their files by the harness, whatever they were configured with
    assert ClusterPool.key(_s(**base)) == ClusterPool.key(_s(**base, workload={"read_replicas": True}))


def test_no_pool_for_an_external_cluster_or_without_reuse(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("nodes:\n  n1: {address: 127.0.0.1:4222, services: {monitor: 127.0.0.1:8222}}\n")
    assert ClusterPool.admits(_s(system="nats"))
    assert not ClusterPool.admits(_s(system="nats", cluster={"reuse": False}))
    assert not ClusterPool.admits(_s(system="nats", external=str(f), cluster={"nodes": 1, "replicas": 1}))


def test_a_pool_keeps_one_cluster_and_a_session_that_cannot_take_it_stops_it_first():
    closed = []

    class Fake:
        def __init__(self, key):
            self.key, self.where = key, "s/run-001"

        def close(self):
            closed.append(self.key)

    pool = ClusterPool()
    nats = _s(system="nats")
    pool.keep(Fake(ClusterPool.key(nats)))
    assert pool.take(_s(system="nats", fault={"action": "kill"}, name="x")).key == ClusterPool.key(nats)
    assert pool.taken == 1 and not pool.kept
    redis, nodes5 = ClusterPool.key(_s(system="redis")), ClusterPool.key(_s(system="nats", cluster={"nodes": 5}))
    pool.keep(Fake(redis))
    pool.keep(Fake(nodes5))  # one at most: the older goes
    assert closed == [redis]
    said = []
    assert pool.take(nats, said.append) is None and closed == [redis, nodes5]  # stopped before a new start
    assert said == ["Cluster pool: the cluster started in s/run-001 is stopped (its servers differ: "
                    "cluster.nodes: 5 vs 3)"]


def _cluster_sources(name: str) -> str:
    """The code of every local cluster class the system may start, with its own bases."""
    system = SYSTEMS.get(name)
    classes = set()
    for _, options, version in system.variants():
        if version == releases.ANY:  # doctor's row for every release fetched by version: no scenario of its own
            continue
        one = {"nodes": 1, "replicas": 1} if options.get("broker") == "mosquitto" else {}
        s = _s(system=name, options=options, cluster={**one, **({"version": version} if version else {})})
        classes |= {k for k in system.local_cluster(s).__mro__
                    if k.__module__.startswith("brokerchaos.systems") and k is not LocalCluster}
    return "\n".join(inspect.getsource(k) for k in classes)


@pytest.mark.parametrize("name", SYSTEMS.names())
def test_what_a_system_calls_its_clients_alone_no_server_of_it_reads(name):
    """The unsafe mistake (an option a server is configured from, called the clients'):
    none of those options is read in its cluster classes' code, by attribute or getattr."""
    system = SYSTEMS.get(name)
    fields = set(system.Options.model_fields)
    assert system.client_options <= fields, system.client_options - fields
    assert not system.client_workload & WORKLOAD_SHAPE
    code = _cluster_sources(name)
    for option in system.client_options:
        read = re.search(rf"(options|\bo)\.{option}\b|getattr\([^)]*options[^)]*['\"]{option}['\"]", code)
        assert read is None, f"{name}: options.{option} is called the clients' alone, but a cluster reads it"
    code = re.sub(r"#.*", "", code)
    for field in system.client_workload:
        assert f"workload.{field}" not in code, f"{name}: a cluster reads workload.{field}"
    for field in system.client_cluster:
        assert f"cluster.{field}" not in code, f"{name}: a cluster reads cluster.{field}"


def test_a_nats_server_replaced_needs_a_system_account_so_its_cluster_is_its_own_and_redis_s_is_not():
    nats = {"system": "nats", "fault": {"action": "kill", "target": "leader"}}
    replace = {"action": "replace", "target": "follower"}
    key = ClusterPool.key
    assert key(_s(**nats)) != key(_s(**{**nats, "fault": replace}))
    assert "set_up: [] vs ['replace']" in differ(key(_s(**nats)), key(_s(**{**nats, "fault": replace})))
    redis = {"system": "redis", "fault": {"action": "kill", "target": "leader"}}
    assert key(_s(**redis)) == key(_s(**{**redis, "fault": replace}))


def test_no_replace_on_an_external_nats_cluster_whose_system_account_is_not_ours(tmp_path):
    from brokerchaos.errors import ScenarioError

    f = tmp_path / "c.yaml"
    f.write_text("nodes:\n" + "".join(f"  n{i}: {{address: 127.0.0.1:{4221 + i}, services: {{monitor: "
                                      f"127.0.0.1:{8221 + i}}}}}\n" for i in (1, 2, 3)))
    assert "replace" in SYSTEMS.get("nats").roles_offers(_s(system="nats"))
    with pytest.raises(ScenarioError, match="replace"):
        _s(system="nats", external=str(f), fault={"action": "replace", "target": "follower"})
