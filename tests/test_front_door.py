"""The front door: `brokerchaos` alone, `--version`, `doctor` (this machine's needs, probed,
and one made missing), `new` (files that validate as written) and `run --dry-run`."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from brokerchaos import doctor, scaffold
from brokerchaos import validation as sc
from brokerchaos.errors import ScenarioError
from brokerchaos.faults.registry import FAULTS
from brokerchaos.systems.external import load as load_cluster
from brokerchaos.systems.registry import SYSTEMS

ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox's probes need root")


def _cli(*args, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "brokerchaos.cli", *args], capture_output=True, text=True,
                          timeout=120, env=env, cwd=cwd)


def test_the_command_alone_prints_help_and_version_names_the_servers():
    r = _cli()
    assert r.returncode == 0 and "usage: brokerchaos" in r.stdout and "doctor" in r.stdout, r
    r = _cli("--version")
    assert r.returncode == 0, r.stderr
    assert re.match(r"brokerchaos \d+\.\d+\.\d+\n", r.stdout), r.stdout
    kafka = r"kafka +4\.4\.\d+ \(KRaft, default\), 4\.1\.\d+ \(KRaft\), 3\.9\.\d+ \(ZooKeeper\)"
    assert re.search(kafka, r.stdout), r.stdout
    assert re.search(r"pulsar +4\.2\.\d+ \(default\), 4\.0\.\d+", r.stdout), r.stdout


@pytest.mark.parametrize("system", SYSTEMS.names())
def test_new_writes_a_scenario_for_every_fault_the_system_offers_that_validates_as_written(system):
    offered = 0
    for action in FAULTS.names():
        text = scaffold.scenario_text(system, action)
        doc = yaml.safe_load(text)
        try:
            s = sc.build(doc)
        except ScenarioError as e:  # only a capability the system lacks may refuse it
            assert "needs" in str(e) or "offer" in str(e), f"{action}: {e}"
            continue
        offered += 1
        assert s.fault.action == action and s.system == system
        # every commented setting uncommented, as written, still validates
        plain = re.sub(r"^(\s*)# (\w+: .*?)  -- .*$", r"\1\2", text, flags=re.M)
        sc.build(yaml.safe_load(plain))
    assert offered >= 5, system  # kill, stop, restart, pause and none at least


@pytest.mark.parametrize("system", SYSTEMS.names())
def test_new_external_writes_a_cluster_file_the_loader_accepts(tmp_path, system):
    f = tmp_path / "c.yaml"
    scaffold.write(f, scaffold.cluster_text(system), load_cluster)
    c = load_cluster(str(f))
    assert list(c.nodes) == ["n1", "n2", "n3"] and c.system == system


def test_new_and_dry_run_from_the_command_line(tmp_path):
    r = _cli("new", "nats", "--fault", "clock", cwd=tmp_path)
    # libfaketime cannot reach NATS's Go runtime: refused, named, and no file left
    assert r.returncode == 2 and "needs clock" in r.stderr and r.stderr.count("\n") == 1, r
    assert not (tmp_path / "nats-clock.yaml").exists()
    r = _cli("new", "kafka", "--fault", "delay", cwd=tmp_path)
    assert r.returncode == 0 and (tmp_path / "kafka-delay.yaml").exists(), r
    r = _cli("new", "kafka", "--fault", "delay", cwd=tmp_path)
    assert r.returncode == 2 and "exists" in r.stderr, r  # never over a file
    r = _cli("run", "kafka-delay.yaml", "--dry-run", cwd=tmp_path)
    if os.geteuid() == 0:
        assert r.returncode == 0, r.stderr
        assert "scenario kafka-delay: valid" in r.stdout and "delay on leader" in r.stdout, r.stdout
        assert "nfqueue" in r.stdout and not (tmp_path / "results").exists(), r.stdout
    else:  # the netns and the firewall need root: named, before anything starts
        assert r.returncode == 2 and "root" in r.stderr, r.stderr


@ROOT
def test_doctor_reports_every_family_ready_here():
    r = _cli("doctor")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "MISSING" not in r.stdout and "everything is ready" in r.stdout, r.stdout
    for label in ("kafka 4.1", "pulsar", "mqtt on vernemq", "power-off", "clock", "delay", "tcp-kill"):
        assert re.search(rf"ready +.*{re.escape(label)}", r.stdout), label
    assert not [ns for ns in os.listdir("/run/netns") if "doctor" in ns] if os.path.isdir("/run/netns") else True


def _path_without(tmp_path: Path, program: str) -> str:
    """A PATH with every program of this one's but `program`."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for d in os.environ["PATH"].split(":"):
        if not os.path.isdir(d):
            continue
        for name in os.listdir(d):
            if name != program and not (bin_ / name).exists():
                (bin_ / name).symlink_to(Path(d) / name)
    return str(bin_)


@ROOT
def test_doctor_and_run_name_a_missing_java_and_its_fix(tmp_path):
    env = {**os.environ, "PATH": _path_without(tmp_path, "java"), "JAVA_HOME": str(tmp_path / "no-jdk")}
    r = _cli("doctor", env=env)
    assert r.returncode == 1, r.stdout + r.stderr
    assert re.search(r"MISSING +the analysis \(Spark\)", r.stdout), r.stdout
    assert re.search(r"MISSING +kafka 3\.9", r.stdout) and re.search(r"ready +nats\n", r.stdout), r.stdout
    assert "java: java not found; fix: make setup (or apt-get install openjdk-17-jre-headless)" in r.stdout, r.stdout
    r = _cli("run", "--system", "nats", "--fault", "kill-leader", "--dry-run", env=env)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "lacks java" in r.stderr and "openjdk-17-jre-headless" in r.stderr, r.stderr


def test_every_capability_a_fault_needs_is_one_of_the_set_and_its_machine_needs_are_doctor_s(monkeypatch):
    from brokerchaos.systems.base import CAPABILITIES

    for action, cls in FAULTS.items():
        for cap in cls.needs_for(cls.Params.model_construct()):
            assert cap in CAPABILITIES, (action, cap)
    assert all(set(c.machine) <= set(doctor.NEEDS) for c in CAPABILITIES.values())
    assert doctor.fault_needs("power-off", {}) == ("root", "fuse") + FAULTS.get("power-off").machine
    for keys in [doctor.ANALYSIS, *(doctor.system_needs(s, o, v) for _, s, o, v in doctor.variants())]:
        assert set(keys) <= set(doctor.NEEDS), keys
    assert {s for _, s, _, _ in doctor.variants()} == set(SYSTEMS.names())
    labels = [label for label, *_ in doctor.variants()]
    assert {"kafka 3.9", "kafka 4.1", "kafka on tansu", "mqtt on vernemq", "pulsar", "nats"} <= set(labels), labels
    assert doctor.system_needs("kafka", {}, "4.1") == ("java", "kafka-4.1")
    # Debian's nats-server for `system`; the default release is the harness's own to install
    assert doctor.system_needs("mqtt", {"broker": "nats"}, "system") == ("nats-server",)
    assert doctor.system_needs("nats", {}, None) == () == doctor.system_needs("mqtt", {"broker": "nats"}, "2.12.1")
