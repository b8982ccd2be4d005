"""Kafka's preferred-leader election (the `elect-leaders` fault): every partition of the
run's topics led again by its first replica, what an operator runs after a rolling restart,
and what moved."""
from __future__ import annotations

import asyncio
from typing import Optional

from ...scenario import topic_names


def run_topics(roles) -> list[str]:
    """The run's topics: its stream and, with workload.topics, every topic's."""
    return [roles.ctx.stream_name] + [roles.client.for_topic(t).stream_name
                                      for t in topic_names(roles.ctx.scenario.workload.topics)[1:]]


async def leaders(roles, topics: list[str]) -> dict[str, Optional[str]]:
    """`topic/partition` -> its leader now (None: none), from one metadata request."""
    md = await roles.client.metadata()
    out: dict[str, Optional[str]] = {}
    for name in topics:
        t = md.topics.get(name)
        for p in (t.partitions.values() if t is not None and t.error is None else []):
            b = md.brokers.get(p.leader)
            out[f"{name}/{p.id}"] = roles.cluster.node_at(b.host, b.port) if b is not None else None
    return out


async def elect_preferred(roles) -> dict:
    """AdminClient.elect_leaders(PREFERRED) over every partition of the run's topics; what
    moved, from one metadata look before and one after (the controller answers once each
    partition's election is decided)."""
    from confluent_kafka import ElectionType, TopicPartition

    topics = run_topics(roles)
    before = await leaders(roles, topics)
    parts = [TopicPartition(k.rsplit("/", 1)[0], int(k.rsplit("/", 1)[1])) for k in before]
    # no request_timeout: confluent-kafka 2.16.1's binding refuses any timeout argument of
    # elect_leaders (SystemError: "more argument specifiers than keyword list entries");
    # the wait is bounded here instead
    fut = roles.client._admin().elect_leaders(ElectionType.PREFERRED, parts)
    answers = await asyncio.to_thread(fut.result, 35)
    errors = {f"{tp.topic}/{tp.partition}": str(e) for tp, e in answers.items() if e is not None}
    await asyncio.sleep(0.5)  # the brokers' metadata follows the controller
    after = await leaders(roles, topics)
    moved = {k: f"{before[k]} -> {after.get(k)}" for k in before if after.get(k) != before[k]}
    # ELECTION_NOT_NEEDED: the preferred replica already leads, the common answer
    return {"partitions": len(parts), "moved": moved,
            "errors": {k: e for k, e in errors.items() if "ELECTION_NOT_NEEDED" not in e}}
