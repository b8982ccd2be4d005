"""`brokerchaos analyze` on histories written by someone else, straight from the format doc."""
import csv
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from brokerchaos import cli

# the columns and types of docs/history-format.md, spelled out independently of the package
DOC_SCHEMA = pa.schema([("run", pa.string()), ("client", pa.string()), ("seq", pa.int64()), ("t_ns", pa.int64()),
                        ("type", pa.string()), ("producer", pa.string()), ("value", pa.int64()),
                        ("offset", pa.string()), ("node", pa.string()), ("detail", pa.string())])


def _rows(run, lost=(), dup=(), order=None):
    rows, t = [], 0
    for v in range(1, 11):
        t += 1000
        rows.append((run, "alice", 2 * v - 1, t, "send", "alice", v, None, "b1", None))
        rows.append((run, "alice", 2 * v, t + 500, "ack", "alice", v, str(100 + v), "b1", None))
    rows.append((run, "chaos", 1, 4_200, "fault", None, None, None, "b2", "partition"))
    rows.append((run, "chaos", 2, 9_000, "heal", None, None, None, "b2", "partition"))
    read = [v for v in (order or range(1, 11)) if v not in lost] + list(dup)
    for i, v in enumerate(read, 1):
        rows.append((run, "bob", i, 20_000 + i, "recv", "alice", v, str(100 + v), "b3", None))
    return rows


