"""Consumer groups for real (workload.group, history format 1.6): a group of two member
processes, a member SIGKILLed with a batch in hand and started again. On Apache Kafka 3.9
(a topic of two partitions):

- positive control: librdkafka's auto-commit (offsets stored when a batch is handed over,
  committed every 200 ms) commits past the batch the dead member never processed: skips,
  with nothing lost by the broker;
- negative control: commit after processing: no skip; the dead member's uncommitted batch
  is processed again by the member that took its partition over;
- a rebalance storm (a member killed every 2 s): no skip, no position going back within an
  assignment, no committed position going back.

On NATS JetStream (one durable pull consumer the members share), the same two controls:
each message acked before its batch is processed skips what the dead member had in hand;
acked after processing, what it had fetched comes again after ack_wait, and nothing is
skipped.

On Redis Streams (a consumer group, XREADGROUP/XACK, XAUTOCLAIM after the session): XACK
before processing skips what a killed member had in hand; XACK after, with a member paused
(SIGSTOP) past the session, skips nothing: its pending entries are claimed by the other, and
what it held when it stopped is processed by both (handed over).

On MQTT (a shared subscription on Mosquitto, each member a persistent session it resumes
when started again): paho's PUBACK as a message is queued for the worker skips the killed
member's queue; a PUBACK after processing skips nothing (the session is handed its unacked
messages again).

On RabbitMQ (competing consumers on a quorum queue; each ack names its message, which the
queue then deletes, so what the group took counts as read from the broker): acked as each
message arrives skips the killed member's backlog; acked after processing skips nothing (the
queue requeues what the dead member held unacked). On VerneMQ, the MQTT positive control on
a shared subscription spread over a 3-node cluster.
"""
import os

import pytest
from observers import Quiet

from brokerchaos import validation as sc
from brokerchaos.runner import Session
from brokerchaos.systems.mqtt import MOSQUITTO
from brokerchaos.systems.redis import group as redisgroup

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
    # sessions whose servers are configured alike share a cluster (runner/pool.py)
    pytest.mark.usefixtures("cluster_pool"),
]


def _run(tmp_path, scenario: str, name: str, **over):
    s = sc.load(f"scenarios/{scenario}.yaml", {"runs": 1, "name": name, **over})
    result = Session(s, tmp_path, observer=Quiet(), report=False).run()
    (v,) = result.verdicts
    return v, result.metas["run-001"], result


def _held(meta) -> str:
    """The member that held its work (hold_after), as run.json names it."""
    assert meta["group_held"] in ("g1-m1", "g1-m2"), meta["group_held"]
    return meta["group_held"]


def _members(meta) -> dict:
    return meta["group_members"]


def test_auto_commit_skips_what_a_killed_member_had_in_hand(tmp_path, spark):
    """A member killed with a batch in hand skips the rest of it once an auto-commit tick came
    between the batch's handover and the kill. Left to the clock, a kill in the first 200 ms
    of a batch skipped nothing (seen once in CI-like runs: the kill 73 ms after the handover);
    the scenario's member holds its batch after its first 100 messages, and the kill comes 1 s
    (five ticks) later."""
    v, meta, result = _run(tmp_path, "kafka-group-auto-commit-kill-consumer", "it-group-auto")
    windows = meta["fault"]["windows"]
    assert [w["nodes"] for w in windows] == [[_held(meta)]], windows
    # the broker lost nothing, and the read and the group's read both finished
    assert v["read_complete"] is True and v["acked_missing"] == 0, v
    assert v["group_read_complete"] is True, v["consumer_groups"]
    # the killed member came back as another incarnation: a member process more
    assert len(_members(meta)) == 3, _members(meta)
    assert v["group_skips"] > 0 and v["result"] == "fail", v
    # skips.csv: every skipped message is stored, and a commit of its partition went past it.
    # (A commit may fail: a member's last one, as it closes, races the rebalance the other
    # member's leaving started: UNKNOWN_MEMBER_ID, seen in most runs. Not asserted.)
    import csv

    with open(result.dir / "skips.csv", newline="") as fh:
        skipped = list(csv.DictReader(fh))
    assert len(skipped) == v["group_skips"] and all(r["stored_at"] and r["committed_past"] for r in skipped)


