"""Real Redis + Sentinel clusters in network namespaces: a durable run and the split brain."""
import os
import shutil
import time

import pytest

from brokerchaos import validation as sc
from brokerchaos.runner import Session
from browser import check_report
from observers import Quiet, client_events
from one_run import one_run

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed (make setup)"),
    # sessions whose servers are configured alike share a cluster (runner/pool.py)
    pytest.mark.usefixtures("cluster_pool"),
]


def test_kill_primary_with_wait_loses_no_acked_write(tmp_path, spark):
    s = sc.load("scenarios/redis-kill-primary.yaml",
                {"runs": 1, "messages": 15_000, "after_acks": 5_000, "name": "it-redis-kill", "consumers": 1,
                 "read_replicas": True})
    result = Session(s, tmp_path, observer=Quiet(), report=False).run()
    (v,) = result.verdicts
    meta = result.metas["run-001"]
    assert meta["fault"]["nodes"] == [meta["leader_at_start"]] == ["n1"]
    # the durability each server runs with, in its own words (CONFIG GET), every node
    assert meta["server_settings"] == {n: {"appendonly": "yes", "appendfsync": "everysec"} for n in ("n1", "n2", "n3")}
    assert meta["leader_before_read"] != "n1", "the sentinels promoted a replica"
    assert v["read_complete"] is True, v["read_status"]
    assert v["send_count"] == 15_000 and v["pos_ack_count"] > 5_000
    assert v["acked_missing"] == 0 and v["result"] == "pass"
    # the negative control of the replica checks: every node's copy read to its end, the same
    assert (v["replica_reads"], v["replica_reads_complete"]) == (3, True), v["replica_status"]
    assert (v["replicas_diverged"], v["acked_on_no_replica"]) == (0, 0)
    # the live consumer (an observer) read through the fault and got every acked message
    assert v["live_consumers"] == 1 and v["live_read_status"] == "complete", v
    assert v["live_recv_rows"] >= v["pos_ack_count"] and v["e2e_latency_ms"] is not None, v
    assert v["fault_recv_gaps_ms"][0] is not None, v
    # redis-py's own word (the error it raised, the first reply after): off the killed
    # primary at once, back on another node
    events = client_events(result.dir / "run-001")
    assert [e[:2] for e in events[:1]] == [("disconnect", "n1")] and events[0][2] < 1000, events
    assert events[1][0] == "reconnect" and events[1][1] not in (None, "n1"), events


def test_split_brain_shows_acked_writes_lost(tmp_path, spark):
    s = sc.load("scenarios/redis-split-brain.yaml", {"name": "it-redis-split", "read_replicas": True})
    result = Session(s, tmp_path, observer=Quiet()).run()
    (v,) = result.verdicts
    meta = result.metas["run-001"]
    # (n1 unless an earlier session on this cluster moved the primary: cluster_pool)
    assert meta["fault"]["nodes"] == [meta["leader_at_start"]]
    assert meta["leader_before_read"] != meta["leader_at_start"]
    assert v["read_complete"] is True, v["read_status"]
    # the positive control: the isolated primary acked writes the new primary never had
    assert v["acked_missing"] > 0 and v["result"] == "fail"
    # read node by node once the old primary resynced: what it acked alone is on no copy at all
    assert v["replica_reads_complete"] is True and v["acked_on_no_replica"] == v["acked_missing"], v
    assert v["replicas_diverged"] == 0
    # the report shows where: the lost messages on the value-against-read-position plot, the
    # first rows of lost.csv under it, the run highlighted as failed
    page = result.report.read_text()
    assert "positions-run-001" in page and "acked, lost" in page and "Acked, never read" in page
    assert "Replicas read one by one: where they disagree" in page and "every replica" in page
    assert "<tr class='fail'>" in page
    got = check_report(result.report, "redis-split-brain")
    # the outages, the timeline, the positions; the outage taken apart only when a mark was seen
    # in it (under load an ack may still come after the fault: then a window has its parts)
    parted = any(p and p["order"] for p in v.get("outage_parts") or [])
    expected = {"outages", "timeline-run-001", "positions-run-001"} | ({"parts-run-001"} if parted else set())
    assert set(got.ids) == expected, (got, v.get("outage_parts"))


