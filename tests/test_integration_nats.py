"""Real 3-node NATS JetStream clusters in network namespaces, real faults, real Spark."""
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from observers import Quiet, namespaces_of

from brokerchaos import validation as sc
from brokerchaos.runner import Observer, Session
from brokerchaos.runner.session import SPARK_WAIT_S
from brokerchaos.sandbox import netns

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
    pytest.mark.skipif(shutil.which("nats-server") is None and not os.path.exists("/usr/sbin/nats-server"),
                       reason="nats-server not installed (make setup)"),
    # sessions whose servers are configured alike share a cluster (runner/pool.py)
    pytest.mark.usefixtures("cluster_pool"),
]


def _history(d: Path) -> list[dict]:
    # the format: only files ending in .parquet are history (a writer may leave *.tmp)
    return ds.dataset(sorted(str(p) for p in d.rglob("*.parquet")), format="parquet").to_table().to_pylist()


def _ours(sid: str) -> list[str]:
    return [n for n in netns.list_all() if n.startswith(f"{netns.PREFIX}{sid}-")]


class LeaderWitness(Observer):
    """Asks the cluster who leads the stream, over its own connection to another node, just
    before the fault fires: an independent check of the harness's target resolution."""

    def __init__(self):
        self.lines = []
        self.seen = None
        self.sid = None

    def line(self, text):
        self.lines.append(text)

    async def before_fault(self, dep, nodes):
        import nats

        self.sid = dep.ctx.sandbox.sid
        other = next(n for n in dep.cluster.node_names if n not in nodes)
        url = "nats://{}:{}".format(*dep.cluster.address(other))
        nc = await nats.connect(servers=[url], connect_timeout=2, max_reconnect_attempts=0)
        try:
            info = await nc.jetstream(timeout=2).stream_info(dep.ctx.stream_name)
            self.seen = (info.cluster.leader, list(nodes))
        finally:
            await nc.close()


def _no_loss_of_ours(v):
    # A message acked at a stream position that the read reached but found another message
    # at was given away by the broker: nats-server 2.9.10 once did it after a leader kill
    # (tests/data/nats-diverged-replica). Any other loss could be the harness's own doing.
    assert v["acked_missing"] == v["acked_missing_overwritten"], v
    assert v["result"] == ("pass" if v["acked_missing"] == 0 else "fail"), v


