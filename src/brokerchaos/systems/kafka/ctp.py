"""Consume-transform-produce (`workload.group.commit: transaction`): a Kafka consumer group's
member that copies each batch it is handed to the output topic (`<stream>-out`, the same
partition) and commits the batch's next offsets inside the same transaction
(send_offsets_to_transaction with the consumer's group metadata, KIP-447), as an
exactly-once application does. The end read of the output topic (read_committed) judges it:
every acked message there once (analysis/transactions.py, "exactly once").

The member reads read_committed and commits nothing itself. Its transactional id is the
group's and the member slot's (`<stream>-<group>-m1`), so an incarnation started after a
kill fences the one killed and ends the transaction it left open. On a failed transaction
(aborted, or fatal: the producer replaced; or aborted on purpose, `abort`'s seeded
share, once its copies are written) its partitions are rewound to the offsets the
group has committed (asked with require_stable, so a commit still being decided is waited
for): what was processed again shows in the group's rows as processed twice, never in the
output. A message's `recv` row is written when it is processed, before its transaction ends.
"""
from __future__ import annotations

import random
import re
import threading
import time
from typing import Optional

from ..runtime import quiet_logger
from .group import KafkaGroupMember

COMMIT_S = 30.0  # one transaction's bound: its commit, its abort, the rewind's look at the committed offsets
TXN_TIMEOUT_MS = 10_000  # a killed member's open transaction is aborted by the broker after this


def slot_of(member: str) -> str:
    """The member slot of an incarnation's client name (`g1-m1-r2` -> `g1-m1`)."""
    return re.sub(r"-r[0-9]+$", "", member)


ON_PURPOSE = "aborted: on purpose (group abort share)"  # a commit row's failure when the member gave up itself


HANG_GRACE_S = 5.0  # past its own timeout, a library call is taken for hung
# the longest a member may stay in one transaction: its calls, then a replaced producer's init
TXN_BOUND_S = 2 * (COMMIT_S + HANG_GRACE_S)


class TxnFailed(Exception):
    """A transaction that did not commit: why (a commit row's failure), and whether it can
    be aborted (else the producer is replaced)."""

    def __init__(self, why: str, abortable: bool) -> None:
        super().__init__(why)
        self.why, self.abortable = why, abortable

    @classmethod
    def of(cls, err) -> "TxnFailed":
        return cls(f"{err.name()}: {err.str()}"[:160], err.txn_requires_abort())


def bounded(call, timeout: float, name: str):
    """`call()` in a thread of its own, given `timeout` + HANG_GRACE_S to return: librdkafka's
    send_offsets_to_transaction was seen to block for minutes past its timeout once a killed
    broker had been its group coordinator (librdkafka issues 5456 and 5511). A call that does
    not return is left where it is, and TxnFailed says so (its producer is then replaced)."""
    box: dict = {}

    def run() -> None:
        try:
            box["ok"] = call()
        except BaseException as e:  # handed to the caller's thread
            box["err"] = e

    th = threading.Thread(target=run, daemon=True, name=name)
    th.start()
    th.join(timeout + HANG_GRACE_S)
    if th.is_alive():
        raise TxnFailed(f"hung: {name} did not return within {timeout + HANG_GRACE_S:.0f} s (its timeout "
                        f"{timeout:.0f} s)", False)
    if "err" in box:
        raise box["err"]
    return box.get("ok")


