"""A Pulsar subscription's member (`workload.group`: kinds shared, failover, key-shared), in a
process of its own (workload/group.py): a consumer of the durable subscription
`<topic>-<group>` from the earliest message, named after its client.

- `commit: after`: each message acked (individually) once it is processed; what a member
  had received and not acked is redelivered when its consumer goes (a crash closes its
  connection), to another consumer of the subscription (shared, key-shared) or to the one
  that becomes active (failover);
- `before`: the messages of a batch (up to 100) acked before the batch is processed: a
  member killed with a batch in hand has acked what it never processed.

Pulsar has no automatic ack (`commit: auto` is refused). Acks are one message's each (commit
rows with detail `acked`). The topic is one partition (`0`); a message's position is its id
as one number, ledger << 40 | entry << 16 | batch index (order kept while entries stay below
2^24 and a batch below 2^16), its offset the id as the client prints it (the end reader's).
A member's read is complete when the subscription has no backlog: every message acked, as
the broker's topic stats say.
"""
from __future__ import annotations

import asyncio
import json
import time
from typing import Optional

from ..consumer import GroupEnd

BATCH = 100
PARTITION = "0"
KINDS = {"shared": "Shared", "failover": "Failover", "key-shared": "KeyShared"}


def position(mid) -> int:
    return (mid.ledger_id() << 40) | (mid.entry_id() << 16) | max(mid.batch_index(), 0)


class PulsarGroupMember:
    def __init__(self, client, name: str, spec, events, kind: str) -> None:
        self.system = client
        self.name = name
        self.spec = spec
        self.events = events
        self.kind = kind
        self.sub = f"{client.stream_name}-{spec.name}"
        self.client = self.consumer = None
        self.last_error: Optional[str] = None

    def _receive(self) -> list:
        import pulsar

        out = []
        try:
            out.append(self.consumer.receive(500))
            while len(out) < BATCH:
                out.append(self.consumer.receive(1))
        except pulsar.Timeout:
            pass
        except Exception as e:  # the client reconnects by itself; said, and asked again
            self.last_error = f"{type(e).__name__}: {e}"[:200]
            time.sleep(0.2)
        return out

    def _ack(self, msgs: list) -> None:
        for m in msgs:
            try:
                self.consumer.acknowledge(m)
                self.events.commit(PARTITION, position(m.message_id()), cumulative=False)
            except Exception as e:
                self.events.commit(PARTITION, position(m.message_id()), f"{type(e).__name__}: {e}",
                                   cumulative=False)

    def _handle(self, msgs: list) -> None:
        if self.spec.commit == "before":
            self._ack(msgs)
        for m in msgs:
            mid = m.message_id()
            self.events.process(m.data(), PARTITION, position(mid), str(mid))
            if self.spec.commit == "after":
                self._ack([m])

    def caught_up(self) -> Optional[str]:
        """None when the subscription's backlog is empty (everything acked), else why not."""
        s = self.system
        path = f"/admin/v2/persistent/{s.options.namespace}/{s.stream_name}/stats"
        try:
            stats = json.loads(asyncio.run(s.admin_get(path, 3.0)))
        except Exception as e:
            return f"{type(e).__name__}: {e}"[:200]
        sub = (stats.get("subscriptions") or {}).get(self.sub)
        if sub is None:
            return f"no subscription {self.sub} in the topic's stats"
        backlog, unacked = sub.get("msgBacklog", 0), sub.get("unackedMessages", 0)
        return None if not backlog else f"backlog {backlog}, {unacked} delivered and unacked"

    def run(self, finishing, idle: float) -> str:
        import pulsar

        s = self.system
        self.client = s.new_client(10)
        self.consumer = self.client.subscribe(
            s.topic, self.sub, consumer_type=getattr(pulsar.ConsumerType, KINDS[self.kind]),
            initial_position=pulsar.InitialPosition.Earliest, consumer_name=self.name)
        end = GroupEnd(idle)
        while True:
            msgs = self._receive()
            if msgs:
                end.got()
                self._handle(msgs)
            if not finishing.is_set() or msgs:
                continue
            detail = end.check(self.caught_up(), self.last_error)
            if detail is not None:
                return detail

    def close(self) -> None:
        for x in (self.consumer, self.client):
            if x is not None:
                try:
                    x.close()
                except Exception:
                    pass
