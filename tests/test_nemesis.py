"""The nemesis against a fake cluster, in memory: triggers, window ids, durations, heal order.

Fast (no root, no JVM): the real Recorder writes the rows; the analysis's own pairing reads
them back.
"""
import asyncio
import time

import pyarrow.dataset as ds
import pytest

from brokerchaos.analysis.metrics import pair_windows
from brokerchaos.faults.nemesis import Nemesis, NemesisContext, said
from brokerchaos.faults.window import Window, WindowError
from brokerchaos.faults.trigger import AckGate
from brokerchaos.history import Recorder
from brokerchaos.scenario import FaultSpec
from brokerchaos.systems.runtime import cancel_all


class FakeCluster:
    """Nodes that are up or down, and a log of what was done to them, with times."""

    def __init__(self, n=3):
        self.node_names = [f"n{i}" for i in range(1, n + 1)]
        self.host_names = self.node_names
        self.up = set(self.node_names)
        self.log = []
        self.start_notes = {}
        self.step_bound_s = 0.0

    def _did(self, verb, node):
        self.log.append((round(time.monotonic(), 3), verb, node))

    def kill(self, node, timeout=10.0):
        self._did("kill", node)
        self.up.discard(node)

    async def kill_nodes(self, nodes, timeout=10.0):  # as a cluster file's hooks do it
        for n in nodes:
            self.kill(n, timeout)

    def start_node(self, node):
        self._did("start", node)
        self.up.add(node)

    def alive(self, node):
        return node in self.up

    def down_why(self, node):
        return None if node in self.up else "not running"

    def pid_of(self, node):  # no process held: the faults' looks ask down_why
        return None

    def address(self, node, service="client"):
        raise LookupError("no ports in memory")

    def pause(self, node):
        self._did("pause", node)

    def resume(self, node):
        self._did("resume", node)


class FakeRoles:
    def __init__(self, lead="n2"):
        self.lead = lead

    async def leader(self):
        return self.lead

    async def replicas(self):
        return [self.lead]

    def consumer_nodes(self):
        return []

    async def wait_stream_ready(self, timeout):
        return True


class FakeDeployment:
    def __init__(self):
        self.cluster = FakeCluster()
        self.roles = FakeRoles()


async def _no_observer(_dep, _nodes):
    pass


def _context(dep, rec, gate, lines) -> NemesisContext:
    """What the run's nemeses share on the fake deployment, as the runner builds it (client on n1)."""
    ctx = NemesisContext(dep, None, 1, "r1", rec, gate, lines.append, _no_observer)
    ctx.workload.bind([_Producer("n1")], None)
    return ctx


class _Producer:
    """A producer as a nemesis sees it: its client says which node it is connected to."""

    def __init__(self, node):
        self.client = self
        self._node = node

    def node(self):
        return self._node


def _nemesis(i, spec, dep, rec, gate, lines):
    """A nemesis on the fake deployment, alone in its run."""
    return Nemesis(i, spec, _context(dep, rec, gate, lines))


def _run(tmp_path, specs, acks=0, extra=0.0, fail_inject=False, roles=None, dep=None):
    """Run one nemesis per spec for a write phase; `acks` first acks arrive at once."""
    dep = dep or FakeDeployment()
    if roles is not None:
        dep.roles = roles
    if fail_inject:
        def boom(node, timeout=10.0):
            raise RuntimeError("no such process")
        dep.cluster.kill = boom
    lines = []

    async def body():
        rec = Recorder(tmp_path, "r1", "nemesis", time.monotonic_ns())
        gate = AckGate()
        ctx = _context(dep, rec, gate, lines)
        nems = [Nemesis(i, FaultSpec(**spec), ctx) for i, spec in enumerate(specs)]
        tasks = [asyncio.create_task(n.run()) for n in nems]
        for _ in range(acks):
            gate.on_first_ack()
        longest = max((s.get("duration") or 0) + s.get("trigger", {}).get("at_seconds", 0) for s in specs)
        await asyncio.wait(tasks, timeout=longest + 2 + extra)
        for n in reversed(nems):  # the runner's `finally`: heal whatever is still in effect
            await n.heal_active("end of run")
        for n in nems:
            await n.settle(1)
        for t in tasks:
            t.cancel()
        said(nems, await asyncio.gather(*tasks, return_exceptions=True))  # as the runner's write phase
        rec.close()
        return nems

    nems = asyncio.run(body())
    rows = sorted(ds.dataset(str(tmp_path)).to_table().to_pylist(), key=lambda r: r["seq"])
    return dep, nems, rows, lines


