"""NATS JetStream: nats-server from Debian or a release of `cluster.version` (natsbin.py),
the nats-py client.

Leader: `$JS.API.STREAM.INFO.<stream>` -> cluster.leader (a server name, which we set to
the node name). Dedup: the `Nats-Msg-Id` header within the stream's duplicate window.
Publishing uses core publish with a per-message reply subject instead of js.publish, so
thousands of messages can be in flight at once (about 2x the throughput here).
"""
from __future__ import annotations

import asyncio
import json
import time
from typing import Optional

import nats
from nats.errors import NoServersError, TimeoutError as NatsTimeout
from nats.js import api
from nats.js.errors import APIError, NotFoundError

from ..errors import ScenarioError
from . import natsbin
from .base import (COORDINATOR, EVERY, REPLICAS, STEPDOWN, Client, ClientEvents, DeliverCallback, OutcomeCallback,
                   Roles, System, SystemError_)
from .consumer import LiveConsumer
from .natscluster import NatsOptions, NatsServers, _whole, meta_leader, meta_whole, node_of_server
from .registry import SYSTEMS
from .runtime import http_get

def _quiet(*_a, **_k):
    # nats-py logs every disconnect at ERROR; the history records what matters.
    async def noop(*_a, **_k):
        return None

    return noop


async def _close(nc) -> None:
    """Close a connection within 5 s whatever state it is in (the broker may be dead)."""
    if nc is None:
        return
    try:
        await asyncio.wait_for(nc.close(), 5)
    except Exception:  # closing anyway
        pass