def test_commit_after_processing_skips_nothing(tmp_path, spark):
    """The kill must find the member with a batch processed and not committed: left to the
    clock, it once landed while the member's commit of its whole batch was on its way (the
    broker took it; the member died before it heard back), and nothing was processed again
    (two workers on two cores: the commit took 250 ms of a 1.2 s batch). The scenario's
    member that first processed 100 messages holds them, uncommitted, and is killed then."""
    v, meta, result = _run(tmp_path, "kafka-group-commit-after-kill-consumer", "it-group-after")
    assert meta["fault"]["nodes"] == [_held(meta)], meta["fault"]
    assert v["read_complete"] is True and v["acked_missing"] == 0, v
    assert v["group_read_complete"] is True, v["consumer_groups"]
    assert v["group_skips"] == 0 and v["result"] == "pass", v
    # the killed member's batch was processed again by the member that took its partition
    assert v["group_duplicates"] > 0 and v["group_dup_handover"] > 0 and v["group_dup_stored"] == 0, v
    assert v["group_nonmonotonic"] == 0 and v["group_commit_backwards"] == 0, v


def test_a_rebalance_storm_on_the_classic_protocol(tmp_path, spark):
    v, meta, _ = _run(tmp_path, "kafka-group-rebalance-storm", "it-group-storm", messages=8000)
    assert len(meta["fault"]["windows"]) >= 3, meta["fault"]
    assert v["read_complete"] is True and v["acked_missing"] == 0, v
    assert v["group_read_complete"] is True, v["consumer_groups"]
    assert v["group_skips"] == 0 and v["group_nonmonotonic"] == 0 and v["group_commit_backwards"] == 0, v
    assert v["group_recv_rows"] >= v["pos_ack_count"], v


def test_nats_acks_before_processing_skip_what_a_killed_member_had_in_hand(tmp_path, spark):
    v, meta, _ = _run(tmp_path, "nats-group-ack-before-kill-consumer", "it-group-nats-before")
    assert meta["fault"]["nodes"] == [_held(meta)], meta["fault"]
    assert v["read_complete"] is True and v["acked_missing"] == 0, v
    assert v["group_read_complete"] is True, v["consumer_groups"]
    assert len(_members(meta)) == 3, _members(meta)
    assert v["group_skips"] > 0 and v["result"] == "fail", v
    # one ack per message, each a commit row of its own ("acked"): none failed, none a position
    assert v["group_commits"] >= v["group_recv_rows"] and v["group_commit_failures"] == 0, v
    assert v["group_commit_backwards"] == 0, v


def test_nats_acks_after_processing_skip_nothing(tmp_path, spark):
    v, meta, _ = _run(tmp_path, "nats-group-ack-after-kill-consumer", "it-group-nats-after")
    assert v["read_complete"] is True and v["acked_missing"] == 0, v
    assert v["group_read_complete"] is True, v["consumer_groups"]
    assert v["group_skips"] == 0 and v["result"] == "pass", v
    # the kill found work in hand: what the member processed and had not acked came again, to another
    assert meta["fault"]["nodes"] == [_held(meta)] and v["group_dup_handover"] > 0, (meta["fault"], v)
    assert v["group_recv_rows"] >= v["pos_ack_count"], v


def test_redis_acks_before_processing_skip_what_a_killed_member_had_in_hand(tmp_path, spark):
    v, meta, result = _run(tmp_path, "redis-group-ack-before-kill-consumer", "it-group-redis-before")
    assert meta["fault"]["nodes"] == [_held(meta)], meta["fault"]
    assert v["read_complete"] is True and v["acked_missing"] == 0, v
    assert v["group_read_complete"] is True, v["consumer_groups"]
    assert len(_members(meta)) == 3, _members(meta)
    assert v["group_skips"] > 0 and v["result"] == "fail", v
    # the skipped entries were acked (XACK took each): acks at least every delivery and skip,
    # but for the acks a killed member sent and never heard back: a kill between Redis taking
    # a batch's XACKs and the member reading the reply leaves that batch acked with no row (a
    # clean-clone run: 4,900 rows for 4,836 deliveries and 164 skips, one batch of 100)
    kills = len(meta["fault"]["windows"])
    assert v["group_commits"] >= v["group_recv_rows"] + v["group_skips"] - kills * redisgroup.BATCH, v
    import csv

    with open(result.dir / "skips.csv", newline="") as fh:
        skipped = list(csv.DictReader(fh))
    assert len(skipped) == v["group_skips"] and all(r["stored_at"] for r in skipped), skipped[:3]


