"""The Java clients' Python side (options.client java, docs/java-clients.md), with no JVM
but in the last test: the configuration handed to kafka-clients, how the Java names of
errors become ack, nack and unknown, the line protocol's bridge against a small process
speaking it, and (with a JDK) where each Java program of a server set is compiled."""
import asyncio
import os
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

from brokerchaos.systems import jclient
from brokerchaos.systems.base import SystemError_
from brokerchaos.systems.kafka.java import JavaProducer, java_config
from brokerchaos.systems.kafka.library import outcome_of as kafka_outcome
from brokerchaos.systems.pulsar.java import outcome_of as pulsar_outcome
from brokerchaos.systems.pulsar.java import position


def test_a_librdkafka_configuration_becomes_the_java_clients():
    conf = java_config({"bootstrap.servers": "a:1", "message.timeout.ms": 9000, "request.timeout.ms": 20000,
                        "linger.ms": 5.0, "enable.idempotence": False, "batch.num.messages": 10,
                        "statistics.interval.ms": 200, "stats_cb": print, "logger": object(), "acks": "all"})
    assert conf["delivery.timeout.ms"] == "9000" and "message.timeout.ms" not in conf
    # the Java client refuses a delivery timeout below linger + request timeout
    assert conf["request.timeout.ms"] == "8995" and conf["linger.ms"] == "5"
    assert conf["enable.idempotence"] == "false" and conf["max.block.ms"] == "9000"
    assert not {"batch.num.messages", "statistics.interval.ms", "stats_cb", "logger"} & set(conf)


def _kafka_error(fields):
    return JavaProducer.error(None, fields)


def test_kafka_java_errors_are_decided_by_the_same_table_as_librdkafkas():
    assert kafka_outcome(_kafka_error(["NOT_ENOUGH_REPLICAS", "NotEnoughReplicasException: x"]))[0] == "nack"
    assert kafka_outcome(_kafka_error(["REQUEST_TIMED_OUT", "TimeoutException: expired"]))[0] == "unknown"
    assert kafka_outcome(_kafka_error(["NOT_A_NAME_AT_ALL", "SomethingElse: ?"]))[0] == "unknown"
    e = _kafka_error(["abortable", "UNKNOWN_SERVER_ERROR", "KafkaException: commit failed"])
    assert e.txn_requires_abort() and not e.retriable() and not e.fatal()
    assert _kafka_error(["fatal", "PRODUCER_FENCED", "ProducerFencedException: x"]).fatal()
    assert _kafka_error(["retriable", "REQUEST_TIMED_OUT", "TimeoutException: x"]).retriable()


def test_pulsar_java_errors_and_positions():
    err = jclient.CallError
    assert pulsar_outcome(None) == ("ack", None)
    assert pulsar_outcome(err(["ProducerQueueIsFullError", "full"]))[0] == "nack"
    assert pulsar_outcome(err(["TimeoutException", "no answer"]))[0] == "unknown"
    assert pulsar_outcome(err(["TransactionConflictException", "?"]))[0] == "unknown"
    # as the Python client writes a message id: the reader's ids compare with the acks'
    assert position(jclient.Written(["29", "0", "-1", "3"])) == "(29,0,-1,3)"
    assert position(jclient.Written([])) is None


SPEAKER = textwrap.dedent("""
    import sys
    print("ready\\t1.2.3", flush=True)
    for line in sys.stdin:
        f = line.rstrip("\\n").split("\\t")
        if f[0] == "x":
            break
        if f[0] == "s":
            print("d\\t%s\\t0\\t%d" % (f[1], int(f[1]) + 99) if f[2] != "bad" else "d\\t%s\\tE\\tX_NAME\\twhy" % f[1],
                  flush=True)
        elif f[0] == "commit":
            print("r\\t%s\\tE\\tabortable\\tTXN_NAME\\tbecause" % f[1], flush=True)
        elif f[0] == "hang":
            pass
        else:
            print("r\\t%s\\tok" % f[1], flush=True)
""")


