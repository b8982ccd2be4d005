"""Each fault's effect, measured from inside the sandbox on a real 3-node NATS cluster.

The probes are plain sockets in the namespaces (TCP connects, UDP counts, a NATS INFO
line), so they check the network and the processes, not the harness's own bookkeeping.
After every heal the cluster must serve the stream again and no rule may be left.
"""
import asyncio
import os
import random
import shutil
import socket
import statistics
import struct
import threading
import time

import nats.errors
import pytest
from nats.js.errors import NoStreamResponseError
from observers import Quiet, descendants, namespaces_not_of_others

from brokerchaos import validation as sc
from brokerchaos.faults import FAULTS, FaultContext
from brokerchaos.faults.targets import resolve
from brokerchaos.runner import Session
from brokerchaos.sandbox import Sandbox, netfilter, netns
from brokerchaos.systems import SYSTEMS, Deployment
from brokerchaos.systems.base import SystemError_

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
    pytest.mark.skipif(shutil.which("nats-server") is None and not os.path.exists("/usr/sbin/nats-server"),
                       reason="nats-server not installed (make setup)"),
]

CLIENT_PORT = 4222
CLUSTER_PORT = 6222


def in_ns(ns, fn, *args, timeout=60):
    """Run fn(*args) in a thread that has entered namespace `ns`; return its result."""
    box = {}

    def body():
        try:
            netns.enter(ns)
            box["v"] = fn(*args)
        except BaseException as e:
            box["e"] = e

    t = threading.Thread(target=body, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"probe in {ns} did not finish within {timeout}s"
    if "e" in box:
        raise box["e"]
    return box["v"]


def can_connect(ip, port, timeout=1.0):
    s = socket.socket()
    s.settimeout(timeout)
    try:
        s.connect((ip, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


TCPI_RTT = 68  # struct tcp_info's tcpi_rtt (µs), after 8 one-byte fields and 15 32-bit ones


def connect_ms(ip, port, n=15, wall=False):
    """The median of `n` connects in ms: the round trip of the SYN as the kernel timed it
    (tcp_info's rtt, sampled when the SYN-ACK arrives), or with `wall` the time this process
    spent in connect(). The kernel's figure is the packets' delay alone; the wall time adds
    this process's wake-up once the SYN-ACK is in, which on a loaded machine is not the fault's."""
    times = []
    for _ in range(n):
        s = socket.socket()
        s.settimeout(5)
        t = time.perf_counter()
        s.connect((ip, port))
        took = (time.perf_counter() - t) * 1000
        rtt = struct.unpack_from("I", s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104), TCPI_RTT)[0]
        times.append(took if wall else rtt / 1000)
        s.close()
    return statistics.median(times)


def nats_info(ip, port, timeout=1.0):
    """Connect and wait for the server's INFO line: True if a live server answered."""
    s = socket.socket()
    s.settimeout(timeout)
    try:
        s.connect((ip, port))
        return s.recv(4).startswith(b"INFO")
    except OSError:
        return False
    finally:
        s.close()


class Cluster:
    def __init__(self, sb, dep):
        self.sb = sb
        self.dep = dep

    def ns(self, node):
        return self.sb.hosts[node].ns

    def ip(self, node):
        return self.sb.hosts[node].ip

    def from_client(self, fn, *args):
        return in_ns(self.sb.client.ns, fn, *args)

    def from_node(self, node, fn, *args):
        return in_ns(self.ns(node), fn, *args)

    def fault(self, action, params=None, uid=1):
        cls = FAULTS.get(action)
        ctx = FaultContext(self.dep, random.Random(7), self.sb, cls.Params.model_validate(params or {}), uid=uid)
        return cls(ctx)

    def inject(self, fault, target):
        async def go():
            await fault.prepare()
            await fault.inject(await resolve(target, fault.ctx, groups=fault.takes_groups))
        self.sb.run_client(go, timeout=60)

    def heal(self, fault):
        self.sb.run_client(fault.heal, timeout=60)

    def healthy(self, within: float = 45.0):
        """The stream serves again within `within` s: a leader with every replica current, then
        a publish acked. The two are asked again until then, not once: a node back from a
        partition may win an election after the first look says ready (it campaigned on a
        higher term while cut off; seen here, a 5-12 s cut moving the leader to the node cut
        off once healed), and the publish in between finds no leader to answer it."""
        dep = self.dep

        async def go():
            await dep.client.connect(timeout=30)
            deadline = time.monotonic() + within
            last = "the stream was never ready"
            try:
                while time.monotonic() < deadline:
                    if await dep.roles.wait_stream_ready(timeout=max(0.1, deadline - time.monotonic())):
                        try:
                            ack = await dep.client.js.publish(f"{dep.client.stream_name}.probe", b"x", timeout=10)
                            return ack.seq > 0
                        except (NoStreamResponseError, nats.errors.TimeoutError) as e:
                            last = f"ready, then a publish unanswered: {e!r}"
                            await asyncio.sleep(0.5)
                raise AssertionError(f"the stream does not serve {within:.0f} s after the heal: {last}")
            finally:
                await dep.client.close()
        return self.sb.run_client(go, timeout=within + 75)

    def no_rules_left(self):
        for n in self.dep.cluster.node_names:
            rules = netfilter.rules(self.ns(n))
            assert "bc" not in rules, f"{n} still has rules:\n{rules}"
            qd = netfilter.run_sync(self.ns(n), ["tc", "qdisc", "show", "dev", "eth0"]).stdout
            assert "tbf" not in qd and "netem" not in qd, qd


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    s = sc.load(None, {"messages": 100, "sandbox": "netns"})
    with Sandbox(["n1", "n2", "n3"], "netns") as sb:
        dep = Deployment(SYSTEMS.get("nats"), s, sb, "run-001", tmp_path_factory.mktemp("logs"))
        dep.cluster.start()
        try:
            async def setup():
                await dep.up(timeout=60)
                await dep.client.create_stream(timeout=30)
                await dep.client.close()
            sb.run_client(setup, timeout=120)
            yield Cluster(sb, dep)
        finally:
            dep.stop()


def test_a_stream_is_made_only_once_every_server_routes_a_publish_to_it(cluster):
    """The run's stream is made once a publish through each server is answered (only its
    leader subscribes; a server the interest has not reached yet answers "no responders").
    A stream never made is answered nowhere: the wait ends at its bound naming a server."""
    c = cluster
    made = c.dep.client
    never = made.for_topic("never-made")
    assert never.stream_name != made.stream_name

    async def go():
        await made.connect(timeout=30)
        try:
            before = (await made.info()).state.messages
            t0 = time.monotonic()
            await made._answered_everywhere(time.monotonic() + 10)
            answered_s = time.monotonic() - t0
            t0 = time.monotonic()
            with pytest.raises(SystemError_, match=r"n1 still has no route to its subjects"):
                await never._answered_everywhere(time.monotonic() + 1.5)
            return answered_s, time.monotonic() - t0, before, (await made.info()).state.messages
        finally:
            await made.close()

    answered_s, refused_s, before, after = c.sb.run_client(go, timeout=60)
    assert answered_s < 5 and 1.5 <= refused_s < 5, (answered_s, refused_s)
    # the probe names another stream: three publishes answered, each refused before it was stored
    assert after == before, (before, after)


def test_partition_cuts_exactly_the_links_between_groups(cluster):
    c = cluster
    assert c.from_node("n1", can_connect, c.ip("n3"), CLUSTER_PORT)
    f = c.fault("partition")
    c.inject(f, "n1|n2,n3")
    try:
        assert not c.from_node("n1", can_connect, c.ip("n3"), CLUSTER_PORT)
        assert not c.from_node("n3", can_connect, c.ip("n1"), CLUSTER_PORT)
        assert not c.from_node("n1", can_connect, c.ip("n2"), CLUSTER_PORT)
        assert c.from_node("n2", can_connect, c.ip("n3"), CLUSTER_PORT)
        # clients still reach every node in a partition
        assert c.from_client(can_connect, c.ip("n1"), CLIENT_PORT)
    finally:
        c.heal(f)
    assert c.from_node("n1", can_connect, c.ip("n3"), CLUSTER_PORT)
    c.no_rules_left()
    assert c.healthy()


def test_isolate_and_isolate_from_peers_differ_only_for_the_clients(cluster):
    c = cluster
    f = c.fault("isolate")
    c.inject(f, "n2")
    try:
        assert not c.from_client(can_connect, c.ip("n2"), CLIENT_PORT)
        assert not c.from_node("n1", can_connect, c.ip("n2"), CLUSTER_PORT)
        assert c.from_node("n1", can_connect, c.ip("n3"), CLUSTER_PORT)
    finally:
        c.heal(f)
    g = c.fault("isolate-from", {"from": "peers"})
    c.inject(g, "n2")
    try:
        assert c.from_client(nats_info, c.ip("n2"), CLIENT_PORT)
        assert not c.from_node("n1", can_connect, c.ip("n2"), CLUSTER_PORT)
        assert not c.from_node("n2", can_connect, c.ip("n3"), CLUSTER_PORT)
    finally:
        c.heal(g)
    assert c.from_client(can_connect, c.ip("n2"), CLIENT_PORT)
    c.no_rules_left()
    assert c.healthy()


def test_delay_adds_the_configured_round_trip(cluster):
    c = cluster
    before = c.from_client(connect_ms, c.ip("n3"), CLIENT_PORT)
    f = c.fault("delay", {"delay_ms": 40})
    c.inject(f, "n3")
    try:
        during = c.from_client(connect_ms, c.ip("n3"), CLIENT_PORT)
        other = c.from_client(connect_ms, c.ip("n1"), CLIENT_PORT)
    finally:
        c.heal(f)
    after = c.from_client(connect_ms, c.ip("n3"), CLIENT_PORT)
    assert before < 5 and after < 5, (before, after)
    assert 40 - 5 <= during - before <= 40 + 15, (before, during)
    assert other < 5, "only the target's links are delayed"
    assert f.effect["method"] in ("netem", "nfqueue")
    assert not f.delayers, "the delayer processes are gone after heal"
    c.no_rules_left()


def test_delay_in_holds_what_arrives_at_the_target_from_the_set_named(cluster):
    # the client's packets on their way to n3 wait (its SYN: the connect takes the delay);
    # the same link out of n3 and every other node's links do not
    c = cluster
    f = c.fault("delay", {"delay_ms": 40, "direction": "in", "from": "clients"})
    c.inject(f, "n3")
    try:
        during = c.from_client(connect_ms, c.ip("n3"), CLIENT_PORT)
        wall = c.from_client(connect_ms, c.ip("n3"), CLIENT_PORT, 15, True)
        other = c.from_client(connect_ms, c.ip("n1"), CLIENT_PORT)
        peer = c.from_node("n1", connect_ms, c.ip("n3"), CLIENT_PORT)
    finally:
        c.heal(f)
    # the SYN's round trip as the kernel timed it: once in CI, at the suite's start, this
    # process's own time in connect() was 71 ms (its wake-up, not the packets': see connect_ms);
    # the wall time and the load average are said beside it, to tell a late delayer from a late test
    assert 40 - 5 <= during <= 40 + 20, (during, wall, os.getloadavg())
    assert other < 5 and peer < 5, (other, peer)
    assert f.effect == {**f.effect, "method": "nfqueue", "direction": "in"}
    c.no_rules_left()


SO_RCVBUFFORCE = 33  # as root, past net.core.rmem_max (Linux; not in Python's socket module)


def test_loss_drops_about_the_configured_share(cluster):
    c = cluster
    port, n = 9999, 3000
    f = c.fault("loss", {"probability": 0.3})
    ready = threading.Event()
    got = {}

    def receiver():
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        # room for every datagram (about 1 kB each in the kernel's accounting): with the
        # default 208 kB, a receiver descheduled on a loaded machine overflowed its socket
        # and counted 48 % lost in CI; the test counts the firewall's drops only
        s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)
        s.bind((c.ip("n1"), port))
        s.settimeout(1.0)
        ready.set()
        k = 0
        try:
            while True:
                s.recv(64)
                k += 1
        except socket.timeout:
            pass
        finally:
            s.close()
        got["n"] = k

    def sender():
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for i in range(n):
            s.sendto(b"%d" % i, (c.ip("n1"), port))
            if i % 100 == 0:
                time.sleep(0.002)  # stay far below any buffer limit: count the firewall's drops only
        s.close()

    c.inject(f, "n1")
    try:
        t = threading.Thread(target=lambda: c.from_node("n1", receiver), daemon=True)
        t.start()
        assert ready.wait(10)
        c.from_client(sender)
        t.join(30)
    finally:
        c.heal(f)
    lost = 1 - got["n"] / n
    # binomial sd at n=3000 is 0.8 %; +-5 % is over six of them
    assert 0.25 <= lost <= 0.35, lost
    c.no_rules_left()


def test_tcp_kill_resets_live_client_connections(cluster):
    c = cluster
    box = {}

    def open_conn():
        s = socket.socket()
        s.settimeout(5)
        s.connect((c.ip("n1"), CLIENT_PORT))
        assert s.recv(4) == b"INFO"
        box["s"] = s

    def read_after():
        s = box["s"]
        try:
            while True:  # the rest of INFO may still be buffered; then the reset
                if not s.recv(65536):
                    return "eof"
        except ConnectionResetError:
            return "reset"
        except socket.timeout:
            return "alive"
        finally:
            s.close()

    c.from_client(open_conn)
    f = c.fault("tcp-kill", {"repeat": False})
    c.inject(f, "n1")
    c.heal(f)
    assert f.effect["connections_reset"] >= 1
    assert c.from_client(read_after) == "reset"
    assert c.from_client(nats_info, c.ip("n1"), CLIENT_PORT), "new connections still work"


def test_tcp_reject_resets_the_clients_and_refuses_them_until_healed(cluster):
    """Refused, not silenced: a client's connect fails at once with an RST (isolate would
    leave it waiting for a timeout), and an open connection is reset; the peers still
    reach the node."""
    c = cluster

    def connect():
        s = socket.socket()
        s.settimeout(3)
        try:
            s.connect((c.ip("n1"), CLIENT_PORT))
            return "connected"
        except ConnectionRefusedError:
            return "refused"
        except OSError as e:
            return type(e).__name__
        finally:
            s.close()

    s = c.from_client(socket.create_connection, (c.ip("n1"), CLIENT_PORT), 5)
    f = c.fault("tcp-reject")
    c.inject(f, "n1")
    try:
        assert f.effect["connections_reset"] >= 1
        with pytest.raises(ConnectionResetError):
            s.settimeout(5)
            while s.recv(65536):  # the rest of INFO may still be buffered; then the reset
                pass
        assert c.from_client(connect) == "refused"
        assert c.from_node("n2", can_connect, c.ip("n1"), CLUSTER_PORT)
    finally:
        s.close()
        c.heal(f)
    assert c.from_client(nats_info, c.ip("n1"), CLIENT_PORT)
    c.no_rules_left()


def test_pause_silences_the_node_until_healed(cluster):
    c = cluster
    assert c.from_client(nats_info, c.ip("n3"), CLIENT_PORT)
    f = c.fault("pause")
    c.inject(f, "n3")
    try:
        assert c.dep.cluster.alive("n3")
        assert not c.from_client(nats_info, c.ip("n3"), CLIENT_PORT)
    finally:
        c.heal(f)
    assert c.from_client(nats_info, c.ip("n3"), CLIENT_PORT, 5.0)
    assert c.healthy()


def test_bandwidth_limits_the_rate_out_of_the_node(cluster):
    c = cluster
    port, size = 9998, 200_000  # 1.6 Mbit: about 1.6 s at 1 mbit/s, milliseconds without the limit
    ready = threading.Event()

    def server():
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((c.ip("n2"), port))
        s.listen(1)
        s.settimeout(10)
        ready.set()
        conn, _ = s.accept()
        conn.sendall(b"x" * size)
        conn.close()
        s.close()

    def fetch():
        s = socket.socket()
        s.settimeout(20)
        s.connect((c.ip("n2"), port))
        t = time.perf_counter()
        k = 0
        while True:
            b = s.recv(65536)
            if not b:
                break
            k += len(b)
        s.close()
        assert k == size
        return time.perf_counter() - t

    def timed():
        ready.clear()
        t = threading.Thread(target=lambda: c.from_node("n2", server), daemon=True)
        t.start()
        assert ready.wait(10)
        d = c.from_client(fetch)
        t.join(10)
        return d

    f = c.fault("bandwidth", {"rate": "1mbit"})
    c.inject(f, "n2")
    try:
        limited = timed()
    finally:
        c.heal(f)
    free = timed()
    assert limited > 1.2, limited
    assert free < 0.5, free
    c.no_rules_left()


def test_stop_is_a_clean_exit_and_heal_restarts(cluster):
    c = cluster
    f = c.fault("stop", {"timeout": 20})
    c.inject(f, "n2")
    try:
        assert not c.dep.cluster.alive("n2")
        assert f.effect["clean_exit"] == [True]
        assert not c.from_client(can_connect, c.ip("n2"), CLIENT_PORT)
    finally:
        c.heal(f)
    assert c.dep.cluster.alive("n2")
    assert c.healthy()


def test_a_follower_cut_from_its_peers_is_named_behind_by_its_own_copy_and_whole_again_after(cluster):
    """`copies_behind` asks each replica's own /jsz: a follower that missed writes (cut from
    its peers while the leader and the other follower acked them) holds the stream to an
    earlier seq; before the cut and once it has caught up, nothing is behind."""
    c = cluster
    dep = c.dep

    async def look(publish: int = 0):
        await dep.client.connect(timeout=30)
        try:
            for i in range(publish):
                await dep.client.js.publish(f"{dep.client.stream_name}.behind", b"%d" % i, timeout=10)
            return await dep.roles.leader(), await dep.roles.copies_behind()
        finally:
            await dep.client.close()

    assert c.healthy()
    leader, behind = c.sb.run_client(look, timeout=60)
    assert behind == [], behind
    follower = next(n for n in dep.cluster.node_names if n != leader)
    f = c.fault("isolate-from", {"from": "peers"})
    c.inject(f, follower)
    # the harness's own connection goes to the leader: the cut-off follower answers every
    # JetStream request with "service unavailable" (a connection to it, drawn at random,
    # once spent its 30 s there)
    dep.client.servers = lambda: ["nats://{}:{}".format(*dep.cluster.address(leader))]

    async def cut_off():
        _, behind = await look(50)
        # the leader acks a write once a quorum stored it; the other follower applies it when
        # the leader's next append or heartbeat carries the commit (CI: it held 54 of 55 at once)
        deadline = time.monotonic() + 10
        while len(behind) > 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            _, behind = await look()
        return behind
    try:
        behind = c.sb.run_client(cut_off, timeout=60)
    finally:
        del dep.client.servers
        c.heal(f)
    assert len(behind) == 1 and behind[0].startswith(f"{follower} holds it to seq "), behind
    held, last = (int(x) for x in behind[0].split("seq ")[1].split(" of "))
    assert held <= last - 50, behind
    assert c.healthy()

    async def caught_up():
        deadline = time.monotonic() + 30
        while True:
            _, behind = await look()
            if not behind or time.monotonic() > deadline:
                return behind
            await asyncio.sleep(0.5)
    assert c.sb.run_client(caught_up, timeout=90) == []
    c.no_rules_left()


def test_bridge_leaves_one_node_seeing_both_halves(cluster):
    c = cluster
    # right after the previous test restarted n2, connects from n1 to n2's cluster port were
    # refused for a moment (CI, and 1 in 5 runs here; from the client host they worked): the
    # links must work before the fault, so that what fails after it is the fault's doing
    deadline = time.monotonic() + 20
    while not all(c.from_node("n1", can_connect, c.ip(n), CLUSTER_PORT) for n in ("n2", "n3")):
        assert time.monotonic() < deadline, "n1 cannot reach n2 and n3 even before the fault"
        time.sleep(0.2)
    f = c.fault("bridge")
    c.inject(f, "n1")
    try:
        # a few tries: one CI run on a loaded machine saw a single 1 s connect from n1 fail
        assert any(c.from_node("n1", can_connect, c.ip("n2"), CLUSTER_PORT) for _ in range(3))
        assert any(c.from_node("n1", can_connect, c.ip("n3"), CLUSTER_PORT) for _ in range(3))
        assert not c.from_node("n2", can_connect, c.ip("n3"), CLUSTER_PORT)
    finally:
        c.heal(f)
    c.no_rules_left()
    assert c.healthy()


def test_leader_and_coordinator_targets_name_live_roles(cluster):
    c = cluster

    async def go():
        await c.dep.client.connect(timeout=30)
        try:
            ctx = FaultContext(c.dep, random.Random(1), c.sb)
            lead = (await resolve("leader", ctx)).nodes
            fol = (await resolve("followers", ctx)).nodes
            coord = (await resolve("coordinator", ctx)).nodes
            one = (await resolve("followers[1]", ctx)).nodes
            return lead, fol, coord, one
        finally:
            await c.dep.client.close()

    lead, fol, coord, one = c.sb.run_client(go, timeout=60)
    assert len(lead) == 1 and sorted(lead + fol) == ["n1", "n2", "n3"]
    assert coord[0] in ("n1", "n2", "n3")
    assert len(one) == 1 and one[0] in fol


# -- whole runs: the nemesis inside `brokerchaos run` ------------------------------------

def _rows(d):
    import pyarrow.dataset as pds

    return pds.dataset(sorted(str(p) for p in d.rglob("*.parquet")), format="parquet").to_table().to_pylist()


def _delayers_running():
    """This test process's delayers (another worker's are not ours to count)."""
    out = []
    for pid in map(str, descendants(os.getpid())):
        if pid.isdigit():
            try:
                if b"nfqdelay.py" in open(f"/proc/{pid}/cmdline", "rb").read():
                    out.append(int(pid))
            except OSError:
                pass
    return out


def test_two_faults_in_one_run_are_recorded_healed_and_analysed(tmp_path, spark):

    doc = {
        "name": "it-two-faults", "runs": 1, "sandbox": "netns",
        "workload": {"messages": 15_000, "in_flight": 2_000, "retries": 60, "ack_timeout": 3},
        "faults": [
            {"action": "delay", "target": "all", "params": {"delay_ms": 20}, "trigger": {"after_acks": 2_000}},
            {"action": "isolate-from", "target": "leader", "params": {"from": "peers"},
             "trigger": {"after_acks": 6_000}, "duration": 3},
        ],
    }

    before = namespaces_not_of_others()
    result = Session(sc.build(doc), tmp_path, observer=Quiet(), report=False).run()
    (v,) = result.verdicts
    meta = result.metas["run-001"]
    rows = _rows(result.dir / "run-001" / "history")
    nem = [(r["type"], r["detail"].split(" (")[0].split(":")[0]) for r in sorted(rows, key=lambda r: r["t_ns"])
           if r["client"] == "nemesis"]
    assert [x for x in nem if x[0] not in ("ready", "effect", "whole")] == [
        ("fault", "delay all"), ("fault", "isolate-from leader"), ("heal", "isolate-from leader"),
        ("heal", "delay all")], nem
    # each window's effect seen: the probe's round trip delayed, the cut dropping the cluster's packets
    effects = [r["detail"] for r in rows if r["type"] == "effect"]
    assert len(effects) == 2 and all(d.startswith("observed: ") for d in effects), effects
    # after each heal, once the cluster is whole again, a ready row for that fault
    for action in ("isolate-from leader", "delay all"):
        assert nem.index(("ready", action)) > nem.index(("heal", action)), nem
    assert len(v["fault_outages_ms"]) == 2
    delay, iso = meta["faults"]
    assert delay["nodes"] == ["n1", "n2", "n3"] and delay["acks_at_effect"] >= 2_000
    assert iso["acks_at_effect"] >= 6_000 and len(iso["nodes"]) == 1
    assert iso["windows"][0]["effect"]["links_cut"] == sorted(
        f"{a}-{b}" for a, b in (sorted((iso["nodes"][0], o)) for o in ("n1", "n2", "n3") if o != iso["nodes"][0]))
    assert all(w.get("heal_error") is None for f in meta["faults"] for w in f["windows"])
    # a loss where the read found another message at the acked position is NATS's own
    # (see test_integration_nats._no_loss_of_ours); any other would be ours
    assert v["read_complete"] is True and v["acked_missing"] == v["acked_missing_overwritten"]
    assert not _delayers_running()
    assert namespaces_not_of_others() <= before, "the session's namespaces are gone"


def test_repeated_windows_follow_the_schedule(tmp_path, spark):

    doc = {
        "name": "it-repeat", "runs": 1, "sandbox": "netns", "seed": 3,
        # a write that outlasts the schedule (7.5 s) on any machine: no new window starts once
        # writing is over (200,000 messages as fast as possible were 14 s of write and 17 s of
        # read on a slow one, and too few on a fast one)
        "workload": {"messages": 30_000, "rate": 4_000, "in_flight": 5_000, "retries": 60},
        "fault": {"action": "pause", "target": "random", "trigger": {"at_seconds": 0.5}, "duration": 0.5,
                  "repeat": {"every": 1.5, "for": 3.5}},
    }

    result = Session(sc.build(doc), tmp_path, observer=Quiet(), report=False).run()
    (v,) = result.verdicts
    f = result.metas["run-001"]["faults"][0]
    assert f["schedule"] == [0.0, 1.5, 3.0]
    assert result.metas["run-001"]["write_s"] > 4.5, "the write phase outlasted the schedule"
    rows = _rows(result.dir / "run-001" / "history")
    kinds = [r["type"] for r in sorted(rows, key=lambda r: r["t_ns"]) if r["client"] == "nemesis"]
    assert [k for k in kinds if k not in ("ready", "effect", "whole")] == ["fault", "heal"] * 3
    assert "ready" in kinds and kinds.count("effect") == 3
    # each window is due at the trigger plus its offset, and in effect `delay_ms` later: the
    # schedule is kept to the millisecond, the lateness is measured, and no window begins
    # before the one before it was healed. (The actual starts were asserted 1-2 s apart;
    # a clean-clone run beside two more test workers had one 2,021 ms after the other: the
    # harness's event loop, busy with the ack backlog of the node just resumed, ran the
    # second window 455 ms after it was due, and run.json said so.)
    ws = f["windows"]
    due = [w["t_ms"] - w["delay_ms"] for w in ws]
    assert all(abs(b - a - 1500) < 5 for a, b in zip(due, due[1:])), due
    assert all(0 <= w["delay_ms"] < 1000 for w in ws), [w["delay_ms"] for w in ws]
    assert all(b["t_ms"] > a["healed_ms"] for a, b in zip(ws, ws[1:])), ws
    assert len(v["fault_outages_ms"]) == 3


def test_a_read_begins_between_the_starts_of_a_staged_return_with_the_last_node_held_down(tmp_path, spark):
    # kill's read_after, the mechanism of the Pulsar seed's reader half (its reader between
    # bookie1's return and bookie3's), on NATS: both followers SIGKILLed, one started 1 s
    # later, the other 20 s after it; the read begins once the first is back. The stagger
    # outlasts the wait before the read (the whole check, the ready rows' settle: 5 s at most)
    doc = {
        "name": "it-staged-read", "runs": 1, "sandbox": "netns",
        "workload": {"messages": 4_000, "rate": 2_000, "in_flight": 1_000, "retries": 60, "ack_timeout": 3},
        "fault": {"action": "kill", "target": "followers", "trigger": {"after_acks": 1_000}, "duration": 1,
                  "params": {"stagger": 20, "read_after": 1}},
    }
    result = Session(sc.build(doc), tmp_path, observer=Quiet(), report=False).run()
    (v,) = result.verdicts
    meta = result.metas["run-001"]
    (w,) = meta["faults"][0]["windows"]
    first, last = w["effect"]["started_ms"]  # in the order they were chosen and started
    assert w["effect"]["started_ms"][last] - w["effect"]["started_ms"][first] >= 20_000, w["effect"]
    # the whole check left the last one out, on purpose, and said so
    assert meta["whole"]["whole"] is True and f"held down on purpose: {last}" in meta["whole"]["detail"], meta
    rows = sorted(_rows(result.dir / "run-001" / "history"), key=lambda r: r["t_ns"])
    (heal,) = [r for r in rows if r["type"] == "heal"]  # the window's heal: its last start
    reads = [r["t_ns"] for r in rows if r["client"] == "c1" and r["type"] == "recv"]
    assert reads and reads[0] < heal["t_ns"], "the read began before the last node was back"
    assert v["read_complete"] is True and v["acked_missing"] == v["acked_missing_overwritten"], v
    assert w.get("heal_error") is None and w["healed_ms"] - w["t_ms"] >= 20_000, w


def test_a_supervised_node_that_exits_on_its_own_is_started_again_and_one_taken_down_is_not(cluster, monkeypatch):
    """The supervisor (LocalCluster.supervised: Pulsar brokers with session_expired shutdown,
    RabbitMQ nodes with restart_on_failure) starts again a node whose process exited on its
    own, recorded in `restarts`; a node a fault took down stays down until its heal."""
    import signal

    c, cl = cluster, cluster.dep.cluster
    monkeypatch.setattr(type(cl), "supervised", property(lambda self: ("n3",)))
    cl.supervise()
    old = cl.procs["n3"].pid
    os.kill(old, signal.SIGKILL)  # a process of ours, by its PID: as a crash would end it
    deadline = time.monotonic() + 20
    while not (cl.restarts and cl.alive("n3")):
        assert time.monotonic() < deadline, f"n3 not started again within 20 s: {cl.restarts}"
        time.sleep(0.2)
    (r,) = cl.restarts
    assert r["node"] == "n3" and r["exit_code"] == -signal.SIGKILL and "error" not in r, r
    assert cl.procs["n3"].pid != old
    assert c.healthy()
    cl.restarts.clear()
    f = c.fault("stop", {"timeout": 20})
    c.inject(f, "n3")
    try:
        time.sleep(cl.RESTART_DELAY_S[0] + 2 * cl.SUPERVISE_EVERY_S + 1)
        assert not cl.alive("n3") and cl.restarts == [], cl.restarts
    finally:
        c.heal(f)
    assert c.healthy()