def test_redis_a_member_paused_past_its_session_skips_nothing(tmp_path, spark):
    v, meta, _ = _run(tmp_path, "redis-group-pause-consumer", "it-group-redis-pause", messages=8000)
    assert meta["fault"]["nodes"] == [_held(meta)] and len(_members(meta)) == 2, (meta["fault"], _members(meta))
    assert v["read_complete"] is True and v["acked_missing"] == 0, v
    assert v["group_read_complete"] is True, v["consumer_groups"]
    assert v["group_skips"] == 0 and v["result"] == "pass", v
    # what it held when paused was claimed and processed by the other member, then by it
    assert v["group_dup_handover"] > 0 and v["group_dup_stored"] == 0, v



def test_redis_a_group_scaled_out_and_in_skips_nothing(tmp_path, spark):
    """workload.group.schedule: two members join 3 s into the write, three leave at 8 s (the
    last started first); what the leavers had taken and not acked is claimed by the one left."""
    v, meta, result = _run(tmp_path, "redis-group-scale-out-in", "it-group-redis-scale")
    steps = meta["group_scaled"]
    want = [(4, ["g1-m3", "g1-m4"]), (1, ["g1-m4", "g1-m3", "g1-m2"])]
    assert [(s["consumers"], s["changed"]) for s in steps] == want, steps
    assert all("took_s" in s and "cut_off_s" not in s for s in steps), steps
    assert 3 <= steps[0]["at_s"] < 4 and 8 <= steps[1]["at_s"] < 9, steps
    assert sorted(_members(meta)) == ["g1-m1", "g1-m2", "g1-m3", "g1-m4"], _members(meta)
    # the three that left said so; the one left read on to the end and speaks for the group
    assert v["consumer_groups"]["g1"]["read_status"] == "complete" and v["group_read_complete"] is True, v
    assert v["read_complete"] is True and v["acked_missing"] == 0, v
    assert v["group_skips"] == 0 and v["result"] == "pass", v
    import pyarrow.dataset as ds

    files = sorted(str(p) for p in (result.dir / "run-001" / "history").rglob("*.parquet"))
    rows = ds.dataset(files, format="parquet").to_table().to_pylist()
    ends = {r["client"]: r["detail"] for r in rows if r["type"] == "read_end" and r["group"] == "g1"}
    assert ends == {"g1-m1": "complete", "g1-m2": "left", "g1-m3": "left", "g1-m4": "left"}, ends
    done = {r["client"] for r in rows if r["type"] == "recv" and r["group"] == "g1"}
    assert done == set(ends), done  # each member processed something while it was in the group


@pytest.mark.skipif(not os.path.exists(MOSQUITTO), reason="mosquitto not installed (make setup)")
def test_mqtt_acks_as_messages_arrive_skip_a_killed_members_queue(tmp_path, spark):
    v, meta, _ = _run(tmp_path, "mqtt-group-auto-ack-kill-consumer", "it-group-mqtt-auto")
    assert v["read_complete"] is True and v["acked_missing"] == 0, v
    assert v["group_read_complete"] is True, v["consumer_groups"]
    assert len(_members(meta)) == 3, _members(meta)
    assert v["group_skips"] > 0 and v["result"] == "fail", v
    # each skipped message was acked: one ack per message the members were handed
    assert v["group_commits"] >= v["group_recv_rows"] + v["group_skips"] and v["group_commit_failures"] == 0, v


@pytest.mark.skipif(not os.path.exists(MOSQUITTO), reason="mosquitto not installed (make setup)")
def test_mqtt_acks_after_processing_skip_nothing(tmp_path, spark):
    v, meta, _ = _run(tmp_path, "mqtt-group-ack-after-kill-consumer", "it-group-mqtt-after")
    assert len(_members(meta)) == 3, _members(meta)
    assert v["read_complete"] is True and v["acked_missing"] == 0, v
    assert v["group_read_complete"] is True, v["consumer_groups"]
    assert v["group_skips"] == 0 and v["result"] == "pass", v
    assert v["group_recv_rows"] >= v["pos_ack_count"], v


