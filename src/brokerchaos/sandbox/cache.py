"""Where the project keeps what it fetches or builds, outside the work tree: the Maven sets,
nats-server releases, VerneMQ unpacked, the power-off layer and the Go that builds it."""
from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

# how long a process waits for another one filling the same cache entry (a Maven resolve
# or a nats-server build is the longest: up to 15 minutes)
LOCK_WAIT_S = 1200.0


def cache_dir(kind: str) -> Path:
    """`$BROKERCHAOS_CACHE/<kind>`, else `~/.cache/brokerchaos/<kind>`."""
    base = os.environ.get("BROKERCHAOS_CACHE")
    return (Path(base) if base else Path.home() / ".cache" / "brokerchaos") / kind


@contextmanager
def filling(entry: Path, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """Held while this process fills cache `entry`: two processes at it (the test workers'
    first VerneMQ run, two sessions) take turns, the second finding it filled. A lock file
    beside the entry; TimeoutError naming it past `wait_s`."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    lock = entry.parent / f".{entry.name}.lock"
    with open(lock, "w") as fh:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"waited {wait_s:.0f} s for another process filling {entry} "
                                       f"(its lock: {lock})") from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