def test_overlapping_kills_are_two_windows_each_healed_by_its_own_id(tmp_path):
    # the long window starts first, the short one inside it is healed first: pairing heals
    # by action would close both at the first heal
    specs = [{"action": "kill", "target": "n1", "trigger": {"at_seconds": 0}, "duration": 0.6},
             {"action": "kill", "target": "n2", "trigger": {"at_seconds": 0.1}, "duration": 0.2}]
    dep, nems, rows, _ = _run(tmp_path, specs)
    faults = [r for r in rows if r["type"] == "fault"]
    heals = [r for r in rows if r["type"] == "heal"]
    readies = [r for r in rows if r["type"] == "ready"]
    assert [r["node"] for r in faults] == ["n1", "n2"] and [r["node"] for r in heals] == ["n2", "n1"]
    ids = [r["window"] for r in faults]
    assert None not in ids and len(set(ids)) == 2
    assert [r["window"] for r in heals] == ids[::-1]
    assert sorted(r["window"] for r in readies) == sorted(ids)
    windows = {f["node"]: (tf, te) for tf, te, f in pair_windows(rows, 10**15)}
    n1, n2 = windows["n1"], windows["n2"]
    assert 0.55 < (n1[1] - n1[0]) / 1e9 < 0.8, n1
    assert 0.15 < (n2[1] - n2[0]) / 1e9 < 0.35, n2
    # both nodes were started again by their heals, in that order
    assert [(verb, node) for _, verb, node in dep.cluster.log] == [
        ("kill", "n1"), ("kill", "n2"), ("start", "n2"), ("start", "n1")]
    assert dep.cluster.up == {"n1", "n2", "n3"}
    assert [n.windows[0]["id"] for n in nems] == ids


def test_ack_trigger_and_a_window_healed_at_the_end(tmp_path):
    specs = [{"action": "pause", "target": "leader", "trigger": {"after_acks": 5}}]
    dep, nems, rows, lines = _run(tmp_path, specs, acks=5)
    assert [(r["type"], r["node"]) for r in rows if r["type"] != "ready"] == [("fault", "n2"), ("heal", "n2"),
                                                                                ("effect", "n2")]
    assert "end of run" in [r for r in rows if r["type"] == "heal"][0]["detail"]
    # a pause on a cluster that holds no pid cannot be seen from outside: not known, said so
    (eff,) = [r for r in rows if r["type"] == "effect"]
    assert eff["value"] is None and eff["detail"].startswith("not known: pause leader: no pid held for n2"), eff
    # a target that named a role says whether the role moved off it by the heal: here it stayed
    w = nems[0].windows[0]
    assert w["role_at_heal"] == ["n2"] and w["role_moved"] is False, w
    w = nems[0].windows[0]
    assert w["acks_at_effect"] == 5 and w["nodes"] == ["n2"] and w["healed_ms"] >= w["t_ms"]
    assert [verb for _, verb, _ in dep.cluster.log] == ["pause", "resume"]
    assert any(line.startswith("Fault: pause leader -> n2 at ack 5") for line in lines), lines


def test_a_jittered_trigger_fires_later_by_a_delay_drawn_with_the_seed(tmp_path):
    specs = [{"action": "kill", "target": "leader", "trigger": {"after_acks": 5, "jitter": 0.4}, "duration": 0.05}]
    t0 = time.monotonic()
    dep, nems, _, _ = _run(tmp_path / "a", specs, acks=5)
    w = nems[0].windows[0]
    assert 0 <= w["trigger_jitter_ms"] < 400
    assert dep.cluster.log[0][0] - t0 >= w["trigger_jitter_ms"] / 1e3 - 0.02  # killed no sooner
    again = _run(tmp_path / "b", specs, acks=5)[1][0].windows[0]["trigger_jitter_ms"]
    assert again == w["trigger_jitter_ms"]  # same seed, run and fault: the same delay
    other = Nemesis(0, FaultSpec(**specs[0]), NemesisContext(FakeDeployment(), None, 2, "r1", None, AckGate(),
                                                             print, _no_observer))
    assert other.jitter_s * 1e3 != w["trigger_jitter_ms"]  # another seed, another delay
    plain = _run(tmp_path / "c", [{**specs[0], "trigger": {"after_acks": 5}}], acks=5)[1][0].windows[0]
    assert "trigger_jitter_ms" not in plain


def test_a_trigger_never_reached_records_nothing(tmp_path):
    specs = [{"action": "kill", "target": "leader", "trigger": {"after_acks": 50}}]
    dep, nems, rows, _ = _run(tmp_path, specs, acks=10)
    assert rows == [] and dep.cluster.log == [] and nems[0].windows == []


