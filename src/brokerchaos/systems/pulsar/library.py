"""What every part of the Pulsar client side takes from pulsar-client the same way: a send
result's outcome, a client closed whatever the broker says, and the one native log a
process's clients write."""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Optional

# results meaning the message was never written
DEFINITE = frozenset({
    "ProducerQueueIsFull", "AlreadyClosed", "InvalidMessage", "MessageTooBig", "TopicTerminated",
    "ProducerBlockedQuotaExceededError", "ProducerBlockedQuotaExceededException", "ProducerFenced",
    "InvalidTopicName", "AuthorizationError", "AuthenticationError", "InvalidConfiguration",
})


_OUTCOMES: dict[int, tuple[str, Optional[str]]] = {}


def outcome_of(result) -> tuple[str, Optional[str]]:
    """A send callback's result -> (kind, detail). Remembered by the result's number: its
    name (pybind11 finds it among the enum's entries) cost 1.3 µs a message, 0.3 now, on
    the one thread the recorded producer has."""
    try:
        key = int(result)
    except (TypeError, ValueError):
        key = None
    known = _OUTCOMES.get(key)
    if known is not None:
        return known
    name = getattr(result, "name", str(result)).split(".")[-1]
    known = ("ack", None) if name == "Ok" else (("nack" if name in DEFINITE else "unknown"), name)
    if key is not None:
        _OUTCOMES[key] = known
    return known


class SharedInstances:
    """workload.topics: one client library instance per producer (`p1` for `p1.t3`), shared
    by its topics' producers with its connections, as an application multiplexes its topics
    over one client; made on first use, closed when its last user lets go."""

    def __init__(self, make) -> None:
        self.make = make
        self.by: dict[str, list] = {}  # producer -> [client, users]

    def take(self, producer: str):
        entry = self.by.setdefault(producer.split(".")[0], [None, 0])
        if entry[0] is None:
            entry[0] = self.make()
        entry[1] += 1
        return entry[0]

    async def release(self, producer: str, client) -> None:
        """One user fewer of a shared instance (a client not shared is closed at once)."""
        base = producer.split(".")[0]
        entry = self.by.get(base)
        if entry is None or entry[0] is not client:
            await _close(client)
            return
        entry[1] -= 1
        if entry[1] <= 0:
            del self.by[base]
            await _close(client)


async def _close(client) -> None:
    """Close a pulsar.Client, whatever the broker says. Seen in CI after a bookie kill: the
    broker answered no CLOSE_PRODUCER within the operation timeout (its pending writes were
    still stuck) and close() raised Timeout, which ended the whole session. By then every
    outcome is recorded: a close that fails has nothing left to tell."""
    try:
        await asyncio.to_thread(client.close)
    except Exception:
        pass


# The C++ client keeps the first logger a process gives it (later clients' are ignored), so
# a process has one client log: the first client's, in its run's log directory, at INFO (a
# few lines per connection, none per message). Native, not a Python logger: the C++ client
# asks a Python logger about every line, DEBUG included, several per message, each taking
# the interpreter lock from the thread that sends or from an I/O thread (with outcome_of's
# lookup, 4 rounds: the recorded producer 15,400 -> 21,400 msg/s, the bare client's loop,
# which makes its clients here too, 23,100 -> 30,700), and a client freed while its I/O
# threads log through Python can deadlock.
_LOG_FILE: Optional[Path] = None


def client_logger(logdir: Path):
    import pulsar

    global _LOG_FILE
    if _LOG_FILE is None:
        logdir.mkdir(parents=True, exist_ok=True)
        _LOG_FILE = logdir / "pulsar-client.log"
    return pulsar.FileLogger(pulsar.LoggerLevel.Info, str(_LOG_FILE))


def log_file() -> Optional[Path]:
    """The process's client log (None before its first client)."""
    return _LOG_FILE
