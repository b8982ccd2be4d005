"""The fault library without a cluster: validation, target expressions, schedules, shapes."""
import asyncio
import random
import subprocess
import sys
from pathlib import Path

import pytest

from brokerchaos import validation as sc
from brokerchaos.analysis.metrics import pair_windows
from brokerchaos.faults import FAULTS, FaultContext, Target
from brokerchaos.faults.schedule import plan, rng_for
from brokerchaos.faults.targets import TargetError, check_expression, resolve
from brokerchaos.systems import SYSTEMS

ROOT = Path(__file__).resolve().parents[1]


class Replicas:
    """Just enough of a deployment for target resolution: names, a leader and its replicas."""

    def __init__(self, n=3, lead="n2"):
        self.node_names = [f"n{i}" for i in range(1, n + 1)]
        self.host_names = self.node_names
        self.lead = lead
        self.cluster = self.roles = self

    async def leader(self):
        return self.lead

    async def replicas(self):
        return [self.lead] + [x for x in self.node_names if x != self.lead]


def _resolve(expr, n=3, groups=False, seed=1):
    ctx = FaultContext(Replicas(n), random.Random(seed))
    return asyncio.run(resolve(expr, ctx, groups=groups))


@pytest.mark.parametrize("flags, field", [
    ({"fault": "loss-leader"}, "fault.params.probability"),
    ({"fault": "loss-leader", "fault_param": ["probability=1.5"]}, "fault.params.probability"),
    ({"fault": "delay-leader", "fault_param": ["delay_ms=10", "jitter_ms=20"]}, "fault.params"),
    ({"fault": "delay-leader", "fault_param": ["delay_ms=10", "direction=up"]}, "fault.params.direction"),
    ({"fault": "delay-leader", "fault_param": ["delay_ms=10", "direction=in", "method=netem"]}, "fault.params"),
    ({"fault": "kill-leader", "fault_param": ["speed=3"]}, "fault.params.speed"),
    ({"fault": "isolate-from-leader", "fault_param": ["from=nowhere"]}, "fault.params.from"),
    ({"fault": "kill", "target": "n1|n2"}, "fault.target"),
    ({"fault": "kill", "target": "n7"}, "fault.target"),
    ({"fault": "kill", "target": "followers[0]"}, "fault.target"),
    ({"fault": "partition", "target": "n1|n1,n2"}, "fault.target"),
    ({"fault": "majorities-ring"}, "fault.target"),
    ({"fault": "isolate-leader", "sandbox": "loopback"}, "sandbox"),
    ({"fault": "bandwidth-leader", "fault_param": ["rate=fast"]}, "fault.params.rate"),
    ({"fault": "kill", "fault_param": ["oops"]}, "fault.params"),
    ({"system": "kafka", "fault": "clock-all", "fault_param": ["offset=0"]}, "fault.params.offset"),
    ({"system": "kafka", "fault": "clock-all", "fault_param": ["offset=60", "strobe=0.5"]}, "fault.params.strobe"),
    ({"system": "kafka", "fault": "clock-all"}, "fault.params.offset"),
    ({"system": "nats", "fault": "clock-all", "fault_param": ["offset=60"]}, "fault"),
    ({"system": "kafka", "fault": "skew-all"}, "fault.params.rate"),
    ({"system": "kafka", "fault": "skew-all", "fault_param": ["rate=0.01"]}, "fault.params.rate"),
    ({"system": "kafka", "fault": "skew-all", "fault_param": ["rate=-1"]}, "fault.params.rate"),
    ({"system": "redis", "fault": "skew-all", "fault_param": ["rate=0.5"]}, "fault"),
    ({"system": "kafka", "fault": "power-off-all", "fault_param": ["stagger=-1"]}, "fault.params.stagger"),
    ({"system": "kafka", "fault": "power-off-all", "fault_param": ["lag=1"]}, "fault.params.lag"),
    ({"system": "kafka", "fault": "kill", "fault_param": ["read_after=1"]}, "fault.params.read_after"),
    ({"system": "pulsar", "option": ["broker=lite", "journal_sync=false"], "nodes": 1, "replicas": 1},
     "options.journal_sync"),
    ({"system": "kafka", "fault": "reassign", "target": "leader"}, "fault.target"),
    ({"system": "kafka", "fault": "reassign", "nodes": 4, "option": ["broker=tansu"]}, "fault"),
    ({"system": "nats", "fault": "reassign", "nodes": 4}, "fault"),
    ({"system": "kafka", "fault": "reassign", "nodes": 4, "fault_param": ["wait=0"]}, "fault.params.wait"),
    ({"system": "rabbitmq", "option": ["queue_type=stream", "message_ttl=60"]}, "options.message_ttl"),
])
def test_bad_fault_settings_name_the_field(flags, field):
    with pytest.raises(sc.ScenarioError) as e:
        sc.load(None, flags)
    assert str(e.value).startswith(f"scenario field '{field}"), str(e.value)
    assert "\n" not in str(e.value)


