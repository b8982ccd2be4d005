"""The Java client for Pulsar (`options.client: java`): pulsar-client-original of the
servers' release in a child process (java/PulsarBridge.java, systems/jclient.py), and its
transactions, which the Python client lacks (`workload.transactions`, systems/transact.py).

A send's outcome is decided by the exception's class name as the C++ client's result is by
its name (client.py's DEFINITE, with the Java names beside them); an ack's position is the
message id written as the Python client writes it, `(ledger,entry,partition,batch)`, so
that the reader's ids and the acks' compare. The Java client says nothing of its
connection here (no disconnect or reconnect rows) and writes to the topic's owner as the
roles name it.
"""
from __future__ import annotations

import asyncio
import re
import sys
from typing import Optional

from .. import jclient, jvm
from ..base import OutcomeCallback, SystemError_
from ..transact import TxnProducer
from .library import DEFINITE

MAIN = "brokerchaos.PulsarBridge"
# the Java client's names for a send refused before anything was written
JAVA_DEFINITE = frozenset({
    "ProducerQueueIsFullError", "AlreadyClosedException", "InvalidMessageException",
    "ProducerBlockedQuotaExceededError", "ProducerBlockedQuotaExceededException", "TopicTerminatedException",
    "ProducerFencedException", "InvalidTopicNameException", "AuthorizationException", "AuthenticationException",
    "InvalidConfigurationException", "NotAllowedException",
})


def outcome_of(err) -> tuple[str, Optional[str]]:
    if err is None:
        return "ack", None
    name = err.name()
    definite = name in JAVA_DEFINITE or name in DEFINITE
    return ("nack" if definite else "unknown"), f"{name}: {err.str()}"[:200]


def position(w: jclient.Written) -> Optional[str]:
    """A Java message id (ledger, entry, partition, batch index) as the Python client writes one."""
    return f"({','.join(map(str, w.fields[:4]))})" if len(w.fields) >= 4 else None


class PulsarJavaProducer:
    def __init__(self, system, name: str) -> None:
        self.system = system
        self.name = name
        self.p: Optional[jclient.Handle] = None
        self.on_outcome: Optional[OutcomeCallback] = None
        self.poller: Optional[asyncio.Task] = None

    def _props(self) -> dict:
        s, o, w = self.system, self.system.options, self.system.ctx.scenario.workload
        txn = w.transactions
        return {"serviceUrl": s.service_url(), "topic": s.topic, "producerName": f"{self.name}-{s.ctx.run_id}",
                "sendTimeoutMs": o.send_timeout(w.ack_timeout),
                "batching": str(o.batching).lower(), "batchingMaxMessages": o.batching_max_messages,
                "batchingMaxPublishDelayMs": o.batching_max_publish_delay_ms,
                "maxPendingMessages": w.in_flight + 1000, "operationTimeoutMs": 10_000,
                "transactions": str(txn is not None).lower(), "startTimeoutMs": 60_000,
                "txnTimeoutMs": int(2 * txn.commit_timeout * 1000) if txn is not None else 60_000}

    def _handle(self) -> jclient.Handle:
        log = self.system.ctx.logdir / f"java-{self.name}.log"
        props = jvm.properties(log.with_suffix(".properties"), self._props())
        return jclient.Handle(MAIN, self.system.java_set, [str(props)], jclient.log_configs(log), log)

    async def open(self, on_outcome: OutcomeCallback) -> None:
        self.on_outcome = on_outcome
        self.system.follow_owner()
        try:
            self.p = await asyncio.to_thread(self._handle)
        except SystemError_ as e:
            # seen once in ~5 suite runs: a broker began loading its transaction coordinators'
            # logs ("Opening managed ledger …__transaction_log_N") and neither finished nor
            # failed, while Pulsar's client retries a coordinator's connect with no deadline
            dumps = getattr(self.system.cluster, "thread_dumps", None)
            raise SystemError_(f"{e}; {await asyncio.to_thread(dumps)}" if dumps else str(e)) from None
        self.poller = asyncio.create_task(self._poll())

    async def _poll(self) -> None:
        while True:
            self._poll_once()
            await asyncio.sleep(0.002)

    def _poll_once(self) -> None:
        try:
            self.p.poll(0)
        except Exception as e:
            print(f"pulsar java poll: {type(e).__name__}: {e}", file=sys.stderr)

    def _record(self, value: int, err, written: jclient.Written) -> None:
        kind, detail = outcome_of(err)
        self.on_outcome(value, kind, position(written) if kind == "ack" else None, self.node(), detail)

    def _produce(self, value: int, payload: bytes) -> bool:
        self.p.produce(self.system.topic, payload, lambda err, w, v=value: self._record(v, err, w))
        return True

    send_now = _produce  # as Kafka's: a transactional producer has none

    async def send(self, value: int, payload: bytes) -> None:
        self._produce(value, payload)

    def node(self) -> Optional[str]:
        return self.system.owner_now or self.system.cluster.node_names[0]

    @property
    def _node(self) -> Optional[str]:
        return self.node()

    async def close(self) -> None:
        if self.poller is not None:
            self.poller.cancel()
            await asyncio.gather(self.poller, return_exceptions=True)
        if self.p is not None:
            await asyncio.to_thread(self.p.flush, 10)
            await asyncio.to_thread(self.p.close)
            self._poll_once()


class PulsarJavaTxnProducer(TxnProducer, PulsarJavaProducer):
    """Pulsar's transactions through the Java client: a transaction begun at the
    coordinator, the sends in it, committed or aborted."""

    def __init__(self, system, name: str) -> None:
        super().__init__(system, name)
        self._txn_setup(system.ctx, name)
        self.call_errors = (jclient.CallFailed,)

    def _record(self, value: int, err, written: jclient.Written) -> None:
        self.reports[value] = (err, position(written) if err is None else None)

    async def _begin(self) -> None:
        await super()._begin()
        # the coordinator of this transaction (target txn-coordinator): its TxnID's first half
        self.system.txn_coordinators[self.name] = coordinator_of(self.p.txn_id)


def coordinator_of(txn_id: Optional[str]) -> Optional[int]:
    """The transaction coordinator's number in a Pulsar TxnID as its toString() gives it,
    `(<most significant bits>,<least significant bits>)`: the partition of
    transaction_coordinator_assign whose owner coordinates the transaction."""
    m = re.fullmatch(r"\(\s*(\d+)\s*,\s*\d+\s*\)", txn_id or "")
    return int(m.group(1)) if m else None