def test_split_brain_read_before_its_heal_shows_the_replicas_diverged(tmp_path, spark):
    """The positive control of `replicas diverge`: the old primary's copy, read before the cut
    is healed, holds what it acked alone; the promoted primary's and the other replica's do not."""
    s = sc.load("scenarios/redis-split-brain-replicas.yaml", {"name": "it-redis-split-replicas", "messages": 25_000})
    result = Session(s, tmp_path, observer=Quiet()).run()
    (v,) = result.verdicts
    old = result.metas["run-001"]["fault"]["nodes"][0]
    assert v["replica_reads_complete"] is True and v["diverged_acked"] > 0 and v["result"] == "fail", v
    rows = (result.dir / "divergence.csv").read_text().splitlines()
    others = " ".join(sorted({"n1", "n2", "n3"} - {old}))
    assert all(r.endswith(f",{old},{others}") for r in rows[1:]) and len(rows) - 1 == v["diverged_acked"], rows[:3]


# -- external mode: the walk-through of docs/external.md, servers and sentinels by hand -------

def _leftover(port: int, n: int) -> None:
    """What an earlier session (or another tool) left on the cluster: the stream an old
    harness named `bc-run-001` for every session, holding our payloads."""
    import redis

    with redis.Redis(port=port, socket_timeout=5) as r:
        for v in range(1, n + 1):
            r.xadd("bc-run-001", {b"p": f"p1:{v}".encode()})


def _primary_port() -> int:
    import redis

    with redis.Redis(port=26381, socket_timeout=5) as r:
        return int(r.sentinel_get_master_addr_by_name("mymaster")[1])


@pytest.mark.effects(("failed", "not whole"), "its third session's heal fails on purpose (a start hook that brings "
                                              "nothing back)")