def test_repeated_windows_follow_the_plan(tmp_path):
    specs = [{"action": "kill", "target": "random", "trigger": {"at_seconds": 0}, "duration": 0.1,
              "repeat": {"every": 0.3, "for": 0.8}}]
    dep, nems, rows, _ = _run(tmp_path, specs, extra=1.0)
    assert nems[0].schedule == [0.0, 0.3, 0.6]
    kinds = [r["type"] for r in rows if r["type"] != "ready"]
    assert kinds == ["fault", "heal", "effect"] * 3
    ids = [r["window"] for r in rows if r["type"] == "fault"]
    assert len(set(ids)) == 3
    # each window's kill seen (the node stopped answering) and undone (it answers again)
    effects = [r for r in rows if r["type"] == "effect"]
    assert [r["window"] for r in effects] == ids and all(r["value"] == 1 for r in effects), effects
    assert "gone: " in effects[0]["detail"] and "running again: " in effects[0]["detail"], effects[0]
    # each window due 300 ms after the one before (its fault row's time less its lateness:
    # exact, whatever the machine's load), none before the previous one was healed, each
    # late by what the loop took (a loaded machine: up to 150 ms seen, behind the heal of
    # the window before it; an idle one: a few ms)
    ws = nems[0].windows
    due = [w["t_ms"] - w["delay_ms"] for w in ws]
    assert all(abs(b - a - 300) < 1 for a, b in zip(due, due[1:])), due
    assert all(b["t_ms"] >= a["healed_ms"] for a, b in zip(ws, ws[1:])), [w.as_json() for w in ws]
    assert all(0 <= w["delay_ms"] < 1000 for w in ws), [w["delay_ms"] for w in ws]


def test_a_nemesis_that_raises_says_so_and_its_window_cannot_pass(tmp_path, monkeypatch):
    # a harness bug (here a window step refused) ends the nemesis's task: said on the
    # console and in run.json, and the window it left gets an effect row that is not a pass
    def refused(self, **kw):
        raise WindowError(f"window {self.id}: in effect in phase {self.phase.value}")
    monkeypatch.setattr(Window, "took_effect", refused)
    specs = [{"action": "kill", "target": "n1", "trigger": {"at_seconds": 0}, "duration": 0.1}]
    dep, nems, rows, lines = _run(tmp_path, specs)
    assert nems[0].state["error"].startswith("the nemesis stopped: WindowError: window"), nems[0].state
    assert any("FAILED: the nemesis stopped" in line for line in lines), lines
    (eff,) = [r for r in rows if r["type"] == "effect"]
    assert eff["value"] != 1, eff


def test_a_failed_injection_is_reported_and_healed_without_a_fault_row(tmp_path):
    specs = [{"action": "kill", "target": "n1", "trigger": {"at_seconds": 0}, "duration": 0.1}]
    dep, nems, rows, lines = _run(tmp_path, specs, fail_inject=True)
    assert [r for r in rows if r["type"] in ("fault", "heal")] == []
    assert "no such process" in nems[0].state["error"]
    assert any("FAILED" in line for line in lines)
    # … and its window's effect row says it failed: the policy will not let the run pass
    (eff,) = [r for r in rows if r["type"] == "effect"]
    assert eff["value"] == 0 and eff["detail"].startswith("failed: kill n1: inject: RuntimeError: no such process")


def test_a_trigger_never_reached_by_the_end_of_the_write_is_an_effect_row_that_failed(tmp_path):
    async def body():
        rec = Recorder(tmp_path, "r1", "nemesis", time.monotonic_ns())
        gate = AckGate()
        nem = _nemesis(0, FaultSpec(action="kill", target="leader", trigger={"after_acks": 50}), FakeDeployment(),
                       rec, gate, [])
        nem.start()
        for _ in range(10):
            gate.on_first_ack()
        await asyncio.sleep(0.2)
        await nem.end_of_write()
        rec.close()
        return nem

    nem = asyncio.run(body())
    rows = ds.dataset(str(tmp_path)).to_table().to_pylist()
    assert [r["type"] for r in rows] == ["effect"] and rows[0]["value"] == 0, rows
    assert rows[0]["detail"] == "failed: kill leader: never injected: trigger not reached (acks: 10)"
    assert nem.state["why"] == "trigger not reached (acks: 10)"


class _UnloadingRoles(FakeRoles):
    """A stepdown that leaves the role where it was (Pulsar's topic unload), or moves it."""

    def __init__(self, moves):
        super().__init__("n2")
        self.stepdown_moves = moves
        self.verbs = []

    async def stepdown(self, node, role):
        self.verbs.append((node, role))
        if self.stepdown_moves:
            self.lead = "n3"
        return f"unload on {node}" if not self.stepdown_moves else f"step down {node}"

    async def stream_ready(self):
        return True

    async def step_back(self, node):
        pass