async def _connect(servers: list[str], name: str, timeout: float, disconnected=None, reconnected=None,
                   check=lambda: None):
    """`check` raises when waiting is hopeless (a server of ours exited while starting)."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        check()
        try:
            return await nats.connect(
                servers=servers,
                name=name,
                connect_timeout=2,
                reconnect_time_wait=0.2,
                max_reconnect_attempts=-1,
                pending_size=256 * 1024 * 1024,
                error_cb=_quiet(),
                disconnected_cb=disconnected or _quiet(),
                reconnected_cb=reconnected or _quiet(),
                allow_reconnect=True,
            )
        except (NoServersError, OSError, NatsTimeout, asyncio.TimeoutError) as e:
            last = e
            await asyncio.sleep(0.1)
    raise SystemError_(f"could not connect to NATS at {servers} within {timeout}s: {last!r}")


class NatsClient(Client):
    # reconnect_time_wait 0.2 s between attempts at one server
    reconnect_steps_ms = tuple(200.0 * k for k in range(1, 11))

    def __init__(self, ctx, cluster) -> None:
        super().__init__(ctx, cluster)
        self.nc = None
        self.js = None

    def servers(self) -> list[str]:
        return ["nats://{}:{}".format(*self.cluster.address(n)) for n in self.cluster.node_names]

    def node_of_url(self, netloc: str) -> Optional[str]:
        host, _, port = netloc.rpartition(":")
        return self.cluster.node_at(host, int(port)) if port.isdigit() else None

    async def connect(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        self.nc = await _connect(self.servers(), "brokerchaos-admin", timeout, check=self._all_running)
        self.js = self.nc.jetstream(timeout=2)
        last: Exception | None = None
        while time.monotonic() < deadline:
            self._all_running()
            try:
                await self.js.account_info()
                return
            except (APIError, NatsTimeout, asyncio.TimeoutError) as e:
                last = e
                await asyncio.sleep(0.1)
        raise SystemError_(f"JetStream not ready within {timeout}s: {last!r}")

    def _all_running(self) -> None:
        """A server of ours that exited while starting (its configuration refused: its log
        says why) is not waited for."""
        for n in self.cluster.node_names:
            if not self.cluster.alive(n):
                raise self.cluster.exited(n)

    async def create_stream(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                await self.js.add_stream(
                    name=self.stream_name,
                    subjects=[f"{self.stream_name}.>"],
                    num_replicas=self.ctx.scenario.cluster.replicas,
                    storage=api.StorageType.FILE,
                    duplicate_window=120.0,
                )
                return self.stream_name
            except (APIError, NatsTimeout, asyncio.TimeoutError) as e:
                # right after start-up the meta leader may not yet know every peer
                last = e
                await asyncio.sleep(0.2)
        raise SystemError_(f"could not create stream {self.stream_name} within {timeout}s: {last!r}")

    async def drop_stream(self) -> None:
        try:
            await self.js.delete_stream(self.stream_name)
        except Exception:  # best effort
            pass

    async def info(self):
        return await self.js.stream_info(self.stream_name)

    def producer(self, name: str) -> "NatsProducer":
        return NatsProducer(self, name)

    def reader(self, name: str) -> "NatsReader":
        return NatsReader(self, name)

    def consumer(self, name: str) -> "NatsConsumer":
        return NatsConsumer(self, name)

    group_kinds = ("durable",)  # one durable pull consumer, shared by the members

    def group_member(self, name: str, spec, events):
        from .natsgroup import NatsGroupMember

        return NatsGroupMember(self, name, spec, events, _connect, _close)

    async def close(self) -> None:
        await _close(self.nc)
        self.nc = None


class NatsRoles(Roles):
    """Leader and replicas from `$JS.API.STREAM.INFO`; the coordinator is the meta leader."""

    client: NatsClient

    async def leader(self) -> str:
        # Two ways at once, the first answer wins: the JetStream API over the client's own
        # connection, which queues behind the producers' acks (1.3 s seen under load, past
        # its 5 s timeout with 50 ms of delay on every node: the kill then never happened),
        # and each node's monitoring endpoint, believed only from a node naming itself
        tries = [asyncio.ensure_future(self._leader_by_api())]
        if len(self.cluster.node_names) > 1:
            tries += [asyncio.ensure_future(self._leader_by_jsz(n)) for n in self.cluster.node_names]
        try:
            pending = set(tries)
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for t in done:
                    if not t.cancelled() and t.exception() is None:
                        return t.result()
            return tries[0].result()  # none answered: the API's own error
        finally:
            for t in tries:
                t.cancel()
            await asyncio.gather(*tries, return_exceptions=True)

    async def _leader_by_api(self) -> str:
        info = await self.client.info()
        if info.cluster is None or not info.cluster.leader:
            # single server without clustering: it is the leader
            if len(self.cluster.node_names) == 1:
                return self.cluster.node_names[0]
            raise SystemError_(f"stream {self.ctx.stream_name} has no leader")
        return await node_of_server(self.cluster, info.cluster.leader)

    async def _leader_by_jsz(self, node: str) -> str:
        lead = (await self._jsz_leaders(node)).get(self.ctx.stream_name)
        if lead and await node_of_server(self.cluster, lead) == node:
            return node
        raise LookupError(f"{node} does not say it leads {self.ctx.stream_name}")

    async def _jsz_streams(self, node: str) -> dict[str, dict]:
        """Each stream `node` holds a copy of, as its monitoring endpoint says (its own state)."""
        body = json.loads(await http_get(*self.cluster.address(node, "monitor"), "/jsz?accounts=true&streams=true",
                                         5.0))
        return {st.get("name"): st for account in body.get("account_details") or []
                for st in account.get("stream_detail") or []}

    async def _jsz_leaders(self, node: str) -> dict[str, str]:
        """Each stream's leader (a server name), as `node`'s monitoring endpoint says."""
        return {name: lead for name, st in (await self._jsz_streams(node)).items()
                if (lead := (st.get("cluster") or {}).get("leader"))}

    async def copies_behind(self) -> list[str]:
        """Each replica whose own copy (its /jsz) ends before the leader's last seq. NATS 2.9
        calls a peer added by a scale-up current before its catch-up has run: seen, a consumer
        placed on it delivered nothing of 3,997 for 5 s, the leader having caught up one of
        its two new peers."""
        last = (await self.client.info()).state.last_seq
        behind = []
        for n in await self.replicas():
            mine = ((await self._jsz_streams(n)).get(self.ctx.stream_name) or {}).get("state") or {}
            if mine.get("last_seq", 0) < last:
                behind.append(f"{n} holds it to seq {mine.get('last_seq', 0)} of {last}")
        return behind

    async def replicas(self) -> list[str]:
        info = await self.client.info()
        if info.cluster is None:
            return list(self.cluster.node_names[:1])
        names = [info.cluster.leader] + [r.name for r in (info.cluster.replicas or [])]
        return [await node_of_server(self.cluster, x) for x in names]

    async def coordinator(self) -> str:
        return await meta_leader(self.cluster)

    async def group_coordinator(self, group: str) -> str:
        """The leader of the group's durable consumer (its Raft group's, not the stream's)."""
        durable = f"{self.ctx.stream_name}-{group}"
        info = await self.client.js.consumer_info(self.ctx.stream_name, durable, timeout=2)
        if info.cluster is None or not info.cluster.leader:
            if len(self.cluster.node_names) == 1:
                return self.cluster.node_names[0]
            raise SystemError_(f"consumer {durable} has no leader")
        return await node_of_server(self.cluster, info.cluster.leader)

    async def whole(self) -> tuple[bool, str]:
        return await meta_whole(self.cluster)

    async def stepdown(self, node: str, role: str) -> str:
        """The JetStream API's step-down: the stream leader's, or the meta leader's."""
        if role == "coordinator":
            holder, subject = await meta_leader(self.cluster), "$JS.API.META.LEADER.STEPDOWN"
        else:
            holder, subject = await self.leader(), f"$JS.API.STREAM.LEADER.STEPDOWN.{self.ctx.stream_name}"
        if holder != node:
            raise LookupError(f"{node} is not the {role} ({holder} is)")
        msg = await self.client.nc.request(subject, b"", timeout=5)
        reply = json.loads(msg.data or b"{}")
        if reply.get("error"):
            raise SystemError_(f"{subject}: {reply['error'].get('description') or reply['error']}")
        return subject

    async def led_by(self, node: str) -> list[str]:
        """The streams `node` says it leads (its own /jsz)."""
        leaders = await self._jsz_leaders(node)
        mine = {lead for lead in set(leaders.values()) if await node_of_server(self.cluster, lead) == node}
        return sorted(name for name, lead in leaders.items() if lead in mine)

    async def stepdown_every(self, node: str) -> dict:
        """A step-down request for each stream `node` leads, all at once (what an operator
        scripts before maintenance: 2.9 has no step-down of a whole server but lame duck)."""
        streams = await self.led_by(node)

        async def one(name: str) -> Optional[str]:
            try:
                msg = await self.client.nc.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{name}", b"", timeout=5)
                err = json.loads(msg.data or b"{}").get("error")
                return (err.get("description") or str(err)) if err else None
            except Exception as e:  # said in the effect; the others went on
                return f"{type(e).__name__}: {e}"

        whys = await asyncio.gather(*(one(n) for n in streams))
        failed = {n: why for n, why in zip(streams, whys) if why}
        return {"verb": "$JS.API.STREAM.LEADER.STEPDOWN.<stream>, each stream led", "streams": len(streams),
                "stepped_down": len(streams) - len(failed), "failed": dict(list(failed.items())[:20])}

    async def set_replicas(self, count: int) -> dict:
        """The stream's replica count changed to `count` (`$JS.API.STREAM.UPDATE`, its config
        otherwise as it is): the peers it had, the count it had, and the peers the update's
        reply names."""
        info = await self.client.info()
        before = info.config.num_replicas
        peers = await self.replicas()
        config = info.config.evolve(num_replicas=count).as_dict()
        subject = f"$JS.API.STREAM.UPDATE.{self.ctx.stream_name}"
        # the client's JetStream context waits 2 s; a new peer set is agreed by the meta group
        msg = await self.client.nc.request(subject, json.dumps(config).encode(), timeout=10)
        reply = json.loads(msg.data or b"{}")
        if reply.get("error"):
            raise SystemError_(f"{subject}: {reply['error'].get('description') or reply['error']}")
        c = reply.get("cluster") or {}
        after = [c.get("leader")] + [r.get("name") for r in c.get("replicas") or []]
        return {"verb": f"{subject} num_replicas {before} -> {count}",
                "replicas_before": before, "peers_before": peers,
                "peers_after": [await node_of_server(self.cluster, x) for x in after if x]}

    async def stream_ready(self) -> bool:
        """Also true when a whole cluster says the stream does not exist (a power cut took its
        files): there is nothing to wait for, and the read says what is gone."""
        try:
            c = (await self.client.info()).cluster
        except NotFoundError:
            return await _whole(self.cluster)
        return c is None or bool(c.leader and all(r.current for r in (c.replicas or [])))


