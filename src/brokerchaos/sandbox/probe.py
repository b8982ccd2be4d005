"""Looks the harness takes at the machine itself, to see what a fault did, not what it said:
whether a TCP packet gets from one of our namespaces to an address, how long its answer
takes, a process's state from /proc, a firewall chain's packet counters, a qdisc's counters.

A reach probe opens a TCP connection from inside a namespace to a port nothing has to
listen on (PROBE_PORT): a host that gets the SYN answers (connected, or refused with an
RST), a link that drops it stays silent until the timeout. The connection is made by a
thread of its own that enters the namespace (setns is per thread) and ends with it, so no
pooled thread is ever left in another namespace.
"""
from __future__ import annotations

import errno
import re
import socket
import threading
import time
from dataclasses import dataclass
from typing import Optional

from . import netns, procstat
from .netfilter import IPTABLES_WAIT, run_sync

PROBE_PORT = 9  # discard: a port nothing of ours listens on; a reachable host refuses it


@dataclass(frozen=True)
class Reach:
    answered: bool  # a SYN-ACK or an RST came back
    ms: float  # how long the answer took (or the timeout)
    why: str  # "refused", "connected", "silent", or the socket error

    def words(self, what: str) -> str:
        if self.answered:
            return f"{what} answered in {self.ms:.0f} ms"
        return f"{what} silent" + ("" if self.why == "silent" else f" ({self.why})")


def reach(ns: Optional[str], ip: str, port: int = PROBE_PORT, timeout: float = 0.5) -> Reach:
    """From namespace `ns` (None: this thread's), a TCP connection to ip:port. Blocking: call
    it off the event loop (asyncio.to_thread); it takes at most `timeout` and a little."""
    box: dict = {}

    def body() -> None:
        try:
            if ns:
                netns.enter(ns)
            box["r"] = _connect(ip, port, timeout)
        except Exception as e:  # the namespace is gone: nothing answered from it
            box["r"] = Reach(False, 0.0, f"{type(e).__name__}: {e}"[:120])

    t = threading.Thread(target=body, name=f"probe-{ns or 'here'}", daemon=True)
    t.start()
    t.join(timeout + 5.0)
    return box.get("r") or Reach(False, timeout, "the probe did not return")


def _connect(ip: str, port: int, timeout: float) -> Reach:
    t0 = time.monotonic()
    so = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    so.settimeout(timeout)
    try:
        so.connect((ip, port))
        return Reach(True, (time.monotonic() - t0) * 1e3, "connected")
    except ConnectionRefusedError:
        return Reach(True, (time.monotonic() - t0) * 1e3, "refused")
    except socket.timeout:
        return Reach(False, timeout * 1e3, "silent")
    except OSError as e:  # unreachable, reset: nothing answered on the way
        return Reach(e.errno == errno.ECONNRESET, (time.monotonic() - t0) * 1e3, e.strerror or str(e))
    finally:
        so.close()


proc_state = procstat.state  # a process's state letter (R, S, D, T, Z, …); None when it is gone


def gone(pid: Optional[int]) -> bool:
    """The process has exited (no /proc entry, or a zombie not yet reaped)."""
    return proc_state(pid) in (None, "Z")


_COUNTER = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\S+)")


def chain_counters(ns: str, chain: str) -> list[tuple[int, int, str]]:
    """(packets, bytes, rule text) of each rule of a chain in namespace `ns`, in order."""
    r = run_sync(ns, ["iptables", "-w", IPTABLES_WAIT, "-L", chain, "-v", "-x", "-n"], check=False)
    out = []
    for line in r.stdout.splitlines()[2:]:
        m = _COUNTER.match(line)
        if m:
            out.append((int(m.group(1)), int(m.group(2)), line.strip()))
    return out


_QDISC = re.compile(r"Sent (\d+) bytes (\d+) pkt \(dropped (\d+), overlimits (\d+)")


def qdisc_counters(ns: str, dev: str) -> Optional[dict]:
    """The root qdisc's counters of `dev` in namespace `ns`: bytes and packets sent, dropped,
    overlimits (held back by a rate limit); None if tc says nothing."""
    r = run_sync(ns, ["tc", "-s", "qdisc", "show", "dev", dev], check=False)
    m = _QDISC.search(r.stdout)
    if not m:
        return None
    return dict(zip(("bytes", "packets", "dropped", "overlimits"), map(int, m.groups())))
