"""A soak killed with SIGKILL in the middle of a run, cleaned up, and resumed: no run lost,
none counted twice, the one cut short reported as such."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from brokerchaos.runner.session import SPARK_WAIT_S
from brokerchaos.sandbox import netns
from brokerchaos.sandbox.sandbox import STATE_ROOT, _running

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
    pytest.mark.skipif(shutil.which("nats-server") is None and not os.path.exists("/usr/sbin/nats-server"),
                       reason="nats-server not installed (make setup)"),
]

CLI = str(Path(sys.executable).with_name("brokerchaos"))

SCENARIO = """
name: it-soak
system: nats
workload: {messages: 3000, rate: 1500, in_flight: 1500, ack_timeout: 2, retries: 30, read_idle: 5}
fault_mix:
  - {action: kill, target: follower, trigger: {at_seconds: 0.5}, duration: 0.5}
  - {action: stepdown, target: leader, trigger: {at_seconds: 0.5}, duration: 0.5}
"""


def _status(run_dir: Path):
    try:
        return json.loads((run_dir / "run.json").read_text()).get("status")
    except (OSError, ValueError):
        return None


def test_soak_killed_mid_run_resumes_without_losing_or_recounting_a_run(tmp_path):
    scenario = tmp_path / "soak.yaml"
    scenario.write_text(SCENARIO)
    out = tmp_path / "out"
    log = open(tmp_path / "first.log", "w")
    p = subprocess.Popen([CLI, "soak", str(scenario), "--runs", "3", "--out", str(out)], stdout=log,
                         stderr=subprocess.STDOUT)
    try:
        # run-001's write waits for Spark's start-up, up to the harness's own bound
        deadline = time.monotonic() + SPARK_WAIT_S + 240
        while True:
            sessions = list(out.glob("it-soak-*"))
            run2 = sessions[0] / "run-002" if sessions else None
            # killed while run-002 writes: run-001 finished, run-002's history under way
            if run2 is not None and _status(run2) == "running" and list((run2 / "history").glob("p1-*.parquet")):
                break
            assert p.poll() is None, (tmp_path / "first.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "run-002 never got under way"
            time.sleep(0.05)
        p.send_signal(signal.SIGKILL)
        p.wait(10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
        log.close()
    session = sessions[0]
    assert _status(session / "run-001") == "finished"
    # the safety net: the dead session's brokers, namespaces and state go (and nothing of a
    # session still alive elsewhere on the machine)
    owners = [json.loads(f.read_text()) for f in STATE_ROOT.glob("*/owner.json")]
    (dead,) = [o for o in owners if o["pid"] == p.pid]
    assert dead["namespaces"] and dead["procs"]
    subprocess.run([CLI, "clean"], check=True, capture_output=True, timeout=60)
    assert not set(dead["namespaces"]) & set(netns.list_all())
    assert not [q for q in dead["procs"] if _running(q["pid"], q["start"])]

    r = subprocess.run([CLI, "soak", "--resume", str(session), "--runs", "3"], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode in (0, 3, 4), r.stdout[-3000:] + r.stderr[-2000:]
    assert "Resuming" in r.stdout and "1 incomplete" in r.stdout
    assert sorted(d.name for d in session.glob("run-*")) == ["run-001", "run-002", "run-003"]
    assert [_status(session / f"run-00{i}") for i in range(1, 4)] == ["finished", "incomplete", "finished"]
    kept = [json.loads(line)["run"] for line in (session / "verdicts.jsonl").read_text().splitlines()]
    assert kept == ["run-001", "run-003"]  # each finished run once, the cut one not as finished
    summary = json.loads((session / "summary.json").read_text())
    assert summary["summary"]["incomplete_runs"] == ["run-002"]
    runs = [v["run"] for v in summary["runs"]]
    assert len(runs) == len(set(runs)) and {"run-001", "run-003"} <= set(runs)
    cut = [v for v in summary["runs"] if v["run"] == "run-002"]
    # what run-002 recorded before the kill is analysed, never as a complete run
    assert all(v["read_complete"] is not True and v["result"] != "pass" for v in cut)
    assert cut and all("cut short" in (v["read_status"] or "") for v in cut)  # its history says so
    assert "Soak: 3 runs finished" not in r.stdout and "Soak: 2 runs finished" in r.stdout
