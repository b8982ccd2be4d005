"""Real Redis + Sentinel clusters in network namespaces: a durable run and the split brain."""
import os
import shutil

import pytest

from brokerchaos import validation as sc
from brokerchaos.runner import Session
from browser import check_report
from observers import Quiet, client_events

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed (make setup)"),
]


def test_kill_primary_with_wait_loses_no_acked_write(tmp_path, spark):
    s = sc.load("scenarios/redis-kill-primary.yaml",
                {"runs": 1, "messages": 15_000, "after_acks": 5_000, "name": "it-redis-kill", "consumers": 1})
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
    s = sc.load("scenarios/redis-split-brain.yaml", {"name": "it-redis-split"})
    result = Session(s, tmp_path, observer=Quiet()).run()
    (v,) = result.verdicts
    meta = result.metas["run-001"]
    assert meta["fault"]["nodes"] == ["n1"]
    assert meta["leader_before_read"] != "n1"
    assert v["read_complete"] is True, v["read_status"]
    # the positive control: the isolated primary acked writes the new primary never had
    assert v["acked_missing"] > 0 and v["result"] == "fail"
    # the report shows where: the lost messages on the value-against-read-position plot, the
    # first rows of lost.csv under it, the run highlighted as failed
    page = result.report.read_text()
    assert "positions-run-001" in page and "acked, lost" in page and "Acked, never read" in page
    assert "<tr class='fail'>" in page
    got = check_report(result.report, "redis-split-brain")
    assert got.plots == 3, got  # outages, the timeline, the positions