def test_power_off_cuts_several_nodes_one_after_another_and_reaches_pulsar_s_bookies():
    s = sc.load(None, {"system": "kafka", "fault": "power-off-all", "fault_param": ["stagger=2"]})
    assert s.fault.params == {"stagger": 2.0}
    s = sc.load(None, {"system": "pulsar", "fault": "power-off", "target": "bookies[2]",
                       "option": ["journal_sync=false"]})
    assert s.options["journal_sync"] is False
    s = sc.load(None, {"system": "rabbitmq", "fault": "power-off-all", "option": ["queue_type=classic"]})
    assert s.fault.action == "power-off"


def test_a_flag_naming_another_action_starts_its_params_afresh():
    file = ROOT / "scenarios" / "kafka-clock-skew.yaml"
    s = sc.load(file, {"fault_param": ["offset=3600"], "fault": "clock-all"})
    assert (s.fault.action, s.fault.target, s.fault.params) == ("clock", "all", {"offset": 3600})
    s = sc.load(file, {"fault": "skew-all", "fault_param": ["rate=-0.5"]})
    assert s.fault.params == {"rate": -0.5}  # the same action: the file's params, then the flag's
    with pytest.raises(sc.ScenarioError, match="fault.params.offset"):
        sc.load(file, {"fault": "clock-all"})  # not the file's rate, which a clock does not take


def test_params_are_typed_from_flags():
    s = sc.load(None, {"fault": "loss-leader", "fault_param": ["probability=0.3", "from=peers"]})
    assert s.fault.params == {"probability": 0.3, "from": "peers"}
    s = sc.load(None, {"fault": "tcp-kill-client-node"})
    assert (s.fault.action, s.fault.target) == ("tcp-kill", "client-node")
    s = sc.load(None, {"fault": "isolate-from-leader", "fault_param": ["from=coordinator"]})
    assert (s.fault.action, s.fault.target) == ("isolate-from", "leader")


def test_several_faults_and_their_field_paths():
    doc = {"faults": [{"action": "delay", "target": "all", "params": {"delay_ms": 20}},
                      {"action": "kill", "target": "leader", "params": {"bogus": 1}}]}
    with pytest.raises(sc.ScenarioError, match=r"^scenario field 'faults\.1\.params\.bogus'"):
        sc.build(doc)
    doc["faults"][1]["params"] = {}
    s = sc.build(doc)
    assert [f.action for f in s.fault_list] == ["delay", "kill"]
    with pytest.raises(sc.ScenarioError, match=r"^scenario field 'faults'"):
        sc.build(doc, {"fault": "kill-leader"})
    with pytest.raises(sc.ScenarioError, match="one of fault, faults and fault_mix, not fault and faults"):
        sc.build({"fault": {"action": "kill"}, "faults": doc["faults"]})


def test_repeats_need_a_duration_and_room_between_windows():
    base = {"action": "kill", "target": "random", "trigger": {"after_acks": 10}}
    with pytest.raises(sc.ScenarioError, match=r"^scenario field 'fault\.duration'"):
        sc.build({"fault": {**base, "repeat": {"every": 5, "for": 30}}})
    with pytest.raises(sc.ScenarioError, match=r"^scenario field 'fault\.repeat\.every'"):
        sc.build({"fault": {**base, "duration": 5, "repeat": {"every": 5, "for": 30}}})
    with pytest.raises(sc.ScenarioError, match=r"^scenario field 'fault\.repeat'"):
        sc.build({"fault": {**base, "duration": 1, "repeat": {"every": 5, "gap": [1, 2], "for": 30}}})
    s = sc.build({"fault": {**base, "duration": 1, "repeat": {"gap": [1, 2], "for": 30}}})
    assert s.fault.repeat.for_ == 30