# the same, answering a delivered send as the bridges do: a record of a binary block
BINARY_SPEAKER = textwrap.dedent("""
    import struct, sys
    print("ready\\t1.2.3", flush=True)
    for line in sys.stdin:
        f = line.rstrip("\\n").split("\\t")
        if f[0] == "x":
            break
        if f[0] == "s" and f[2] != "bad":
            sys.stdout.buffer.write(b"B\\x02" + struct.pack("<i3q", 1, int(f[1]), 0, int(f[1]) + 99))
            sys.stdout.flush()
        elif f[0] == "s":
            print("d\\t%s\\tE\\tX_NAME\\twhy" % f[1], flush=True)
        else:
            print("r\\t%s\\tok" % f[1], flush=True)
""")


def test_answers_are_framed_whole_across_any_cut():
    """Text lines and binary blocks, in order, whatever the chunks the pipe hands over."""
    import struct

    block = b"B\x02" + struct.pack("<i", 3) + struct.pack("<9q", 1, 0, 100, 2, 0, 101, 3, 1, -1)
    pulsar = b"B\x04" + struct.pack("<i5q", 1, 4, 29, 0, -1, 3)
    stream = b"ready\t1.2\n" + block + b"d\t4\tE\tNAME\twhy\n" + pulsar + b"r\t1\tok\n"
    want = [["ready", "1.2"], (1, 0, 100), (2, 0, 101), (3, 1, -1), ["d", "4", "E", "NAME", "why"], (4, 29, 0, -1, 3),
            ["r", "1", "ok"]]
    assert jclient.frames(stream) == (want, b"")
    for cut in range(1, len(stream)):
        first, rest = jclient.frames(stream[:cut])
        second, left = jclient.frames(rest + stream[cut:])
        assert first + second == want and left == b"", cut
    assert position(jclient.Written((29, 0, -1, 3))) == "(29,0,-1,3)"


def _speaker(tmp_path, code=SPEAKER):
    argv = [sys.executable, "-c", code]
    return jclient.Bridge("t", argv, tmp_path / "t.log", lambda f: None)


def test_the_bridge_answers_calls_and_deliveries_in_the_protocol(tmp_path, monkeypatch):
    monkeypatch.setattr(jclient, "classpath", lambda s, m: "")
    monkeypatch.setattr(jclient.jvm, "argv", lambda cp, main, heap, *a, props=None: [sys.executable, "-c", SPEAKER])
    h = jclient.Handle("x.Main", "set", [], {}, tmp_path / "h.log")
    assert h.version == "1.2.3"
    got = []
    h.produce("t", b"p1:1", lambda e, w: got.append((e, w.partition(), w.offset())))
    h.produce("t", b"bad", lambda e, w: got.append((e.name(), e.str())))
    h.begin_transaction()
    with pytest.raises(jclient.CallFailed) as fail:
        h.commit_transaction(2.0)
    assert fail.value.args[0].txn_requires_abort() and fail.value.args[0].name() == "TXN_NAME"
    assert h.poll(0) == 2 and len(h) == 0
    assert got == [(None, 0, 100), ("X_NAME", "java why")]
    h.close()
    assert h.bridge.proc.returncode == 0


@pytest.mark.parametrize("speaker", [SPEAKER, BINARY_SPEAKER], ids=["text", "binary"])
def test_sends_go_out_in_batches_and_every_outcome_comes_back_once(tmp_path, monkeypatch, speaker):
    # more sends than one batch holds, the rest written by a poll; the answers read in
    # chunks that split lines and blocks: each delivery once, to its own callback
    monkeypatch.setattr(jclient, "classpath", lambda s, m: "")
    monkeypatch.setattr(jclient.jvm, "argv", lambda cp, main, heap, *a, props=None: [sys.executable, "-c", speaker])
    h = jclient.Handle("x.Main", "set", [], {}, tmp_path / "h.log")
    n = 3 * jclient.PUSH_BATCH + 7
    got: dict[int, int] = {}
    for i in range(n):
        h.produce("t", f"p1:{i}".encode(), lambda e, w, i=i: got.__setitem__(i, got.get(i, -1) + w.offset()))
    deadline = __import__("time").monotonic() + 20
    while len(h) and __import__("time").monotonic() < deadline:
        h.poll(0)
        __import__("time").sleep(0.01)
    assert len(h) == 0, f"{len(h)} of {n} sends without an outcome"
    assert got == {i: i + 99 for i in range(n)}  # id i+1 answered at offset i+100, once
    h.close()