class KafkaTransformMember(KafkaGroupMember):
    def __init__(self, client, name: str, spec, events) -> None:
        super().__init__(client, name, spec, events)
        self.out = client.output_name
        self.txn_id = f"{self.group_id}-{slot_of(name)[len(spec.name) + 1:]}"
        self.p = None
        self.done: dict[int, int] = {}  # partition -> the position this member last committed
        self.rnd = random.Random(f"{client.ctx.scenario.seed}-{client.ctx.run_id}-{name}")  # spec.abort's draws

    def _conf(self) -> dict:
        conf = super()._conf()
        conf.update({"enable.auto.commit": False, "isolation.level": "read_committed"})
        return conf

    def _producer(self):
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.client.bootstrap(), "client.id": f"{self.name}-out",
                      "transactional.id": self.txn_id, "enable.idempotence": True, "acks": "all",
                      "transaction.timeout.ms": TXN_TIMEOUT_MS, "message.timeout.ms": TXN_TIMEOUT_MS,
                      "socket.timeout.ms": 3000, "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 1000,
                      "log_level": 0, "logger": quiet_logger("librdkafka")})
        bounded(lambda: p.init_transactions(COMMIT_S), COMMIT_S, "init_transactions")  # fences an earlier
        return p  # incarnation, ends what it left open

    def run(self, finishing, idle: float) -> str:
        """As a group member's, but the group is called stuck only once it has not moved for
        longer than one transaction may take: a member inside its commit, retrying a killed
        coordinator, is within its own bound for up to TXN_BOUND_S (CI: the other member,
        idle, called the group stuck after read_idle's 10 s while the commit was in hand)."""
        self.p = self._producer()
        return super().run(finishing, max(idle, TXN_BOUND_S))

    def _handle(self, msgs: list) -> None:
        good = [m for m in msgs if m.error() is None]
        for m in msgs:
            if m.error() is not None:
                self._error(m.error())
        if good:
            self._transact(good, self._positions(sorted({m.partition() for m in good})))

    def _positions(self, parts: list[int]) -> dict[int, int]:
        """The consumer's next offset in these partitions (past any transaction marker)."""
        from confluent_kafka import TopicPartition

        got = self.c.position([TopicPartition(self.topic, p) for p in parts])
        return {tp.partition: tp.offset for tp in got if tp.offset is not None and tp.offset >= 0}

    def _transact(self, msgs: list, upto: dict[int, int]) -> None:
        """The messages processed and written to the output one by one, and `upto`
        committed, in one transaction; on failure the partitions rewound to what the group
        has committed."""
        from confluent_kafka import KafkaException, TopicPartition

        if not upto:
            return
        deadline = time.monotonic() + COMMIT_S
        try:
            try:
                self.p.begin_transaction()
                for m in msgs:
                    self.events.process(m.value(), str(m.partition()), m.offset(), f"{m.partition()}:{m.offset()}")
                    self._produce(m)
                if msgs and self.rnd.random() < self.spec.abort:
                    self.p.flush(max(0.1, deadline - time.monotonic()))  # the copies written, then aborted
                    raise TxnFailed(ON_PURPOSE, True)
                tps = [TopicPartition(self.topic, p, o) for p, o in sorted(upto.items())]
                meta = self.c.consumer_group_metadata()
                self._retried(lambda t: self.p.send_offsets_to_transaction(tps, meta, t), deadline,
                              "send_offsets_to_transaction")
                self._retried(self.p.commit_transaction, deadline, "commit_transaction")
            except KafkaException as e:
                raise TxnFailed.of(e.args[0]) from None
        except TxnFailed as f:
            self._failed(f, sorted(upto), deadline)
            return
        for p, o in sorted(upto.items()):
            self.events.commit(str(p), o)
            self.done[p] = o

    def _produce(self, m) -> None:
        while True:
            try:
                self.p.produce(self.out, m.value(), key=m.key(), partition=m.partition())
                return
            except BufferError:
                self.p.poll(0.05)

    @staticmethod
    def _retried(call, deadline: float, name: str) -> None:
        """`call(timeout)` again after each retriable error until `deadline`, each bounded."""
        from confluent_kafka import KafkaException

        while True:
            try:
                left = max(0.1, deadline - time.monotonic())
                bounded(lambda left=left: call(left), left, name)
                return
            except KafkaException as e:
                err = e.args[0]
                if not err.retriable() or err.txn_requires_abort() or time.monotonic() >= deadline:
                    raise

    def _failed(self, f: TxnFailed, parts: list[int], deadline: float) -> None:
        """The transaction aborted (or, where it cannot be, the producer replaced: its
        successor's init_transactions ends it), its commits recorded as failed, and the
        partitions rewound to the group's committed offsets."""
        from confluent_kafka import KafkaException

        for p in parts:
            self.events.commit(str(p), None, f.why)
        try:
            if not f.abortable:
                raise f
            self._retried(self.p.abort_transaction, deadline, "abort_transaction")
        except (KafkaException, TxnFailed) as e:
            old, self.p = self.p, None
            if not (isinstance(e, TxnFailed) and e.why.startswith("hung")):
                old.purge()  # a hung one is left alone: its call still holds it
            self.p = self._producer()
        self._rewind(parts, deadline)

    def _rewind(self, parts: list[int], deadline: float) -> None:
        """Each partition still assigned back to the offset the group has committed (none:
        the beginning)."""
        from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

        mine = {tp.partition for tp in self.c.assignment() if tp.topic == self.topic}
        tps = [TopicPartition(self.topic, p) for p in parts if p in mine]
        while tps:
            try:
                got = self.c.committed(tps, timeout=max(0.5, min(5.0, deadline - time.monotonic())))
                break
            except KafkaException:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)
        else:
            return
        for tp in got:
            try:
                self.c.seek(TopicPartition(self.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))
                self.events.rewind(str(tp.partition), tp.offset if tp.offset >= 0 else None)
            except KafkaException as e:  # no longer assigned: its new owner starts from the commit
                self._error(e.args[0])

    def caught_up(self) -> Optional[str]:
        """The markers ending the input's last transactions moved the position past the last
        commit without a message: an offsets-only transaction commits them, then as a group."""
        from confluent_kafka import KafkaException

        try:
            mine = sorted(tp.partition for tp in self.c.assignment() if tp.topic == self.topic)
            ahead = {p: o for p, o in self._positions(mine).items() if o > self.done.get(p, -1)}
        except KafkaException as e:
            return f"{e.args[0]}"[:200]
        self._transact([], ahead)
        return super().caught_up()

    def close(self) -> None:
        if self.p is not None:
            self.p.purge()
        super().close()
