"""Bad input, refused before anything starts: one line naming the file, field or flag, exit
code 2, and nothing left behind (no results directory, no JUnit file).

Each case is something a user typed (issue 37's list): files that are not scenarios,
outputs that cannot be written, a soak resumed in a run's directory, a typo hidden behind a
default, YAML errors and misspelt keys.
"""
import json
import os
import subprocess
from pathlib import Path

import pytest

from brokerchaos import cli, validation as sc
from brokerchaos.inputs import directory_error, file_error


def _refused(capsys, argv, *words):
    """`brokerchaos argv` exits 2 with one line on stderr holding every word."""
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err, err
    for w in words:
        assert w in err, err
    return err


# -- scenario files that are not scenarios -------------------------------------------------

@pytest.mark.parametrize("content, words", [
    ("", ["is empty"]),
    ("# nothing but a comment\n", ["is empty"]),
    ("{}\n", ["is empty"]),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", ["not a text file"]),
    (b"system: nats\nname: \xff\xfe\n", ["not a text file", "byte 19"]),
    ("system: nats\nworkload:\n  messages: 10\n   in_flight: 5\n", ["invalid YAML at line 4, column 13"]),
    ("fault: [kill\n", ["invalid YAML at line 2, column 1"]),
    # YAML keeps the last of a key given twice and says nothing: the run would use another value
    ("system: nats\nworkload:\n  messages: 1000\n  messages: 2000\n",
     ["line 4, column 3", "key 'messages' given twice (first at line 3)"]),
    ("system: nats\nruns: 1\nsystem: kafka\n", ["key 'system' given twice"]),
])
def test_a_file_that_is_not_a_scenario_is_one_line(tmp_path, capsys, content, words):
    f = tmp_path / "s.yaml"
    f.write_bytes(content if isinstance(content, bytes) else content.encode())
    out = tmp_path / "res"
    _refused(capsys, ["run", str(f), "--out", str(out)], "scenario file", str(f), *words)
    assert not out.exists()


def test_a_directory_is_not_a_scenario_file(tmp_path, capsys):
    _refused(capsys, ["run", str(tmp_path), "--out", str(tmp_path / "res")], "is a directory, not a file")
    _refused(capsys, ["run", str(tmp_path / "nope.yaml")], "not found")


def test_campaign_and_cluster_files_are_read_the_same_way(tmp_path, capsys):
    (tmp_path / "c.yaml").write_bytes(b"\x00\x01")
    _refused(capsys, ["campaign", str(tmp_path / "c.yaml")], "campaign file", "not a text file")
    _refused(capsys, ["campaign", str(tmp_path)], "campaign file", "is a directory")
    (tmp_path / "ext.yaml").write_text("")
    _refused(capsys, ["run", "--system", "nats", "--external", str(tmp_path / "ext.yaml")],
             "'external'", "is empty")
    _refused(capsys, ["run", "--system", "nats", "--external", str(tmp_path)], "'external'", "is a directory")


# -- outputs that cannot be written -----------------------------------------------------------

def _scenario(tmp_path) -> str:
    f = tmp_path / "ok.yaml"
    f.write_text("system: nats\nruns: 1\nworkload: {messages: 10}\n")
    return str(f)


def test_an_out_that_cannot_be_written_is_refused_before_the_run(tmp_path, capsys):
    s = _scenario(tmp_path)
    plain = tmp_path / "a-file"
    plain.write_text("x")
    _refused(capsys, ["run", s, "--out", str(plain)], "--out", "exists and is not a directory")
    _refused(capsys, ["run", s, "--out", str(plain / "below")], "--out", "is a file, not a directory")
    _refused(capsys, ["run", s, "--out", "/proc/brokerchaos-results"], "--out", "cannot write there")
    _refused(capsys, ["soak", s, "--runs", "1", "--out", str(plain)], "--out", "not a directory")
    _refused(capsys, ["campaign", "campaigns/nats-dedup.yaml", "--out", str(plain)], "--out", "not a directory")
    # an empty --out (a shell variable not set) names no directory: refused, not the current one
    for cmd in (["run", s], ["soak", s, "--runs", "1"], ["campaign", "campaigns/nats-dedup.yaml"],
                ["analyze", str(tmp_path)], ["new", "nats"]):
        _refused(capsys, [*cmd, "--out", ""], "--out: empty")


def test_a_junit_file_that_cannot_be_written_is_refused_before_the_run(tmp_path, capsys):
    s = _scenario(tmp_path)
    _refused(capsys, ["run", s, "--out", str(tmp_path / "r"), "--expect", "no-loss", "--junit", str(tmp_path)],
             "--junit", "is a directory")
    _refused(capsys, ["run", s, "--out", str(tmp_path / "r"), "--expect", "no-loss", "--junit",
                      "/proc/brokerchaos/junit.xml"], "--junit", "cannot write there")
    assert not (tmp_path / "r").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a read-only file system needs root")
