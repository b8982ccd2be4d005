"""What every part of the Kafka client side takes from confluent-kafka the same way: a
delivery report's outcome, an admin client, a transactional id and the `__transaction_state`
partition Kafka places it on."""
from __future__ import annotations

from typing import Optional

from ..runtime import quiet_logger

# errors that mean the message was never written: a definite failure, not a maybe
DEFINITE = frozenset({
    "_PURGE_QUEUE", "_MSG_SIZE_TOO_LARGE", "MSG_SIZE_TOO_LARGE", "_UNKNOWN_PARTITION", "_UNKNOWN_TOPIC",
    "UNKNOWN_TOPIC_OR_PART", "TOPIC_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED", "INVALID_MSG",
    "CORRUPT_MESSAGE", "INVALID_REQUIRED_ACKS", "RECORD_LIST_TOO_LARGE", "INVALID_RECORD", "NOT_ENOUGH_REPLICAS",
    "INVALID_TOPIC_EXCEPTION", "_INVALID_ARG", "_KEY_SERIALIZATION", "_VALUE_SERIALIZATION",
})


def outcome_of(err) -> tuple[str, Optional[str]]:
    """A delivery report's error -> (kind, detail)."""
    if err is None:
        return "ack", None
    name = err.name()
    return ("nack" if name in DEFINITE else "unknown"), f"{name}: {err.str()}"[:200]


def transactional_id(stream: str, producer: str) -> str:
    return f"{stream}-{producer}"


def java_hash(s: str) -> int:
    """Java's String.hashCode with its sign bit cleared (Kafka's Utils.abs), as Kafka places a
    transactional id on a `__transaction_state` partition."""
    h = 0
    for ch in s:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h & 0x7FFFFFFF


def admin_for(bootstrap: str, timeout_ms: int = 3000):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": timeout_ms,
                        "log_level": 0, "logger": quiet_logger("librdkafka")})
