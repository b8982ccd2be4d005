"""A node's wall clock, moved for the processes the harness starts there (the `clock` fault).

libfaketime (Debian's `libfaketime`) is preloaded into each process of a node whose cluster
offers `clock` and whose scenario has a clock fault. It reads the node's clock file (an
offset in seconds, `+0` when nothing is moved) about once a second, so a change is seen
within two seconds. Only the wall clock moves (CLOCK_REALTIME, gettimeofday, time()): the
monotonic clocks stay true, as they do on a machine whose NTP steps the clock. What it
reaches is what calls the C library for the time: JVMs (Kafka, ZooKeeper), not Go binaries
(NATS: the Go runtime reads the kernel's clock itself), not Redis (its jemalloc and
libfaketime call each other at start and the server hangs: seen with 0.9.10).
"""
from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import Optional

# how often (s) a process rereads its clock file: libfaketime's FAKETIME_CACHE_DURATION
REREAD_S = 1
# within how long a process sees a new offset: libfaketime compares whole seconds, rereading
# once more than REREAD_S has passed since the last read (seen: 1 of 3 JVMs 1.5 s after)
SEEN_WITHIN_S = 2 * REREAD_S


class ClockError(RuntimeError):
    """libfaketime is not installed (make setup installs it)."""


def library() -> str:
    """The preload library's path, or ClockError naming what to install."""
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    if not found:
        raise ClockError("libfaketime is not installed (Debian package libfaketime; make setup installs it)")
    return found[0]


def env(clock_file: Path, base: Optional[dict] = None) -> dict:
    """The environment of a process whose wall clock follows `clock_file`."""
    return {**(os.environ if base is None else base),
            "LD_PRELOAD": library(),
            "FAKETIME_TIMESTAMP_FILE": str(clock_file),
            "FAKETIME_CACHE_DURATION": str(REREAD_S),
            "FAKETIME_DONT_FAKE_MONOTONIC": "1", "DONT_FAKE_MONOTONIC": "1",  # 0.9.10 reads either
            # else its pthread_cond_timedwait returns at once: a JVM's timed waits (Object.wait,
            # parkNanos) spin, and a Kafka broker took minutes to start
            "FAKETIME_FORCE_MONOTONIC_FIX": "0",
            "FAKETIME_DONT_RESET": "1"}  # a child process keeps the offset, not a new start


def set_offset(clock_file: Path, seconds: float) -> None:
    """Move the clock `seconds` from true time (0: back to true; fractions to the ms, as a
    drifting clock's steps are); written whole, then renamed, so a process never reads half
    an offset."""
    clock_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = clock_file.with_suffix(".tmp")
    tmp.write_text(f"{int(seconds):+d}\n" if seconds == int(seconds) else f"{seconds:+.3f}\n")
    os.replace(tmp, clock_file)
