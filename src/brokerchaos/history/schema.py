"""History format 1.12: the only contract between the workload/nemesis and the analysis.

docs/history-format.md is the prose version of this module; keep the two in step. A minor
version adds optional columns or row types (readers of 1.0 files fill them with nulls); a
new major version changes what existing columns mean, and an older reader refuses it.
"""
import pyarrow as pa

FORMAT_VERSION = (1, 12)
# key of the Parquet file metadata that carries the version ("1.1")
VERSION_KEY = b"brokerchaos.history.format"

SCHEMA = pa.schema(
    [
        ("run", pa.string()),
        ("client", pa.string()),
        ("seq", pa.int64()),
        ("t_ns", pa.int64()),
        ("type", pa.string()),
        ("producer", pa.string()),
        ("value", pa.int64()),
        ("offset", pa.string()),
        ("node", pa.string()),
        ("detail", pa.string()),
        # 1.1: the fault window a fault, heal or ready row belongs to (null before 1.1)
        ("window", pa.int64()),
        # 1.2: a send row's intended time at a steady rate (`workload.rate`): when the
        # schedule meant it to go, on the t_ns clock; null without a rate, and on resends
        ("intended_ns", pa.int64()),
        # 1.4: on a message's first ack row, the time its latency counts from (its first
        # send's intended_ns at a steady rate, else that send's t_ns): latency is then an
        # aggregate over ack rows, with no pairing of sends and acks. Null on later acks,
        # on every other row, and in older histories
        ("send_ns", pa.int64()),
        # 1.6: a consumer group's rows (docs/history-format.md, "Consumer groups"): the
        # group on its members' subscribe, recv, commit, assign and revoke rows; the
        # partition (or shard, or queue) and the position in it of a recv (where the
        # message is stored), a commit (the position made durable: the next one to read) or
        # an assignment; the group's generation or member epoch where the library reports it.
        # 1.11: on a checking reader's recv, the partition of a partitioned topic it came from
        ("group", pa.string()),
        ("partition", pa.string()),
        ("position", pa.int64()),
        ("epoch", pa.int64()),
        # 1.7: a transactional producer's message (docs/history-format.md, "Transactions"):
        # on its outcome row, the number of the transaction it was written in (per producer,
        # from 1); the row's type is the transaction's outcome (ack: committed, nack:
        # aborted, unknown: the commit's answer was lost)
        ("txn", pa.int64()),
        # 1.8: the topic (stream, queue) of `workload.topics` a row is about: on a producer's
        # and a reader's rows, `t1`, `t2`…; on the nemesis's `owner` rows, the topic watched.
        # Null in a run of one topic and in older histories (one topic)
        ("topic", pa.string()),
    ],
    metadata={VERSION_KEY: ".".join(map(str, FORMAT_VERSION)).encode()},
)

COLUMNS = SCHEMA.names

# a send row this long after its intended_ns is late (the late_sends verdict)
LATE_NS = 100_000_000

