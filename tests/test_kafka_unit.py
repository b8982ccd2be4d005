"""Kafka delivery reports into history rows, without a broker: what librdkafka hands the
callback for each acks mode."""
from types import SimpleNamespace

from brokerchaos.systems.kafka.client import KafkaProducer


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

    from brokerchaos.systems.kafka.client import _BrokerStates

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