def test_a_recorded_seed_replays_the_same_random_schedule():
    spec = sc.build({"fault": {"action": "kill", "target": "random", "duration": 2,
                               "repeat": {"gap": [1, 5], "for": 60}}}).fault
    a = plan(spec, rng_for(42, "run-001", 0, "schedule"))
    b = plan(spec, rng_for(42, "run-001", 0, "schedule"))
    c = plan(spec, rng_for(43, "run-001", 0, "schedule"))
    assert a == b and a != c
    assert a[0] == 0.0 and all(y - x >= 2 + 1 for x, y in zip(a, a[1:])) and a[-1] < 60
    every = sc.build({"fault": {"action": "kill", "duration": 1, "repeat": {"every": 10, "for": 35}}}).fault
    assert plan(every, random.Random(0)) == [0.0, 10.0, 20.0, 30.0]


def test_target_expressions():
    assert _resolve("leader").nodes == ["n2"]
    assert _resolve("followers").nodes == ["n1", "n3"]
    assert _resolve("n1,leader").nodes == ["n1", "n2"]
    one = _resolve("followers[1]").nodes
    assert len(one) == 1 and one[0] in ("n1", "n3")
    assert _resolve("followers[1]", seed=5).nodes == _resolve("followers[1]", seed=5).nodes
    assert _resolve("leader", groups=True).groups == [["n2"], ["n1", "n3"]]
    assert _resolve("n1|n2", groups=True).groups == [["n1"], ["n2"], ["n3"]]
    m = _resolve("minority", n=5, groups=True).groups
    assert len(m[0]) == 2 and len(m[1]) == 3
    with pytest.raises(LookupError):
        _resolve("all", groups=True)
    with pytest.raises(TargetError):
        check_expression("coordinator", ["n1"], frozenset({"kill"}))
    check_expression("coordinator", ["n1"], frozenset({"coordinator"}))
    assert "coordinator" in SYSTEMS.get("nats").offers


