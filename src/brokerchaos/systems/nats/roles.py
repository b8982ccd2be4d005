"""Who holds what in a NATS cluster: the stream's leader and replicas (`$JS.API.STREAM.INFO`,
each server's /jsz), the JetStream meta leader (the coordinator), and what an operator asks
of them (step-downs, a replica count changed)."""
from __future__ import annotations

import asyncio
import json
import time
from typing import Optional

from nats.js.errors import NotFoundError

from ..base import Client, SystemError_
from ..roles import Roles
from ..runtime import http_get
from . import members
from .cluster import _whole, meta_leader, meta_whole, node_of_server

PEERS_S = 10.0  # a replica-count update's new peer set, named by the stream's info


class NatsRoles(Roles):
    """Leader and replicas from `$JS.API.STREAM.INFO`; the coordinator is the meta leader."""

    client: Client

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
        return await self.client.leader_node()

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
        try:
            last = (await self.client.info()).state.last_seq
        except NotFoundError:  # no stream (a power cut took its files): no copy to compare
            return []
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
        return [await node_of_server(self.cluster, x) for x in _peer_names(info.cluster)]

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
        t0 = time.monotonic()
        if len([x for x in after if x]) != count:  # 2.15 answers with the peers it had: the meta group moves them
            after = await self._peers_when(count)
        return {"verb": f"{subject} num_replicas {before} -> {count}",
                "replicas_before": before, "peers_before": peers,
                "peers_after": [await node_of_server(self.cluster, x) for x in after if x],
                "peers_settled_s": round(time.monotonic() - t0, 3)}

    async def _peers_when(self, count: int) -> list[str]:
        """The stream's peers (server names) once it names `count` of them, or as they are
        after PEERS_S."""
        t0, names = time.monotonic(), []
        while True:
            try:
                names = [x for x in _peer_names((await self.client.info()).cluster) if x]
            except Exception:  # a stream between leaders for a moment: asked again
                pass
            if len(names) == count or time.monotonic() - t0 > PEERS_S:
                return names
            await asyncio.sleep(0.1)

    async def remove_member(self, node: str, same_name: bool = False) -> dict:
        """A server removed for good (members.py): shut down, its store deleted, peer-removed
        from the meta group through the others; the server that takes its place is named anew
        (n2-r1), as NATS asks, unless `same_name` (Jepsen's nemesis: nats-server#7545)."""
        before = await members.members(self.cluster)
        name = self.cluster.server_name(node)
        await asyncio.to_thread(self.cluster.stop_node, node)
        new = await asyncio.to_thread(self.cluster.renew, node, not same_name)
        removed = await members.peer_remove(self.cluster, name)
        return {"verb": f"{node} shut down, its store deleted, $JS.API.SERVER.REMOVE {name}", "name": name,
                "new_name": new, "members_before": before, "members_after": await members.members(self.cluster),
                **removed}

    async def add_member(self, node: str, timeout: float) -> dict:
        """The server started again under its name with an empty store; waited for until the
        meta group names it and the stream has its replicas, each current."""
        want, name = (await self.client.info()).config.num_replicas, self.cluster.server_name(node)
        t0 = time.monotonic()
        await asyncio.to_thread(self.cluster.start_node, node)
        in_sync, peers = None, []
        while time.monotonic() - t0 < timeout:
            try:
                peers = [x for x in _peer_names((await self.client.info()).cluster) if x]
                if (name in await members.members(self.cluster) and len(peers) == want
                        and await self.stream_ready()):
                    in_sync = round(time.monotonic() - t0, 3)
                    break
            except Exception:  # the stream between leaders while the group changes: asked again
                pass
            await asyncio.sleep(0.2)
        return {"verb": f"{node} started again as {name}, its store empty", "name": name,
                "members_after": await members.members(self.cluster),
                "in_sync_s": in_sync, "stream_peers": peers,
                "copied": f"the stream's peers {peers}" + (", each current" if in_sync is not None else "")}

    async def stream_ready(self) -> bool:
        """Also true when a whole cluster says the stream does not exist (a power cut took its
        files): there is nothing to wait for, and the read says what is gone."""
        try:
            c = (await self.client.info()).cluster
        except NotFoundError:
            return await _whole(self.cluster)
        return c is None or bool(c.leader and all(r.current for r in (c.replicas or [])))


def _peer_names(c) -> list[str]:
    """A stream's peers as its info names them (servers): the leader first, then its replicas."""
    return [c.leader] + [r.name for r in c.replicas or []] if c is not None else []
