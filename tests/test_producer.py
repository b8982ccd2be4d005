"""The producer's accounting: the seeds' counters, timeouts, retries and the in-flight bound.

The broker here is a scripted stand-in answering in-process: this is a unit test of the
loop's bookkeeping; the real broker path is covered by the integration tests.
"""
import asyncio
import time

import pyarrow.dataset as ds

from brokerchaos.history import Recorder
from brokerchaos.scenario import WorkloadSpec
from brokerchaos.workload import Accounting, ProducerLoop, decode, encode


def test_accounting_precedence_ack_beats_nack_beats_unknown():
    a = Accounting(5)
    for v in range(1, 6):
        a.on_send(v)
    a.on_send(1)  # a resend is not a new message
    assert a.sent == 5
    a.on_unknown(1)
    a.on_ack(1)  # late ack after a timeout
    a.on_ack(2)
    a.on_nack(2)  # a nack never undoes an ack
    a.on_nack(3)
    a.on_unknown(3)  # unknown never undoes a nack
    a.on_unknown(4)
    assert (a.pos, a.neg, a.unknown, a.acked, a.in_doubt()) == (2, 1, 1, 3, 1)


def test_accounting_rejects_outcome_for_unsent_message():
    a = Accounting(3)
    try:
        a.on_ack(2)
    except ValueError:
        pass
    else:
        raise AssertionError("expected ValueError")


def test_payload_roundtrip_and_padding():
    assert decode(encode("p1", 42)) == ("p1", 42)
    p = encode("p2", 7, size=100)
    assert len(p) == 100 and decode(p) == ("p2", 7)
    assert decode(b"garbage") == (None, None)
    assert decode(b"a:b") == (None, None)


class Scripted:
    """Answers each message per `rule(value, attempt)`: "ack", "nack" or None (never answers)."""

    def __init__(self, rule, delay=0.001):
        self.rule = rule
        self.delay = delay
        self.attempt: dict[int, int] = {}
        self.max_outstanding = 0

    async def open(self, on_outcome):
        self.cb = on_outcome

    async def send(self, value, payload):
        assert decode(payload)[1] == value
        n = self.attempt[value] = self.attempt.get(value, 0) + 1
        kind = self.rule(value, n)
        # in flight = sent, neither answered nor timed out (the loop's own outstanding set)
        self.max_outstanding = max(self.max_outstanding, len(self.loop.attempts))
        if kind is not None:
            asyncio.get_running_loop().call_later(self.delay, self._answer, value, kind)

    def _answer(self, value, kind):
        self.cb(value, kind, str(value) if kind == "ack" else None, "n1", None)

    def node(self):
        return "n1"

    async def close(self):
        pass


def _run(tmp_path, rule, client_class=None, **spec):
    w = WorkloadSpec(**{"messages": 200, "in_flight": 20, "ack_timeout": 0.2, "retry_backoff": 0.01, **spec})
    client = (client_class or Scripted)(rule)
    rec = Recorder(tmp_path, "r", "p1", time.monotonic_ns())
    loop = ProducerLoop("p1", client, rec, w)
    client.loop = loop
    asyncio.run(loop.run(time.monotonic() + 30))
    rec.close()
    rows = ds.dataset(str(tmp_path), format="parquet").to_table().to_pylist()
    return loop, client, rows


def test_every_message_gets_a_row_per_outcome(tmp_path):
    rule = lambda v, n: "nack" if v % 10 == 0 else None if v % 7 == 0 else "ack"
    loop, client, rows = _run(tmp_path, rule)
    a = loop.acct
    assert a.sent == 200
    assert a.neg == 20 and a.unknown == 28 - 2 and a.pos == 200 - 20 - 26  # 70 and 140 are nacks
    kinds = {}
    for r in rows:
        kinds.setdefault(r["type"], set()).add(r["value"])
    assert kinds["send"] == set(range(1, 201))
    assert kinds["unknown"] == {v for v in range(1, 201) if v % 7 == 0 and v % 10 != 0}
    assert [r["seq"] for r in rows] == sorted(r["seq"] for r in rows)
    assert 10 < client.max_outstanding <= 20  # the in-flight bound holds, and is reached


