"""Every registered system held to the broker contract (systems/base.py), with no broker
running: what its capabilities say it can do is what its classes can, `brokerchaos faults`
says the same, its roles resolve, its cluster files name what its roles ask, and every
scenario shipped for it is valid. The example of the minimum (tests/example_broker.py) is
held to the same checks, and one session runs on it.
"""
import glob
import io
import os
import shutil
from contextlib import redirect_stdout

import pytest
import yaml
from pydantic import ValidationError

from brokerchaos import cli, doctor, validation as sc
from brokerchaos.faults import FAULTS
from brokerchaos.faults.base import supported
from brokerchaos.registry import Registry
from brokerchaos.systems import SYSTEMS
from brokerchaos.systems.base import CAPABILITIES, Client
from brokerchaos.systems.roles import Roles
from brokerchaos.systems.system import System
from brokerchaos.systems.cluster import LocalCluster

def _scenarios(name: str) -> list:
    """The system's shipped scenarios, each also at every server version it can run (unless
    it names one: KIP-848's consumer groups are Kafka 4.x's)."""
    out = []
    for path in sorted(glob.glob("scenarios/*.yaml")):
        if (yaml.safe_load(open(path)) or {}).get("system", "nats") == name:
            s = sc.load(path)
            out.append(s)
            if s.cluster.version is None:  # a scenario that names its version is about that one
                out += [sc.load(path, {"server_version": v}) for v in SYSTEMS.get(name).versions(s)]
    return out


def _overrides(cls: type, base: type, method: str) -> bool:
    return getattr(cls, method) is not getattr(base, method)


def check_system(name: str, cls: type[System], scenarios: list) -> None:
    assert issubclass(cls, System) and cls.description, name
    with pytest.raises(ValidationError):
        cls.Options.model_validate({"no-such-option": 1})  # options are checked, never ignored
    assert cls.offers <= set(CAPABILITIES), (name, cls.offers - set(CAPABILITIES))
    assert issubclass(cls.Client, Client) and all(_overrides(cls.Client, Client, m) for m in ("producer", "reader"))
    for s in scenarios:
        local = cls.local_cluster(s)
        assert issubclass(local, LocalCluster) and not local.__abstractmethods__, (name, local)
        assert "client" in local.ports, (name, local)
        assert local.extra_offers <= set(CAPABILITIES), (name, local)
        # a capability backed by a cluster's method: the cluster that offers it writes it
        for cap in local.extra_offers:
            method = CAPABILITIES[cap].cluster_method
            assert method is None or _overrides(local, LocalCluster, method), (name, local, cap)
        # what an external cluster file must give is what the local cluster serves
        assert set(cls.services_needed(s)) <= set(local.ports) | {"admin"}, (name, cls.services_needed(s))
        roles = cls.roles_class(s)
        assert issubclass(roles, Roles) and _overrides(roles, Roles, "leader"), (name, roles)
        for cap in cls.roles_offers(s):
            method = CAPABILITIES[cap].role_method
            assert method is None or _overrides(roles, Roles, method), (name, roles, cap)


@pytest.mark.parametrize("name", SYSTEMS.names())
def test_every_system_keeps_the_contract(name):
    scenarios = _scenarios(name)
    assert scenarios, f"no scenario in scenarios/ for {name}"
    check_system(name, SYSTEMS.get(name), scenarios)


def test_the_faults_table_says_what_the_capabilities_say():
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli.main(["faults"]) == 0
    lines = out.getvalue().splitlines()
    for fault, fcls in FAULTS.items():
        (i,) = [k for k, line in enumerate(lines) if line.startswith(f"  {fault} ")]
        listed = lines[i + 1].split("systems: ", 1)[1]
        for name, cls in SYSTEMS.items():
            offers = cls.local_capabilities()
            assert (name in listed.split(", ")) == supported(fcls, offers), (fault, name, listed)


def test_the_example_of_the_minimum_keeps_the_contract():
    import example_broker

    systems = Registry("system")  # its own: the real registry is left as it was
    systems.register("redis-one")(example_broker.RedisOne)
    s = sc.load(None, {"system": "nats", "nodes": 1, "replicas": 1})
    check_system("redis-one", systems.get("redis-one"), [s])


@pytest.mark.integration
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces")
@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed (make setup)")
def test_a_session_runs_on_the_example_of_the_minimum(tmp_path, spark):
    """Registered, the example is a system like the others, run as a user runs one
    (`brokerchaos run its-scenario.yaml`: the machine checked through what it declares, the
    scenario validated, the session run): a kill of its node (the leader) healed, the verdict
    and the session's files, with nothing more written for it."""
    import json

    import example_broker

    SYSTEMS.register("redis-one")(example_broker.RedisOne)
    path = tmp_path / "redis-one.yaml"
    path.write_text(yaml.safe_dump({
        "name": "it-redis-one", "system": "redis-one", "runs": 1, "cluster": {"nodes": 1, "replicas": 1},
        "workload": {"messages": 3000, "in_flight": 1, "ack_timeout": 2, "retries": 30},
        "fault": {"action": "kill", "target": "leader", "trigger": {"after_acks": 1000}, "duration": 1}}))
    try:
        assert "redis-one" in [label for label, *_ in doctor.variants()]
        out = io.StringIO()
        with redirect_stdout(out):
            code = cli.main(["run", str(path), "--out", str(tmp_path / "out")])
    finally:
        SYSTEMS._items.pop("redis-one")
    assert code == 0, out.getvalue()[-3000:]
    (session,) = list((tmp_path / "out").iterdir())
    (v,) = json.loads((session / "summary.json").read_text())["runs"]
    meta = json.loads((session / "run-001" / "run.json").read_text())
    assert meta["fault"]["nodes"] == ["n1"] and meta["fault"]["windows"][0]["healed_ms"] is not None, meta["fault"]
    assert v["send_count"] == 3000 and v["read_complete"] is True, v
    # what was sent while the node was down was sent again after its heal, and acked then
    assert v["pos_ack_count"] == 3000 and v["fault_outages_ms"][0] >= 1000, v
    assert v["acked_missing"] == 0 and v["result"] == "pass", v
    assert (session / "results.csv").exists() and "Result: PASS" in out.getvalue()