def test_a_stepdown_that_keeps_its_holder_is_ready_at_once_and_one_that_moves_names_where(tmp_path):
    specs = [{"action": "stepdown", "target": "leader", "trigger": {"at_seconds": 0}, "params": {"wait": 2}}]
    for moves, moved_to in ((False, None), (True, "n3")):
        dep, nems, rows, _ = _run(tmp_path / str(moves), specs, roles=_UnloadingRoles(moves))
        assert dep.roles.verbs == [("n2", "leader")]
        w = nems[0].windows[0]
        # a holder that took its clients back is not waited on for the whole `wait`
        assert w["effect"]["moved_to"] == moved_to and w["effect"]["moved_s"] < 1.0, w
        readies = [r for r in rows if r["type"] == "ready"]
        assert len(readies) == 1 and readies[0]["window"] == w["id"], rows


class _SlowDescribe(FakeRoles):
    async def describe(self):
        await asyncio.sleep(0.2)
        return {"leader": self.lead}


def test_a_heal_under_way_when_the_write_ends_is_finished_not_cut_short(tmp_path):
    # The runner cancels a nemesis still running when the write phase ends. Landing inside a
    # heal (here while the cluster describes itself, before the node is started) it once left
    # the node down and the window without a heal: seen in CI as a Kafka run whose killed
    # broker was never started again.
    dep = FakeDeployment()
    dep.roles = _SlowDescribe()

    async def body():
        rec = Recorder(tmp_path, "r1", "nemesis", time.monotonic_ns())
        spec = FaultSpec(action="kill", target="n1", trigger={"at_seconds": 0}, duration=0.1)
        n = _nemesis(0, spec, dep, rec, AckGate(), [])
        task = asyncio.create_task(n.run())
        for _ in range(300):
            if n.heals.under_way:
                break
            await asyncio.sleep(0.01)
        assert n.heals.under_way and "n1" not in dep.cluster.up
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await n.heals.wait()  # what the runner does before its read
        assert "n1" in dep.cluster.up
        await n.heal_active("end of run")  # and its `finally`: nothing left to heal
        await n.settle(1)
        rec.close()
        return n

    n = asyncio.run(body())
    rows = sorted(ds.dataset(str(tmp_path)).to_table().to_pylist(), key=lambda r: r["seq"])
    heals = [r for r in rows if r["type"] == "heal"]
    assert len(heals) == 1 and "after duration" in heals[0]["detail"]
    w = n.windows[0]
    assert w["healed_ms"] >= w["t_ms"] and w["roles_during"] == {"leader": "n2"}
    assert [verb for _, verb, _ in dep.cluster.log] == ["kill", "start"]


class _SlowLeader(FakeRoles):
    """A leader lookup that gets slow (a stream-info request queued behind the load)."""

    def __init__(self):
        super().__init__("n2")
        self.delay = 0.0
        self.asked = 0

    async def leader(self):
        self.asked += 1
        lead = self.lead  # what the cluster says when asked, answered `delay` later
        await asyncio.sleep(self.delay)
        return lead

    async def describe(self):
        return {"leader": self.lead}


@pytest.mark.parametrize("moved", [False, True])
def test_a_slow_leader_lookup_does_not_delay_the_fault_and_the_view_is_confirmed(tmp_path, moved):
    dep = FakeDeployment()
    dep.roles = roles = _SlowLeader()
    lines = []

    async def body():
        rec = Recorder(tmp_path, "r1", "nemesis", time.monotonic_ns())
        gate = AckGate()
        spec = FaultSpec(action="kill", target="leader", trigger={"after_acks": 5}, duration=0.2)
        n = _nemesis(0, spec, dep, rec, gate, lines)
        task = asyncio.create_task(n.run())
        await asyncio.sleep(0.3)  # the background view has looked
        assert roles.asked >= 1
        roles.delay = 0.6
        if moved:  # the leader moved since the view looked: the lookup will say so
            roles.lead = "n3"
        for _ in range(5):
            gate.on_first_ack()
        await asyncio.wait_for(task, 5)
        await n.heal_active("end of run")
        await n.settle(5)
        rec.close()
        return n

    n = asyncio.run(body())
    w = n.windows[0]
    # the fault did not wait for the 0.6 s lookup: it took the view, then the lookup
    # (asked at the trigger) confirmed it or named the node it should have been
    assert w["target_by"] == "view" and w["resolve_ms"] < 100 and w["view_age_ms"] < 2000, w
    assert w["nodes"] == ["n2"] and w["roles_before"] == {"leader": "n2"}
    assert w["target_confirmed"] is (not moved), w
    if moved:
        assert w["target_when_asked"] == ["n3"]
        assert any("the background view named n2, the cluster answered n3" in x for x in lines), lines
    assert [(verb, node) for _, verb, node in dep.cluster.log] == [("kill", "n2"), ("start", "n2")]


