"""A process's line in /proc (`/proc/PID/stat`, or one thread's), read in one place: its
fields after the command name (which may hold spaces and parentheses), so the state is
field 0 and the start time (clock ticks since boot) field 19."""
from __future__ import annotations

import os
from typing import Optional


def fields(pid: int, thread: Optional[str] = None) -> Optional[list[str]]:
    """The stat fields after the command name; None when the process (or thread) is gone."""
    path = f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat"
    try:
        with open(path) as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def state(pid: Optional[int]) -> Optional[str]:
    """The state letter (R, S, D, T, Z, …); None when gone."""
    f = fields(pid) if pid is not None else None
    return f[0] if f else None


def start_time(pid: int) -> Optional[str]:
    """When it started (with the pid, what names one process for good); None when gone."""
    f = fields(pid)
    return f[19] if f and len(f) > 19 else None


def every_thread_stopped(pid: int) -> bool:
    """Every thread is stopped (state T or t), or the process is gone."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    for t in threads:
        f = fields(pid, t)  # None: a thread that ended meanwhile
        if f is not None and f[0] not in ("T", "t"):
            return False
    return True
