"""Kafka's partition reassignment (the `reassign` fault): the run's partition moved to
other brokers while it is written, what `kafka-reassign-partitions` does. confluent-kafka
has no AlterPartitionReassignments, so kafka-clients' Admin does it
(java/KafkaReassign.java, one shot, run by jclient.run_once): the new brokers fetch the
log from the leader, join the ISR, and the controller then drops the old ones."""
from __future__ import annotations

import asyncio

from ..base import SystemError_


async def assignment(roles) -> tuple[list[str], dict[str, int]]:
    """The partition's replicas in their assigned order (the first is the preferred leader),
    and every broker's id by node."""
    md, p = await roles.partition()
    ids = {roles.node_of(md, b): b for b in md.brokers}
    return [roles.node_of(md, r) for r in p.replicas], ids


async def reassign(roles, replicas: list[str], timeout: float) -> dict:
    """Move the partition to `replicas` (in that order) and wait until the controller has
    finished and every one of them is in sync; what it was, what it is, and how long."""
    before, ids = await assignment(roles)
    unknown = [n for n in replicas if n not in ids]
    if unknown:
        raise SystemError_(f"no broker of the cluster's metadata is {', '.join(unknown)}")
    log = roles.ctx.logdir / "java-reassign.log"
    args = [roles.client.bootstrap(), roles.ctx.stream_name, "0", ",".join(str(ids[n]) for n in replicas),
            str(int(timeout * 1000))]
    from ..jclient import run_once

    said = await asyncio.to_thread(run_once, "brokerchaos.KafkaReassign", roles.client.java_set, args, log,
                                   timeout + 30)
    if said[0] != "done":
        raise SystemError_(f"reassigning {roles.ctx.stream_name} to {','.join(replicas)}: {' '.join(said[1:])}")
    _, ms, now, isr, leader = said

    node = {b: n for n, b in ids.items()}

    def names(said_ids: str) -> list[str]:
        return [node.get(int(i), i) for i in said_ids.split(",") if i]

    return {"verb": "alterPartitionReassignments", "replicas_before": before, "replicas_after": names(now),
            "isr_after": names(isr), "leader_after": names(leader)[0] if leader != "-1" else None,
            "done_s": int(ms) / 1000}
