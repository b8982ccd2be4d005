"""Supervised broker processes: started by us, and signalled only through a handle that
cannot name another process.

Every broker is our child. Its PID stays ours until we reap it, and a pidfd taken at spawn
names that process alone even after it is reaped, so a signal can never reach a process
that reused the PID (this machine's pid_max is 32768, and a test suite starts tens of
thousands of processes: one CI run saw a PID of ours run `ip` a moment later). A process
that has exited, or whose PID runs another program, is gone: never an error.
"""
from __future__ import annotations

import asyncio
import os
import select
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from . import procstat



@dataclass
class Proc:
    name: str
    argv: list[str]
    popen: subprocess.Popen
    netns: Optional[str]
    log: Path
    started: float = field(default_factory=time.monotonic)
    pidfd: Optional[int] = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        if self.popen.poll() is not None:
            self.close()
            return False
        return True

    def close(self) -> None:
        if self.pidfd is not None:
            try:
                os.close(self.pidfd)
            except OSError:
                pass
            self.pidfd = None


def spawn(name: str, argv: list[str], ns: Optional[str], log: Path, env: Optional[dict] = None) -> Proc:
    log.parent.mkdir(parents=True, exist_ok=True)
    # `ip netns exec` execs the command after setns, so the PID we get is the broker's.
    full = (["ip", "netns", "exec", ns] if ns else []) + argv
    with open(log, "ab") as fh:
        popen = subprocess.Popen(
            full,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C in the terminal reaches us, not the brokers
            env=env,
        )
    try:
        pidfd: Optional[int] = os.pidfd_open(popen.pid)
    except OSError:  # exited already (and not reaped: the PID is still ours) or no pidfd
        pidfd = None
    return Proc(name, argv, popen, ns, log, pidfd=pidfd)


def send_signal(proc: Proc, sig: int, group: bool = False) -> None:
    """Signal the process, or with `group` the process group we started it in (its PID:
    spawned in a new session, so a broker's helpers are in it too). Nothing happens to a
    process that is gone."""
    if not proc.alive():
        return
    try:
        if group:
            # the group's id is our unreaped child's PID, which nobody else can hold
            os.killpg(proc.pid, sig)
        elif proc.pidfd is not None:
            signal.pidfd_send_signal(proc.pidfd, sig)
        else:
            os.kill(proc.pid, sig)
    except ProcessLookupError:
        pass


def stopped(pid: int) -> bool:
    """Every thread of the process is stopped (state T or t), or the process is gone. A
    SIGSTOP is not in effect when kill() returns: the kernel stops a process's threads as
    each is next scheduled, and on a busy machine another of them may first take a new
    connection and answer it (a paused NATS server once sent its INFO that way)."""
    return procstat.every_thread_stopped(pid)


def wait_stopped(proc: Proc, timeout: float) -> bool:
    """Wait until every thread of the process has stopped (after a SIGSTOP); False when
    some still runs after `timeout` seconds."""
    return wait_pid_stopped(proc.pid, timeout, proc.alive)


def wait_pid_stopped(pid: int, timeout: float, alive=lambda: True) -> bool:
    """wait_stopped for a process known by its pid (a consumer group's member: a child of
    the harness, so its pid is not reused while it is unreaped)."""
    deadline = time.monotonic() + timeout
    while alive() and not stopped(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


def wait_exit(proc: Proc, timeout: float) -> bool:
    # on the pidfd: Popen.wait polls with sleeps of up to 50 ms, which a fault's timing shows
    if proc.pidfd is not None and proc.popen.returncode is None:
        poller = select.poll()
        poller.register(proc.pidfd, select.POLLIN)
        if not poller.poll(timeout * 1000):
            return False
    try:
        proc.popen.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return False
    proc.close()
    return True


# SIGKILL's bit in /proc/PID/status's pending-signal masks
_SIGKILL_BIT = 1 << (signal.SIGKILL - 1)


def dying(proc: Proc) -> Optional[str]:
    """Of a process sent SIGKILL that has not exited: what holds its exit up, when it is on
    its way out (SIGKILL pending, or it or a thread of it in uninterruptible sleep or a
    zombie: e.g. an fsync on a stalled disk finishes first), else None. Read from /proc: its
    state and its threads' (with the kernel function one in D waits in)."""
    if proc.popen.returncode is not None:
        return None
    base = Path(f"/proc/{proc.pid}")
    try:
        status = dict(line.split(":", 1) for line in (base / "status").read_text().splitlines() if ":" in line)
        state = status.get("State", "?").strip()
        pending = int(status.get("SigPnd", "0"), 16) | int(status.get("ShdPnd", "0"), 16)
        threads = []
        for t in sorted((base / "task").iterdir()):
            st = (t / "stat").read_text()
            t_state = st[st.rindex(")") + 2]
            if t_state in "DZ":
                wchan = (t / "wchan").read_text().strip() if (t / "wchan").exists() else ""
                threads.append(f"{t.name} {t_state}" + (f" in {wchan}" if wchan and wchan != "0" else ""))
    except (OSError, ValueError):
        return None  # gone meanwhile: the caller's next wait says so
    # a leader that has taken its SIGKILL may itself wait in D for a thread that has not
    if not (pending & _SIGKILL_BIT or state[:1] in "DZ" or threads):
        return None
    return (f"state {state}" + (", SIGKILL pending" if pending & _SIGKILL_BIT else "")
            + (f"; threads {', '.join(threads[:4])}" if threads else ""))


def outlast(proc: Proc, timeout: float, more: float) -> Optional[str]:
    """After a SIGKILL whose first wait (`timeout` s) ran out: None once the process is gone,
    waiting up to `more` s longer while it is on its way out (dying()); else what it was
    found as, for the error."""
    why = dying(proc)
    if why is None:
        return None if wait_exit(proc, 0) else f"{timeout:.0f}s, SIGKILL not taken"
    return None if wait_exit(proc, more) else f"{timeout + more:.0f}s, {why}"


async def exited(proc: Proc, timeout: float) -> bool:
    """wait_exit without holding the event loop: the pidfd turns readable when the process
    exits."""
    if proc.pidfd is None or proc.popen.returncode is not None:
        return await asyncio.to_thread(wait_exit, proc, timeout)
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    fd = proc.pidfd
    loop.add_reader(fd, lambda: done.done() or done.set_result(None))
    try:
        await asyncio.wait_for(done, timeout)
    except asyncio.TimeoutError:
        return False
    finally:
        loop.remove_reader(fd)
    return wait_exit(proc, 1.0)  # a zombie now: reaped at once


def terminate(proc: Proc, grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds; always reaps."""
    terminate_all([proc], grace)


def terminate_all(procs: list[Proc], grace: float = 5.0) -> None:
    """terminate() of each, the grace shared: every SIGTERM first, then the waits. One after
    the other, a cluster's stop was the sum of its JVMs' shutdowns (a Pulsar cluster's seven
    processes 10-11 s on a slow machine, each up to its grace); together, the longest."""
    live = [p for p in procs if p.alive()]
    for p in live:
        send_signal(p, signal.SIGTERM)
        # a paused broker (the pause fault) would never act on SIGTERM
        send_signal(p, signal.SIGCONT, group=True)
    deadline = time.monotonic() + grace
    late = [p for p in live if not wait_exit(p, max(0.0, deadline - time.monotonic()))]
    for p in late:
        send_signal(p, signal.SIGKILL)
    for p in late:
        wait_exit(p, 5.0)