# send/ack/nack/unknown/recv/fault/heal are the core of v1. read_end is an optional
# marker a reader writes when it stops (detail "complete", "complete: note" or
# "incomplete: why"; read_finished() tells them apart), so a
# read that could not finish is never mistaken for data loss. ready (optional, nemesis)
# marks the cluster whole again after a heal: the end of the seeds' "downtime".
# disconnect/reconnect (1.2, optional) are a client library's own connection events, as its
# callbacks report them. subscribe (1.3, optional) is a live consumer's first row; detail
# "observer" says that it reads during the write phase to measure (end-to-end latency, the
# consumer's outage, redeliveries) while another reader does the end check, so its
# deliveries are not counted in the loss, duplicate and ordering verdicts. check (1.5,
# optional, nemesis) is the cluster's own account of its copies once every fault is healed:
# `value` the stored units short of copies (Pulsar with AutoRecovery: under-replicated
# ledgers; null when it could not be asked), `detail` what was seen.
# commit/assign/revoke (1.6, optional) are a consumer group member's: a position it made
# durable (detail "ok"; "acked" for one message's ack; or "failed: why"), and the
# partitions its library's callbacks gave it and took away. A member is a client whose
# subscribe row names a `group`; its recv rows are the messages the group processed,
# kept out of the verdicts above (as an observer's) and judged by the group verdicts.
MESSAGE_TYPES = ("send", "ack", "nack", "unknown", "recv")
NEMESIS_TYPES = ("fault", "heal")
CLIENT_EVENT_TYPES = ("disconnect", "reconnect")
GROUP_TYPES = ("commit", "assign", "revoke")
# owner (1.8, optional, nemesis): during a fault window, a topic's owner as the roles see it:
# detail `changed: <what>` at the first answer that differs from the one before the fault
# (another owner, or none), `serving` at the first answer after it where the topic is served
# again; `node` the owner then. The outage's parts (analysis/parts.py) start from these
OWNER = "owner"
# The evidence that a run tested what it names (1.9, optional, nemesis; docs/history-format.md):
# effect: one per fault window (its `window`), what the harness saw the fault do: `value` 1
# observed, 0 not (the detail says which of EFFECT_STATES), null not known; `detail`
# "<state>: <evidence>". whole: once, before the read, whether every node the faults did not
# mean to leave down serves and the cluster says the stream is whole: `value` how many things
# were short (0: whole), null when it could not be asked; `detail` what was seen. mechanism:
# one per mechanism the scenario `requires` (MECHANISMS): `detail` "<name>: <evidence>",
# `value` 1 it occurred, 0 it did not, null the analysis judges it from the messages
EFFECT, WHOLE, MECHANISM = "effect", "whole", "mechanism"
EVIDENCE_TYPES = (EFFECT, WHOLE, MECHANISM)
EFFECT_STATES = ("observed", "not observed", "not healed", "failed", "not known")
# what a scenario may require to have happened for its question to be asked at all: judged by
# the run (owner-moved, unsynced-dropped) or, their rows' value null, by the analysis
MECHANISMS = {
    "owner-moved": "in a fault window, the stream's owner (leader) as the cluster names it moved to another node",
    "unsynced-dropped": "a power cut dropped writes the servers had not fsynced",
    "duplicates": "the read found some message more than once",
    "unknown-outcomes": "some message's send had no answer (its outcome unknown)",
}
# What the broker itself counted of what it dropped on purpose over the run (1.10, optional,
# nemesis): once, after the read; `value` the messages dropped since the write's start (null:
# it could not be asked), `detail` each counter ("queue_message_drop 885 messages, …")
DROPS = "drops"
EVENT_TYPES = (MESSAGE_TYPES + NEMESIS_TYPES + ("read_end", "ready", "subscribe", "check") + CLIENT_EVENT_TYPES
               + GROUP_TYPES + (OWNER,) + EVIDENCE_TYPES + (DROPS,))
OBSERVER = "observer"
COMMIT_OK = "ok"  # a commit row's detail when the broker took the position (and all before it)
ACKED = "acked"  # … when it took one message's ack (NATS, Redis, MQTT: no position order)
# ends a member's subscribe detail (`rabbitmq queue; takes`) when its acks take messages out of
# the store and name them (producer, value on its `acked` commit rows): what the group took
# counts as read by the checking read
TAKES = "; takes"
# a `subscribe` detail: the client reads what a consume-transform-produce group (its `group`)
# wrote to its output stream, judged by the exactly-once verdicts alone
OUTPUT = "output"
# an `assign` row's detail when a member moved itself back to its group's committed position
# (a consume-transform-produce member after a transaction that did not commit)
REWOUND = "rewound"
# (1.12) a `subscribe` detail: the client reads one replica's copy directly, the node its
# `node` names (docs/history-format.md, "Replicas"); judged by the replica verdicts alone
REPLICA = "replica"
LEFT = "left"  # a group member's read_end when it left the group on purpose (scale-in, a stop)

NEMESIS_CLIENT = "nemesis"


def read_finished(detail: str) -> bool:
    """A read_end detail that says the reader read everything there was: `complete`, or
    `complete: <note>` (e.g. the stream no longer exists on a whole cluster)."""
    return detail == "complete" or detail.startswith("complete:")
