"""A subscription in effect on every node, where the broker replicates its subscriptions
between nodes (a cluster with `subscription_known`: VerneMQ). A SUBACK speaks only of the
node that sent it; a message published on a node that does not know the subscription yet
is acked and routed to nobody, so the write starts only once every node knows it."""
from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable, Optional

from ..base import SystemError_

# how long the receiver's subscription may take to reach every node (VerneMQ 2.1.2: a lost
# broadcast waited once 61 s for an exchange to repair it) ...
SUBSCRIPTION_S = 60.0
# ... and after how long it is made again (a new write to the subscriber store, broadcast anew)
RESUBSCRIBE_S = 6.0


async def in_effect(cluster, client_id: str, node: str, topic: str,
                    again: Callable[[], Awaitable[None]]) -> Optional[str]:
    """Until every node knows `client_id`'s subscription to `topic` on `node`, calling
    `again` (UNSUBSCRIBE, SUBSCRIBE) each RESUBSCRIBE_S it does not; how long that took and
    how often it was made again, or None where the cluster does not replicate subscriptions.
    Raises SystemError_ after SUBSCRIPTION_S."""
    known = getattr(cluster, "subscription_known", None)
    if known is None:
        return None
    t0 = time.monotonic()
    retry, times = t0 + RESUBSCRIBE_S, 0
    while True:
        ok, why = await known(client_id, node, topic)
        now = time.monotonic()
        if ok:
            more = f", subscribed {times} more times" if times else ""
            return f"{why} {now - t0:.1f} s after its SUBACK{more}"
        if now - t0 > SUBSCRIPTION_S:
            raise SystemError_(f"the subscription of {client_id} is {why} {now - t0:.0f} s after its SUBACK, "
                               f"subscribed {times} more times (the broker did not replicate it)")
        if now > retry:
            await again()
            retry, times = time.monotonic() + RESUBSCRIBE_S, times + 1
        await asyncio.sleep(0.5)
