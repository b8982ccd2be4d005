"""A NATS JetStream consumer group's member (`workload.group`): every member pulls from one
durable pull consumer of the run's stream, as several instances of an application share
one (NATS's "group"), in a process of its own (workload/group.py).

- `commit: after`: each message acked once it is processed (AckPolicy explicit); one a
  member took and never acked comes again to any member after `ack_wait`
  (`session_timeout_ms`): a redelivery;
- `before`: each message of a batch acked before the batch is processed: a member killed
  with a batch in hand has acked what it never processed, and nobody gets it again;
- `auto`: AckPolicy none: the server takes a message as done once it is delivered.

Acks are one message's each, not a position: they go to `events` as commits with the
message's stream sequence and `cumulative=False` (rows with detail `acked`), outside the
"commits backwards" verdict. The stream is one partition (`0`); a delivery's position is
its stream sequence.
"""
from __future__ import annotations

import asyncio
from typing import Optional

from ..consumer import GroupEnd

BATCH = 100
PARTITION = "0"


class NatsGroupMember:
    def __init__(self, client, name: str, spec, events, connect, close) -> None:
        self.client = client
        self.connect, self.close_nc = connect, close  # nats.py's, with its reconnect settings
        self.name = name
        self.spec = spec
        self.events = events
        self.durable = f"{client.stream_name}-{spec.name}"
        self.last_error: Optional[str] = None

    def _config(self):
        from nats.js import api

        policy = api.AckPolicy.NONE if self.spec.commit == "auto" else api.AckPolicy.EXPLICIT
        return api.ConsumerConfig(durable_name=self.durable, ack_policy=policy,
                                  ack_wait=self.spec.session_timeout_ms / 1000,
                                  deliver_policy=api.DeliverPolicy.ALL, max_ack_pending=-1)

    async def _subscribe(self, js):
        s = self.client
        while True:
            try:
                return await js.pull_subscribe(f"{s.stream_name}.>", durable=self.durable, stream=s.stream_name,
                                               config=self._config(), pending_msgs_limit=-1, pending_bytes_limit=-1)
            except Exception as e:  # the consumer's leader moving, a server down: again
                self.last_error = f"{type(e).__name__}: {e}"[:200]
                await asyncio.sleep(0.5)

    async def _ack(self, m) -> None:
        seq = m.metadata.sequence.stream
        try:
            await m.ack_sync(timeout=2)
            self.events.commit(PARTITION, seq, cumulative=False)
        except Exception as e:  # not acked: it comes again after ack_wait
            self.events.commit(PARTITION, seq, f"{type(e).__name__}: {e}"[:150], cumulative=False)

    async def _handle(self, msgs: list) -> None:
        if self.spec.commit == "before":
            for m in msgs:
                await self._ack(m)
        for m in msgs:
            seq = m.metadata.sequence.stream
            self.events.process(m.data, PARTITION, seq, str(seq))
            if self.spec.commit == "after":
                await self._ack(m)

    async def _caught_up(self, js) -> Optional[str]:
        """None when the consumer has delivered the stream's last message and nothing
        delivered awaits its ack, else why not."""
        try:
            info = await js.consumer_info(self.client.stream_name, self.durable, timeout=2)
            last = (await js.stream_info(self.client.stream_name)).state.last_seq
        except Exception as e:
            return f"{type(e).__name__}: {e}"[:200]
        if info.delivered.stream_seq < last or info.num_ack_pending:
            return f"delivered {info.delivered.stream_seq} of {last}, {info.num_ack_pending} awaiting an ack"
        return None

    async def _run(self, finishing, idle: float) -> str:
        from nats.errors import TimeoutError as NatsTimeout

        nc = await self.connect(self.client.servers(), f"brokerchaos-{self.name}", 30)
        try:
            js = nc.jetstream(timeout=2)
            psub = await self._subscribe(js)  # no assignment: every member may get any message
            end = GroupEnd(idle)
            while True:
                try:
                    msgs = await psub.fetch(batch=BATCH, timeout=0.5)
                except (NatsTimeout, asyncio.TimeoutError):
                    msgs = []
                except Exception as e:
                    self.last_error = f"{type(e).__name__}: {e}"[:200]
                    msgs = []
                    await asyncio.sleep(0.2)
                if msgs:
                    end.got()
                    await self._handle(msgs)
                if not finishing.is_set() or msgs:
                    continue
                detail = end.check(await self._caught_up(js), self.last_error)
                if detail is not None:
                    return detail
        finally:
            await self.close_nc(nc)

    def run(self, finishing, idle: float) -> str:
        return asyncio.run(self._run(finishing, idle))

    def close(self) -> None:
        """Nothing left open: run() closed its connection."""
