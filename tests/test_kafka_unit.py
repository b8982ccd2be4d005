"""Kafka delivery reports into history rows, without a broker: what librdkafka hands the
callback for each acks mode."""
from types import SimpleNamespace

import pytest

from brokerchaos.systems.kafka.producer import KafkaProducer


class Msg:
    def __init__(self, offset):
        self._offset = offset

    def partition(self):
        return 0

    def offset(self):
        return self._offset


def producer(acks: str) -> tuple[KafkaProducer, list]:
    system = SimpleNamespace(stream_name="t", options=SimpleNamespace(acks=acks))
    p = KafkaProducer(system, "p1")
    rows: list = []
    p.on_outcome = lambda *row: rows.append(row)
    return p, rows


def test_acks0_report_has_no_offset_and_is_still_an_ack():
    # librdkafka gives no offset (None) when the broker never answers (acks=0)
    p, rows = producer("0")
    p._report(7, None, Msg(None))
    assert rows == [(7, "ack", None, None, "acks=0: the client's word only")]


def test_acked_offset_is_kept_and_a_failing_callback_does_not_raise(capsys):
    p, rows = producer("all")
    p._report(1, None, Msg(41))
    assert rows == [(1, "ack", "0:41", None, None)]
    p.on_outcome = lambda *row: 1 / 0
    p._report(2, None, Msg(42))  # must not raise into librdkafka's poll()
    assert "ZeroDivisionError" in capsys.readouterr().err


def test_broker_state_log_lines_become_disconnect_and_reconnect_events():
    import logging

    from brokerchaos.systems.kafka.producer import _BrokerStates

    at = {("10.9.0.2", 9092): "n2"}
    cluster = SimpleNamespace(node_at=lambda h, p: at.get((h, p)))
    system = SimpleNamespace(stream_name="t", options=SimpleNamespace(acks="all"), cluster=cluster)
    p = KafkaProducer(system, "p1")
    events: list = []
    p.on_event = lambda *e: events.append(e)
    h = _BrokerStates(p)

    def line(text):
        h.emit(logging.LogRecord("x", logging.DEBUG, "", 0, text, None, None))

    head = "STATE [rdkafka#producer-1] [thrd:10.9.0.2:9092/2]: "
    line(head + "10.9.0.2:9092/2: Broker changed state APIVERSION_QUERY -> UP")  # first connect
    line(head + "10.9.0.2:9092/bootstrap: Broker changed state UP -> DOWN")  # bootstrap entry retired
    line(head + "10.9.0.2:9092/2: Broker changed state UP -> DOWN")
    line(head + "10.9.0.2:9092/2: Broker changed state DOWN -> CONNECT")
    line(head + "10.9.0.2:9092/2: Broker changed state APIVERSION_QUERY -> UP")
    assert [e[:2] for e in events] == [("disconnect", "n2"), ("reconnect", "n2")]
    p.closing = True
    line(head + "10.9.0.2:9092/2: Broker changed state UP -> DOWN")  # our own close
    assert len(events) == 2


def _stats(leader: int, brokers: list[tuple[str, int, str]]) -> str:
    """librdkafka's statistics, the parts read: partition leaders and brokers' states (as a
    KRaft run recorded them: the `-1` partition is librdkafka's unassigned one)."""
    import json

    return json.dumps({
        "topics": {"t": {"partitions": {"0": {"leader": leader}, "-1": {"leader": -1}}}},
        "brokers": {f"{addr}/{nid}": {"nodename": addr, "nodeid": nid, "state": state}
                    for addr, nid, state in brokers},
    })


def following() -> KafkaProducer:
    nodes = {"10.0.0.1:9092": "n1", "10.0.0.2:9092": "n2", "10.0.0.3:9092": "n3"}
    cluster = SimpleNamespace(node_at=lambda host, port: nodes.get(f"{host}:{port}"))
    system = SimpleNamespace(stream_name="t", options=SimpleNamespace(acks="all"), cluster=cluster)
    return KafkaProducer(system, "p1")


def test_the_client_node_is_the_leader_before_its_connection_is_up_and_after_it_dies():
    p = following()
    # the start: the bootstrap broker's connection is up, the leader's not yet
    p._follow(_stats(2, [("10.0.0.3:9092", 3, "UP"), ("10.0.0.2:9092", 2, "INIT"), ("10.0.0.1:9092", 1, "INIT")]))
    assert p.node() == "n2"
    # the leader killed: the metadata still names it, the client tries it and writes to no one else
    p._follow(_stats(2, [("10.0.0.3:9092", 3, "UP"), ("10.0.0.2:9092", 2, "TRY_CONNECT"), ("10.0.0.1:9092", 1, "UP")]))
    assert p.node() == "n2"
    # the metadata refreshed mid-election: no leader, the last one stays
    p._follow(_stats(-1, [("10.0.0.3:9092", 3, "UP"), ("10.0.0.1:9092", 1, "UP")]))
    assert p.node() == "n2"
    p._follow(_stats(1, [("10.0.0.3:9092", 3, "UP"), ("10.0.0.1:9092", 1, "UP")]))
    assert p.node() == "n1"