def test_retries_resend_until_acked(tmp_path):
    rule = lambda v, n: "ack" if n >= 3 else ("nack" if n == 1 else None)
    loop, client, rows = _run(tmp_path, rule, messages=30, retries=2)
    assert loop.acct.pos == 30 and loop.acct.neg == 0 and loop.acct.unknown == 0
    sends = [r for r in rows if r["type"] == "send"]
    assert len(sends) == 90 and {r["detail"] for r in sends} == {None, "retry 1", "retry 2"}
    # each ack carries when its message was first sent (format 1.4), not its resend's time
    first = {r["value"]: r["t_ns"] for r in sends if r["detail"] is None}
    acks = [r for r in rows if r["type"] == "ack"]
    assert len(acks) == 30 and all(r["send_ns"] == first[r["value"]] for r in acks)
    assert all(r["send_ns"] is None for r in rows if r["type"] != "ack")


def test_a_send_that_never_waits_and_its_fallbacks(tmp_path):
    """A client's `send_now` takes most sends without a coroutine; one it declines (False)
    goes through the awaited `send`, one it refuses (raises) is a nack: every message has
    its send row and one outcome, as through `send` alone."""
    class Now(Scripted):
        handed, awaited = 0, 0

        def send_now(self, value, payload):
            if value % 11 == 0:
                raise ValueError("refused")
            if value % 5 == 0:
                return False
            Now.handed += 1
            asyncio.ensure_future(Scripted.send(self, value, payload))
            return True

        async def send(self, value, payload):
            Now.awaited += 1
            await Scripted.send(self, value, payload)

    loop, client, rows = _run(tmp_path, lambda v, n: "ack", Now)
    refused = {v for v in range(1, 201) if v % 11 == 0}
    assert Now.awaited == len({v for v in range(1, 201) if v % 5 == 0} - refused) == 37
    assert Now.handed == 200 - 37 - len(refused)
    assert loop.acct.pos == 200 - len(refused) and loop.acct.neg == len(refused)
    assert sorted(r["value"] for r in rows if r["type"] == "send") == list(range(1, 201))
    nacks = [r for r in rows if r["type"] == "nack"]
    assert {r["value"] for r in nacks} == refused and all(r["detail"] == "send failed: ValueError: refused"
                                                           for r in nacks)
    acks = {r["value"]: r for r in rows if r["type"] == "ack"}
    assert set(acks) == set(range(1, 201)) - refused and all(a["send_ns"] is not None for a in acks.values())


def test_retries_run_out_and_the_last_outcome_stays(tmp_path):
    loop, client, rows = _run(tmp_path, lambda v, n: "nack", messages=10, retries=1)
    assert loop.acct.neg == 10 and loop.acct.pos == 0
    assert sum(r["type"] == "send" for r in rows) == 20


def test_retries_whose_sends_block_end_at_the_write_bound(tmp_path):
    """A client whose sends block (RabbitMQ's while its node boots: one answer every
    ack_timeout) and a queue of retries: the write still ends at its deadline, and every
    message keeps its last outcome (none left without a row)."""
    class Blocking(Scripted):
        async def send(self, value, payload):
            if self.attempt.get(value):  # a retry: the client holds it, then refuses
                await asyncio.sleep(0.3)
            await super().send(value, payload)

    w = WorkloadSpec(messages=40, in_flight=40, ack_timeout=0.2, retries=30, retry_backoff=0.01)
    client = Blocking(lambda v, n: "nack")
    rec = Recorder(tmp_path, "r", "p1", time.monotonic_ns())
    loop = ProducerLoop("p1", client, rec, w)
    client.loop = loop
    t = time.monotonic()
    asyncio.run(asyncio.wait_for(loop.run(t + 1.5), 10))  # a regression fails here, not hangs
    took = time.monotonic() - t
    rec.close()
    # 40 messages x 30 retries x 0.3 s would take 6 minutes: the bound holds (one blocked send past it)
    assert took < 1.5 + 0.3 + 0.5, took
    assert loop.stopped_early and loop.acct.sent == 40 and loop.acct.neg + loop.acct.unknown == 40, loop.acct
    rows = ds.dataset(str(tmp_path), format="parquet").to_table().to_pylist()
    answered = {r["value"] for r in rows if r["type"] in ("nack", "unknown")}
    assert answered == set(range(1, 41))