class _SlowDescription(_SlowLeader):
    """A description that gets slow under load (Kafka's metadata: 11-75 ms at a trigger);
    the leader lookup stays fast."""

    async def leader(self):
        return self.lead

    async def describe(self):
        self.asked += 1
        lead = self.lead
        await asyncio.sleep(self.delay)
        return {"leader": lead}


def test_a_slow_description_does_not_delay_a_fault_on_a_named_node(tmp_path):
    # `n1` and `client-node` have no view of their target; their roles_before came from a
    # description asked after the target, which the fault waited for
    dep = FakeDeployment()
    dep.roles = roles = _SlowDescription()

    async def body():
        rec = Recorder(tmp_path, "r1", "nemesis", time.monotonic_ns())
        gate = AckGate()
        n = _nemesis(0, FaultSpec(action="kill", target="n1", trigger={"after_acks": 5}, duration=0.2),
                     dep, rec, gate, [])
        task = asyncio.create_task(n.run())
        await asyncio.sleep(0.3)  # the background look has described the cluster
        assert roles.asked >= 1
        roles.delay, roles.lead = 0.6, "n3"
        for _ in range(5):
            gate.on_first_ack()
        await asyncio.wait_for(task, 5)
        await n.heal_active("end of run")
        await n.settle(5)
        rec.close()
        return n

    w = asyncio.run(body()).windows[0]
    assert w["nodes"] == ["n1"] and w["delay_ms"] < 300, w
    assert w["resolve_ms"] <= w["inject_at_ms"] <= w["delay_ms"], w
    # the roles as the background look saw them, and how old that look was
    assert w["roles_before"] == {"leader": "n2"} and 0 < w["roles_before_age_ms"] < 2000, w
    assert w["roles_during"] == {"leader": "n3"}


def test_a_kill_is_in_effect_at_its_signal_not_when_the_process_is_reaped(tmp_path):
    dep = FakeDeployment()
    signalled = []

    async def kill_nodes(nodes, timeout=10.0):
        signalled.append(time.monotonic_ns())
        for n in nodes:
            dep.cluster.kill(n)
        await asyncio.sleep(0.3)  # a JVM torn down after SIGKILL
        return signalled[0]

    dep.cluster.kill_nodes = kill_nodes
    _, nems, rows, _ = _run(tmp_path, [{"action": "kill", "target": "n1", "trigger": {"at_seconds": 0.1},
                                        "duration": 0.2}], dep=dep)
    (w,) = nems[0].windows
    (fault,) = [r for r in rows if r["type"] == "fault"]
    assert fault["t_ns"] == int(w["t_ms"] * 1e6) or abs(fault["t_ns"] / 1e6 - w["t_ms"]) < 0.01
    # the window (and its row) at the signal, the 300 ms until the process was gone apart
    assert w["effect"]["exit_ms"] >= 290 and w["delay_ms"] < 150, w
    heal = next(r for r in rows if r["type"] == "heal")
    assert (heal["t_ns"] - fault["t_ns"]) / 1e9 >= 0.2 + 0.29


def _timed_kills() -> FakeDeployment:
    """A fake deployment whose kills say when they took effect (as a local cluster's do)."""
    dep = FakeDeployment()

    async def kill_nodes(nodes, timeout=10.0):
        for n in nodes:
            dep.cluster.kill(n)
        return time.monotonic_ns()

    dep.cluster.kill_nodes = kill_nodes
    return dep


def test_a_staged_return_starts_the_killed_nodes_one_stagger_apart(tmp_path):
    # the Pulsar seed's kill of a write quorum's bookies, brought back one, then the other
    dep = _timed_kills()
    _, nems, _, _ = _run(tmp_path, [{"action": "kill", "target": "all", "trigger": {"at_seconds": 0},
                                     "duration": 0.2, "params": {"stagger": 0.4}}], dep=dep, extra=1.5)
    starts = [(t, node) for t, verb, node in dep.cluster.log if verb == "start"]
    assert [n for _, n in starts] == ["n1", "n2", "n3"] and dep.cluster.up == {"n1", "n2", "n3"}
    gaps = [b[0] - a[0] for a, b in zip(starts, starts[1:])]
    assert all(0.35 < g < 0.8 for g in gaps), starts
    (w,) = nems[0].windows
    started = w["effect"]["started_ms"]
    assert list(started) == ["n1", "n2", "n3"] and 350 < started["n3"] - started["n2"] < 800, started