def _write(path: Path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    cols = list(zip(*rows))
    arrays = [pa.array(c, type=f.type) for c, f in zip(cols, DOC_SCHEMA)]
    pq.write_table(pa.Table.from_arrays(arrays, schema=DOC_SCHEMA), path)


@pytest.fixture
def foreign(tmp_path):
    d = tmp_path / "elsewhere"
    clean = _rows("A")
    _write(d / "x" / "a-part1.parquet", clean[:9])  # one run split over files and depths
    _write(d / "y" / "z" / "a-part2.parquet", clean[9:])
    _write(d / "b.parquet", _rows("B", lost=(3, 4), dup=(7,), order=[1, 2, 5, 6, 3, 4, 7, 8, 9, 10]))
    (d / "notes.txt").write_text("not a history")
    (d / "half-written.parquet.tmp").write_bytes(b"PAR1 garbage")
    return d


def test_analyze_json_on_a_directory_it_did_not_write(foreign, capsys, spark):
    assert cli.main(["analyze", str(foreign), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [v["run"] for v in out] == ["A", "B"]
    a, b = out
    for key in ("send_count", "pos_ack_count", "neg_ack_count", "unknown_count", "ack_count", "received",
                "stowaways", "acked_missing", "missing", "received_no_ack", "received_after_nack",
                "received_after_unknown", "msgs_with_dups", "duplicate_deliveries", "jf", "jb", "djf", "djb",
                "out_of_order", "max_ack_gap_ms", "max_recv_gap_ms", "fault_outages_ms", "ack_latency_ms",
                "e2e_latency_ms"):
        assert key in a, key
    assert (a["send_count"], a["acked_missing"], a["received"], a["result"]) == (10, 0, 10, "pass")
    assert (b["acked_missing"], b["msgs_with_dups"], b["result"]) == (2, 1, "fail")
    assert a["faults"][0]["node"] == "b2" and len(a["fault_outages_ms"]) == 1
    assert a["ack_latency_ms"]["p50"] == pytest.approx(0.0005)
    # session outputs land next to the histories
    rows = list(csv.DictReader(open(foreign / "results.csv")))
    assert [r["NotReceived"] for r in rows] == ["0", "2"] and rows[1]["MsgsWithDups"] == "1"
    assert "JUMP" in (foreign / "jumps.csv").read_text()
    assert "bob@107 bob@107" in (foreign / "duplicates.csv").read_text()
    summary = json.loads((foreign / "summary.json").read_text())["summary"]
    assert summary["verdicts"]["acked loss"]["runs"] == 1 and summary["result"] == "fail"
    # and its page, though no scenario says what wrote it
    from browser import check_report

    page = (foreign / "report.html").read_text()
    assert "Scenario</dt><dd>not known" in page and "<section id='B'>" in page
    check_report(foreign / "report.html", "foreign-history")


def test_no_timing_gives_the_same_counts_and_leaves_out_the_time_figures(foreign, capsys, spark):
    assert cli.main(["analyze", str(foreign), "--format", "json", "--no-write"]) == 0
    full = json.loads(capsys.readouterr().out)
    assert cli.main(["analyze", str(foreign), "--format", "json", "--no-write", "--no-timing"]) == 0
    quick = json.loads(capsys.readouterr().out)
    counts = ("send_count", "pos_ack_count", "received", "acked_missing", "missing", "msgs_with_dups",
              "duplicate_deliveries", "jf", "jb", "djf", "djb", "result", "txm", "rxm")
    assert [[v[k] for k in counts] for v in quick] == [[v[k] for k in counts] for v in full]
    assert full[0]["max_ack_gap_ms"] is not None and full[0]["ack_latency_ms"] is not None
    for v in quick:
        assert v["timing"] is False
        assert v["max_ack_gap_ms"] is None and v["ack_latency_ms"] is None and v["fault_outages_ms"] == [None]
    assert cli.main(["analyze", str(foreign), "--no-write", "--no-timing"]) == 0
    assert "not computed (--no-timing)" in capsys.readouterr().out


def test_analyze_rejects_a_path_without_histories(tmp_path, capsys):
    assert cli.main(["analyze", str(tmp_path)]) == 2
    assert "no .parquet" in capsys.readouterr().err
    assert cli.main(["analyze", str(tmp_path / "nope")]) == 2


def test_expect_gives_ci_an_exit_code_and_a_junit_file(foreign, tmp_path, capsys, spark):
    """--expect on recorded histories: violations (run B lost 2 acked messages and read one
    twice) exit 3 with JUnit failures carrying the figures; a clean history 0; a read that did not finish 4;
    a bad expectation 2 before anything is read."""
    junit = tmp_path / "junit.xml"
    assert cli.main(["analyze", str(foreign), "--no-write", "--expect", "no-loss,no-duplicates", "--junit",
                     str(junit)]) == 3
    out = capsys.readouterr().out
    assert "Expectations: 2 passed, 2 failed, 0 undecided" in out and "B: no-loss: 2 acked messages missing" in out
    import xml.etree.ElementTree as ET

    cases = {t.get("name"): t for t in ET.parse(junit).getroot().iter("testcase")}
    assert sorted(cases) == ["A: no-duplicates", "A: no-loss", "B: no-duplicates", "B: no-loss"]
    assert cases["B: no-loss"].find("failure").get("message") == "2 acked messages missing"
    assert cases["A: no-loss"].find("failure") is None

    clean = tmp_path / "clean"
    _write(clean / "a.parquet", _rows("A"))
    assert cli.main(["analyze", str(clean), "--no-write", "--expect", "no-loss,no-duplicates,max-outage=1s"]) == 0
    assert "Expectations: 3 passed, 0 failed, 0 undecided" in capsys.readouterr().out
    unfinished = tmp_path / "unfinished"
    _write(unfinished / "c.parquet", _rows("C", lost=(9, 10)) + [
        ("C", "bob", 99, 30_000, "read_end", None, None, None, "b3", "incomplete: stream unavailable")])
    assert cli.main(["analyze", str(unfinished), "--no-write", "--format", "json", "--expect", "no-loss"]) == 4
    captured = capsys.readouterr()
    assert json.loads(captured.out)[0]["result"] == "unknown"  # stdout stays JSON
    assert "UNDECIDED" in captured.err and "incomplete: stream unavailable" in captured.err

    assert cli.main(["analyze", str(clean), "--expect", "no-loss,fast"]) == 2
    assert cli.main(["analyze", str(clean), "--junit", str(junit)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "'fast'" in err[0] and "--junit needs --expect" in err[1]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spark_env(**extra):
    """The pyspark distribution's home and an environment that keeps Spark on loopback."""
    import pyspark

    home = Path(pyspark.__file__).parent
    env = dict(os.environ, SPARK_HOME=str(home), SPARK_LOCAL_IP="127.0.0.1",
               JAVA_HOME=os.environ.get("JAVA_HOME") or "/usr/lib/jvm/java-17-openjdk-amd64", **extra)
    return home, env


def _stop(*procs):
    for p in procs:
        if p is None:
            continue
        p.terminate()
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)


def test_same_verdicts_on_a_standalone_spark_master_and_worker(foreign, tmp_path, capsys, spark):
    """A real standalone master + worker from the pyspark distribution, on loopback."""
    assert cli.main(["analyze", str(foreign), "--format", "json", "--no-write"]) == 0
    local = json.loads(capsys.readouterr().out)

    home, env = _spark_env(SPARK_MASTER_HOST="127.0.0.1", SPARK_LOG_DIR=str(tmp_path),
                           SPARK_WORKER_DIR=str(tmp_path / "work"))
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    cls = str(home / "bin" / "spark-class")
    master = subprocess.Popen([cls, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
                               str(port), "--webui-port", str(_free_port())], env=env,
                              stdout=open(tmp_path / "master.log", "w"), stderr=subprocess.STDOUT)
    worker = None
    try:
        deadline = time.monotonic() + 60
        while "I have been elected leader" not in (tmp_path / "master.log").read_text():
            assert master.poll() is None and time.monotonic() < deadline, (tmp_path / "master.log").read_text()
            time.sleep(0.2)
        worker = subprocess.Popen([cls, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                                   "--cores", "1", "--memory", "1g", "--webui-port", str(_free_port())], env=env,
                                  stdout=open(tmp_path / "worker.log", "w"), stderr=subprocess.STDOUT)
        while "Successfully registered with master" not in (tmp_path / "worker.log").read_text():
            assert worker.poll() is None and time.monotonic() < deadline, (tmp_path / "worker.log").read_text()
            time.sleep(0.2)
        r = subprocess.run([sys.executable, "-m", "brokerchaos.cli", "analyze", str(foreign), "--format", "json",
                            "--no-write", "--spark-master", url],
                           capture_output=True, text=True, timeout=300,
                           env=dict(env, BROKERCHAOS_SPARK_DRIVER_MEMORY="1g"))
        assert r.returncode == 0, r.stderr[-3000:]
        remote = json.loads(r.stdout)
        assert remote == local
        # the job really ran on an executor the worker launched for it, not in a local driver
        assert list((tmp_path / "work").glob("app-*/*/stderr"))
    finally:
        _stop(worker, master)


def test_same_verdicts_through_spark_connect(foreign, tmp_path, capsys, spark):
    """A real Spark Connect server from the pyspark distribution, on loopback (sc://)."""
    assert cli.main(["analyze", str(foreign), "--format", "json", "--no-write"]) == 0
    local = json.loads(capsys.readouterr().out)
    home, env = _spark_env()
    port = _free_port()
    log = tmp_path / "connect.log"
    server = subprocess.Popen(
        [str(home / "bin" / "spark-submit"), "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
         "--conf", f"spark.connect.grpc.binding.port={port}", "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
         "--conf", "spark.ui.enabled=false", "--driver-memory", "1g",
         # a server sized for this machine, as its operator would (Spark's default, 200
         # partitions a shuffle, made 3,486 tasks of this small history's analysis: 82 s)
         "--conf", "spark.sql.shuffle.partitions=4", "spark-internal"],
        env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while "Spark Connect server started" not in log.read_text():
            assert server.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        out = tmp_path / "out"
        r = subprocess.run([sys.executable, "-m", "brokerchaos.cli", "analyze", str(foreign), "--format", "json",
                            "--out", str(out), "--spark-master", f"sc://127.0.0.1:{port}"],
                           capture_output=True, text=True, timeout=300, env=env)
        assert r.returncode == 0, r.stderr[-3000:]
        assert json.loads(r.stdout) == local
        assert "JUMP" in (out / "jumps.csv").read_text()  # the logs stream back over Connect too
    finally:
        _stop(server)