def test_external_redis_with_sentinels_by_hand(tmp_path, spark, monkeypatch, capsys):
    """docs/external/redis-by-hand as the docs run it, with an `alive` hook that lies
    (always 0): the heal must still start the killed primary (its port is closed). A second
    session then sees only its own messages, though a stream named as an old harness named
    every session's is there; a third, whose killed node does not come back, is stopped."""
    from brokerchaos import cli
    from observers import by_hand, stop_by_hand

    monkeypatch.setenv("PATH", os.environ.get("PATH", "") + ":/usr/sbin:/usr/bin")

    def lying(doc):
        for n in doc["nodes"].values():
            n["alive"] = "true"

    d = by_hand(tmp_path, "redis-by-hand", lying)
    f = str(d / "cluster.yaml")
    try:
        before = {n: (d / f"{n}.pid").read_text() for n in ("n1", "n2", "n3")}
        s = sc.load("scenarios/redis-kill-primary.yaml",
                    {"external": f, "option": ["master_name=mymaster"], "runs": 2, "messages": 8000,
                     "after_acks": 2000, "duration": 2, "name": "it-redis-external"})
        result = Session(s, tmp_path / "a", observer=Quiet(), report=False).run()
        metas = [result.metas[r] for r in ("run-001", "run-002")]
        assert metas[0]["cluster"].startswith("external (") and metas[1]["cluster"].startswith("reused")
        assert metas[0]["healthy_after"] is True, metas[0]["health_after"]
        for m, v in zip(metas, result.verdicts):
            w = m["fault"]["windows"][0]
            assert "heal_error" not in w and w["healed_ms"] is not None, w
            assert v["read_complete"] is True and v["send_count"] == 8000 and v["acked_missing"] == 0, v
        killed = {m["fault"]["nodes"][0] for m in metas}
        after = {n: (d / f"{n}.pid").read_text() for n in ("n1", "n2", "n3")}
        # the hook said alive, the port said down: the start hook ran, a new server is up
        assert all(after[n] != before[n] for n in killed), (killed, before, after)
        assert all(m["stream"].startswith("bc-") and m["stream"] != f"bc-{r}"
                   for r, m in zip(("run-001", "run-002"), metas))

        # a second session on the same cluster: exactly its own messages, whatever is there
        _leftover(_primary_port(), 300)
        s2 = sc.load(None, {"system": "redis", "external": f, "option": ["master_name=mymaster"], "runs": 1,
                            "messages": 3000, "name": "it-redis-external-2"})
        (v,) = Session(s2, tmp_path / "b", observer=Quiet(), report=False).run().verdicts
        assert (v["send_count"], v["pos_ack_count"], v["received"]) == (3000, 3000, 3000), v
        assert (v["msgs_with_dups"], v["received_no_ack"], v["stowaways"], v["acked_missing"]) == (0, 0, 0, 0), v

        # the sentinels' name for the primary left at ours: said at once, with the name asked
        t = time.monotonic()
        capsys.readouterr()
        assert cli.main(["run", "--system", "redis", "--external", f, "--runs", "1", "--messages", "100",
                         "--out", str(tmp_path / "wrong-name")]) == 1
        err = capsys.readouterr().err
        assert "monitors no primary named 'bc'" in err and "options.master_name" in err, err
        assert time.monotonic() - t < 30, "a name no sentinel knows is not worth waiting for"

        # a node whose `start` hook brings nothing back: the heal fails, said on the console
        # and in run.json, and the next run is refused, not run on two nodes of three
        import json

        import yaml

        doc = yaml.safe_load((d / "cluster.yaml").read_text())
        doc["nodes"]["n3"]["start"] = "true"
        doc["hook_timeout"] = 4
        (d / "broken.yaml").write_text(yaml.safe_dump(doc))  # beside the pid files its hooks read
        capsys.readouterr()
        rc = cli.main(["run", "--system", "redis", "--external", str(d / "broken.yaml"), "--option",
                       "master_name=mymaster", "--runs", "2", "--messages", "3000", "--fault", "kill",
                       "--target", "n3", "--duration", "1", "--out", str(tmp_path / "c"), "--name",
                       "it-redis-broken"])
        out, err = capsys.readouterr()
        assert rc == 1, (out, err)
        (sess,) = (tmp_path / "c").iterdir()
        w = json.loads((sess / "run-001" / "run.json").read_text())["fault"]["windows"][0]
        assert "n3 is not up 4s after its 'start' hook (nothing answers at 127.0.0.1:16383)" in w["heal_error"], w
        assert not (sess / "run-002").exists()
        assert "Heal: kill n3 FAILED" in out, out
        why = "run-002 not started: the external cluster is not whole (n3: nothing answers at 127.0.0.1:16383)"
        assert f"Run refused: {why}" in out and f"brokerchaos: run stopped: {why}" in err, (out, err)
        summary = json.loads((sess / "summary.json").read_text())["summary"]
        assert summary["runs"] == 1 and summary["refused"].startswith("run-002 not started"), summary
        # and the run whose heal failed is no pass: its fault was never undone, its cluster not whole
        (v,) = json.loads((sess / "summary.json").read_text())["runs"]
        assert v["result"] == "unknown" and v["faults_not_in_effect"] == 1 and v["not_whole"] >= 1, v
        assert "n3: nothing answers" in v["whole_detail"], v["whole_detail"]
    finally:
        stop_by_hand(d, "redis")


def _corrupt(tmp_path, side: str):
    r = one_run(f"scenarios/redis-corrupt-{side}-tail.yaml", tmp_path / side, f"it-redis-corrupt-{side}")
    v, meta, window = r.verdict, r.meta, r.window
    (node,) = window["nodes"]
    (cut,) = window["effect"]["changes"][node]
    # the newest of the server's append-only files, 100,000 bytes shorter (~1,160 writes: more than
    # the producer can have in flight at 2,000 msg/s, so acknowledged ones are among them)
    assert cut["file"].startswith("appendonlydir/appendonly.aof.") and cut["file"].endswith(".incr.aof"), cut
    assert cut["size"] == cut["size_was"] - 100_000, cut
    # Redis's own check (redis-check-aof, no --fix) read the cut file as it was left: up to
    # where it reads whole (a cut on a record's boundary would read as valid)
    check = window["effect"]["check"][node]
    name = cut["file"].rsplit("/", 1)[1]
    (line,) = [x for x in check["said"] if x.startswith(f"AOF analyzed: filename={name},")]
    assert f"size={cut['size']}," in line and check["exit"] in (0, 1), check
    assert f"{node}'s own check: " in window["observed"]["evidence"], window["observed"]
    assert v["read_complete"] is True, v["read_status"]
    return v, meta, node, r.dir


