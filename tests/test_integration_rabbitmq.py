"""A real 3-node RabbitMQ cluster in network namespaces: a durable quorum queue survives a
leader kill on a reused cluster; a classic queue on a killed node loses acked messages."""
import csv
import os

import pyarrow.parquet as pq
import pytest

from brokerchaos import validation as sc
from brokerchaos.runner import Session
from observers import Quiet
from one_run import one_run
from brokerchaos.systems.rabbitmq import SERVER

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
    pytest.mark.skipif(not os.path.exists(SERVER), reason="rabbitmq-server not installed (make setup)"),
    # sessions whose servers are configured alike share a cluster (runner/pool.py)
    pytest.mark.usefixtures("cluster_pool"),
]


def test_quorum_queue_kill_leader_loses_nothing_and_the_cluster_is_reused(tmp_path, spark):
    # 500 in flight, not the scenario's 2,000: a quorum queue confirms ~700 a second on two
    # slow cores, so 2,000 in flight wait ~3 s, time out (ack_timeout 3) and are sent again,
    # and a 12,000-message write took 28 s
    s = sc.load("scenarios/rabbitmq-kill-leader.yaml",
                {"runs": 2, "messages": 8_000, "after_acks": 3_000, "in_flight": 500, "name": "it-rabbit-kill",
                 "consumers": 1})
    result = Session(s, tmp_path, observer=Quiet(), report=False).run()
    assert [v["run"] for v in result.verdicts] == ["run-001", "run-002"]
    for v in result.verdicts:
        meta = result.metas[v["run"]]
        # the kill hit the queue's leader, and a new leader served the read
        assert meta["fault"]["nodes"] == [meta["leader_at_start"]]
        assert meta["leader_before_read"] != meta["leader_at_start"]
        assert v["read_complete"] is True, v["read_status"]
        assert v["send_count"] == 8_000 and v["pos_ack_count"] > 3_000
        assert v["acked_missing"] == 0 and v["result"] == "pass", v
        assert v["stowaways"] == 0
        # the live consumer takes messages off the queue: its deliveries are checked, and the
        # end read found what it had left (nothing, or what was redelivered)
        assert v["live_consumers"] == 0 and v["e2e_latency_ms"] is not None, v
        rows = pq.read_table(result.dir / v["run"] / "history").to_pylist()
        assert sum(1 for r in rows if r["type"] == "recv" and r["client"] == "l1") > 3_000
    first, second = result.metas["run-001"], result.metas["run-002"]
    # (the module's first session: the pool has nothing yet)
    assert first["cluster"] == "started" and first["healthy_after"] is True
    assert second["cluster"].startswith("reused"), second["cluster"]
    assert second["cluster_ready_s"] < first["cluster_ready_s"]


def test_a_quorum_queue_s_members_read_one_by_one_agree_after_a_leader_kill(tmp_path, spark):
    """The negative control of the replica checks on RabbitMQ: each member's Ra log read from
    its node's files before the end read, once the restarted leader has caught up."""
    s = sc.load("scenarios/rabbitmq-kill-leader.yaml",
                {"runs": 1, "messages": 5_000, "after_acks": 2_000, "in_flight": 500, "read_replicas": True,
                 "name": "it-rabbit-kill-replicas"})
    result = Session(s, tmp_path, observer=Quiet(), report=False).run()
    (v,) = result.verdicts
    assert v["read_complete"] is True and v["acked_missing"] == 0, v
    assert v["replica_reads"] == 3 and v["replica_reads_complete"] is True, v["replica_status"]
    assert (v["replicas_diverged"], v["acked_on_no_replica"], v["result"]) == (0, 0, "pass"), v


def test_a_follower_killed_until_after_the_reads_holds_less_than_the_other_members(tmp_path, spark):
    """The positive control: a follower killed after 2,000 acks and started only after the
    reads (scenarios/rabbitmq-kill-follower-replicas.yaml): what the other two confirmed
    meanwhile is on their logs and not on its."""
    s = sc.load("scenarios/rabbitmq-kill-follower-replicas.yaml",
                {"messages": 6_000, "after_acks": 2_000, "in_flight": 500, "name": "it-rabbit-follower-replicas"})
    result = Session(s, tmp_path, observer=Quiet(), report=False).run()
    (v,) = result.verdicts
    (killed,) = result.metas["run-001"]["fault"]["nodes"]
    assert v["read_complete"] is True and v["acked_missing"] == 0, v
    assert v["replica_reads"] == 3 and v["replica_reads_complete"] is True, v["replica_status"]
    assert 0 < v["diverged_acked"] <= v["pos_ack_count"] - 2_000 and v["diverged_positions"] == 0, v
    assert v["acked_on_no_replica"] == 0 and v["result"] == "fail", v
    with open(result.dir / "divergence.csv", newline="") as fh:
        assert {r["missing_on"] for r in csv.DictReader(fh)} == {killed}