def test_brokers_sharing_one_id_give_the_one_connected():
    # tansu's brokers all call themselves the same node id
    p = following()
    p._follow(_stats(7, [("10.0.0.1:9092", 7, "INIT"), ("10.0.0.3:9092", 7, "UP")]))
    assert p.node() == "n3"


def test_kraft_cluster_ids_never_start_with_a_dash(monkeypatch):
    import uuid

    from brokerchaos.systems.kafka import apache

    # 0xf8: the first base64 character is '-', which the storage tool takes for an option
    ids = iter([uuid.UUID(bytes=b"\xf8" + bytes(15)), uuid.UUID(bytes=b"\x08" + bytes(15))])
    monkeypatch.setattr(apache.uuid, "uuid4", lambda: next(ids))
    assert apache.cluster_id() == "CAAAAAAAAAAAAAAAAAAAAA"


def test_the_partitions_delegation_moves_the_client_node_at_once():
    import logging

    from brokerchaos.systems.kafka.producer import _BrokerStates

    p = following()
    p.topic = "bc-run-001"
    h = _BrokerStates(p)

    def log(line: str) -> None:
        h.emit(logging.LogRecord("rdkafka", logging.DEBUG, "", 0, line, None, None))

    # as librdkafka 2.x logged a leader kill and the fail-over (debug: topic)
    log("BRKDELGT [p1#producer-6] [thrd:main]: bc-run-001 [0]: delegate to broker 10.0.0.3:9092/3 "
        "(rktp 0x7f35b06fe630, term 0, ref 3)")
    assert p.node() == "n3"
    log("BRKDELGT [p1#producer-6] [thrd:10.0.0.3:9092/3]: bc-run-001 [0]: delegate to broker (none) "
        "(rktp 0x7f35b06fe630, term 0, ref 3)")
    log("BRKDELGT [p1#producer-6] [thrd:main]: bc-run-001 [0]: no longer delegated to broker 10.0.0.3:9092/3")
    assert p.node() == "n3"
    log("BRKDELGT [p1#producer-6] [thrd:main]: bc-run-0010 [0]: delegate to broker 10.0.0.2:9092/2 (rktp 0x1)")
    log("BRKDELGT [p1#producer-6] [thrd:main]: bc-run-001 [1]: delegate to broker 10.0.0.2:9092/2 (rktp 0x1)")
    assert p.node() == "n3"  # another topic, another partition
    log("BRKDELGT [p1#producer-6] [thrd:main]: bc-run-001 [0]: delegate to broker 10.0.0.1:9092/1 "
        "(rktp 0x7f35b06fe630, term 0, ref 4)")
    assert p.node() == "n1"


def test_a_library_call_past_its_timeout_is_taken_for_hung_and_left_behind():
    import threading
    import time

    from brokerchaos.systems.kafka import ctp

    assert ctp.bounded(lambda: 7, 1.0, "fast") == 7
    with pytest.raises(ValueError):
        ctp.bounded(lambda: (_ for _ in ()).throw(ValueError("no")), 1.0, "raises")
    release = threading.Event()
    old, ctp.HANG_GRACE_S = ctp.HANG_GRACE_S, 0.2
    try:
        t0 = time.monotonic()
        with pytest.raises(ctp.TxnFailed) as e:
            ctp.bounded(lambda: release.wait(30), 0.3, "send_offsets_to_transaction")
        assert time.monotonic() - t0 < 2 and e.value.why.startswith("hung: send_offsets_to_transaction") and \
            not e.value.abortable, e.value.why
    finally:
        ctp.HANG_GRACE_S = old
        release.set()


def test_a_transforming_member_waits_out_another_member_s_transaction_before_calling_the_group_stuck(monkeypatch):
    """read_idle (10 s) is shorter than a transaction may take through a killed coordinator:
    CI's idle member called the group stuck while the other's commit was in hand."""
    from brokerchaos.systems.kafka import ctp, group

    asked = []
    monkeypatch.setattr(group.KafkaGroupMember, "run", lambda self, finishing, idle: asked.append(idle) or "complete")
    member = object.__new__(ctp.KafkaTransformMember)
    member._producer = lambda: "producer"
    assert member.run(None, 10.0) == "complete" and member.p == "producer"
    assert asked == [ctp.TXN_BOUND_S] and ctp.TXN_BOUND_S >= 2 * (ctp.COMMIT_S + ctp.HANG_GRACE_S), asked
    member.run(None, 600.0)
    assert asked[-1] == 600.0, "a longer read_idle is kept"


