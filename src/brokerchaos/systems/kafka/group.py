"""A Kafka consumer group's member (`workload.group`), in a process of its own
(workload/group.py): subscribe, process what the group hands it, make its position durable
as the scenario says, and record all of it (history format 1.6).

- `commit: auto`: librdkafka stores a message's offset when consume() returns it, before it
  is processed, and commits the stored offsets every `auto_commit_ms` (its defaults): a
  member killed with a batch in hand has committed past what it never processed;
- `after`: the batch is processed, then its next offsets committed (synchronously);
- `before`: committed first, then processed (at most once).

What happens goes to `events` (workload/group.py's GroupEvents, which processes and
records): each message handed over, each commit's outcome from librdkafka's commit callback
(auto) or the synchronous commit's answer, assignments and revocations from the rebalance
callbacks. All of them run on this process's one thread, inside consume().
"""
from __future__ import annotations

import time
from typing import Optional

from ..consumer import GroupEnd
from ..runtime import quiet_logger

BATCH = 500
POLL_S = 0.2


class KafkaGroupMember:
    def __init__(self, client, name: str, spec, events) -> None:
        self.client = client
        self.name = name
        self.spec = spec
        self.events = events
        self.topic = client.stream_name
        self.group_id = f"{client.ctx.stream_name}-{spec.name}"
        self.c = None
        self.last_error: Optional[str] = None  # the library's last word of trouble, for an incomplete end

    def _conf(self) -> dict:
        s = self.spec
        conf = {"bootstrap.servers": self.client.bootstrap(), "group.id": self.group_id, "client.id": self.name,
                "auto.offset.reset": "earliest", "enable.auto.commit": s.commit == "auto",
                "auto.commit.interval.ms": s.auto_commit_ms, "socket.timeout.ms": 3000,
                "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 1000, "on_commit": self._committed,
                "error_cb": self._error,
                "log_level": 0, "logger": quiet_logger("librdkafka")}
        if (s.kind or "classic") == "consumer":
            conf["group.protocol"] = "consumer"  # KIP-848: the session timeout is the broker's
        else:
            conf["session.timeout.ms"] = s.session_timeout_ms
            conf["heartbeat.interval.ms"] = max(100, s.session_timeout_ms // 10)
        return conf

    def _error(self, err) -> None:
        self.last_error = f"{err.name()}: {err.str()}"[:200]

    def _assigned(self, consumer, partitions) -> None:
        for tp in partitions:
            self.events.assign(str(tp.partition))

    def _revoked(self, consumer, partitions) -> None:
        for tp in partitions:
            self.events.revoke(str(tp.partition))

    def _lost(self, consumer, partitions) -> None:
        for tp in partitions:
            self.events.revoke(str(tp.partition), lost=True)

    def _committed(self, err, partitions) -> None:
        from confluent_kafka import KafkaError

        if self.spec.commit != "auto":
            return  # a synchronous commit's answer is recorded where it returns
        if err is not None and err.code() == KafkaError._NO_OFFSET:
            return  # nothing was stored to commit: no commit was made
        for tp in partitions:
            if tp.offset >= 0 or err is not None or tp.error is not None:
                self._commit_row(tp, err)

    def _commit_row(self, tp, err=None) -> None:
        why = tp.error or err
        self.events.commit(str(tp.partition), tp.offset if tp.offset >= 0 else None,
                           None if why is None else str(why.name() if hasattr(why, "name") else why))

    def _commit(self, upto: dict[int, int]) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        tps = [TopicPartition(self.topic, p, o) for p, o in sorted(upto.items())]
        try:
            for tp in self.c.commit(offsets=tps, asynchronous=False) or []:
                self._commit_row(tp)
        except KafkaException as e:
            for tp in tps:
                self._commit_row(tp, e.args[0] if e.args else e)

    def _handle(self, msgs: list) -> None:
        good = [m for m in msgs if m.error() is None]
        for m in msgs:
            if m.error() is not None:
                self._error(m.error())
        upto: dict[int, int] = {}
        for m in good:
            upto[m.partition()] = max(upto.get(m.partition(), 0), m.offset() + 1)
        if self.spec.commit == "before" and upto:
            self._commit(upto)
        for m in good:
            self.events.process(m.value(), str(m.partition()), m.offset(), f"{m.partition()}:{m.offset()}")
        if self.spec.commit == "after" and upto:
            self._commit(upto)

    def caught_up(self) -> Optional[str]:
        """None when the group's committed position is at the end of every partition, else why not."""
        from confluent_kafka import TopicPartition

        if self.spec.commit == "auto":
            try:  # what is stored, now rather than at the next tick (never a synchronous commit:
                # one waits for a coordinator without a bound)
                self.c.commit(asynchronous=True)
            except Exception:
                pass  # nothing stored yet: asked again shortly
        try:
            md = self.c.list_topics(self.topic, 3)
            parts = sorted(md.topics[self.topic].partitions)
            committed = self.c.committed([TopicPartition(self.topic, p) for p in parts], timeout=3)
            behind = []
            for tp in committed:
                high = self.c.get_watermark_offsets(TopicPartition(self.topic, tp.partition), timeout=3,
                                                    cached=False)[1]
                if max(tp.offset, 0) < high:
                    behind.append(f"{tp.partition}: committed {tp.offset}, end {high}")
            return "; ".join(behind) or None
        except Exception as e:
            return f"{type(e).__name__}: {e}"[:200]

    def run(self, finishing, idle: float) -> str:
        """Process until `finishing` is set and the group has committed everything there is
        (complete), or neither it got anything nor the group moved for `idle` s (incomplete)."""
        from confluent_kafka import Consumer

        self.c = Consumer(self._conf())
        self.c.subscribe([self.topic], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._lost)
        end = GroupEnd(idle)
        while True:
            msgs = self.c.consume(BATCH, POLL_S)
            if msgs:
                end.got()
                self._handle(msgs)
            self.events.flush()
            if not finishing.is_set() or msgs:
                continue
            detail = end.check(self.caught_up(), self.last_error)
            if detail is not None:
                return detail
            time.sleep(0.5)

    def close(self) -> None:
        if self.c is not None:
            try:
                self.c.close()
            except Exception:
                pass
