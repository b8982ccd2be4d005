"""Reading a NATS stream back: the end-of-run read (an ephemeral pull consumer from the first
message) and the live consumer (a durable one, each message acked)."""
from __future__ import annotations

import asyncio
import time

from nats.errors import TimeoutError as NatsTimeout
from nats.js import api
from nats.js.errors import APIError, NotFoundError

from ..base import Client, DeliverCallback
from ..consumer import LiveConsumer
from .cluster import _whole
from .conn import _close, _connect


class NatsReader:
    """Reads the whole stream from its first message with an ephemeral pull consumer."""

    def __init__(self, client: Client, name: str) -> None:
        self.system = client
        self.name = name

    async def read(self, deliver: DeliverCallback, idle: float) -> str:
        s = self.system
        nc = await _connect(s.servers(), f"brokerchaos-{self.name}", idle)
        try:
            js = nc.jetstream(timeout=2)
            deadline = time.monotonic() + idle
            info = await self._stream_info(js, idle, deadline)
            if isinstance(info, str):
                return info
            if info.state.messages == 0:
                return "complete"
            psub = await self._consumer(js, deadline)
            if isinstance(psub, str):
                return psub
            return await self._fetch_all(nc, js, psub, info.state.last_seq, deliver, idle)
        finally:
            await _close(nc)

    async def _stream_info(self, js, idle: float, deadline: float):
        """The stream's info, or why the read ends without it."""
        s = self.system
        last_err: Exception | None = None
        while time.monotonic() < deadline:
            try:
                return await js.stream_info(s.stream_name)
            except (APIError, NatsTimeout, asyncio.TimeoutError) as e:
                last_err = e
                await asyncio.sleep(0.2)
        if isinstance(last_err, NotFoundError) and await _whole(s.cluster):
            # not a stream out of reach: a whole cluster that no longer has it (a power cut
            # took its files before they were synced)
            return (f"complete: stream {s.stream_name} no longer exists (not found for {idle:.0f}s "
                    "while the JetStream meta group is whole)")
        return f"incomplete: stream {s.stream_name} unavailable for {idle:.0f}s ({type(last_err).__name__})"

    async def _consumer(self, js, deadline: float, start: int = 1):
        """An ephemeral pull consumer from stream seq `start`, or why there is none."""
        s = self.system
        where = dict(deliver_policy=api.DeliverPolicy.ALL) if start <= 1 else dict(
            deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start)
        while True:
            try:
                return await js.pull_subscribe(
                    f"{s.stream_name}.>",
                    stream=s.stream_name,
                    config=api.ConsumerConfig(
                        ack_policy=api.AckPolicy.NONE,
                        inactive_threshold=300.0,
                        **where,
                    ),
                    pending_msgs_limit=-1,
                    pending_bytes_limit=-1,
                )
            except (APIError, NatsTimeout, asyncio.TimeoutError) as e:
                if time.monotonic() > deadline:
                    return f"incomplete: could not create a consumer ({e!r})"
                await asyncio.sleep(0.2)

    async def _fetch_all(self, nc, js, psub, last_seq: int, deliver: DeliverCallback, idle: float) -> str:
        """Every message up to the stream's own last sequence. The consumer's num_pending is
        not trusted: NATS 2.9 reported 0 for a filtered consumer after a leader change while
        35 messages were still to come, which looked like acked loss."""
        s = self.system
        seen, renewed = 0, False
        progress_at = time.monotonic()
        while seen < last_seq:
            try:
                msgs = await psub.fetch(batch=5000, timeout=1)
            except (NatsTimeout, asyncio.TimeoutError, APIError):
                msgs = []
            if not msgs:
                try:
                    # the stream may really have lost its tail: then it ends earlier
                    last_seq = min(last_seq, (await js.stream_info(s.stream_name)).state.last_seq)
                except (APIError, NatsTimeout, asyncio.TimeoutError):
                    pass
                if seen >= last_seq:
                    break
                if time.monotonic() - progress_at > idle:
                    return f"incomplete: no progress for {idle:.0f}s at stream seq {seen} of {last_seq}"
                if not renewed and time.monotonic() - progress_at > idle / 2:
                    # a consumer delivers from its leader's own copy of the stream: one placed
                    # on a replica just restarted stopped at that copy's end (seen: seq 2860
                    # of 4137, for 10 s). A new one, from the next seq, once per stall
                    renewed = True
                    fresh = await self._consumer(js, time.monotonic() + idle / 4, start=seen + 1)
                    if not isinstance(fresh, str):
                        psub = fresh
                continue
            progress_at, renewed = time.monotonic(), False
            node = s.node_of_url(nc.connected_url.netloc) if nc.connected_url else None
            for m in msgs:
                seq = m.metadata.sequence.stream
                seen = max(seen, seq)
                deliver(m.data, str(seq), node)
        return "complete"


class NatsConsumer(LiveConsumer):
    """A durable pull consumer (replicated as the stream is), each message acked; nats-py
    reconnects the connection, and a consumer that has to be made again starts at the next
    stream sequence not yet delivered. Not acked cumulatively: a pull response lost with a
    killed server (seen: stream seqs 9993–9995, the batch in flight at a leader kill) would
    be acked by the next batch's ack and never come again; acked one by one, it comes back
    after `ack_wait` (2 s), a redelivery."""

    def __init__(self, client: Client, name: str) -> None:
        super().__init__(client, name)
        self.nc = None
        self.next_seq = 1

    async def consume(self, deliver: DeliverCallback) -> None:
        s = self.system
        if self.nc is None:
            self.nc = await _connect(s.servers(), f"brokerchaos-{self.name}", 10)
        js = self.nc.jetstream(timeout=2)
        psub = await js.pull_subscribe(
            f"{s.stream_name}.>", durable=f"live-{self.name}", stream=s.stream_name,
            config=api.ConsumerConfig(ack_policy=api.AckPolicy.EXPLICIT, ack_wait=2.0, opt_start_seq=self.next_seq,
                                      deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE, max_ack_pending=-1),
            pending_msgs_limit=-1, pending_bytes_limit=-1)
        while True:
            try:
                msgs = await psub.fetch(batch=1000, timeout=1)
            except (NatsTimeout, asyncio.TimeoutError):
                continue  # nothing new, or the consumer's leader is moving
            url = self.nc.connected_url
            node = s.node_of_url(url.netloc) if url else None
            for m in msgs:
                seq = m.metadata.sequence.stream
                deliver(m.data, str(seq), node)
                self.next_seq = max(self.next_seq, seq + 1)
                try:
                    await m.ack()
                except Exception:  # unacked, it comes again: a redelivery, recorded as such
                    pass

    async def shutdown(self) -> None:
        await _close(self.nc)
        self.nc = None