def test_a_primary_s_cut_aof_loses_acked_writes_everywhere_and_a_replica_s_nothing(tmp_path, spark):
    """corrupt on Redis: the primary, its AOF's tail cut and started again before the
    sentinels' down-after, is still the primary, and its replicas resync from its shorter
    copy: writes each acknowledged by a replica too (WAIT 1) are gone (the positive
    control). A replica's cut tail is made good by the primary (the negative one)."""
    v, meta, node, run_dir = _corrupt(tmp_path, "primary")
    assert node == meta["leader_at_start"] == meta["leader_before_read"], meta
    assert v["acked_missing"] > 0 and v["result"] == "fail", v
    # in the restarted primary's own words: the short AOF loaded, the replicas' partial
    # resyncs refused (a new replication id), so they took its copy whole
    log = (run_dir / "logs" / f"{node}.log").read_text(errors="replace")
    assert "loaded anyway because aof-load-truncated is enabled" in log
    assert log.count("Partial resynchronization not accepted: Replication ID mismatch") >= 2, log[-3000:]
    v, meta, node, _ = _corrupt(tmp_path, "replica")
    assert node != meta["leader_at_start"], meta
    assert v["acked_missing"] == 0 and v["result"] == "pass", v


def test_a_replica_s_aof_with_flipped_bits_starts_again_once_redis_own_tool_repairs_it(tmp_path, spark):
    """corrupt with repair on Redis: 64 bits flipped in a replica's AOF increments, which
    Redis's own check finds invalid; redis-check-aof --fix cuts the file at its first bad
    command, the check then finds it valid, and the replica loads it and resyncs: nothing
    acknowledged goes and the cluster is whole (the negative control of repair; without it
    the replica does not start, redis-corrupt-replica-bits)."""
    r = one_run("scenarios/redis-corrupt-replica-bits-repaired.yaml", tmp_path, "it-redis-repaired")
    (node,) = r.window["nodes"]
    e = r.window["effect"]
    assert node != r.meta["leader_at_start"], r.meta
    flipped = {c["file"].rsplit("/", 1)[1] for c in e["changes"][node]}
    assert flipped and all(f.endswith(".incr.aof") for f in flipped), flipped  # params.file
    assert any("is not valid" in line for line in e["check"][node]["said"]), e["check"]
    assert e["repair"][node]["exit"] == 0 and "Successfully truncated" in e["repair"][node]["said"][-1], e["repair"]
    after = e["check_after_repair"][node]
    assert after["exit"] == 0 and not any("is not valid" in line for line in after["said"]), after
    assert f"{node} repaired: Successfully truncated" in r.window["observed"]["evidence"], r.window["observed"]
    assert r.meta["whole"]["whole"] is True, r.meta["whole"]
    assert r.verdict["acked_missing"] == 0 and r.verdict["result"] == "pass", r.verdict


def test_a_replica_replaced_under_load_is_copied_whole_and_loses_nothing(tmp_path, spark):
    """replace on Redis: a replica leaves for good (shut down, its data deleted, every
    sentinel reset) and a new, empty server takes its place, copied whole from the primary
    (one full resync more); with WAIT 1 the other replica held every acknowledged write, and
    nothing goes (the negative control of `replace`)."""
    r = one_run("scenarios/redis-replace-replica.yaml", tmp_path, "it-redis-replace")
    (node,) = r.window["nodes"]
    e = r.window["effect"]
    lead = r.meta["leader_at_start"]
    removed = e["removed"][node]
    assert node != lead and removed["members_before"][0] == lead, e
    assert node in removed["members_before"] and node not in removed["members_after"], e
    added = e["added"][node]
    assert node in added["members_after"] and added["in_sync_s"] is not None, added
    assert added["full_syncs"] >= 1, added  # the new server copied the primary's data whole
    assert r.meta["whole"]["whole"] is True, r.meta["whole"]
    assert r.verdict["acked_missing"] == 0 and r.verdict["result"] == "pass", r.verdict


