"""A NATS server replaced, as an operator replaces a machine and as Jepsen's membership
nemesis does it (nats-server#7545): the server shut down and its store deleted, then
peer-removed from the JetStream meta group (`$JS.API.SERVER.REMOVE`, what `nats server raft
peer-remove` sends, a request of the system account's); at the heal a server starts in its
place with an empty store, under a name of its own (n2-r1: NATS asks that a removed server
not come back under its name) or, as Jepsen's did, the removed one's. The meta group places
the stream's missing replica on it, which copies the stream from the leader.

The servers get a system account only when a scenario needs it (`replace`; cluster.py's
SYSTEM_ACCOUNT): a `sys` user in it for these requests, and `no_auth_user` keeps every other
client in the global account, as without accounts."""
from __future__ import annotations

import asyncio
import json
import time

from ..base import SystemError_
from .cluster import SYS_PASSWORD, SYS_USER, jsz, meta_leader
from .conn import _close, _connect

REMOVE_S = 30.0  # the meta group agreeing on a removal (a leader elected first, after a kill)


async def members(cluster) -> list[str]:
    """The meta group's peers as its leader names them (the leader first), offline ones
    included; [] when no leader answers."""
    try:
        lead = await meta_leader(cluster)
        meta = await jsz(cluster, lead)
    except (SystemError_, OSError, ValueError, asyncio.TimeoutError):
        return []
    names = [meta.get("leader")] + [p.get("name") for p in meta.get("replicas") or []]
    return [str(n) for n in names if n]


async def peer_remove(cluster, node: str, timeout: float = REMOVE_S) -> dict:
    """`$JS.API.SERVER.REMOVE` for server `node`, asked through the live servers as the system
    account until the meta leader says it is done (or `timeout`): its reply, and how long."""
    live = [n for n in cluster.node_names if n != node and cluster.alive(n)]
    if not live:
        raise SystemError_(f"no live server to peer-remove {node} through")
    servers = ["nats://{}:{}@{}:{}".format(SYS_USER, SYS_PASSWORD, *cluster.address(n)) for n in live]
    nc = await _connect(servers, "brokerchaos-sys", 10.0)
    t0, last = time.monotonic(), "no answer"
    try:
        while time.monotonic() - t0 < timeout:
            try:
                msg = await nc.request("$JS.API.SERVER.REMOVE", json.dumps({"peer": node}).encode(), timeout=5)
                reply = json.loads(msg.data or b"{}")
            except Exception as e:  # no meta leader yet (after a kill): asked again
                last = f"{type(e).__name__}: {e}"
                await asyncio.sleep(0.5)
                continue
            if reply.get("success"):
                return {"reply": "success", "removed_after_s": round(time.monotonic() - t0, 3)}
            last = str((reply.get("error") or {}).get("description") or reply)
            if "not found" in last.lower() or "not a member" in last.lower():
                return {"reply": last, "removed_after_s": round(time.monotonic() - t0, 3)}
            await asyncio.sleep(0.5)
    finally:
        await _close(nc)
    raise SystemError_(f"$JS.API.SERVER.REMOVE {node}: not done within {timeout:.0f} s ({last})")
