"""Where the project keeps what it fetches or builds, outside the work tree: the Maven sets,
nats-server releases, VerneMQ unpacked, the power-off layer and the Go that builds it."""
from __future__ import annotations

import fcntl
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

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


# A download that failed on the network (a DNS answer that did not come: CI saw Maven's
# "Temporary failure in name resolution" for a pom Maven Central served minutes later) is
# tried again after each of these waits, a little under two minutes in all.
RETRY_WAITS_S = (5.0, 20.0, 60.0)
NO_DOWNLOAD = "BROKERCHAOS_NO_DOWNLOAD"
NETWORK_WORDS = ("Could not transfer artifact", "Temporary failure in name resolution", "Name or service not known",
                 "NewConnectionError", "ConnectTimeout", "ReadTimeout", "Connection reset", "Connection refused",
                 "dial tcp", "i/o timeout", "TLS handshake timeout", "connection reset by peer", "unexpected EOF",
                 "Network is unreachable", "timed out")


def network_failed(output: str) -> bool:
    """Whether a download's output names a failure of the network (worth another try), not
    an answer (a release that does not exist is not tried again)."""
    return any(w in output for w in NETWORK_WORDS)


def retried(attempt: Callable[[], tuple[Any, str]], what: str, waits: tuple[float, ...] = RETRY_WAITS_S,
            sleep: Callable[[float], None] = time.sleep) -> tuple[Any, str]:
    """`attempt()` -> (exit code, output), made again after each of `waits` while it fails
    on the network; the last (code, output). Each wait is said on stderr. With
    $BROKERCHAOS_NO_DOWNLOAD set (`make test`, after fetching tests/releases.txt), nothing is
    attempted: (1, why), naming what was asked for."""
    if os.environ.get(NO_DOWNLOAD):
        return 1, f"{what}: not in the cache, and {NO_DOWNLOAD} is set ({os.environ[NO_DOWNLOAD]})"
    code, out = attempt()
    for wait in waits:
        if code == 0 or not network_failed(out):
            break
        print(f"{what}: the network failed ({_first_line(out)}); trying again in {wait:.0f} s",
              file=sys.stderr, flush=True)
        sleep(wait)
        code, out = attempt()
    return code, out


def _first_line(out: str) -> str:
    hit = next((ln for ln in out.splitlines() if network_failed(ln)), out.strip()[:160])
    return hit.strip()[:160]