@SYSTEMS.register("nats")
class Nats(System):
    description = "NATS JetStream cluster (nats-server), stream with N replicas, file storage"
    LocalCluster = NatsServers
    Client = NatsClient
    Roles = NatsRoles
    Options = NatsOptions
    # the JetStream meta leader, from the monitoring endpoint; the API's leader step-downs
    offers = frozenset({COORDINATOR, STEPDOWN, EVERY, REPLICAS})
    external_services = ("monitor",)  # /jsz, /varz: the meta leader, health, server names

    @classmethod
    def machine_needs(cls, options, version):
        return ("nats-server",)

    @classmethod
    def version_error(cls, scenario) -> Optional[str]:
        return natsbin.version_error(scenario.cluster.version)

    @classmethod
    def install(cls, scenario) -> None:
        if scenario.external is None:
            natsbin.binary(scenario.cluster.version)

    @classmethod
    def check(cls, scenario) -> None:
        sync = NatsOptions.model_validate(scenario.options).sync_interval
        v = scenario.cluster.version
        if sync != "default" and (v in (None, natsbin.SYSTEM) or (natsbin.release(v) or (0,)) < (2, 10, 0)):
            raise ScenarioError(f"scenario field 'options.sync_interval': nats-server {v or 'system'} has no "
                                "sync_interval (2.9.10 refuses it); set cluster.version to a 2.10 release or later")