def test_classic_queue_on_a_killed_node_loses_acked_messages(tmp_path, spark):
    s = sc.load("scenarios/rabbitmq-classic-kill.yaml",
                {"runs": 1, "messages": 10_000, "after_acks": 3_000, "name": "it-rabbit-classic"})
    result = Session(s, tmp_path, observer=Quiet(), report=False).run()
    (v,) = result.verdicts
    meta = result.metas["run-001"]
    assert meta["fault"]["nodes"] == ["n1"] == [meta["leader_at_start"]]
    assert v["read_complete"] is True, v["read_status"]
    # the positive control: confirmed while the queue's only node was down, then gone
    assert v["acked_missing"] > 0 and v["result"] == "fail"


def test_quorum_queue_members_changed_then_every_node_cut_loses_nothing_confirmed(tmp_path, spark):
    """A membership change (two followers deleted, added back) and then a power cut of every
    node: a quorum queue confirms once a majority fsynced, so nothing confirmed may go (the
    positive controls of the power cut are Kafka's and Redis's, test_integration_disk)."""
    doc = {
        "name": "it-rabbit-members-power", "system": "rabbitmq", "runs": 1, "options": {"queue_type": "quorum"},
        "workload": {"messages": 15000, "rate": 1000, "in_flight": 500, "ack_timeout": 10, "write_timeout": 120,
                     "retries": 30, "retry_backoff": 0.1, "retry_backoff_max": 1.0, "read_idle": 10},
        "faults": [
            # the adds back take a few seconds of CLI each (4-5 s for two in one run, 8.4 s in
            # a clean-clone run): the cut comes once they are done (after_fault); on an ack
            # count alone it once cut the second add short (its CLI found n1 down, exit 69)
            {"action": "replicas", "params": {"to": 1}, "trigger": {"after_acks": 1000}, "duration": 2},
            {"action": "power-off", "target": "all", "params": {"setup_synced": True},
             "trigger": {"after_acks": 9000, "after_fault": 1}, "duration": 2},
        ],
    }
    result = Session(sc.build(doc), tmp_path, observer=Quiet(), report=False).run()
    (v,) = result.verdicts
    meta = result.metas["run-001"]
    members, cut = (f["windows"][0]["effect"] for f in meta["faults"])
    windows = [f["windows"][0] for f in meta["faults"]]
    assert windows[1]["t_ms"] > windows[0]["healed_ms"], windows  # one after the other
    assert members["peers_before"][:1] == members["peers_after"] == [meta["leader_at_start"]], members
    assert len(members["peers_before"]) == 3 and len(members.get("back", {}).get("peers_after", [])) == 3, members
    assert all(d["fsyncs_seen"] > 0 for d in cut["power_cut"].values()), cut
    assert all(d["settled_files"] > 0 for d in cut["power_cut"].values()), cut
    assert v["read_complete"] is True, v["read_status"]
    assert v["pos_ack_count"] > 12000 and v["acked_missing"] == 0 and v["result"] == "pass", v


def _corrupt(tmp_path, who: str):
    r = one_run(f"scenarios/rabbitmq-corrupt-{who}-tail.yaml", tmp_path / who, f"it-rabbit-corrupt-{who}")
    v, meta, window = r.verdict, r.meta, r.window
    for node in window["nodes"]:
        # the node's Raft write-ahead log (every quorum queue member on it appends there), 100,000
        # bytes shorter: ~280 messages of ~357 bytes, more than the producer has in flight
        (cut,) = window["effect"]["changes"][node]
        assert cut["file"].endswith(".wal") and "/quorum/" in cut["file"], cut
        assert cut["size"] == cut["size_was"] - 100_000, cut
    assert v["read_complete"] is True and not v.get("not_whole"), v
    return v, meta, window, r.dir


def test_a_quorum_queue_whose_every_wal_tail_is_cut_loses_confirmed_messages_and_a_follower_s_nothing(
        tmp_path, spark):
    """corrupt on RabbitMQ: every member killed, the tail of each node's WAL cut, all started
    again: Ra recovers each log up to its last whole record, and what the cut took was on no
    copy: confirmed messages are gone (the positive control), the newest before the kill. One
    follower's cut tail is sent again by the leader (the negative one)."""
    v, meta, window, r_dir = _corrupt(tmp_path, "all")
    assert sorted(window["nodes"]) == ["n1", "n2", "n3"], window
    assert v["acked_missing"] > 0 and v["result"] == "fail", v
    # each one confirmed by the killed processes (before any node was started again: a confirm
    # can reach the client a little after the SIGKILL, 0.2 ms in one run): what the cut took
    lost = list(csv.DictReader(open(r_dir.parent / "lost.csv")))
    assert len(lost) == v["acked_missing"], len(lost)
    back_ms = window["t_ms"] + min(window["effect"]["started_ms"].values())
    assert all(float(x["first_ack_ms"]) < back_ms for x in lost), (lost[-1], window)
    v, meta, window, _ = _corrupt(tmp_path, "follower")
    assert window["nodes"] != [meta["leader_at_start"]], (window["nodes"], meta["leader_at_start"])
    assert v["acked_missing"] == 0 and v["result"] == "pass", v