def test_explore_draws_schedules_until_one_loses_acked_writes_and_resumes_where_it_stopped(tmp_path, spark,
                                                                                          capsys):
    """`explore` on Redis with asynchronous replication and the producer pinned to its node
    (the split brain's settings, its fault replaced): seed 14 draws a follower cut off for
    2 s and a follower delayed for 2 s (both hold), then the leader cut off from its peers for
    10 s, which the sentinels fail over while the old primary acks alone: a violation at the
    third schedule, within a budget of 3 runs. Resumed, the search draws nothing more."""
    import json

    from brokerchaos import explore as ex
    from brokerchaos.cli import main

    import yaml

    base = sc.load_document("scenarios/redis-split-brain.yaml")
    base.update(name="it-redis-explore", workload={**base["workload"], "messages": 30_000})
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    argv = ["explore", str(tmp_path / "base.yaml"), "--actions", "isolate-from,delay,pause",
            "--targets", "leader,follower", "--max-faults", "1", "--budget", "3", "--seed", "14",
            "--out", str(tmp_path)]
    assert main(argv) == 3, capsys.readouterr().out[-3000:]
    out = capsys.readouterr().out
    (root,) = tmp_path.glob("explore-it-redis-explore-*")
    entries = ex.read_journal(root)
    assert [(e["cells"][0][:2], e["outcome"]) for e in entries] == [
        (["isolate-from", "follower"], "holds"), (["delay", "follower"], "holds"),
        (["isolate-from", "leader"], "fails")]
    assert "acked messages missing" in entries[2]["why"][0], entries[2]
    found = json.loads((root / ex.EXPLORE_FILE).read_text())
    assert found["stopped"] == "1 violation found" and found["explored"] == 3 and found["runs"] == 3, found
    assert sum(c["tried"] for c in found["coverage"]) == 3
    # the violation is a plain scenario: it loads, with the base's settings and the fault drawn
    doc = sc.load_document(root / "violation-003.yaml")
    assert doc["options"] == {"wait_replicas": 0, "follow_failover": False}
    assert doc["faults"] == entries[2]["faults"] and sc.build(doc).runs == 1
    assert "brokerchaos shrink" in out and "3 schedules tried (3 explored, 3 runs)" in out
    page = (root / "report.html").read_text()
    assert "Found:</b> schedule 3" in page and all(f"href='{e['dir']}/report.html'" in page for e in entries)
    got = check_report(root / "report.html", "explore-redis")
    assert got.ids == ["coverage"] and got.title == "brokerchaos explore it-redis-explore", got
    # resumed: the journal says a violation was found, so nothing more is drawn or run
    assert main(["explore", "--resume", str(root)]) == 3
    assert len(ex.read_journal(root)) == 3


def test_shrink_cuts_a_schedule_down_to_its_one_useful_fault(tmp_path, spark, capsys):
    """`shrink` of a hand-made schedule: a follower paused (useless: with asynchronous
    replication it touches no acked write) before the leader cut off from its peers (the
    split brain). The useful fault is last, so that delta debugging's first cut (without the
    pause) fails and is kept: one run of search ends at the isolation alone; the budget then
    stops the search, said so. (Each run is a 30,000-message split brain: one useless fault
    shows the cut as well as two did, and a run fewer.)"""
    import json

    import yaml

    from brokerchaos import shrink
    from brokerchaos.cli import main

    doc = sc.load_document("scenarios/redis-split-brain.yaml")
    useful = {**doc.pop("fault"), "params": {"from": "peers"}}
    doc.update(name="it-redis-shrink", workload={**doc["workload"], "messages": 30_000},
               faults=[{"action": "pause", "target": "followers[1]", "trigger": {"after_acks": 5000}, "duration": 2},
                       useful])
    path = tmp_path / "schedule.yaml"
    path.write_text(yaml.safe_dump(doc))
    code = main(["shrink", str(path), "--runs", "1", "--budget", "1", "--out", str(tmp_path / "out")])
    said = capsys.readouterr()
    out = said.out
    assert code == 0, out[-3000:] + said.err[-1500:]  # an error is said on stderr
    (root,) = (tmp_path / "out").glob("shrink-it-redis-shrink-*")
    found = json.loads((root / shrink.SHRINK_FILE).read_text())
    assert found["original"]["failed"] == 1, found["original"]
    assert [(s["cut"], s["outcome"]) for s in found["steps"]] == [("without fault 1", "fails")], found["steps"]
    assert found["stopped"] == "the budget of 1 run was spent" and "stopped: the budget" in out
    rep = sc.load_document(root / shrink.REPRODUCER)
    assert rep["fault"] == useful and "faults" not in rep, rep
    assert found["reproducer"]["failed"] == 1 == found["reproducer"]["decided"], found["reproducer"]
