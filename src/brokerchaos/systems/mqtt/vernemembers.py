"""A VerneMQ node replaced, as its documentation decommissions one: `vmq-admin cluster leave
node=N -k`, asked of another node, stops N's MQTT listeners (its sessions cut: they connect
again elsewhere), waits until N holds no online queue, migrates N's offline queues to the
others, takes N out of the cluster and stops it; its data is then deleted (a new machine).
At the heal a node starts in its place, empty, and joins the cluster; it holds what a node
holds (VerneMQ replicates no message: only the metadata, subscriptions and retained
messages, by SWC's exchange) once the cluster says every member runs and its own subscriber
store knows the receiver's subscription.

A VerneMQ node's name is its address (VerneMQ@10.0.0.N): the new node comes back under the
removed one's name, which a left node with its data deleted may do (same_name is moot)."""
from __future__ import annotations

import asyncio
import shutil
import time

from ...sandbox import process
from ..base import SystemError_

LEAVE_S = 60  # vmq-admin's own bound on the migration (its -t), seconds
EXIT_S = 60.0  # the node stopping itself (init:stop) once it has left


def other_live(cluster, node: str) -> str:
    live = [n for n in cluster.node_names if n != node and cluster.alive(n)]
    if not live:
        raise SystemError_(f"no running VerneMQ node to ask for {node}'s leave")
    return live[0]


def leave(cluster, node: str) -> dict:
    """`vmq-admin cluster leave node=N -k` through another node, then N's exit waited for
    (SIGKILL after EXIT_S: not on its own). What vmq-admin said and how long it took."""
    through = other_live(cluster, node)
    cluster.on_purpose.add(node)
    t0 = time.monotonic()
    said = cluster.admin(through, "cluster", "leave", f"node={cluster.nodename(node)}", "-k", "-t", str(LEAVE_S),
                         timeout=LEAVE_S + 30.0).strip()
    if "Done" not in said:
        raise SystemError_(f"vmq-admin cluster leave node={cluster.nodename(node)} -k: {said[-300:]}")
    on_its_own = process.wait_exit(cluster.procs[node], EXIT_S)
    if not on_its_own:
        cluster.kill(node)
    return {"through": through, "said": said.splitlines()[-1][:200], "left_after_s": round(time.monotonic() - t0, 3),
            "stopped_on_its_own": on_its_own}


def renew(cluster, node: str) -> None:
    """A stopped node's data deleted: the release's empty data directory in its place (the
    install and its configuration stay: they are the machine's)."""
    if cluster.alive(node):
        raise SystemError_(f"{node} is running: renew a stopped VerneMQ node")
    data = cluster.home(node) / "data"
    shutil.rmtree(data, ignore_errors=True)
    shutil.copytree(cluster.release / "data", data, dirs_exist_ok=True)


async def rejoin(cluster, node: str, client_id: str, rx_node: str, topic: str, timeout: float) -> dict:
    """The node started (empty) and joined to a running member, until the cluster says every
    member runs and the node's subscriber store knows the receiver's subscription (on the
    node the receiver is on; `client_id` empty: no receiver, the members alone), or
    `timeout`: the seconds it took (None: not within it)."""
    t0 = time.monotonic()
    await asyncio.to_thread(cluster.start_node, node)
    through, joined, last = other_live(cluster, node), False, "not yet asked"
    while time.monotonic() - t0 < timeout:
        await asyncio.sleep(1.0)
        if not cluster.alive(node):
            raise cluster.exited(node)
        try:
            if not joined:
                await asyncio.to_thread(cluster.admin, node, "cluster", "join",
                                        f"discovery-node={cluster.nodename(through)}")
                joined = True
            ok, last = await cluster.whole()
            if ok and not client_id:  # no receiver this run (a group's members): the members say it
                return {"in_sync_s": round(time.monotonic() - t0, 3), "through": through}
            if ok:
                out = await asyncio.to_thread(cluster.rpc, node, "vmq_subscriber_db", "read",
                                              '{[], <<"%s">>}.' % client_id)
                if subscribed_in(out, cluster.nodename(rx_node), topic):
                    return {"in_sync_s": round(time.monotonic() - t0, 3), "through": through}
                last = f"{node}'s subscriber store does not know {client_id}'s subscription yet"
        except SystemError_ as e:  # vmq-admin's commands register late after the port opens
            last = str(e)[:200]
    return {"in_sync_s": None, "through": through, "last": last}


def subscribed_in(record: str, nodename: str, topic: str) -> bool:
    """Whether a subscriber's record in a node's store, as `vmq_subscriber_db:read` printed
    it (`[{'VerneMQ@10.0.0.2',false,[{[<<"bc">>,<<"t">>],1}]}]`: node, clean session,
    topic filters and QoS), holds a subscription to `topic` on the node `nodename`."""
    flat = "".join(record.split())  # the printer breaks long terms over lines
    levels = "[" + ",".join(f'<<"{level}">>' for level in topic.split("/")) + "]"
    sessions = ["{'" + part for part in flat.split("{'")[1:]]  # one per node with a session of it
    return any(s.startswith(f"{{'{nodename}',") and f"{{{levels}," in s for s in sessions)
