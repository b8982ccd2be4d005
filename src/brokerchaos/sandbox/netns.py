"""Thin wrappers over `ip netns` and setns(2).

Everything here acts inside namespaces this project created: `ip -n NS …` never touches
the root namespace's interfaces or firewall.
"""
from __future__ import annotations

import ctypes
import os
import subprocess

CLONE_NEWNET = 0x40000000
NETNS_DIR = "/run/netns"
PREFIX = "bc-"

_libc = ctypes.CDLL(None, use_errno=True)


class NetnsError(RuntimeError):
    pass


def ip(*args: str, timeout: float = 10.0, check: bool = True) -> subprocess.CompletedProcess:
    try:
        r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise NetnsError(f"`ip {' '.join(args)}` did not finish within {timeout}s") from None
    if check and r.returncode != 0:
        raise NetnsError(f"`ip {' '.join(args)}` failed: {r.stderr.strip()}")
    return r


def exists(name: str) -> bool:
    return os.path.exists(os.path.join(NETNS_DIR, name))


def list_all() -> list[str]:
    r = ip("netns", "list", check=False)
    return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]


# Linux's default TCP congestion control in every namespace of ours, whatever the machine's:
# a new namespace takes the host's (BBR on some), and BBR, measuring a link through the
# userspace delayer (faults/nfqdelay.py) that releases packets in bursts, paced a broker's
# receipts at ~115 kbit/s in two of eight deduplication runs (docs/seeds/dedup.md). The
# seeds' Docker hosts ran cubic.
CONGESTION = "cubic"


def add(name: str) -> None:
    ip("netns", "add", name)
    try:
        ip("-n", name, "link", "set", "lo", "up")
        congestion(name, CONGESTION)
    except BaseException:
        delete(name)
        raise


# one list for the whole machine: what a namespace other than the host's may choose
ALLOWED = "/proc/sys/net/ipv4/tcp_allowed_congestion_control"


def allow(algorithm: str) -> None:
    """Let namespaces choose `algorithm`: added to the machine's allowed list when missing
    (it widens a choice; no socket changes)."""
    try:
        with open(ALLOWED) as f:
            allowed = f.read().split()
        if algorithm not in allowed:
            with open(ALLOWED, "w") as f:
                f.write(" ".join([*allowed, algorithm]))
    except OSError as e:
        raise NetnsError(f"cannot allow {algorithm} congestion control in namespaces ({ALLOWED}): {e}") from None


def congestion(name: str, algorithm: str | None = None) -> str:
    """The namespace's TCP congestion control, set first when `algorithm` is given."""
    base = ["ip", "netns", "exec", name, "sysctl"]
    if algorithm is not None:
        allow(algorithm)
        r = subprocess.run([*base, "-qw", f"net.ipv4.tcp_congestion_control={algorithm}"], capture_output=True,
                           text=True, timeout=10)
        if r.returncode != 0:
            raise NetnsError(f"cannot set {algorithm} congestion control in {name}: {r.stderr.strip()}")
    r = subprocess.run([*base, "-n", "net.ipv4.tcp_congestion_control"], capture_output=True, text=True, timeout=10)
    return r.stdout.strip()


def delete(name: str) -> None:
    if exists(name):
        ip("netns", "del", name, check=False)


def pids(name: str) -> list[int]:
    r = ip("netns", "pids", name, check=False)
    return [int(x) for x in r.stdout.split() if x.isdigit()]


def inode(name: str) -> int:
    return os.stat(os.path.join(NETNS_DIR, name)).st_ino


def pid_inode(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None


def enter(name: str) -> None:
    """Move the *calling thread* into namespace `name` (setns is per thread)."""
    fd = os.open(os.path.join(NETNS_DIR, name), os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise NetnsError(f"setns({name}) failed: {os.strerror(err)}")
    finally:
        os.close(fd)


def can_create() -> tuple[bool, str]:
    """Whether this process can build the namespace sandbox, and if not, why."""
    if os.geteuid() != 0:
        return False, "not running as root"
    probe = f"{PREFIX}probe-{os.getpid()}"
    try:
        add(probe)
        return True, ""
    except NetnsError as e:
        return False, str(e)
    finally:
        delete(probe)
