"""Supervised broker processes: started by us, signalled only after checking where they live."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from . import netns


@dataclass
class Proc:
    name: str
    argv: list[str]
    popen: subprocess.Popen
    netns: Optional[str]
    log: Path
    started: float = field(default_factory=time.monotonic)
    # the executable the PID runs once the start script has exec'd (e.g. beam.smp), when
    # argv[0] is a wrapper script
    exe: Optional[str] = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None


def spawn(name: str, argv: list[str], ns: Optional[str], log: Path, env: Optional[dict] = None,
          exe: Optional[str] = None) -> Proc:
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
    return Proc(name, argv, popen, ns, log, exe=exe)


class NotOurProcess(RuntimeError):
    pass


def verify(proc: Proc) -> None:
    """Refuse to signal a PID that is not the process we started in the namespace we made."""
    if not proc.alive():
        return
    try:
        exe_name = Path(os.readlink(f"/proc/{proc.pid}/exe")).name
    except OSError:
        return  # exited meanwhile
    # compare resolved paths: redis-server, for one, is a link to redis-check-rdb
    expected = proc.exe or Path(os.path.realpath(shutil.which(proc.argv[0]) or proc.argv[0])).name
    if exe_name != expected:
        raise NotOurProcess(f"pid {proc.pid} runs {exe_name}, expected {expected}")
    if proc.netns is not None:
        got = netns.pid_inode(proc.pid)
        if got is not None and got != netns.inode(proc.netns):
            raise NotOurProcess(f"pid {proc.pid} is not in namespace {proc.netns}")


def send_signal(proc: Proc, sig: int, group: bool = False) -> None:
    """Signal the process, or with `group` the process group we started it in (its PID:
    spawned in a new session, so a broker's helpers are in it too)."""
    verify(proc)
    if proc.alive():
        try:
            (os.killpg if group else os.kill)(proc.pid, sig)
        except ProcessLookupError:
            pass


def wait_exit(proc: Proc, timeout: float) -> bool:
    try:
        proc.popen.wait(timeout=timeout)
        return True
    except subprocess.TimeoutExpired:
        return False


def terminate(proc: Proc, grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds; always reaps."""
    if not proc.alive():
        proc.popen.wait(timeout=1)
        return
    send_signal(proc, signal.SIGTERM)
    # a paused broker (the pause fault) would never act on SIGTERM
    send_signal(proc, signal.SIGCONT, group=True)
    if not wait_exit(proc, grace):
        send_signal(proc, signal.SIGKILL)
        wait_exit(proc, 5.0)