class NatsProducer(ClientEvents):
    def __init__(self, client: NatsClient, name: str) -> None:
        self.system = client
        self.name = name
        self.subject = f"{client.stream_name}.{name}"
        self.dedup = client.ctx.scenario.workload.dedup
        self.nc = None
        self.inbox = ""
        self._at: Optional[str] = None
        self._closing = False

    async def open(self, on_outcome: OutcomeCallback) -> None:
        async def disconnected() -> None:
            if not self._closing:  # nats-py calls it on our own close too
                self.on_event("disconnect", self._at, "nats-py disconnected_cb")

        async def reconnected() -> None:
            self._at = self.node()
            self.on_event("reconnect", self._at, "nats-py reconnected_cb")

        self.nc = await _connect(self.system.servers(), f"brokerchaos-{self.name}", 30, disconnected, reconnected)
        self._at = self.node()  # the node a disconnect leaves (nats-py no longer says)
        self.inbox = self.nc.new_inbox()
        prefix_len = len(self.inbox) + 1
        handled = [0]

        async def on_reply(msg) -> None:
            handled[0] += 1
            if handled[0] % 256 == 0:
                # nats-py drains a subscription's backlog without yielding; a burst of
                # thousands of acks would otherwise hold back the nemesis
                await asyncio.sleep(0)
            value = int(msg.subject[prefix_len:])
            node = self.node()
            hdr = msg.headers
            if hdr and hdr.get("Status") == "503":
                on_outcome(value, "nack", None, node, "no responders")
                return
            try:
                body = json.loads(msg.data)
            except ValueError:
                on_outcome(value, "nack", None, node, f"unparseable reply {msg.data[:80]!r}")
                return
            err = body.get("error")
            if err:
                on_outcome(value, "nack", None, node, f"{err.get('code')} {err.get('description')}")
                return
            on_outcome(value, "ack", str(body.get("seq")), node, "duplicate" if body.get("duplicate") else None)

        await self.nc.subscribe(self.inbox + ".*", cb=on_reply, pending_msgs_limit=-1, pending_bytes_limit=-1)

    async def send(self, value: int, payload: bytes) -> None:
        headers = {"Nats-Msg-Id": f"{self.name}-{value}"} if self.dedup else None
        await self.nc.publish(self.subject, payload, reply=f"{self.inbox}.{value}", headers=headers)

    def node(self) -> Optional[str]:
        nc = self.nc
        if nc is None or nc.connected_url is None or not nc.is_connected:
            return None
        return self.system.node_of_url(nc.connected_url.netloc)

    async def close(self) -> None:
        self._closing = True
        await _close(self.nc)


class NatsReader:
    """Reads the whole stream from its first message with an ephemeral pull consumer."""

    def __init__(self, client: NatsClient, name: str) -> None:
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

    def __init__(self, client: NatsClient, name: str) -> None:
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