def test_live_progress_knows_when_every_acked_message_has_arrived():
    from types import SimpleNamespace

    from brokerchaos.scenario import WorkloadSpec
    from brokerchaos.workload import Accounting, LiveProgress

    acct = Accounting(4)
    for v in (1, 2, 3, 4):
        acct.on_send(v)
    acct.on_ack(1)
    acct.on_ack(3)
    acct.on_unknown(4)  # not acked: the read need not wait for it
    progress = LiveProgress()
    progress.add(SimpleNamespace(name="p1-run-001", spec=WorkloadSpec(messages=4), acct=acct))
    progress.saw("p1-run-001", 1)
    progress.saw("p1-run-000", 3)  # another run's message (a stowaway) does not count
    progress.saw(None, None)
    assert not progress.all_acked_seen()
    progress.saw("p1-run-001", 3)
    assert progress.all_acked_seen()
    acct.on_ack(2)  # a late ack makes the read wait again
    assert not progress.all_acked_seen()


def test_the_read_says_where_it_is_as_the_seed_does(tmp_path):
    from brokerchaos.workload import read_all

    class Scripted:  # delivers 7 messages at positions 0:0 .. 0:6, then goes idle
        async def read(self, deliver, idle):
            for v in range(1, 8):
                deliver(encode("p1", v), f"0:{v - 1}", "n1")
            return "complete"

    lines = []
    rec = Recorder(tmp_path / "h", "run-001", "c1", time.monotonic_ns())
    assert asyncio.run(read_all(Scripted(), rec, idle=1, timeout=5, line=lines.append, every=3)) == "complete"
    rec.close()
    assert lines == ["Received: 3 Curr Entry: 0:2", "Received: 6 Curr Entry: 0:5",
                     "Received: 7 Curr Entry: 0:6 (read complete)"]
    rows = ds.dataset(str(tmp_path / "h")).to_table().to_pylist()
    assert [r["value"] for r in rows if r["type"] == "recv"] == list(range(1, 8))


# -- producers in processes of their own (workload.processes) --------------------------------------

def _in_processes(tmp_path, rule, names, processes, cancel_after=None, fail=None, **spec):
    """Runs `names` through ProducerProcesses (forked processes, the Scripted client in
    each); returns the group, the first acks counted here, and the history rows."""
    from brokerchaos.workload import ProducerProcesses

    w = WorkloadSpec(**{"messages": 300, "in_flight": 20, "ack_timeout": 0.2, "retry_backoff": 0.01, **spec})
    origin = time.monotonic_ns()

    def make(name):
        client = Scripted(rule)
        if name == fail:
            async def refuse(on_outcome):
                raise ConnectionRefusedError("no broker here")
            client.open = refuse
        loop = ProducerLoop(name, client, Recorder(tmp_path, "r", name, origin), w)
        client.loop = loop
        return loop

    firsts = []
    group = ProducerProcesses(names, processes, w, make, lambda: firsts.append(1))

    async def main():
        await group.start(timeout=30)
        if cancel_after is None:
            await group.run(time.monotonic() + 30)
            return
        task = asyncio.ensure_future(group.run(time.monotonic() + 30))
        await asyncio.sleep(cancel_after)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass

    try:
        asyncio.run(main())
    finally:
        assert not any(p.is_alive() for p in group.procs), "a producer process outlived its write phase"
    rows = ds.dataset(str(tmp_path), format="parquet").to_table().to_pylist()
    return group, len(firsts), rows


def test_producers_in_processes_record_and_count_as_in_the_harness(tmp_path):
    import os

    rule = lambda v, n: "nack" if v % 10 == 0 else None if v % 7 == 0 else "ack"
    group, firsts, rows = _in_processes(tmp_path, rule, ["p1", "p2", "p3"], 2)
    assert [len(g) for g in group.groups] == [2, 1]
    assert len({p.pid for p in group.procs} | {os.getpid()}) == 3  # two processes besides ours
    for name, p in group.producers.items():
        mine = [r for r in rows if r["producer"] == name]
        kinds = {}
        for r in mine:
            kinds.setdefault(r["type"], set()).add(r["value"])
        assert kinds["send"] == set(range(1, 301))
        # what the runner sees here (progress lines, live readers) is what the history says
        assert p.acct.sent == 300 and p.acct.pos == len(kinds["ack"]) and p.acct.neg == len(kinds["nack"])
        assert p.acct.unknown == len(kinds["unknown"] - kinds["ack"] - kinds["nack"])
        assert sum(s == 4 for s in p.acct.state) == p.acct.pos  # each message's outcome came back
        assert p.client.node() == "n1" and p.stopped_early is None
    assert firsts == sum(p.acct.pos for p in group.producers.values())  # after_acks triggers count them all