def test_a_staged_return_with_read_after_lets_the_read_begin_between_its_starts(tmp_path):
    # the seed's reader between bookie1's return and bookie3's: the run's wait before the
    # read (heals.wait_readable) ends at the first start, the second node still held down on purpose
    dep, lines, origin = _timed_kills(), [], time.monotonic_ns()

    async def body():
        rec = Recorder(tmp_path, "r1", "nemesis", origin)
        spec = FaultSpec(action="kill", target="n1,n3", trigger={"at_seconds": 0}, duration=0.1,
                         params={"stagger": 0.8, "read_after": 1})
        nem = _nemesis(0, spec, dep, rec, AckGate(), lines)
        task = asyncio.create_task(nem.run())
        await asyncio.sleep(0.3)  # in its stagger: n1 started, n3 not yet
        t0 = time.monotonic()
        await nem.heal_for_read("before read")
        waited, held, up = time.monotonic() - t0, nem.held(), set(dep.cluster.up)
        await nem.heal_active("end of run")  # the teardown's: the heal's end
        await nem.settle(0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        rec.close()
        return nem, waited, held, up

    nem, waited, held, up = asyncio.run(body())
    assert waited < 0.3 and held == ["n3"] and up == {"n1", "n2"}, (waited, held, up)
    assert dep.cluster.up == {"n1", "n2", "n3"} and nem.held() == []
    (w,) = nem.windows
    assert list(w["effect"]["started_ms"]) == ["n1", "n3"], w["effect"]
    rows = sorted(ds.dataset(str(tmp_path)).to_table().to_pylist(), key=lambda r: r["seq"])
    heal = next(r for r in rows if r["type"] == "heal")  # the window healed at its last start
    (n3,) = [t for t, verb, n in dep.cluster.log if (verb, n) == ("start", "n3")]
    assert (origin + heal["t_ns"]) / 1e9 >= n3 - 0.01, (heal, n3)


def test_a_kill_apart_signals_one_node_after_another_in_effect_at_the_first(tmp_path):
    dep = _timed_kills()
    _, nems, _, _ = _run(tmp_path, [{"action": "kill", "target": "n1,n3", "trigger": {"at_seconds": 0},
                                     "duration": 0.1, "params": {"apart": 0.5}}], dep=dep, extra=1.0)
    kills = [(t, node) for t, verb, node in dep.cluster.log if verb == "kill"]
    assert [n for _, n in kills] == ["n1", "n3"] and 0.45 < kills[1][0] - kills[0][0] < 0.9, kills
    (w,) = nems[0].windows
    assert 450 < w["effect"]["killed_ms"]["n3"] < 900 and w["effect"]["killed_ms"]["n1"] == 0, w["effect"]
    assert w["effect"]["exit_ms"] >= 450 and dep.cluster.up == {"n1", "n2", "n3"}, w["effect"]


def test_the_write_s_end_waits_for_a_staged_return_only_until_the_read_may_begin(tmp_path):
    # end_of_write lets a window under way finish its heal; with read_after, only that far
    dep, lines = _timed_kills(), []

    async def body():
        rec = Recorder(tmp_path, "r1", "nemesis", time.monotonic_ns())
        spec = FaultSpec(action="kill", target="n1,n3", trigger={"at_seconds": 0}, duration=0.1,
                         params={"stagger": 3, "read_after": 1})
        nem = _nemesis(0, spec, dep, rec, AckGate(), lines)
        nem.start()
        await asyncio.sleep(0.05)  # in effect, not healed yet
        t0 = time.monotonic()
        await nem.end_of_write()
        await nem.heals.wait_readable()
        waited, held = time.monotonic() - t0, nem.held()
        await nem.heal_active("end of run")
        await nem.settle(0)
        rec.close()
        return waited, held

    waited, held = asyncio.run(body())
    assert waited < 1.0 and held == ["n3"], (waited, held)
    assert dep.cluster.up == {"n1", "n2", "n3"}


def test_without_read_after_the_read_waits_for_every_start_of_a_staged_return(tmp_path):
    dep, lines = FakeDeployment(), []

    async def body():
        rec = Recorder(tmp_path, "r1", "nemesis", time.monotonic_ns())
        spec = FaultSpec(action="kill", target="n1,n3", trigger={"at_seconds": 0}, duration=0.1,
                         params={"stagger": 0.8})
        nem = _nemesis(0, spec, dep, rec, AckGate(), lines)
        task = asyncio.create_task(nem.run())
        await asyncio.sleep(0.3)
        await nem.heal_for_read("before read")
        up = set(dep.cluster.up)
        await nem.settle(0)
        await asyncio.gather(task, return_exceptions=True)
        rec.close()
        return nem, up

    nem, up = asyncio.run(body())
    assert up == {"n1", "n2", "n3"} and nem.held() == []


def test_a_heal_look_that_fails_where_another_fault_is_in_effect_is_not_known_and_one_alone_not_healed(
        tmp_path, monkeypatch):
    """Overlapping windows: a kill of n1 healed while a pause of n1 is still in effect, then the
    pause healed alone. Each heal's look is made to fail: the kill's, taken under the pause,
    cannot tell its own fault from the pause (not known, both named); the pause's, taken with
    nothing else in effect, is its own (not healed)."""
    from brokerchaos.faults import effect
    from brokerchaos.faults.process import Kill, Pause

    async def fails_after_heal(self, stage):
        return effect.not_healed("probe silent") if stage == effect.HEALED else effect.observed("seen")

    monkeypatch.setattr(Kill, "observe", fails_after_heal)
    monkeypatch.setattr(Pause, "observe", fails_after_heal)
    specs = [{"action": "pause", "target": "n1", "trigger": {"at_seconds": 0}, "duration": 0.6},
             {"action": "kill", "target": "n1", "trigger": {"at_seconds": 0.1}, "duration": 0.2}]
    _, nems, rows, _ = _run(tmp_path, specs)
    effects = {r["window"]: r["detail"] for r in rows if r["type"] == "effect"}
    pause, kill = (effects[n.windows[0]["id"]] for n in nems)
    assert kill == "not known: kill n1: seen; probe silent (while pause n1 on n1 in effect there: " \
                   "not told from its own)", kill
    assert pause == "not healed: pause n1: seen; probe silent", pause


def test_a_graceful_stop_is_in_effect_at_its_sigterm(tmp_path):
    dep = FakeDeployment()

    def stop_node(node, timeout=30.0):  # a broker's controlled shutdown, in a worker thread
        dep.cluster._did("stop", node)
        time.sleep(0.3)
        dep.cluster.up.discard(node)
        return True

    dep.cluster.stop_node = stop_node
    _, nems, rows, _ = _run(tmp_path, [{"action": "stop", "target": "n1", "trigger": {"at_seconds": 0.1},
                                        "duration": 0.2}], dep=dep)
    (w,) = nems[0].windows
    assert w["effect"]["clean_exit"] == [True] and w["effect"]["exit_ms"] >= 290 and w["delay_ms"] < 150, w
    assert [verb for _, verb, _ in dep.cluster.log] == ["stop", "start"]


def test_a_window_whose_write_ended_while_its_target_was_looked_up_failed_never_injected(tmp_path):
    """The write over while the leader is still being looked up for the kill (a clean-clone
    run: 3,000 unpaced messages acked first): the window opened, nothing was injected, and
    its effect is `failed`, never `not known` (which would let the run pass)."""
    class SlowRoles(FakeRoles):
        async def leader(self):
            await asyncio.sleep(5)
            return self.lead

    async def body():
        rec = Recorder(tmp_path, "r1", "nemesis", time.monotonic_ns())
        gate, dep = AckGate(), FakeDeployment()
        dep.roles = SlowRoles()
        nem = _nemesis(0, FaultSpec(action="kill", target="leader", trigger={"after_acks": 5}), dep, rec, gate, [])
        nem.start()
        for _ in range(10):
            gate.on_first_ack()
        await asyncio.sleep(0.3)
        await nem.end_of_write()
        await nem.finish_effects()
        rec.close()
        return nem

    nem = asyncio.run(body())
    rows = [r for r in ds.dataset(str(tmp_path)).to_table().to_pylist() if r["type"] == "effect"]
    assert len(rows) == 1 and rows[0]["value"] == 0, rows
    assert rows[0]["detail"].startswith("failed: kill leader: never injected"), rows
    assert dep_killed_nothing(nem)


def dep_killed_nothing(nem) -> bool:
    return all("t_ms" not in w for w in nem.windows)


def test_a_heal_that_never_returns_fails_within_its_bound_and_says_so(tmp_path, monkeypatch):
    """A node that never starts (its start hangs): the heal is stopped at its bound, the
    window keeps why, the console says it at once, and the node is left down for the
    whole-before-read check to name (the run is then not a pass)."""
    from brokerchaos.faults import base

    monkeypatch.setattr(base, "HEAL_S", 1.0)
    dep = FakeDeployment()

    def hangs(node):
        dep.cluster._did("start", node)
        time.sleep(4)  # "forever" for the bound; a thread cannot be cancelled, so it ends

    dep.cluster.start_node = hangs
    t0 = time.monotonic()
    _, (n,), rows, lines = _run(tmp_path, [dict(action="kill", target="n1", trigger={"at_seconds": 0},
                                                 duration=0.2)], dep=dep)
    (w,) = n.windows
    assert w["heal_error"] == "HealTimeout: the heal did not return within 1 s; stopped there", w
    assert any(ln.startswith("Heal: ") and "FAILED" in ln and "within 1 s" in ln for ln in lines), lines
    assert "n1" not in dep.cluster.up
    heal = [r for r in rows if r["type"] == "heal"]
    assert len(heal) == 1 and "heal FAILED" in heal[0]["detail"], heal
    effect = [r for r in rows if r["type"] == "effect"]
    assert effect and effect[-1]["detail"].startswith("failed"), effect
    assert time.monotonic() - t0 < 8


def test_a_fault_after_another_waits_for_its_heal_however_long_it_takes(tmp_path):
    """`after_fault: 1`: the second kill fires on its own trigger (at once) only once the
    first fault's heal is done, and its heal (the node started again) took 0.4 s here."""
    dep = FakeDeployment()
    start = dep.cluster.start_node

    def slow_start(node):
        time.sleep(0.4)
        start(node)

    dep.cluster.start_node = slow_start
    specs = [{"action": "kill", "target": "n1", "trigger": {"at_seconds": 0}, "duration": 0.2},
             {"action": "kill", "target": "n2", "trigger": {"at_seconds": 0, "after_fault": 1}, "duration": 0.1}]
    _, nems, rows, _ = _run(tmp_path, specs, dep=dep, extra=1.0)
    assert [(verb, node) for _, verb, node in dep.cluster.log] == [
        ("kill", "n1"), ("start", "n1"), ("kill", "n2"), ("start", "n2")], dep.cluster.log
    assert [r["node"] for r in rows if r["type"] == "fault"] == ["n1", "n2"]
    # the second window began after the first one's heal row
    (h1,) = [r["t_ns"] for r in rows if r["type"] == "heal" and r["node"] == "n1"]
    (f2,) = [r["t_ns"] for r in rows if r["type"] == "fault" and r["node"] == "n2"]
    assert f2 > h1, (h1, f2)


def test_a_fault_after_another_that_is_still_under_way_at_the_end_of_the_write_says_so(tmp_path):
    specs = [{"action": "kill", "target": "n1", "trigger": {"after_acks": 50}, "duration": 0.1},
             {"action": "kill", "target": "n2", "trigger": {"after_fault": 1}, "duration": 0.1}]

    async def body():
        rec = Recorder(tmp_path, "r1", "nemesis", time.monotonic_ns())
        gate, lines = AckGate(), []
        ctx = _context(FakeDeployment(), rec, gate, lines)
        nems = [Nemesis(i, FaultSpec(**s), ctx) for i, s in enumerate(specs)]
        for n in nems:
            n.start()
        await asyncio.sleep(0.2)
        for n in nems:
            await n.end_of_write()
        rec.close()
        return nems

    nems = asyncio.run(body())
    assert nems[1].state["why"] == "trigger not reached (acks: 0; fault 1 still under way)", nems[1].state


def test_a_member_holding_trigger_fires_that_long_after_the_member_began_to_hold():
    from brokerchaos.faults.trigger import fired
    from brokerchaos.scenario import TriggerSpec

    class Group:
        async def holding(self):
            await asyncio.sleep(0.05)
            return 1_000_000_000

    async def body():
        return await fired(TriggerSpec(member_holding=0.5), AckGate(), time.monotonic(), 0.0, lambda: Group())

    assert asyncio.run(body()) == 1_500_000_000


def test_a_watcher_that_swallows_its_cancel_is_cancelled_again_within_the_bound():
    # Python 3.11's wait_for can lose a cancel; a teardown's settle(0) must not then wait
    # for the watcher to finish on its own (a `ready` row 7 s after a SIGTERM's heal)
    give_in = asyncio.Event()

    async def stubborn(times):
        for _ in range(times):
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                if give_in.is_set():
                    raise
        await asyncio.sleep(30)

    async def main():
        once, always = asyncio.ensure_future(stubborn(1)), asyncio.ensure_future(stubborn(10 ** 6))
        await asyncio.sleep(0)
        t0 = time.monotonic()
        assert await cancel_all([once]) == [] and once.cancelled()
        assert time.monotonic() - t0 < 2
        assert await cancel_all([always], bound=0.5) == [always]
        give_in.set()
        assert await cancel_all([always]) == [] and always.cancelled()

    asyncio.run(main())