def test_a_read_only_file_system_is_refused(tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "brokerchaos-test", str(ro)], check=True)
    try:
        assert directory_error(ro, "--out") == f"--out '{ro}': cannot write there (Read-only file system)"
        assert "Read-only file system" in file_error(ro / "j.xml", "--junit")
        _refused(capsys, ["run", _scenario(tmp_path), "--out", str(ro / "results")], "Read-only file system")
        _refused(capsys, ["analyze", "tests/data", "--out", str(ro)], "--out", "Read-only file system")
    finally:
        subprocess.run(["umount", str(ro)], check=True)


def test_the_trials_leave_nothing_behind(tmp_path):
    out = tmp_path / "a" / "b" / "c"
    assert directory_error(out, "--out") is None
    assert not (tmp_path / "a").exists()  # the directories the trial made are gone again
    assert file_error(tmp_path / "x" / "junit.xml", "--junit") is None
    assert list(tmp_path.iterdir()) == []
    kept = tmp_path / "kept.xml"
    kept.write_text("mine")
    assert file_error(kept, "--junit") is None and kept.read_text() == "mine"


# -- a soak resumed where no soak was --------------------------------------------------------

def _session(tmp_path, kind=None, command=None) -> Path:
    d = tmp_path / "sess"
    d.mkdir(parents=True)
    (d / "scenario.json").write_text(sc.load(None, {"messages": 10, "runs": 1}).model_dump_json())
    if kind:
        (d / "session.json").write_text(json.dumps({"kind": kind, "tag": ""}))
    if command:
        (d / "command.txt").write_text(command + "\n")
    return d


def test_soak_resume_refuses_a_run_session(tmp_path, capsys):
    d = _session(tmp_path, kind="run")
    _refused(capsys, ["soak", "--resume", str(d), "--runs", "2"], "--resume", "is a `run` session, not a soak's")
    assert sorted(p.name for p in d.iterdir()) == ["scenario.json", "session.json"]  # nothing rewritten


def test_soak_resume_reads_the_kind_of_sessions_older_than_session_json(tmp_path, capsys):
    d = _session(tmp_path, command="brokerchaos run scenarios/nats-kill-leader.yaml --runs 1")
    _refused(capsys, ["soak", "--resume", str(d), "--runs", "2"], "is a `run` session")
    assert cli._session_kind(_session(tmp_path / "old-soak")) == "soak"  # an old soak kept no command.txt


# -- the user's own mistake before a consequence of a default -------------------------------

def test_a_typo_in_the_fault_is_reported_before_the_default_trigger(capsys):
    _refused(capsys, ["run", "--fault", "kil-leader", "--messages", "1000"], "'fault.action'", "unknown fault 'kil'")


def test_the_default_trigger_sits_inside_the_run():
    for messages, producers in ((20_000, 1), (1000, 1), (100_000, 1), (7, 3), (1, 1)):
        s = sc.load(None, {"fault": "kill-leader", "messages": messages, "producers": producers})
        total = messages * producers
        assert s.fault.trigger.after_acks == max(1, total // 5) < total or total == 1
    assert sc.load(None, {"fault": "kill-leader"}).fault.trigger.after_acks == 20_000  # the seeds' marker
    # a trigger given is kept, and one given too late is still refused, naming it
    assert sc.load(None, {"fault": "kill", "after_acks": 999, "messages": 1000}).fault.trigger.after_acks == 999
    with pytest.raises(sc.ScenarioError, match="'fault.trigger.after_acks'"):
        sc.load(None, {"fault": "kill", "after_acks": 1001, "messages": 1000})
    mix = sc.build({"workload": {"messages": 500}, "fault_mix": [{"action": "kill"}, {"action": "pause"}]})
    assert [f.trigger.after_acks for f in mix.fault_mix] == [100, 100]


# -- misspelt keys ----------------------------------------------------------------------------

def test_a_misspelt_required_key_is_named_not_only_the_missing_one(tmp_path):
    f = tmp_path / "ext.yaml"
    f.write_text("nodes:\n  n1: {adress: '127.0.0.1:4222'}\n")
    with pytest.raises(sc.ScenarioError) as e:
        sc.load(None, {"system": "nats", "nodes": 1, "replicas": 1, "external": str(f)})
    assert str(e.value) == ("scenario field 'external.nodes.n1.adress': unknown field (did you mean 'address', "
                            "which is required?)")


def test_a_cluster_file_without_the_services_the_roles_need_is_refused(tmp_path):
    f = tmp_path / "ext.yaml"
    f.write_text("nodes:\n" + "".join(f"  n{i}: {{address: '127.0.0.1:{6379 + i}'}}\n" for i in (1, 2, 3)))
    with pytest.raises(sc.ScenarioError) as e:
        sc.load(None, {"system": "redis", "external": str(f)})
    assert str(e.value).startswith("scenario field 'external.nodes.n1.services.sentinel': missing; redis's roles")
    with pytest.raises(sc.ScenarioError, match="'external.nodes.n1.services.monitor'"):
        sc.load(None, {"system": "nats", "external": str(f)})
    with pytest.raises(sc.ScenarioError, match="'external.nodes.n1.services.mqtt'"):
        sc.load(None, {"system": "mqtt", "external": str(f)})
    sc.load(None, {"system": "kafka", "external": str(f)})  # Kafka's roles ask the brokers alone