def _skips_csv(result) -> list[dict]:
    import csv

    with open(result.dir / "skips.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def test_rabbitmq_acks_as_messages_arrive_skip_a_killed_members_backlog(tmp_path, spark):
    """Competing consumers on a quorum queue, each message acked as it arrives: the queue
    deleted what the killed member had acked and not processed. The end read finds only what
    the group left, so the broker's verdicts count what the members took (their acks name
    each message): nothing lost, and the skips are messages taken, never processed."""
    v, meta, result = _run(tmp_path, "rabbitmq-group-ack-before-kill-consumer", "it-group-rabbit-before",
                           messages=4000)
    assert v["read_complete"] is True and v["group_read_complete"] is True, (v["read_status"], v["consumer_groups"])
    assert v["acked_missing"] == 0 and v["received"] >= v["pos_ack_count"], v
    assert len(_members(meta)) == 3, _members(meta)
    assert v["group_skips"] > 0 and v["result"] == "fail", v
    skipped = _skips_csv(result)
    # each skip was taken out of the queue by the member killed, acked by it and never processed
    killed = meta["fault"]["windows"][0]["nodes"][0]
    assert len(skipped) == v["group_skips"] and all(r["stored_at"] == "taken" for r in skipped), skipped[:3]
    assert {r["committed_past"].split("@")[0] for r in skipped} == {killed}, skipped[:3]


def test_rabbitmq_acks_after_processing_skip_nothing(tmp_path, spark):
    """The same with each message acked after it is processed: what the killed member held
    unacked goes back to the queue and the other member processes it."""
    v, meta, _ = _run(tmp_path, "rabbitmq-group-ack-after-kill-consumer", "it-group-rabbit-after", messages=4000)
    assert v["read_complete"] is True and v["group_read_complete"] is True, (v["read_status"], v["consumer_groups"])
    assert v["acked_missing"] == 0 and len(_members(meta)) == 3, v
    assert v["group_skips"] == 0 and v["result"] == "pass", v
    # the kill found work in hand: what the member processed and had not acked was requeued and
    # processed again (the duplicate is not classed as handed over: RabbitMQ's rows have no
    # partition to hand over)
    assert meta["fault"]["nodes"] == [_held(meta)] and v["group_duplicates"] > 0, (meta["fault"], v)


def _vernemq_release():
    from brokerchaos.systems.mqtt import vernemq

    try:
        return vernemq.release()
    except Exception:
        return None


@pytest.mark.skipif(_vernemq_release() is None, reason="no VerneMQ release (../shared/vernemq or $BROKERCHAOS_VERNEMQ)")
def test_vernemq_shared_subscription_acks_as_messages_arrive_skip_a_killed_members_queue(tmp_path, spark):
    """A shared subscription on a 3-node VerneMQ cluster, spread over both members (policy
    random, written to every node's configuration): paho's PUBACK as a message is queued for
    the work skips the killed member's queue, while the plain receiver gets everything."""
    v, meta, _ = _run(tmp_path, "vernemq-group-auto-ack-kill-consumer", "it-group-vernemq-auto", messages=4000)
    assert {s["shared_subscription_policy"] for s in meta["server_settings"].values()} == {"random"}, meta
    assert v["read_complete"] is True and v["acked_missing"] == 0, v
    assert v["group_read_complete"] is True and len(_members(meta)) == 3, (v["consumer_groups"], _members(meta))
    assert v["group_skips"] > 0 and v["result"] == "fail", v
    # the sessions' queues unbounded: nothing the broker dropped on purpose (format 1.10)
    assert v["broker_dropped"] == 0 and v["broker_drops"].startswith("cluster_bytes_dropped 0 bytes"), v


@pytest.mark.skipif(_vernemq_release() is None, reason="no VerneMQ release (../shared/vernemq or $BROKERCHAOS_VERNEMQ)")
def test_vernemq_counts_what_full_session_queues_drop_and_it_is_what_went_missing(tmp_path, spark):
    """The drops row's positive control: queues bounded at 50 messages, two members taking
    4 ms a message (250 msg/s each) against 1,000 msg/s, no fault. The members' queues
    overflow within a second whatever the machine's load (a slower machine processes slower),
    VerneMQ drops what arrives for a full queue after its PUBACK, and it counts at least
    what the group never processed plus what the plain receiver missed (no other way to
    lose a message here)."""
    doc = sc.load_document("scenarios/vernemq-group-ack-after-kill-consumer.yaml")
    doc["options"]["max_queued_messages"] = 50
    doc["workload"]["group"].pop("hold_after")
    doc.pop("fault")
    s = sc.build(doc, {"runs": 1, "name": "it-group-vernemq-drops", "messages": 2000, "fault": "none"})
    result = Session(s, tmp_path, observer=Quiet(), report=False).run()
    (v,) = result.verdicts
    assert v["group_skips"] > 0 and v["broker_dropped"] > 0, v
    # more, not equal: the first run counted 1,794 drops against 874 skips and 535 missing
    # (not explained yet: VerneMQ's queue_message_drop counts each full-queue insert)
    assert v["broker_dropped"] >= v["group_skips"] + v["acked_missing"], (v["broker_drops"], v["group_skips"],
                                                                          v["acked_missing"])
    assert "queue_message_drop" in v["broker_drops"], v["broker_drops"]