def test_a_cancelled_write_stops_the_processes_and_every_outstanding_message_is_recorded(tmp_path):
    # never answered, and a timeout far away: everything in flight is outstanding at the cancel
    group, _, rows = _in_processes(tmp_path, lambda v, n: None, ["p1", "p2"], 2, cancel_after=1.0,
                                   ack_timeout=60)
    for name in ("p1", "p2"):
        sent = {r["value"] for r in rows if r["producer"] == name and r["type"] == "send"}
        unknown = {r["value"] for r in rows if r["producer"] == name and r["type"] == "unknown"}
        assert len(sent) == 20 and unknown == sent  # the in-flight bound, each recorded at the end
        assert {r["detail"] for r in rows if r["producer"] == name and r["type"] == "unknown"} == {
            "outstanding when the write phase ended"}


def test_a_producer_process_that_fails_fails_the_write_naming_its_producer(tmp_path):
    try:
        _in_processes(tmp_path, lambda v, n: "ack", ["p1", "p2"], 2, fail="p2")
    except RuntimeError as e:
        assert "p2" in str(e) and "ConnectionRefusedError: no broker here" in str(e)
    else:
        raise AssertionError("expected the write to fail")


def test_a_topic_s_live_progress_waits_for_that_topic_s_streams_only():
    from types import SimpleNamespace

    from brokerchaos.scenario import WorkloadSpec
    from brokerchaos.workload import Accounting, LiveProgress

    def loop(name):
        acct = Accounting(2)
        acct.on_send(1)
        acct.on_ack(1)
        return SimpleNamespace(name=name, spec=WorkloadSpec(messages=2), acct=acct)

    progress = LiveProgress("t2")
    for name in ("p1.t1", "p1.t2", "p2.t2", "p1.t12"):
        progress.add(loop(name))
    assert sorted(progress.producers) == ["p1.t2", "p2.t2"]
    progress.saw("p1.t2", 1)
    assert not progress.all_acked_seen()
    progress.saw("p2.t2", 1)
    assert progress.all_acked_seen()


def test_producer_processes_keep_each_producer_s_topics_together():
    from brokerchaos.workload.processes import spread

    names = [f"p{p}.t{t}" for p in (1, 2, 3) for t in (1, 2)]
    groups = spread(names, 2, lambda n: n.split(".")[0])
    assert groups == [["p1.t1", "p1.t2", "p3.t1", "p3.t2"], ["p2.t1", "p2.t2"]]
    assert spread(["p1", "p2", "p3"], 3, lambda n: n) == [["p1"], ["p2"], ["p3"]]


def test_a_transactional_producer_never_sends_without_waiting():
    """A transactional send may begin or end a transaction first: no `send_now`, and its
    `send` still reaches the library (the plain class's own path, not `send_now`)."""
    from brokerchaos.systems.kafka.producer import KafkaProducer
    from brokerchaos.systems.kafka.txn import KafkaTxnProducer
    from brokerchaos.systems.pulsar.java import PulsarJavaProducer, PulsarJavaTxnProducer

    assert KafkaTxnProducer.send_now is None and PulsarJavaTxnProducer.send_now is None
    assert callable(KafkaProducer.send_now) and callable(PulsarJavaProducer.send_now)

    class Lib:
        sent: list = []

        def produce(self, topic, payload, on_delivery=None):
            Lib.sent.append(payload)

    p = PulsarJavaTxnProducer.__new__(PulsarJavaTxnProducer)
    p.p, p.system = Lib(), type("S", (), {"topic": "t"})()
    asyncio.run(PulsarJavaProducer.send(p, 1, b"p1:1"))
    k = KafkaTxnProducer.__new__(KafkaTxnProducer)
    k.p, k.topic = Lib(), "t"
    asyncio.run(KafkaProducer.send(k, 2, b"p1:2"))
    assert Lib.sent == [b"p1:1", b"p1:2"]
