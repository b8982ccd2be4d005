"""The Java client for Kafka (`options.client: java`): org.apache.kafka:kafka-clients of the
servers' release, in a child process (java/KafkaBridge.java, systems/jclient.py).

`JavaProducer` answers the part of confluent-kafka's Producer that KafkaProducer and
KafkaTxnProducer call (jclient.Handle: produce with a delivery callback, poll, flush,
purge, the transactional calls), so one producer class drives either library and the
history is made the same way. Its errors are confluent-kafka's KafkaError with the code
Kafka's protocol gives the Java exception (Errors.forException), so a delivery's ack, nack
or unknown is decided by one table (client.py's DEFINITE) for both.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from .. import jclient, jvm

MAIN = "brokerchaos.KafkaBridge"
# librdkafka's properties that the Java client names otherwise or has not
RENAMED = {"message.timeout.ms": "delivery.timeout.ms"}
LIBRDKAFKA_ONLY = frozenset({"batch.num.messages", "queue.buffering.max.messages", "statistics.interval.ms",
                             "socket.timeout.ms", "log_level", "logger", "stats_cb", "debug", "error_cb"})



def java_config(conf: dict) -> dict[str, str]:
    """A librdkafka producer configuration as the Java client's properties."""
    out = {RENAMED.get(k, k): v for k, v in conf.items() if k not in LIBRDKAFKA_ONLY and not callable(v)}
    out["linger.ms"] = int(float(out.get("linger.ms", 5)))
    delivery = int(out.get("delivery.timeout.ms", 30_000))
    # the Java client refuses a delivery timeout below linger + request timeout
    out["request.timeout.ms"] = min(int(out.get("request.timeout.ms", 5000)), max(1, delivery - out["linger.ms"]))
    out.setdefault("max.block.ms", delivery)  # a send or a transactional call never blocks longer
    return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in out.items()}


class JavaProducer(jclient.Handle):
    def __init__(self, conf: dict, topic: str, server_set: str, log: Path,
                 on_leader: Callable[[str, int], None]) -> None:
        props = jvm.properties(log.with_suffix(".properties"), java_config(conf))
        super().__init__(MAIN, server_set, [str(props), topic], jclient.log_configs(log), log,
                         on_line=lambda f: f[0] == "l" and on_leader(f[1], int(f[2])))

    def error(self, fields: list[str]):
        """["NAME", "reason"] (and the kind of a transactional call's failure) as a KafkaError."""
        from confluent_kafka import KafkaError

        e = jclient.CallError(fields)
        code = getattr(KafkaError, e.name(), KafkaError.UNKNOWN)
        return KafkaError(code if isinstance(code, int) else KafkaError.UNKNOWN, e.str(), fatal=e.fatal(),
                          retriable=e.retriable(), txn_requires_abort=e.txn_requires_abort())

    def failed(self, err) -> Exception:
        from confluent_kafka import KafkaException

        return KafkaException(err)