def test_a_member_slot_keeps_its_transactional_id_across_incarnations():
    from brokerchaos.systems.kafka.ctp import slot_of

    assert slot_of("g1-m1") == slot_of("g1-m1-r2") == slot_of("g1-m1-r13") == "g1-m1"
    assert slot_of("g1-m12") == "g1-m12"


def test_a_zookeeper_leader_whose_broker_is_gone_is_not_serving():
    """The owner watch's `serve` mark (faults/owners.py) on ZooKeeper: a killed leader (and
    controller) stays named in the partition's state until the next controller elects
    another; a look then said "n2 serving" and the window's watch ended there, so the move
    to n1 a moment later was never seen and the run was called *unknown* (mechanism
    missing) though its roles_during said n1 led (the dedup seed's exact fail-over, 1 of 6
    runs, 2026-12-03). A leader counts as serving only while its broker is registered."""
    import asyncio
    from types import SimpleNamespace

    from brokerchaos.systems.base import SystemError_
    from brokerchaos.systems.kafka.zkroles import ApacheKafkaRoles

    cluster = SimpleNamespace(node_names=["n1", "n2", "n3"])
    roles = ApacheKafkaRoles(SimpleNamespace(stream_name="bc-run-001"), cluster, None)

    def look(state):
        async def zk_state():
            return state
        roles.zk_state = zk_state
        return asyncio.run(roles.serving())

    stale = {"leader": 2, "isr": [2, 1, 3], "replicas": [2, 1, 3], "controller": -1, "registered": [1, 3]}
    with pytest.raises(SystemError_, match="broker 2, is not registered"):
        look(stale)
    assert look({**stale, "leader": 1, "controller": 3}) == "n1"
    with pytest.raises(SystemError_, match="has no leader"):
        look({**stale, "leader": -1})


def _zz(n: int) -> bytes:
    """A zigzag varint, as Kafka's records write their lengths and deltas."""
    raw, out = (n << 1) ^ (n >> 63), b""
    while True:
        b, raw = raw & 0x7F, raw >> 7
        out += bytes([b | (0x80 if raw else 0)])
        if not raw:
            return out


def _batch(base: int, values: list[bytes], attrs: int = 0) -> bytes:
    """One record batch (magic 2) as a broker's segment holds it (systems/kafka/segments.py)."""
    import struct

    recs = b""
    for d, v in enumerate(values):
        body = b"\x00" + _zz(0) + _zz(d) + _zz(-1) + _zz(len(v)) + v + _zz(0)
        recs += _zz(len(body)) + body
    head = struct.pack(">ibIhiqqqhii", 0, 2, 0, attrs, len(values) - 1, 0, 0, -1, -1, -1, len(values))
    return struct.pack(">qi", base, len(head) + len(recs)) + head + recs


def test_a_broker_s_segment_is_read_batch_by_batch_control_batches_left_out():
    from brokerchaos.systems.kafka.segments import CONTROL, Unreadable, records

    seg = _batch(0, [b"p1:1", b"p1:2"]) + _batch(2, [b"\x00\x00\x00\x00\x00\x00"], CONTROL) + _batch(3, [b"p1:3"])
    assert list(records(seg)) == [(0, b"p1:1"), (1, b"p1:2"), (3, b"p1:3")]
    with pytest.raises(Unreadable, match="compressed"):
        list(records(_batch(0, [b"x"], attrs=1)))
    with pytest.raises(Unreadable, match="a batch of"):
        list(records(seg[:-2]))


def test_a_topic_counts_as_made_only_where_a_brokers_metadata_has_it_led():
    """create_stream waits until every live broker's own metadata answers with the run's
    topics led (unled): the run's next question, the leader at the start, may go to any
    broker, and one that has not cached the topic yet answers without it."""
    from brokerchaos.systems.kafka.client import unled

    def md(**topics):
        return SimpleNamespace(topics={name: SimpleNamespace(error=None, partitions={
            i: SimpleNamespace(leader=lead) for i, lead in enumerate(leaders)}) for name, leaders in topics.items()})

    assert unled(md(t=[1, 2]), ["t"], 2) is None
    assert unled(md(), ["t"], 2) == "t: not known yet"  # this broker has not cached it
    assert unled(md(t=[1, -1]), ["t"], 2) == "t: no leader yet"
    assert unled(md(t=[1]), ["t"], 2) == "t: no leader yet"  # partitions still coming
    assert unled(md(t=[1, 2]), ["t", "t-out"], 2) == "t-out: not known yet"
    failed = SimpleNamespace(topics={"t": SimpleNamespace(error="LEADER_NOT_AVAILABLE", partitions={})})
    assert unled(failed, ["t"], 1) == "t: LEADER_NOT_AVAILABLE"
