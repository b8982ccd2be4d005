"""What the broker counted of its own drops over a run (history format 1.10, `drops`):
VerneMQ's counters read from its /metrics, the difference between the write's start and the
end of the read, and the verdict's figures that tell a loss the broker counted apart."""
import asyncio

from histories import H

from brokerchaos.history.schema import DROPS
from brokerchaos.report.console import run_block
from brokerchaos.runner.drops import DropCount, difference
from brokerchaos.runner.record import RunRecord
from brokerchaos.systems.mqtt.vernemq import drop_counts_of, subscribed_in

# lines in the form of a VerneMQ 2.1.2 node's /metrics (read 2026-11-29; the counts changed), and one
# without the namespace
METRICS = """# HELP vernemq_socket_open The number of times an MQTT socket has been opened.
# TYPE vernemq_socket_open counter
vernemq_socket_open{node="VerneMQ@198.18.0.11"} 1
vernemq_queue_message_drop{node="VerneMQ@198.18.0.11"} 885
vernemq_cluster_bytes_dropped{node="VerneMQ@198.18.0.11"} 0
queue_message_drop{node="VerneMQ@198.18.0.11",extra="x"} 5
vernemq_queue_message_drop_other{node="VerneMQ@198.18.0.11"} 7
"""


def test_vernemq_s_drop_counters_are_read_from_its_metrics():
    assert drop_counts_of(METRICS) == {"queue_message_drop": (890, "messages"), "cluster_bytes_dropped": (0, "bytes")}
    assert drop_counts_of("mqtt_publish_received{node=\"x\"} 1\n") == {}


def _c(q, b):
    return {"queue_message_drop": (q, "messages"), "cluster_bytes_dropped": (b, "bytes")}


def test_the_difference_over_the_run_and_a_node_restarted_meanwhile():
    before = {"n1": _c(10, 0), "n2": _c(5, 100)}
    assert difference(before, {"n1": _c(895, 0), "n2": _c(5, 100)}) == \
        (885, "cluster_bytes_dropped 0 bytes, queue_message_drop 885 messages")
    value, said = difference(before, {"n1": _c(10, 0), "n2": _c(2, 40)})
    assert value == 2 and "n2 restarted: cluster_bytes_dropped counted from its restart" in said \
        and "queue_message_drop 2 messages" in said and "cluster_bytes_dropped 40 bytes" in said
    value, said = difference(None, {"n1": _c(3, 0)}, "OSError: refused")
    assert value == 3 and "counted from each node's start" in said and "OSError: refused" in said


class _Roles:
    def __init__(self, answers):
        self.answers = list(answers)

    async def drop_counts(self):
        a = self.answers.pop(0)
        if isinstance(a, BaseException):
            raise a
        return a


class _Rec:
    def __init__(self):
        self.rows = []

    def record(self, type_, **kw):
        self.rows.append((type_, kw))


def _count(answers):
    d, nem, rec, lines = DropCount(_Roles(answers)), _Rec(), RunRecord("r1", 1, "mqtt", "netns", {}), []

    async def main():
        await d.start()
        await d.record(nem, rec, lines.append)
        await d.record(nem, rec, lines.append)  # once only

    asyncio.run(main())
    return nem.rows, rec, lines


def test_one_drops_row_after_the_read_and_none_where_no_count_is_kept():
    rows, rec, lines = _count([{"n1": _c(10, 0)}, {"n1": _c(895, 0)}])
    assert [r[0] for r in rows] == [DROPS] and rows[0][1]["value"] == 885 and rec.drops["messages"] == 885
    assert lines == [f"Drops: the broker counted {rows[0][1]['detail']}"]
    rows, rec, lines = _count([LookupError("no count kept")])
    assert rows == [] and rec.drops is None and lines == []
    rows, rec, _ = _count([{"n1": _c(0, 0)}, OSError("no answer")])
    assert rows[0][1]["value"] is None and rows[0][1]["detail"].startswith("not known")
    assert rec.drops["messages"] is None


def test_the_verdict_says_what_the_broker_counted_beside_the_loss(spark_analyze, tmp_path):
    counted = H("counted").sent_acked([1, 2, 3, 4]).read([1, 2]).ev(
        "nemesis", DROPS, value=2, detail="queue_message_drop 2 messages, cluster_bytes_dropped 0 bytes").rows
    silent = H("silent").sent_acked([1, 2]).read([1, 2]).rows
    v = {x["run"]: x for x in spark_analyze(counted + silent, tmp_path / "h").verdicts}
    assert v["counted"]["acked_missing"] == 2 and v["counted"]["broker_dropped"] == 2
    assert v["counted"]["broker_drops"].startswith("queue_message_drop 2 messages")
    assert v["silent"]["broker_dropped"] is None and v["silent"]["broker_drops"] is None
    assert "queue_message_drop 2 messages" in run_block(v["counted"]) and "Dropped" not in run_block(v["silent"])


# what `vmq_subscriber_db:read({[], <<"probe-sub-15">>})` printed on a VerneMQ 2.1.2 node
# (2026-12-03), and a record of two sessions, broken over lines as the printer does
RECORD = "[{'VerneMQ@198.18.0.12',false,[{[<<\"probe\">>,<<\"t\">>],1}]}]"
TWO = ("[{'VerneMQ@198.18.0.11',false,[{[<<\"probe\">>,<<\"t\">>],1}]},\n"
       " {'VerneMQ@198.18.0.12',false,[{[<<\"a\">>],1}]}]")


def test_a_vernemq_node_knows_a_subscription_only_to_that_topic_on_that_node():
    """The check before the write (systems/mqtt/replicated.py): a node
    whose store lacks the receiver's subscription routes its topic to nobody."""
    assert subscribed_in(RECORD, "VerneMQ@198.18.0.12", "probe/t")
    assert not subscribed_in(RECORD, "VerneMQ@198.18.0.13", "probe/t")  # its session on another node
    assert not subscribed_in(RECORD, "VerneMQ@198.18.0.12", "probe/u")  # an earlier run's topic
    assert not subscribed_in(RECORD, "VerneMQ@198.18.0.12", "probe")  # a prefix of it
    assert not subscribed_in("undefined", "VerneMQ@198.18.0.12", "probe/t")
    assert subscribed_in(TWO, "VerneMQ@198.18.0.11", "probe/t")
    assert not subscribed_in(TWO, "VerneMQ@198.18.0.12", "probe/t")