def test_on_an_event_loop_the_sends_go_out_when_the_step_ends_not_at_the_next_poll(tmp_path, monkeypatch):
    monkeypatch.setattr(jclient, "classpath", lambda s, m: "")
    monkeypatch.setattr(jclient.jvm, "argv", lambda cp, main, heap, *a, props=None: [sys.executable, "-c", SPEAKER])
    h = jclient.Handle("x.Main", "set", [], {}, tmp_path / "h.log")

    async def step() -> int:
        for i in range(10):
            h.produce("t", f"p1:{i}".encode(), lambda e, w: None)
        got: list = []
        for _ in range(300):  # no poll: only the write scheduled on the loop sends them
            await asyncio.sleep(0.01)
            while not h.done.empty():
                got.extend(h.done.get_nowait())
            if len(got) >= 10:
                break
        return sum(f[0] == "d" for f in got)

    assert asyncio.run(step()) == 10
    h.close()


def test_a_bridge_that_never_answers_is_bounded_and_one_that_dies_is_named(tmp_path):
    b = _speaker(tmp_path)
    t0 = __import__("time").monotonic()
    ans = b.call("hang", 0.2)
    assert ans[:2] == ["E", "retriable"] and __import__("time").monotonic() - t0 < 8
    b.close()
    with pytest.raises(SystemError_, match="ended before it was ready"):
        _speaker(tmp_path, "import sys; sys.exit(3)")


@pytest.mark.parametrize("scenario, option, field", [
    ("scenarios/pulsar-txn-kill-owner.yaml", ["client=cpp"], "options.client"),
    ("scenarios/pulsar-txn-kill-owner.yaml", ["broker=lite"], "cluster.nodes"),
    ("scenarios/kafka-txn-kill-coordinator.yaml", ["client=jvm"], "options.client"),
])
def test_a_client_that_cannot_run_the_scenario_is_refused_naming_the_field(scenario, option, field):
    from brokerchaos import validation as sc
    from brokerchaos.errors import ScenarioError

    with pytest.raises(ScenarioError, match=f"scenario field '{field}'"):
        sc.load(scenario, {"option": option})
    assert sc.load(scenario, {"option": ["client=java"]}).options["client"] == "java"


def test_pulsars_transaction_coordinator_is_read_from_the_txn_id():
    # TxnID.toString(): (most significant bits, least): the first names the coordinator
    from brokerchaos.systems.pulsar.java import coordinator_of

    assert coordinator_of("(3,17)") == 3 and coordinator_of("(15, 4096)") == 15
    assert coordinator_of(None) is None and coordinator_of("") is None and coordinator_of("3:17") is None


def test_a_pulsar_txn_coordinator_target_needs_transactions():
    from brokerchaos import validation as sc
    from brokerchaos.errors import ScenarioError

    assert sc.load("scenarios/pulsar-txn-kill-coordinator.yaml", {}).fault.target == "txn-coordinator"
    with pytest.raises(ScenarioError, match="scenario field 'fault.target': txn-coordinator needs transactions"):
        sc.load("scenarios/pulsar-kill-broker.yaml", {"target": "txn-coordinator"})


@pytest.mark.spark  # needs a JDK, as the spark fixtures do
@pytest.mark.skipif(shutil.which("javac") is None and not os.environ.get("JAVA_HOME"), reason="no JDK (make setup)")
def test_two_programs_of_one_server_set_each_find_their_own_class(monkeypatch, tmp_path):
    # KafkaBridge and KafkaReassign run against the same jars; each is compiled alone, so a
    # shared directory (one `done` mark) let whichever came second miss its class (CI)
    jars = jclient.jvm.classpath("kafka-3.9")  # the cache's own jars; the programs compiled afresh
    monkeypatch.setenv("BROKERCHAOS_CACHE", str(tmp_path))
    monkeypatch.setattr(jclient.jvm, "classpath", lambda name: jars)
    paths = {}
    for main in ("brokerchaos.KafkaReassign", "brokerchaos.KafkaBridge"):
        classes = Path(jclient.classpath("kafka-3.9", main).rsplit(":", 1)[1])
        assert (classes / "brokerchaos" / f"{main.rsplit('.', 1)[1]}.class").exists(), (main, classes)
        paths[main] = classes
    assert len(set(paths.values())) == 2