def test_majorities_ring_gives_every_node_a_different_majority():
    for n in (4, 5, 7):
        names = [f"n{i}" for i in range(1, n + 1)]
        sysm = Replicas(n)
        f = FAULTS.get("majorities-ring")(FaultContext(sysm, random.Random(3)))
        cut = f.links(Target(names, [names]))
        sees = {a: frozenset([a] + [b for b in names if b != a and tuple(sorted((a, b))) not in cut]) for a in names}
        assert all(len(v) >= n // 2 + 1 for v in sees.values()), sees
        assert len(set(sees.values())) == n, sees


def test_bridge_node_sees_both_halves():
    f = FAULTS.get("bridge")(FaultContext(Replicas(5), random.Random(3)))
    cut = f.links(Target(["n3"], [["n3"]]))
    assert not any("n3" in link for link in cut)
    a, b = f.effect["halves"]
    assert sorted(a + b) == ["n1", "n2", "n4", "n5"] and len(cut) == len(a) * len(b)


def test_a_heal_ends_the_window_of_its_own_action():
    rows = [
        {"t_ns": 10, "type": "fault", "detail": "delay all", "node": "n1"},
        {"t_ns": 20, "type": "fault", "detail": "kill leader", "node": "n2"},
        {"t_ns": 30, "type": "heal", "detail": "kill leader (before read)", "node": "n2"},
        {"t_ns": 40, "type": "heal", "detail": "delay all (before read)", "node": "n1"},
        {"t_ns": 50, "type": "fault", "detail": "x", "node": "n1"},
        {"t_ns": 60, "type": "fault", "detail": "y", "node": "n1"},
        {"t_ns": 70, "type": "heal", "detail": None, "node": None},
        {"t_ns": 80, "type": "fault", "detail": "kill", "node": "n1"},
    ]
    got = [(a, b) for a, b, _ in pair_windows(rows, 99)]
    assert got == [(10, 40), (20, 30), (50, 70), (60, 70), (80, 99)]


def test_faults_command_lists_every_fault_with_its_systems():
    out = subprocess.run([sys.executable, "-m", "brokerchaos.cli", "faults"], capture_output=True, text=True,
                         cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    for name in FAULTS.names():
        line = next((ln for ln in out.stdout.splitlines() if ln.split()[:1] == [name]), None)
        assert line, f"{name} not listed"
    lines = out.stdout.splitlines()
    for name in ("kill", "isolate-from", "delay", "tcp-kill", "pause", "partition"):
        i = next(i for i, ln in enumerate(lines) if ln.split()[:1] == [name])
        assert "nats" in lines[i + 1] and "needs:" in lines[i + 1], lines[i + 1]
    i = next(i for i, ln in enumerate(lines) if ln.split()[:1] == ["command"])
    assert "needs: hooks" in lines[i + 1] and "external" in lines[i + 1], lines[i + 1]
    for flag in ("probability", "delay_ms", "from"):
        assert f"{flag}:" in out.stdout
    # and what the harness sees each one do
    for name, cls in FAULTS.items():
        i = next(i for i, ln in enumerate(lines) if ln.split()[:1] == [name])
        assert lines[i + 2].strip() == f"seen by: {cls.observes}", (name, lines[i + 2])
    # and where a system's servers cannot have what a fault needs, why
    i = next(i for i, ln in enumerate(lines) if ln.split()[:1] == ["clock"])
    assert lines[i + 3].strip().startswith("not on nats: nats-server is a statically linked Go binary"), lines[i + 3]
    assert lines[i + 4].strip().startswith("not on redis: redis-server hangs"), lines[i + 4]


def test_every_fault_action_says_what_effect_it_checks_and_looks_for_it():
    from brokerchaos.faults.base import Fault

    for name, cls in FAULTS.items():
        assert len(cls.observes) > 20, f"{name}: no `observes` (the effect it checks, in words)"
        assert cls.observe is not Fault.observe, f"{name}: no look of its own (Fault.observe)"


def test_every_fault_action_declares_its_family_and_the_tables_are_read_from_the_plugins():
    """A fault says where it shows (its README matrix column), what it needs of the machine and
    whether it acts on consumers; docsite, doctor and validation read those declarations."""
    from brokerchaos import doctor, docsite
    from brokerchaos.faults.base import FAMILIES

    for name, cls in FAULTS.items():
        assert "family" in vars(cls), f"{name}: declares no family of its own (None: in no column)"
        assert cls.family is None or cls.family in FAMILIES, (name, cls.family)
    cols = dict(docsite.families())
    assert set(cols) == set(FAMILIES) and all(cols.values()), cols
    shown = {a for actions in cols.values() for a in actions}
    assert shown == {n for n, c in FAULTS.items() if c.family} and {"none", "command"}.isdisjoint(shown)
    assert "delay" in cols["network"] and "kill-wipe" in cols["disk lost"]
    assert doctor.fault_needs("delay")[-1] == "nfqueue" and doctor.fault_needs("tcp-kill")[-1] == "ss-kill"
    assert "nfqueue" not in doctor.fault_needs("loss")
    acting = sorted(n for n, c in FAULTS.items() if c.acts_on_consumers)
    assert acting == ["kill", "pause", "restart", "stop"], acting
    doc = {"name": "x", "system": "kafka", "workload": {"messages": 10, "group": {"consumers": 2}},
           "fault": {"action": "partition", "target": "consumer"}}
    with pytest.raises(sc.ScenarioError, match="'fault.action': kill, pause, restart, stop act on a consumer"):
        sc.build(doc)


def test_a_window_s_effect_is_its_worst_look_with_every_look_s_evidence():
    from brokerchaos.faults import effect

    seen = effect.combine([effect.observed("gone: n2"), effect.not_healed("not running again: n2")])
    assert seen.state == "not healed" and seen.evidence == "gone: n2; not running again: n2" and seen.value == 0
    assert effect.combine([effect.observed("a"), effect.not_known("b")]).value is None
    assert effect.combine([effect.observed("a"), None]).detail() == "observed: a"
    assert effect.combine([]) is None
    assert effect.judge(False, "x", effect.HEALED).state == "not healed"
    assert effect.judge(False, "x").state == "not observed"


def test_unsupported_or_bad_fault_stops_the_cli_before_anything_starts(tmp_path):
    out = subprocess.run([sys.executable, "-m", "brokerchaos.cli", "run", "--fault", "loss-leader",
                          "--fault-param", "probability=2", "--out", str(tmp_path / "r")],
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "fault.params.probability" in out.stderr
    assert not (tmp_path / "r").exists()


def test_a_clock_file_holds_whole_seconds_and_the_process_env_reads_it(tmp_path):
    from brokerchaos.sandbox import clock

    f = tmp_path / "clocks" / "n1"
    clock.set_offset(f, 691200)
    assert f.read_text() == "+691200\n"
    clock.set_offset(f, -30)
    assert f.read_text() == "-30\n" and not list(f.parent.glob("*.tmp"))
    clock.set_offset(f, 0)
    assert f.read_text() == "+0\n"
    clock.set_offset(f, -2.25)  # a drifting clock's steps (the skew fault)
    assert f.read_text() == "-2.250\n"
    try:
        env = clock.env(f, {"PATH": "/bin"})
    except clock.ClockError as e:  # not installed: the one line says what to install
        assert "libfaketime" in str(e) and "make setup" in str(e)
        return
    assert env["PATH"] == "/bin" and env["LD_PRELOAD"].endswith("libfaketime.so.1")
    assert env["FAKETIME_TIMESTAMP_FILE"] == str(f) and env["FAKETIME_DONT_FAKE_MONOTONIC"] == "1"
    assert env["FAKETIME_FORCE_MONOTONIC_FIX"] == "0"  # else a JVM's timed waits return at once


def _said(*readings):
    return [{n: {"after_s": t, "said_s": s} for n, (t, s) in r.items()} for r in readings]


@pytest.mark.parametrize("rate, readings, seen", [
    # a fast clock: 0.5 s a second, read 2.6 s and 9.5 s in, to the second and a little late
    (0.5, _said({"n1": (2.6, 0.0), "n2": (3.4, 1.0)}, {"n1": (9.5, 3.8), "n2": (10.1, 4.0)}), True),
    (-0.5, _said({"n1": (2.6, -1.8)}, {"n1": (9.5, -5.2)}), True),
    (2.0, _said({"n1": (2.6, 3.0)}, {"n1": (5.1, 8.0)}), True),
    # the negatives: a clock that stayed true, one that jumped and held, one drifting the other way
    (0.5, _said({"n1": (2.6, 0.0)}, {"n1": (9.5, 0.0)}), False),
    (0.5, _said({"n1": (2.6, 60.0)}, {"n1": (9.5, 60.0)}), False),
    (0.5, _said({"n1": (2.6, 0.0), "n2": (3.4, 1.0)}, {"n1": (9.5, 4.0), "n2": (10.1, -4.0)}), False),
    # nobody could say: not known
    (0.5, _said({"n1": (2.6, None)}, {"n1": (9.5, None)}), None),
])
def test_a_skewed_clock_is_seen_drifting_at_its_rate_and_a_true_or_jumped_one_is_not(rate, readings, seen):
    from brokerchaos.faults.skew import drift_seen

    ok, words = drift_seen(rate, readings)
    assert ok is seen, words
    assert ("not drifting so" in words) is (seen is False), words


def test_the_delayer_releases_each_packet_when_due_and_everything_held_at_its_end():
    """nfqdelay's Held, on a queue that records its verdicts: a fixed delay releases in
    arrival order with one batch verdict up to the last packet due; a jitter releases each
    packet at its own drawn time; the end releases everything still held."""
    from brokerchaos.faults.nfqdelay import Held

    class Q:
        def __init__(self):
            self.verdicts = []

        def verdict(self, pid, batch):
            self.verdicts.append((pid, batch))

    q = Q()
    fixed = Held(q, 100, 0, 1)
    for i, t in enumerate((0.0, 0.01, 0.02), 1):
        fixed.add(t, i)
    assert fixed.release_due(0.05) == pytest.approx(0.1) and q.verdicts == []
    assert fixed.release_due(0.111) == pytest.approx(0.12) and q.verdicts == [(2, True)]  # 1 and 2 in one batch
    fixed.release_all()
    assert q.verdicts == [(2, True), (3, True)]
    q = Q()
    jittered = Held(q, 100, 50, 7)
    for i in range(1, 21):
        jittered.add(0.0, i)
    dues = sorted(d for d, _ in jittered.heap)
    assert all(0.05 <= d <= 0.15 for d in dues) and len(set(dues)) == 20
    jittered.release_due(dues[9])
    assert len(q.verdicts) == 10 and all(not b for _, b in q.verdicts)
    jittered.release_all()
    assert sorted(p for p, _ in q.verdicts) == list(range(1, 21))


def test_repair_and_the_file_choice_are_checked_before_anything_starts():
    """corrupt's repair runs the system's own tool: a system without one is refused at
    params.repair; truncate needs a cut; both take a file glob and data or metadata."""
    s = sc.build({"system": "redis", "fault": {"action": "corrupt", "target": "follower",
                                                "params": {"bits": 8, "file": "*.incr.aof", "repair": True}}})
    assert s.fault.params["repair"] is True
    refused = r"^scenario field 'fault\.params\.repair'.*needs repair.*nats-server ships no offline"
    with pytest.raises(sc.ScenarioError, match=refused):
        sc.build({"system": "nats", "fault": {"action": "corrupt", "target": "follower",
                                               "params": {"bits": 8, "repair": True}}})
    with pytest.raises(sc.ScenarioError, match=r"params\.bytes"):
        sc.build({"system": "pulsar", "fault": {"action": "truncate", "target": "bookie", "params": {}}})
    with pytest.raises(sc.ScenarioError, match=r"params\.files"):
        sc.build({"system": "nats", "fault": {"action": "truncate", "target": "follower",
                                               "params": {"bytes": 9, "files": "logs"}}})
    sc.build({"system": "nats", "fault": {"action": "truncate", "target": "all",
                                           "params": {"bytes": 9, "files": "metadata", "file": "*snap*"}}})


def test_a_pause_on_a_node_another_fault_holds_down_says_so_and_stops_nothing():
    """In a combined schedule a pause can fall on a node a kill or a power cut holds down:
    no process to stop, so its effect is not known (not 'not observed', which would say
    the pause failed), and the node is left to the fault that holds it."""
    from types import SimpleNamespace

    from brokerchaos.faults.base import FaultContext, Target
    from brokerchaos.faults.effect import INJECTED, NOT_KNOWN
    from brokerchaos.faults.process import Pause

    paused, pids = [], {"n1": None, "n2": 4242}
    cluster = SimpleNamespace(on_purpose={"n1"}, pause=paused.append, pid_of=pids.get)
    fault = Pause(FaultContext(deployment=SimpleNamespace(cluster=cluster), rng=random.Random(1)))
    fault.target = Target(["n1"])
    asyncio.run(fault.inject(fault.target))
    assert paused == [] and fault.nodes == [] and fault.effect["down_when_paused"] == ["n1"]
    seen = asyncio.run(fault.observe(INJECTED))
    assert seen.state == NOT_KNOWN and "n1 down when the pause came or since" in seen.evidence, seen
    # paused, then killed and started again by another fault before the look: a new process
    fault = Pause(FaultContext(deployment=SimpleNamespace(cluster=cluster), rng=random.Random(1)))
    fault.target = Target(["n2"])
    asyncio.run(fault.inject(fault.target))
    assert paused == ["n2"] and fault.effect["paused_pids"] == {"n2": 4242}
    pids["n2"] = 4343
    seen = asyncio.run(fault.observe(INJECTED))
    assert seen.state == NOT_KNOWN and "n2 down when the pause came or since" in seen.evidence, seen


def test_a_heal_leaves_a_node_another_fault_still_holds_down_to_that_fault():
    """Faults combined: a kill's heal does not start a node a power cut still holds down (its
    window in effect): that cut's heal starts it, and the kill's look says why it did not.
    A fault whose heal starts nothing (a pause) holds no node for this, and one whose heal
    is under way holds none either (else two heals at once would each wait on the other)."""
    from types import SimpleNamespace

    from brokerchaos.faults.base import FaultContext, Target
    from brokerchaos.faults.effect import HEALED, NOT_KNOWN
    from brokerchaos.faults.nemesis import NemesisContext
    from brokerchaos.faults.process import Kill, Pause

    def nemesis(cls, nodes, active=True):
        fault = SimpleNamespace(held_down=lambda: list(nodes))
        return SimpleNamespace(cls=cls, active=(fault, None) if active else None)

    cut, paused, healing = nemesis(Kill, ["n2"]), nemesis(Pause, ["n3"]), nemesis(Kill, ["n1"], active=False)
    ctx = SimpleNamespace(nemeses=[cut, paused, healing])
    me = object()
    held = [n for n in ("n1", "n2", "n3") if NemesisContext.held_elsewhere(ctx, n, me)]
    assert held == ["n2"], held

    started = []
    cluster = SimpleNamespace(pid_of=lambda n: None, down_why=lambda n: "down", start_node=started.append,
                              start_notes={})
    kill = Kill(FaultContext(deployment=SimpleNamespace(cluster=cluster), rng=random.Random(1), params=Kill.Params(),
                             held_elsewhere=lambda n: n == "n2"))
    kill.target = Target(["n2"])
    kill.nodes, kill.pids_before = ["n2"], {"n2": 77}
    asyncio.run(kill.heal())
    assert started == [] and kill.effect["left_to_another_fault"] == ["n2"], kill.effect
    seen = asyncio.run(kill.observe(HEALED))
    assert seen.state == NOT_KNOWN and "another fault of the run still held it" in seen.evidence, seen