@pytest.mark.fresh_cluster  # nothing of its session may stay
def test_kill_leader_kills_the_real_leader_and_accounts_for_every_acked_message(tmp_path, spark, capsys):
    # paced: at full speed ack 5,000 comes 250 ms into the write, before the live consumer's
    # first fetch; once (CI, 2026-11-24) its consumer then stalled until the killed node was
    # back, after the last send, and the run had no end-to-end latency to measure
    s = sc.load("scenarios/nats-kill-leader.yaml",
                {"runs": 1, "messages": 20_000, "after_acks": 5_000, "name": "it-kill-leader", "consumers": 1,
                 "rate": 4000, "read_replicas": True})
    obs = LeaderWitness()
    result = Session(s, tmp_path, observer=obs, report=False).run()
    (v,) = result.verdicts
    meta = result.metas["run-001"]
    assert v["read_complete"] is True, v["read_status"]
    assert v["send_count"] == 20_000
    _no_loss_of_ours(v)
    assert v["pos_ack_count"] > 5_000 and v["received"] >= v["pos_ack_count"]
    # the replica checks' negative control: each server's store read to its end, alike
    assert (v["replica_reads"], v["replica_reads_complete"]) == (3, True), v["replica_status"]
    assert (v["replicas_diverged"], v["acked_on_no_replica"]) == (0, 0)
    # the live consumer (an observer) read through the fault and got every acked message
    assert v["live_consumers"] == 1 and v["live_read_status"] == "complete", v
    assert v["live_recv_rows"] >= v["pos_ack_count"] and v["e2e_latency_ms"] is not None, v
    assert v["fault_recv_gaps_ms"][0] is not None, v
    # the node killed was the stream leader at injection time, by an independent query
    leader_seen, killed = obs.seen
    assert killed == [leader_seen]
    assert meta["fault"]["nodes"] == killed and meta["fault"]["acks_at_effect"] >= 5_000
    assert meta["leader_before_read"] != leader_seen  # leadership moved away from the killed node
    # the history itself records the fault against that node, and the outage it caused
    assert [f["node"] for f in v["faults"]] == killed
    assert v["fault_outages_ms"][0] is not None and v["fault_outages_ms"][0] > 0
    rows = _history(result.dir / "run-001" / "history")
    faults = [r for r in rows if r["type"] == "fault"]
    heals = [r for r in rows if r["type"] == "heal"]
    assert len(faults) == 1 and faults[0]["node"] == leader_seen and len(heals) == 1
    assert (result.dir / "results.csv").read_text().startswith("DedupEnabled,TestRun,SendCount")
    # `brokerchaos analyze` on the session it wrote gives the same verdicts
    import json

    from brokerchaos import cli

    capsys.readouterr()
    assert cli.main(["analyze", str(result.dir), "--format", "json", "--no-write"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again == json.loads(json.dumps(result.verdicts, default=str))
    # nothing left behind
    assert _ours(obs.sid) == []
    assert not (Path("/tmp/brokerchaos") / obs.sid).exists()


def test_a_follower_killed_until_after_the_reads_holds_a_copy_that_diverged(tmp_path, spark):
    """The positive control of `replicas diverge` on NATS: the killed follower's own store stops
    where the kill found it; the end read, from the leader, misses nothing."""
    s = sc.load("scenarios/nats-kill-follower-replicas.yaml", {"name": "it-nats-replicas"})
    result = Session(s, tmp_path, observer=Quiet(), report=False).run()
    (v,) = result.verdicts
    down = result.metas["run-001"]["fault"]["nodes"][0]
    assert v["acked_missing"] == 0 and v["replica_reads_complete"] is True, v["replica_status"]
    assert v["diverged_acked"] > 5_000 and v["diverged_positions"] == 0 and v["result"] == "fail", v
    rows = (result.dir / "divergence.csv").read_text().splitlines()[1:]
    assert {r.rsplit(",", 1)[1] for r in rows} == {down}, rows[:3]


def _restarted_leader(tmp_path, version: str):
    """scenarios/nats-restarted-leader-replicas.yaml on `version`: the leader, cut off from its
    peers with the producer on its side, killed during the cut and started after it healed."""
    s = sc.load("scenarios/nats-restarted-leader-replicas.yaml",
                {"name": f"it-nats-restarted-leader-{version}", "server_version": version})
    result = Session(s, tmp_path, observer=Quiet(), report=False).run()
    (v,) = result.verdicts
    cut, kill = (f["windows"][0] for f in result.metas["run-001"]["faults"])
    # the kill found the cut server (the producer's), and both faults did what they name
    assert cut["nodes"] == kill["nodes"] and cut["observed"]["state"] == kill["observed"]["state"] == "observed", \
        (cut, kill)
    assert v["read_complete"] is True and v["replica_reads_complete"] is True, v
    return v, kill["nodes"][0], result.dir


def test_a_restarted_leader_keeps_entries_no_quorum_had_on_2_10_22(tmp_path, spark):
    """The positive control of the NATS restarted-leader case (docs/findings/nats.md): on
    2.10.22 the old leader keeps and applies the publishes only its Raft log had, so at those
    positions its stream holds other messages than the two peers', which agree."""
    v, old, run_dir = _restarted_leader(tmp_path, "2.10.22")
    assert v["diverged_positions"] > 0 and v["result"] == "fail", v
    # the end read's consumer is led by any server: read from the old leader's copy, the
    # messages it displaced are lost, each at a position the read returned holding another
    assert v["acked_missing"] == v["acked_missing_overwritten"] <= v["diverged_positions"], v
    import csv

    with open(run_dir / "divergence.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["kind"] == "position"]
    assert len(rows) == v["diverged_positions"], rows[:3]
    for r in rows:  # "n1 p1:2022; n2 p1:2045; n3 p1:2045": the old leader alone differs
        held = dict(x.split(" ", 1) for x in r["nodes"].split("; "))
        others = {held[n] for n in held if n != old}
        assert len(others) == 1 and held[old] not in others, r


def test_a_restarted_leader_drops_entries_no_quorum_had_from_2_10_23(tmp_path, spark):
    """The negative control: the same schedule on 2.10.25 (PR #5957, in 2.11.0 and backported
    to 2.10.23), every copy alike."""
    v, _, _ = _restarted_leader(tmp_path, "2.10.25")
    assert v["diverged_positions"] == 0 and v["diverged_acked"] == 0 and v["acked_missing"] == 0, v
    assert v["result"] == "pass", v


def test_producers_in_processes_of_their_own_trigger_the_fault_and_record_every_message(tmp_path, spark):
    s = sc.load("scenarios/nats-kill-leader.yaml",
                {"runs": 1, "messages": 20_000, "producers": 2, "processes": 2, "after_acks": 10_000,
                 "name": "it-processes"})
    result = Session(s, tmp_path, observer=Quiet(), report=False).run()
    (v,) = result.verdicts
    meta = result.metas["run-001"]
    pids = meta["producer_processes"]
    assert len(pids) == 2 and os.getpid() not in pids
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)  # gone with the write phase
    assert v["read_complete"] is True and v["send_count"] == 40_000, v
    _no_loss_of_ours(v)
    # the N-th ack, counted over both processes, fired the fault: the history has at least
    # that many acks before the fault row
    rows = _history(result.dir / "run-001" / "history")
    (fault,) = [r for r in rows if r["type"] == "fault"]
    assert meta["fault"]["acks_at_effect"] >= 10_000
    acked_before = {(r["producer"], r["value"]) for r in rows if r["type"] == "ack" and r["t_ns"] < fault["t_ns"]}
    assert len(acked_before) >= 10_000
    assert {r["producer"] for r in rows if r["type"] == "send"} == {"p1", "p2"}


def test_the_demo_on_a_terminal_draws_bars_and_ends_with_its_report(tmp_path):
    """`make demo` as a user runs it (smaller), in a pseudo-terminal: a bar for the runs and
    one for the current run's messages, the seed's lines above them; the last line names
    report.html, which opens in a real browser without a network request or a console
    error, every plot drawn; output.txt has the session's lines, time-stamped."""
    import pty
    import re
    import select

    from browser import check_report

    argv = ["run", "scenarios/nats-kill-leader.yaml", "--runs", "1", "--messages", "20000", "--after-acks", "5000",
            "--out", str(tmp_path)]
    master, slave = pty.openpty()
    p = subprocess.Popen([sys.executable, "-m", "brokerchaos.cli", *argv], stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    got = b""
    # the write waits for Spark's start-up (up to SPARK_WAIT_S); a clean-clone run with a
    # busy core beside it took 431 s in all, and the lines read by then had no report yet
    deadline = time.monotonic() + SPARK_WAIT_S + 400
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 1.0)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the child's side closed, everything it wrote read
                    break
                if not chunk:
                    break
                got += chunk
            elif p.poll() is not None or time.monotonic() >= deadline:
                break  # exited: the next turns read what is left; or out of time
        assert p.poll() is not None, f"the demo still running after {SPARK_WAIT_S + 400:.0f} s: " + \
            got.decode(errors="replace")[-3000:]
        # 3: nats-server 2.9.10 once gave an acked message away (tests/data/nats-diverged-replica)
        assert p.returncode in (0, 3), got.decode(errors="replace")[-3000:]
    finally:
        if p.poll() is None:
            p.kill()
        os.close(master)
    text = got.decode(errors="replace")
    assert "runs:" in text and "messages:" in text, text[-3000:]
    assert "\r" in text  # the bars redraw in place
    (report,) = {Path(m) for m in re.findall(r"Report: (\S+report\.html)", text)}
    session = report.parent
    assert (session / "command.txt").read_text().strip() == "brokerchaos " + " ".join(argv)
    stamped = (session / "output.txt").read_text().splitlines()
    assert all(re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ", line) for line in stamped), stamped[:3]
    said = [line[25:] for line in stamped]
    assert said[-1] == f"Report: {report}" and said[-2] == f"Results: {session}"
    # the fault as it fires, then again in the run's block
    assert len([x for x in said if re.match(r"Fault: kill leader -> n\d at ack \d+ ", x)]) == 1, said
    assert len([x for x in said if re.match(r"Fault: kill leader -> n\d \(at ack \d+, ", x)]) == 1, said
    # the read's progress, as the Pulsar seed's reader prints it (here only its last line: the
    # seed prints one every 50,000 messages)
    assert len([x for x in said if x.startswith("Received: ") and x.endswith("(read complete)")]) == 1, said
    # the demo's negative control of the evidence: its window seen in effect, the cluster whole
    assert any(re.match(r"Fault effect: +observed: kill leader: gone: n\d", x) for x in said), said
    assert any(re.match(r"Cluster before the read: +whole after", x) for x in said), said
    page = report.read_text()
    assert "brokerchaos run " + str(session / "scenario.json") in page and "nats-kill-leader" in page
    loaded = check_report(report, "demo")
    # the outage distribution and the run's timeline (and a value-against-position plot if the
    # run lost or reordered)
    assert loaded.plots >= 2, loaded
    assert page.count("<section id='run-") == 1 and "href='#run-001'" in page


class _Harness:
    """A `brokerchaos run` subprocess whose output is read as it comes, so that a test can wait
    for a line the harness prints (the fault's) instead of guessing how long start-up takes."""

    def __init__(self, cmd):
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.append(line)

    @property
    def out(self) -> str:
        return "".join(self.lines)

    def wait_for_line(self, prefix: str, timeout: float):
        deadline = time.monotonic() + timeout
        while not any(line.startswith(prefix) for line in self.lines):
            assert self.p.poll() is None, self.out
            if time.monotonic() > deadline:
                # the harness tears its cluster down on SIGTERM: a failed wait leaves nothing behind
                self.p.send_signal(signal.SIGTERM)
                self.finish(120)
                raise AssertionError(f"no line starting {prefix!r} within {timeout:.0f}s:\n{self.out}")
            time.sleep(0.1)

    def finish(self, timeout: float) -> str:
        self.p.wait(timeout)
        self._reader.join(10)
        return self.out


def _start_harness(tmp_path, *extra):
    cmd = [sys.executable, "-m", "brokerchaos.cli", "run", "--out", str(tmp_path), "--name", "it-crash",
           "--runs", "1", "--messages", "3000000", "--fault", "none", "--write-timeout", "120", *extra]
    before = set(netns.list_all())
    h = _Harness(cmd)
    deadline = time.monotonic() + 60
    while True:
        assert h.p.poll() is None, h.out
        new = [n for n in namespaces_of(h.p.pid) if n not in before and netns.exists(n)]
        nodes = [n for n in new if n.endswith(("-n1", "-n2", "-n3"))]
        if len(nodes) == 3 and all(netns.pids(n) for n in nodes):
            return h, new
        assert time.monotonic() < deadline, "harness did not start its cluster within 60s"
        time.sleep(0.2)


def _broker_pids(names):
    return [pid for n in names for pid in netns.pids(n)]


def test_crashed_session_is_removed_by_clean(tmp_path):
    h, names = _start_harness(tmp_path)
    pids = _broker_pids(names)
    assert len(pids) >= 3
    os.kill(h.p.pid, signal.SIGKILL)  # a crash: no finally, no teardown
    h.finish(10)
    assert all(netns.exists(n) for n in names), "namespaces should outlive a crashed harness"
    assert all(os.path.exists(f"/proc/{pid}") for pid in pids), "brokers should outlive a crashed harness"
    r = subprocess.run([sys.executable, "-m", "brokerchaos.cli", "clean"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for n in names:
        assert f"namespace {n}" in r.stdout
    assert not any(netns.exists(n) for n in names)
    deadline = time.monotonic() + 10
    while any(os.path.exists(f"/proc/{pid}") for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(os.path.exists(f"/proc/{pid}") for pid in pids)


def test_sigterm_heals_and_tears_down(tmp_path):
    h, names = _start_harness(tmp_path, "--fault", "kill-leader", "--after-acks", "1000")
    pids = _broker_pids(names)
    # the signal must come after the fault: a loaded machine can take far longer than the
    # brokers' start-up to reach 1000 acks (a fixed 3 s sleep once saw no fault row in CI),
    # and the write itself waits for Spark's start-up, up to its own bound (a clean-clone run
    # with a busy core beside it waited 87 s: "Spark: the write waited …")
    h.wait_for_line("Fault: ", SPARK_WAIT_S + 90)
    h.p.send_signal(signal.SIGTERM)
    out = h.finish(120)
    assert h.p.returncode == 130, out
    assert "\r" not in out and "messages:" not in out  # no terminal: plain lines, no bar
    assert not any(netns.exists(n) for n in names), out
    assert not any(os.path.exists(f"/proc/{pid}") for pid in pids)
    # nothing recorded is lost: the heal is in the history, the producer's rows are contiguous,
    # and every message sent has an outcome (those in flight at the signal: unknown)
    (hist,) = list(tmp_path.rglob("history"))
    rows = _history(hist)
    # (the window's effect too: what the harness saw of it, written even as the run is cut short)
    assert [r["type"] for r in rows if r["client"] == "nemesis"] == ["fault", "heal", "effect"]
    p1 = sorted(r["seq"] for r in rows if r["client"] == "p1")
    assert p1 == list(range(1, len(p1) + 1)) and len(p1) > 1000
    sent = {r["value"] for r in rows if r["type"] == "send"}
    answered = {r["value"] for r in rows if r["type"] in ("ack", "nack", "unknown")}
    assert sent and sent == answered
    assert not list(hist.glob("*.tmp"))
    # the run is not taken for a finished one: run.json and the history both say it was cut
    meta = json.loads((hist.parent / "run.json").read_text())
    assert meta["status"] == "incomplete" and meta["incomplete"].startswith("cut short"), meta
    (end,) = [r for r in rows if r["client"] == "cut-short"]
    assert end["type"] == "read_end" and end["detail"].startswith("incomplete: cut short")


@pytest.mark.fresh_cluster  # about its own runs' cluster
def test_cluster_is_reused_while_healthy_and_rebuilt_when_not(tmp_path, spark, monkeypatch):
    from brokerchaos.systems import Deployment

    real = Deployment.healthy
    calls = []

    async def healthy_then_not(self, timeout):
        ok, why = await real(self, timeout)
        calls.append((self.ctx.run_id, ok))
        # the real check first (it must pass on a whole cluster), then the second run is
        # declared unfit so that the third must build a new cluster
        return (ok, why) if self.ctx.run_id != "run-002" else (False, "declared unfit by the test")

    monkeypatch.setattr(Deployment, "healthy", healthy_then_not)
    s = sc.load("scenarios/nats-kill-leader.yaml",
                # paced: unpaced, the 3,000 were acked while the leader was still being looked
                # up for the kill, and the write ended before the fault landed (a clean-clone run)
                {"runs": 3, "messages": 3000, "rate": 1500, "after_acks": 1000, "retries": 20, "name": "it-reuse"})
    result = Session(s, tmp_path, observer=Quiet(), report=False).run()
    clusters = [result.metas[f"run-00{i}"]["cluster"] for i in (1, 2, 3)]
    assert clusters == ["started", "reused (started in run-001)",
                        "started (rebuilt: declared unfit by the test)"], clusters
    assert calls == [("run-001", True), ("run-002", True)]  # no check after the last run
    for v in result.verdicts:
        assert v["read_complete"] is True
        _no_loss_of_ours(v)
    # each run had its own stream: no run read another's messages
    assert all(v["send_count"] == 3000 and v["received"] >= v["pos_ack_count"] > 1000 and v["stowaways"] == 0
               for v in result.verdicts), result.verdicts
    # the rebuilt cluster logs to the run that started it
    assert all((result.dir / "run-003" / "logs" / f"n{i}.log").exists() for i in (1, 2, 3))
    # where each run's time went: the parts add up, and each verdict came after its read
    for i in (1, 2, 3):
        p = json.loads((result.dir / f"run-00{i}" / "run.json").read_text())["phases"]
        assert abs(p["write_s"] + p["read_s"] + p["harness_s"] - p["run_s"]) < 0.01, p
        assert p["harness_s"] >= p["cluster_ready_s"] > 0 and p["analysis_s"] > 0, p
        assert p["verdict_after_read_s"] >= p["analysis_s"], p
        assert "blocks" in p["analysis_steps_s"], p


def test_a_long_session_takes_every_verdict_from_one_analysis_at_its_end(tmp_path, spark):
    s = sc.load("scenarios/nats-no-fault.yaml", {"runs": 3, "messages": 500, "name": "it-end"})
    result = Session(s, tmp_path, observer=Quiet(), report=False, verdicts="end").run()
    assert [v["run"] for v in result.verdicts] == ["run-001", "run-002", "run-003"]
    assert all(v["send_count"] == 500 and v["result"] == "pass" for v in result.verdicts), result.verdicts
    # kept as they would be run by run, and no run analysed on its own
    kept = [json.loads(x)["run"] for x in (result.dir / "verdicts.jsonl").read_text().splitlines()]
    assert kept == ["run-001", "run-002", "run-003"]
    for i in (1, 2, 3):
        p = json.loads((result.dir / f"run-00{i}" / "run.json").read_text())["phases"]
        assert "analysis_s" not in p and p["write_s"] > 0, p
    assert "Analysis: 3 runs in" in (result.dir / "output.txt").read_text()



@pytest.mark.fresh_cluster  # a pool of its own
def test_sessions_whose_servers_are_alike_share_one_cluster_through_a_pool(tmp_path, spark):
    """runner/pool.py: a session takes the cluster an earlier session left whole when its
    servers would be configured alike (here another fault, dedup, another workload), with a
    stream of its own; a session whose servers differ (a server option) starts its own, the
    kept one stopped first; nothing stays once the pool closes."""
    from brokerchaos.runner import ClusterPool

    def session(scenario, **over):
        return Session(sc.load(scenario, over), tmp_path, observer=Quiet(), report=False).run()

    with ClusterPool() as pool:
        a = session("scenarios/nats-kill-leader.yaml", runs=1, messages=3000, rate=1500, after_acks=1000,
                    retries=20, name="it-pool-a")
        b = session("scenarios/nats-no-fault.yaml", runs=2, messages=500, dedup=True, name="it-pool-b")
        first = pool.kept[0].sandbox.sid
        c = session("scenarios/nats-no-fault.yaml", runs=1, messages=500, name="it-pool-c",
                    option=["lame_duck_duration=40s"])
        assert not [ns for ns in namespaces_of(os.getpid()) if first in ns]  # stopped before c's start
    metas = [a.metas["run-001"], b.metas["run-001"], b.metas["run-002"], c.metas["run-001"]]
    assert [m["cluster"] for m in metas] == ["started", f"reused (started in {a.dir.name}/run-001)",
                                             f"reused (started in {a.dir.name}/run-001)", "started"], metas
    assert pool.taken == 1 and not pool.kept
    assert len({m["stream"] for m in metas}) == 4, [m["stream"] for m in metas]  # each session its own names
    assert "Cluster pool: this session takes the cluster started in" in (b.dir / "output.txt").read_text()
    for v in a.verdicts + b.verdicts + c.verdicts:
        assert v["read_complete"] is True and v["stowaways"] == 0, v
        _no_loss_of_ours(v)
    assert [v["send_count"] == v["received"] == 500 for v in b.verdicts + c.verdicts] == [True] * 3
    assert namespaces_of(os.getpid()) == []


def test_a_one_run_session_is_analysed_once(tmp_path, spark, monkeypatch):
    """The run's own analysis gives its verdict and then the session's files: a session of
    one run does not analyse the same history again at its end."""
    import threading

    from brokerchaos.analysis import metrics

    real, calls = metrics.analyze, []

    def analyze(*a, **k):
        if threading.current_thread().name != "spark-warm-up":  # the gaps' rounds are not the session's
            calls.append(k.get("timing", True))
        return real(*a, **k)

    monkeypatch.setattr(metrics, "analyze", analyze)
    s = sc.load("scenarios/nats-no-fault.yaml", {"runs": 1, "messages": 500, "name": "it-once"})
    result = Session(s, tmp_path, observer=Quiet(), report=False).run()
    assert calls == [True]
    (v,) = result.verdicts
    assert v["send_count"] == 500 and v["result"] == "pass", v
    # the files the session's analysis writes, from the run's
    import csv

    with open(result.dir / "results.csv", newline="") as fh:
        (row,) = list(csv.DictReader(fh))
    assert row["SendCount"] == "500", row
    assert json.loads((result.dir / "summary.json").read_text())["runs"][0]["send_count"] == 500


# -- external mode: the walk-through of docs/external.md, three nats-servers by hand ---------

def _leftover(port: int, n: int) -> None:
    """What an earlier session (or another tool) left on the cluster: a stream named as an
    old harness named every session's first run, holding our payloads."""
    import asyncio

    import nats

    async def put():
        nc = await nats.connect(servers=[f"nats://127.0.0.1:{port}"], connect_timeout=5)
        try:
            js = nc.jetstream(timeout=5)
            await js.add_stream(name="bc-run-001", subjects=["bc-run-001.>"], num_replicas=3)
            for v in range(1, n + 1):
                await js.publish("bc-run-001.p1", f"p1:{v}".encode())
        finally:
            await nc.close()

    asyncio.run(put())


@pytest.mark.effects(("failed",), "a `command` hook that exits 1: the positive control of a failed inject")
def test_external_mode_drives_a_nats_cluster_through_its_hooks(tmp_path, spark, monkeypatch):
    """docs/external/nats-by-hand as the docs run it: server names not ours (nats-a, ...), an
    `alive` hook that lies (always 0: the heal must still start the killed leader, whose
    port is closed), two runs that reuse the cluster; then a second session that sees only
    its own messages, though a stream named as an old harness named every session's is there."""
    import subprocess

    import yaml
    from observers import DOCS_EXTERNAL, by_hand, stop_by_hand

    from brokerchaos.systems.external import load

    monkeypatch.setenv("PATH", os.environ.get("PATH", "") + ":/usr/sbin:/usr/bin")

    def lying(doc):
        for n in doc["nodes"].values():
            n["alive"] = "true"
            n["hooks"] = {"broken": "echo 'iptables: no such chain' >&2; exit 1"}  # breaks, as after an upgrade

    d = by_hand(tmp_path, "nats-by-hand", lying)
    f = d / "cluster.yaml"
    try:
        ext = load(f)
        s = sc.build({"name": "it-nats-external", "system": "nats", "runs": 2, "external": str(f),
                      "workload": {"messages": 6000, "in_flight": 2000, "retries": 20},
                      "fault": {"action": "kill", "target": "leader", "trigger": {"after_acks": 2000},
                                "duration": 2}})
        before = {n: (d / f"{n}.pid").read_text().strip() for n in ext.nodes}
        obs = LeaderWitness()
        result = Session(s, tmp_path / "out", observer=obs, report=False).run()
        metas = [result.metas[r] for r in ("run-001", "run-002")]
        assert [m["sandbox"] for m in metas] == ["loopback", "loopback"]
        assert metas[0]["cluster"].startswith("external (") and metas[1]["cluster"].startswith("reused")
        assert not any("sandbox" in t for t in obs.lines), [t for t in obs.lines if "sandbox" in t]
        for m, v in zip(metas, result.verdicts):
            (killed,) = m["fault"]["nodes"]
            assert killed in ("n1", "n2", "n3")  # the user's server name, mapped to its node
            w = m["fault"]["windows"][0]
            assert w.get("healed_ms") is not None and "heal_error" not in w, w
            assert v["read_complete"] is True, v["read_status"]
            assert v["send_count"] == 6000 and v["pos_ack_count"] > 2000
            _no_loss_of_ours(v)
        # the witness saw the leader by its server name: the node killed is that server
        leader_seen, killed = obs.seen
        assert leader_seen == "nats-" + "abc"[int(killed[0][1:]) - 1]
        after = {n: (d / f"{n}.pid").read_text().strip() for n in ext.nodes}
        killed_nodes = {m["fault"]["nodes"][0] for m in metas}
        # the `alive` hook said alive, the closed port said down: the start hook (the heal)
        # ran and a new server is up
        assert all(after[n] != before[n] for n in killed_nodes)
        assert all(ext.answers(n) for n in ext.nodes), "every server answers again"

        # a second session on the same cluster reports exactly what it sent
        _leftover(14221, 300)
        s2 = sc.build({"name": "it-nats-external-2", "system": "nats", "runs": 1, "external": str(f),
                       "workload": {"messages": 3000}})
        (v,) = Session(s2, tmp_path / "out2", observer=Quiet(), report=False).run().verdicts
        assert (v["send_count"], v["pos_ack_count"], v["received"]) == (3000, 3000, 3000), v
        assert (v["msgs_with_dups"], v["received_no_ack"], v["stowaways"], v["acked_missing"]) == (0, 0, 0, 0), v

        # a fault whose hook fails tested nothing: the run is unknown, and `--expect no-loss` says so (exit 4)
        from brokerchaos import cli

        code = cli.main(["run", "--system", "nats", "--external", str(f), "--runs", "1", "--messages", "2000",
                         "--fault", "command", "--target", "n2", "--fault-param", "inject=broken",
                         "--after-acks", "500", "--out", str(tmp_path / "out3"), "--expect", "no-loss"])
        assert code == 4
        (session,) = list((tmp_path / "out3").iterdir())
        v3 = json.loads((session / "summary.json").read_text())["runs"][0]
        (eff,) = v3["effects"]
        assert eff["state"] == "failed" and "exit" in eff["detail"] and v3["result"] == "unknown", v3
        assert v3["acked_missing"] == 0 and v3["read_complete"] is True

        # the docs' own `alive` hook says down as soon as the killed server is gone, reaped or not
        alive = yaml.safe_load((DOCS_EXTERNAL / "nats-by-hand" / "cluster.yaml").read_text())["nodes"]["n1"]["alive"]
        assert subprocess.run(["/bin/sh", "-c", alive], cwd=d).returncode == 0
        ext.run("n1", "kill")
        deadline = time.monotonic() + 0.5
        while subprocess.run(["/bin/sh", "-c", alive], cwd=d).returncode == 0:
            assert time.monotonic() < deadline, "the documented `alive` hook still says alive 0.5 s after kill -9"
            time.sleep(0.02)
    finally:
        stop_by_hand(d, "nats-server")
