"""Kafka for real, confluent-kafka against Apache Kafka from Maven Central and against tansu.

tansu (starts in a second): the delivery reports librdkafka gives land in the right history
row, and a tansu cluster driven through an external-mode cluster file (hooks only). Apache
Kafka: the seed's positive control (acks=1, the leader cut off from ZooKeeper, loses what
the old leader acked) and its negative (acks=all), and Kafka 4.1 on KRaft with a leader kill
the producer fails over from.
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from brokerchaos import validation as sc
from brokerchaos.runner import Session
from brokerchaos.systems import kafka
from observers import Quiet, free_port, kill_ours, started, until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
    # sessions whose servers are configured alike share a cluster (runner/pool.py)
    pytest.mark.usefixtures("cluster_pool"),
]


def _cluster(tmp_path, options=None, workload=None):
    s = sc.build({"name": "it-kafka-dr", "system": "kafka", "runs": 1,
                  "options": {"broker": "tansu", **(options or {})},
                  "workload": {"messages": 100, "ack_timeout": 4, **(workload or {})}})
    return s


def test_delivery_reports_map_to_ack_nack_unknown(tmp_path):
    s = _cluster(tmp_path, options={"message_timeout_ms": 2000})
    outcomes: dict[int, tuple] = {}
    with started(kafka.Kafka, s, ["n1", "n2", "n3", "store"], tmp_path / "logs") as (sb, dep):
        async def body():
            await dep.up(60)
            await dep.client.create_stream(10)
            assert await dep.roles.wait_stream_ready(10)
            p = dep.client.producer("p1")
            await p.open(lambda v, kind, off, node, detail: outcomes.__setitem__(v, (kind, off, node, detail)))
            try:
                # ack: a broker wrote it, at an offset
                for v in range(1, 11):
                    await p.send(v, b"p1 %d" % v)
                await until(lambda: len(outcomes) == 10, 15)
                assert p.node() in dep.cluster.node_names
                # unknown: every broker silent (SIGSTOP) until message.timeout.ms passes
                for n in dep.cluster.node_names:
                    dep.cluster.pause(n)
                try:
                    await p.send(11, b"p1 11")
                    await until(lambda: 11 in outcomes, 10)
                finally:
                    for n in dep.cluster.node_names:
                        dep.cluster.resume(n)
            finally:
                await p.close()
            # nack: a partition the topic does not have, as the broker's metadata says;
            # nothing was written. librdkafka says so from produce() itself when the
            # topic's metadata is in already (its first answer from a local broker often
            # comes within the millisecond after the Producer is made), else in the
            # delivery report: the same error either way, and the harness's producer
            # records a refused send as a nack too (workload/producer.py)
            from confluent_kafka import KafkaException, Producer

            raw = Producer({k: v for k, v in dep.client.producer_config("p2").items() if k != "logger"})
            errs = []
            try:
                raw.produce(dep.client.stream_name, b"x", partition=7, on_delivery=lambda err, msg: errs.append(err))
            except KafkaException as e:
                errs.append(e.args[0])
            raw.flush(10)
            return errs

        errs = sb.run_client(body, 120)
    for v in range(1, 11):
        kind, off, node, _ = outcomes[v]
        assert kind == "ack" and off.startswith("0:") and node in ("n1", "n2", "n3"), outcomes[v]
    assert len({outcomes[v][1] for v in range(1, 11)}) == 10
    kind, off, _, detail = outcomes[11]
    assert kind == "unknown" and off is None and "TIMED_OUT" in detail, outcomes[11]
    assert len(errs) == 1 and errs[0].name() == "_UNKNOWN_PARTITION", errs
    assert kafka.outcome_of(errs[0])[0] == "nack", errs


# -- external mode: the same brokers, started and killed by the cluster file's hooks only --

def _tansu_cluster_file(tmp_path: Path) -> tuple[Path, list[int], Path]:
    """A moto store and three tansu brokers on loopback ports, controlled by pid files."""
    store, ports = free_port(), [free_port() for _ in range(3)]
    run = tmp_path / "ext"
    run.mkdir()
    env = (f"AWS_ENDPOINT=http://127.0.0.1:{store} AWS_ALLOW_HTTP=true AWS_ACCESS_KEY_ID=x "
           f"AWS_SECRET_ACCESS_KEY=x AWS_DEFAULT_REGION=us-east-1")
    nodes = {}
    for i, port in enumerate(ports, 1):
        pidf = run / f"n{i}.pid"
        start = (f"{env} setsid {kafka.tansu_binary()} broker --listener-url tcp://127.0.0.1:{port} "
                 f"--advertised-listener-url tcp://127.0.0.1:{port} --storage-engine s3://tansu/ "
                 f"> {run}/n{i}.log 2>&1 < /dev/null & echo $! > {pidf}")
        nodes[f"n{i}"] = {"address": f"127.0.0.1:{port}", "start": start,
                          "kill": f"kill -9 $(cat {pidf})", "alive": f"kill -0 $(cat {pidf})"}
    import yaml

    f = run / "cluster.yaml"
    f.write_text(yaml.safe_dump({"system": "kafka", "nodes": nodes, "hook_timeout": 20}))
    return f, [store] + ports, run


def test_external_mode_drives_a_cluster_through_its_hooks(tmp_path, spark):
    f, ports, run = _tansu_cluster_file(tmp_path)
    store = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(ports[0])],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    from brokerchaos.systems.external import load

    ext = load(f)
    try:
        _wait_http(ports[0])
        import urllib.request

        urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{ports[0]}/tansu", method="PUT"),
                               timeout=10).close()
        for n in ext.nodes:
            ext.run(n, "start")
        s = sc.build({"name": "it-kafka-external", "system": "kafka", "runs": 2, "external": str(f),
                      "options": {"broker": "tansu"},
                      "workload": {"messages": 10_000, "in_flight": 5000, "ack_timeout": 10},
                      "fault": {"action": "kill", "target": "client-node", "trigger": {"after_acks": 5000},
                                "duration": 2}})
        before = {n: (run / f"{n}.pid").read_text().strip() for n in ext.nodes}
        result = Session(s, tmp_path / "out", observer=Quiet(), report=False).run()
        assert [m["sandbox"] for m in result.metas.values()] == ["loopback", "loopback"]
        # whole again after the first run's heal (every broker answers), so the second reused it
        assert result.metas["run-001"]["healthy_after"] is True, result.metas["run-001"]["health_after"]
        assert result.metas["run-002"]["cluster"].startswith("reused"), result.metas["run-002"]["cluster"]
        for run_id, v in zip(result.metas, result.verdicts):
            meta = result.metas[run_id]
            (killed,) = meta["fault"]["nodes"]
            assert v["read_complete"] is True, v["read_status"]
            assert v["send_count"] == 10_000 and v["pos_ack_count"] > 5000
            assert meta["fault"]["windows"][0].get("healed_ms") is not None
        killed_nodes = {m["fault"]["nodes"][0] for m in result.metas.values()}
        after = {n: (run / f"{n}.pid").read_text().strip() for n in ext.nodes}
        # the kill hook ended the broker and the start hook (the heal) started a new one
        assert all(after[n] != before[n] for n in killed_nodes)
        assert all(ext.run(n, "alive", check=False) == 0 for n in ext.nodes), "every broker running again"
    finally:
        for n in ext.nodes:
            pidf = run / f"{n}.pid"
            if pidf.exists():
                kill_ours(int(pidf.read_text()), "tansu")
        kill_ours(store.pid, "python")
        store.wait(10)


def _wait_http(port, timeout=30):
    import socket

    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            return
        except OSError:
            assert time.monotonic() < deadline, f"nothing listens on {port} after {timeout}s"
            time.sleep(0.1)


def test_outcome_mapping_table():
    from confluent_kafka import KafkaError

    assert kafka.outcome_of(None) == ("ack", None)
    assert kafka.outcome_of(KafkaError(KafkaError._MSG_TIMED_OUT))[0] == "unknown"
    assert kafka.outcome_of(KafkaError(KafkaError._PURGE_INFLIGHT))[0] == "unknown"
    assert kafka.outcome_of(KafkaError(KafkaError._PURGE_QUEUE))[0] == "nack"
    assert kafka.outcome_of(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))[0] == "nack"
    assert kafka.outcome_of(KafkaError(KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND))[0] == "unknown"


def test_dedup_campaign_writes_one_seed_csv(tmp_path, spark):
    import csv

    from brokerchaos import campaign as cp

    # on tansu: this is about the campaign's table, and tansu starts in a second
    spec, scenarios = cp.load("campaigns/kafka-dedup.yaml", {"runs": 1, "messages": 15_000, "after_acks": 5_000,
                                                            "option": ["broker=tansu"]})
    out = cp.run(spec, scenarios, tmp_path, observer=Quiet())
    with open(out["dir"] / "results.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["Scenario"], r["DedupEnabled"], r["TestRun"]) for r in rows] == [
        ("kafka-kill-leader-dedup-off", "false", "1"), ("kafka-kill-leader-dedup-on", "true", "1")]
    for r in rows:
        assert int(r["SendCount"]) == 15_000 and int(r["PosAckCount"]) > 5_000
        assert set(r) >= {"NotReceived", "ReceivedNoAck", "MsgsWithDups", "DJF", "DJB", "JF", "JB"}
    # the second arm differs in its producers alone: it ran on the first arm's cluster (runner/pool.py)
    off_dir, on_dir = (out["dir"] / s["dir"] for s in out["sessions"])
    on_meta = json.loads((on_dir / "run-001" / "run.json").read_text())
    assert on_meta["cluster"] == f"reused (started in {off_dir.name}/run-001)", on_meta["cluster"]
    # what --expect holds against: each session's verdicts under its scenario's name
    from brokerchaos.report import expect

    cases = [c for name, vs in out["verdicts"] for c in expect.evaluate(name, vs, expect.parse("no-loss"))]
    assert [(c.suite, c.run) for c in cases] == [("kafka-kill-leader-dedup-off", "run-001"),
                                                 ("kafka-kill-leader-dedup-on", "run-001")]
    # the campaign's page: a row per arm linking to its session's own report, the two arms
    # compared in words; every page of it draws offline
    from browser import check_report

    page = out["report"].read_text()
    assert "The arms differ in: <code>" in page and "workload.dedup: False vs True" in page
    assert "Fisher's exact test" in page or "no run of either arm had it" in page
    check_report(out["report"], "campaign-kafka-dedup")
    for s in out["sessions"]:
        assert f"href='{s['dir']}/report.html'" in page
        check_report(out["dir"] / s["dir"] / "report.html", f"campaign-{s['scenario']}")
    # --resume: a finished cell is kept as it is; a cell cut short (here: its run gone, its
    # session never analysed) goes on where it stopped
    import shutil

    off, on = (out["dir"] / s["dir"] for s in out["sessions"])
    kept = (off / "summary.json").read_text()
    shutil.rmtree(on / "run-001")
    (on / "summary.json").unlink()

    class Said(Quiet):
        lines = []

        def line(self, text):
            self.lines.append(text)

    again = cp.run(spec, scenarios, tmp_path, observer=Said(), resume=out["dir"])
    assert again["dir"] == out["dir"] and (off / "summary.json").read_text() == kept
    assert any(x.strip() == f"=== kafka-kill-leader-dedup-off: finished in {off.name}, kept ===" for x in Said.lines)
    assert any(x.strip() == f"=== kafka-kill-leader-dedup-on: cut short in {on.name}, going on ===" for x in Said.lines)
    assert json.loads((on / "run-001" / "run.json").read_text())["status"] == "finished"
    assert [s["summary"]["runs"] for s in again["sessions"]] == [1, 1]
    with open(out["dir"] / "results.csv", newline="") as fh:
        assert [r["Scenario"] for r in csv.DictReader(fh)] == ["kafka-kill-leader-dedup-off",
                                                               "kafka-kill-leader-dedup-on"]


# -- Apache Kafka from Maven Central: the seed's controls ----------------------------------------

def _history(result, run="run-001"):
    import pyarrow.dataset as ds

    return ds.dataset(str(result.dir / run / "history")).to_table().to_pylist()


def test_acks1_leader_isolated_from_zookeeper_loses_what_the_old_leader_acked(tmp_path, spark):
    """The positive control: cut off from ZooKeeper only, the leader loses its session and the
    controller elects another; nobody tells the old one, which goes on acking acks=1 writes
    the new leader never gets. The ZooKeeper session is 3 s here (the seed's 6 s) to keep the
    test short; the write lasts 10 s at 10,000 msg/s, the cut comes at 2 s."""
    s = sc.load("scenarios/kafka-acks1-isolate-leader-from-zk.yaml",
                {"runs": 1, "messages": 100_000, "after_acks": 20_000, "name": "it-kafka-acks1-zk",
                 "option": ["zk_session_timeout_ms=3000"], "read_replicas": True})
    result = Session(s, tmp_path, observer=Quiet(), report=False).run()
    (v,) = result.verdicts
    meta = result.metas["run-001"]
    (old,) = meta["fault"]["nodes"]
    w = meta["fault"]["windows"][0]
    assert meta["servers"] == {"kafka": "3.9.1", "zookeeper": "3.8.4"}, meta["servers"]
    # the topic's details around the fault, as the cluster gave them: a new leader was
    # elected while the old one was cut off, and the old one is back in the ISR after
    assert w["roles_before"]["leader"] == old and sorted(w["roles_before"]["isr"]) == ["n1", "n2", "n3"]
    assert w["roles_during"]["leader"] not in (None, old) and old not in w["roles_during"]["isr"], w
    assert w["roles_during"]["leader_epoch"] > w["roles_before"]["leader_epoch"], w
    assert sorted(w["roles_after"]["isr"]) == ["n1", "n2", "n3"], w["roles_after"]
    assert v["read_complete"] is True, v["read_status"]
    assert v["acked_missing"] > 0 and v["result"] == "fail", v
    # each broker's segments read: the old leader truncated its log to the new leader's, so
    # what it acked alone is on no copy at all (the broker's loss, not the read's)
    assert v["replica_reads_complete"] is True and v["acked_on_no_replica"] == v["acked_missing"], v
    # lost.csv: every lost message was acked by the old leader, after the cut
    import csv

    with open(result.dir / "lost.csv", newline="") as fh:
        lost = list(csv.DictReader(fh))
    assert len(lost) == v["acked_missing"]
    assert {r["acked_by"] for r in lost} == {old}
    t_fault = w["t_ms"]
    assert min(float(r["first_ack_ms"]) for r in lost) > t_fault


def test_acks_all_loses_nothing_when_the_leader_is_cut_off_from_zookeeper(tmp_path, spark):
    """The negative control of the same fault: acks=all with min.insync.replicas=2."""
    s = sc.load("scenarios/kafka-acksall-isolate-leader-from-zk.yaml",
                {"runs": 1, "messages": 70_000, "after_acks": 10_000, "name": "it-kafka-acksall-zk",
                 "option": ["zk_session_timeout_ms=3000"], "read_replicas": True})
    result = Session(s, tmp_path, observer=Quiet(), report=False).run()
    (v,) = result.verdicts
    meta = result.metas["run-001"]
    w = meta["fault"]["windows"][0]
    assert w["roles_during"]["leader"] != meta["fault"]["nodes"][0], w  # the fail-over happened
    assert v["read_complete"] is True, v["read_status"]
    assert v["pos_ack_count"] > 10_000 and v["acked_missing"] == 0, v
    # and every broker's segments hold the same messages at the same offsets
    assert (v["replica_reads"], v["replica_reads_complete"]) == (3, True), v["replica_status"]
    assert (v["replicas_diverged"], v["acked_on_no_replica"]) == (0, 0), v


def test_an_old_leader_read_before_its_heal_holds_what_it_acked_alone(tmp_path, spark):
    """The positive control of `replicas diverge` on Kafka: acks=1, the leader cut off from
    the other brokers and ZooKeeper (not the client) until after the reads; its segments
    hold the messages it acked after the cut, the other brokers' do not."""
    s = sc.load("scenarios/kafka-acks1-isolate-leader-replicas.yaml",
                {"messages": 60_000, "after_acks": 20_000, "name": "it-kafka-replicas",
                 "option": ["zk_session_timeout_ms=3000"]})
    result = Session(s, tmp_path, observer=Quiet(), report=False).run()
    (v,) = result.verdicts
    (old,) = result.metas["run-001"]["fault"]["nodes"]
    assert v["replica_reads_complete"] is True and v["diverged_acked"] > 0 and v["result"] == "fail", v
    import csv

    with open(result.dir / "divergence.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    acked_some = [r for r in rows if r["kind"] == "acked on some"]
    assert acked_some and all(old in r["nodes"].split() or old in r["missing_on"].split() for r in acked_some)
    assert any(r["nodes"] == old for r in acked_some), acked_some[:3]


def test_kraft_leader_kill_moves_the_producer_and_loses_nothing(tmp_path, spark):
    """Kafka 4.1 on a KRaft controller (cluster.version 4.1), acks=all, idempotence on (the
    dedup seed's kill): the leader killed and restarted 3 s later. The producer's acks come
    from the leader before the kill and from the new leader after it."""
    s = sc.load("scenarios/kafka-kill-leader-dedup-on.yaml",
                {"runs": 1, "messages": 20_000, "after_acks": 5_000, "name": "it-kafka-kraft", "consumers": 1})
    s = s.model_copy(update={"cluster": s.cluster.model_copy(update={"version": "4.1"})})
    result = Session(s, tmp_path, observer=Quiet(), report=False).run()
    (v,) = result.verdicts
    meta = result.metas["run-001"]
    (killed,) = meta["fault"]["nodes"]
    assert meta["servers"]["kafka"].startswith("4.1"), meta["servers"]
    assert meta["fault"]["windows"][0]["roles_before"]["controller"] == "controller"
    assert v["read_complete"] is True, v["read_status"]
    assert v["send_count"] == 20_000 and v["pos_ack_count"] > 5_000 and v["acked_missing"] == 0, v
    # every message has an outcome: none is left without a row
    assert v["pos_ack_count"] + v["neg_ack_count"] + v["unknown_count"] == 20_000
    # the live consumer (an observer) read through the fault and got every acked message
    assert v["live_consumers"] == 1 and v["live_read_status"] == "complete", v
    assert v["live_recv_rows"] >= v["pos_ack_count"] and v["e2e_latency_ms"] is not None, v
    assert v["fault_recv_gaps_ms"][0] is not None, v
    rows = _history(result)
    t_fault = next(r["t_ns"] for r in rows if r["type"] == "fault")
    before = {r["node"] for r in rows if r["type"] == "ack" and r["t_ns"] < t_fault}
    assert before == {killed}, f"the producer wrote to {before}, the fault hit {killed}"
    after = {r["node"] for r in rows if r["type"] == "ack" and r["t_ns"] > t_fault + 500_000_000}
    assert after and killed not in after, f"acks after the kill came from {after}"
    assert v["duplicate_deliveries"] == v["stored_duplicates"] + v["redeliveries"]


def test_a_kafka_release_without_a_pinned_pom_runs_by_cluster_version(tmp_path, spark):
    """Versions as an axis: Kafka 4.0.2, none of the pinned releases, from Maven Central
    through a pom written for it (systems/kafka/release.py); from 4.0 on it runs on a KRaft
    controller. The leader killed for 2 s under acks=all loses nothing."""
    from brokerchaos.systems.kafka import release

    s = sc.load("scenarios/kafka-kill-leader-briefly.yaml",
                {"runs": 1, "messages": 10_000, "after_acks": 3_000, "name": "it-kafka-4.0", "server_version": "4.0.2"})
    result = Session(s, tmp_path, observer=Quiet(), report=False).run()
    (v,) = result.verdicts
    meta = result.metas["run-001"]
    assert meta["servers"]["kafka"] == "4.0.2", meta["servers"]
    assert "<version>4.0.2</version>" in release.resolve("4.0.2").pom().read_text()
    # the Java client's bridge compiles against its kafka-clients (4.4 moved AppInfoParser to
    # common.utils.internals: a campaign's Java cell on 4.4.0 failed to compile before)
    from brokerchaos.systems import jclient

    assert jclient.classpath("kafka-4.4", "brokerchaos.KafkaBridge")
    (w,) = meta["fault"]["windows"]
    assert w["observed"]["state"] == "observed" and w["roles_before"]["controller"] == "controller", w
    assert v["read_complete"] is True and v["pos_ack_count"] > 3_000 and v["acked_missing"] == 0, v


def test_a_reassignment_moves_the_leader_s_replica_to_a_spare_broker_and_back_losing_nothing(tmp_path, spark):
    """A membership change under load (Kafka 4.1, KRaft): the leader's replica moved to the
    broker that held none mid-write by alterPartitionReassignments, the leadership with it, and moved
    back at the heal; acks=all, min ISR 2."""
    s = sc.load("scenarios/kafka-reassign-leader.yaml",
                {"runs": 1, "messages": 6000, "after_acks": 2000, "name": "it-kafka-reassign"})
    s = s.model_copy(update={"cluster": s.cluster.model_copy(update={"version": "4.1"})})
    result = Session(s, tmp_path, observer=Quiet(), report=False).run()
    (v,) = result.verdicts
    (w,) = result.metas["run-001"]["faults"][0]["windows"]
    e, before = w["effect"], w["roles_before"]
    (moved,) = w["nodes"]
    (spare,) = {"n1", "n2", "n3", "n4"} - set(before["replicas"])  # the broker that held none
    assert moved == before["leader"] and e["moved"] == {moved: spare}, e
    assert e["replicas_before"] == before["replicas"], (e, before)
    # the spare took the leader's place in the assignment, so it leads once in sync
    assert e["replicas_after"] == [spare if n == moved else n for n in e["replicas_before"]], e
    assert sorted(e["isr_after"]) == sorted(e["replicas_after"]) and e["leader_after"] == spare, e
    assert w["roles_during"]["replicas"] == e["replicas_after"], w["roles_during"]
    # the heal moved it back, and the cluster's metadata says so
    assert e["back"]["replicas_after"] == e["replicas_before"], e
    assert w["roles_after"]["replicas"] == e["replicas_before"], w["roles_after"]
    assert v["read_complete"] is True, v["read_status"]
    assert v["pos_ack_count"] == 6000 and v["acked_missing"] == 0 and v["result"] == "pass", v


def test_replicas_cut_to_one_and_grown_back_by_reassignment_lose_nothing(tmp_path, spark):
    """The `replicas` membership change on Kafka: 3 -> 1 mid-write by a reassignment that keeps
    the leader, 1 -> 3 at the heal (the two new followers fetch the log and join the ISR);
    acks=all with min ISR 1 loses nothing acknowledged."""
    s = sc.load("scenarios/kafka-replicas-shrink-grow.yaml",
                {"runs": 1, "messages": 6000, "after_acks": 2000, "name": "it-kafka-replicas"})
    result = Session(s, tmp_path, observer=Quiet(), report=False).run()
    (v,) = result.verdicts
    (w,) = result.metas["run-001"]["faults"][0]["windows"]
    e, before = w["effect"], w["roles_before"]
    assert e["replicas_before"] == 3 and e["peers_before"] == before["replicas"], (e, before)
    assert e["peers_after"] == [before["leader"]] and w["roles_during"]["replicas"] == e["peers_after"], e
    assert sorted(e["back"]["peers_after"]) == ["n1", "n2", "n3"], e
    assert sorted(w["roles_after"]["replicas"]) == ["n1", "n2", "n3"], w["roles_after"]
    assert w["observed"]["state"] == "observed", w["observed"]
    assert v["read_complete"] is True, v["read_status"]
    assert v["pos_ack_count"] == 6000 and v["acked_missing"] == 0 and v["result"] == "pass", v


# -- the evidence a PASS rests on (issue 60) ---------------------------------------------------

def test_a_leader_killed_for_two_seconds_on_zookeeper_comes_back_because_the_harness_waits(tmp_path, spark):
    """Kafka 3.9: a broker started again within its old ZooKeeper session exits at once
    (NodeExists). The restart waits for the registration to expire, and the run checks that
    every broker serves before the read: the killed leader is back, the run passes on it."""
    s = sc.load("scenarios/kafka-kill-leader-briefly.yaml", {"messages": 12_000, "after_acks": 3000,
                                                               "name": "it-kafka-kill-briefly"})
    result = Session(s, tmp_path, observer=Quiet(), report=False).run()
    (v,) = result.verdicts
    (w,) = result.metas["run-001"]["faults"][0]["windows"]
    (killed,) = w["nodes"]
    assert "waited" in w["effect"]["start_waited"][killed], w["effect"]
    assert w["observed"]["state"] == "observed" and f"running again: {killed} as pid" in w["observed"]["evidence"]
    whole = result.metas["run-001"]["whole"]
    assert whole["whole"] is True and "every broker registered and answering" in whole["detail"], whole
    assert v["not_whole"] == 0 and v["faults_not_in_effect"] == 0 and v["result"] == "pass", v
    # its log says it started for good: no second "Fatal error during KafkaServer startup"
    log = (result.dir / "run-001" / "logs" / f"{killed}.log").read_text(errors="replace")
    assert "NodeExistsException" not in log


@pytest.mark.effects(("not observed", "failed"), "the positive controls of the evidence checks")
def test_faults_with_no_effect_a_failed_inject_and_a_mechanism_that_never_happened_are_not_a_pass(tmp_path, spark,
                                                                                                   capsys):
    """Kafka 4.1 (scenarios/kafka-no-effect-controls.yaml): followers cut off from each other
    (no packet of the cluster's crosses: no effect), the leader cut off from itself (nothing to
    cut: the inject fails), a follower killed while the scenario requires the owner to move
    (it never does). The run is unknown with each reason, `--expect no-loss` exits 4."""
    from brokerchaos import cli

    out = tmp_path / "out"
    code = cli.main(["run", "scenarios/kafka-no-effect-controls.yaml", "--out", str(out), "--expect", "no-loss"])
    assert code == 4, capsys.readouterr().out[-3000:]
    (session,) = list(out.iterdir())
    v = json.loads((session / "summary.json").read_text())["runs"][0]
    assert v["result"] == "unknown" and v["acked_missing"] == 0, v
    states = {e["detail"].split(": ")[1]: e["state"] for e in v["effects"]}
    assert states == {"isolate-from follower": "not observed", "isolate-from leader": "failed",
                      "kill follower": "observed"}, v["effects"]
    cut = next(e["detail"] for e in v["effects"] if "isolate-from follower" in e["detail"])
    assert "across the cut silent" in cut and "(0 dropped)" in cut and "which stays open answered" in cut, cut
    assert v["faults_not_in_effect"] == 2 and v["mechanisms_missing"] == 1 and v["not_whole"] == 0, v
    assert any("the mechanism under test did not occur: owner-moved" in w for w in v["result_why"]), v["result_why"]
    printed = capsys.readouterr().out
    assert "UNDECIDED kafka-no-effect-controls run-001: no-loss: 0 acked messages missing, but the run did not " \
           "test what it names" in printed, printed[-2000:]


def test_another_librdkafka_release_runs_in_a_child_interpreter(tmp_path, spark):
    """Client versions as an axis: options.client_version 2.4 names confluent-kafka's newest
    2.4.x (PyPI), with the librdkafka its wheel carries; this interpreter loaded another, so
    the session runs in a child interpreter that loads it first (runner/interpreter.py), and
    run.json names it. The leader killed for 2 s under acks=all loses nothing."""
    import confluent_kafka

    s = sc.load("scenarios/kafka-kill-leader-briefly.yaml",
                {"runs": 1, "messages": 6_000, "after_acks": 2_000, "name": "it-librdkafka-2.4",
                 "option": ["client_version=2.4"]})
    assert confluent_kafka.version()[0] != "2.4.0"
    result = Session(s, tmp_path, observer=Quiet(), report=False).run()
    (v,) = result.verdicts
    meta = result.metas["run-001"]
    assert meta["client"] == {"library": "librdkafka", "version": "2.4.0", "binding": "confluent-kafka 2.4.0"}
    assert v["read_complete"] is True and v["pos_ack_count"] > 2_000 and v["acked_missing"] == 0, v
    assert "confluent_kafka" in sys.modules and confluent_kafka.version()[0] != "2.4.0"  # this one untouched
