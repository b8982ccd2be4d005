"""Firewall and traffic-control changes inside one of our namespaces.

Each fault gets its own pair of chains (`<tag>-in` jumped to from INPUT, `<tag>-out` from
OUTPUT), loaded in one `iptables-restore --noflush` call so a fault takes effect at once,
and removed as a whole on heal: concurrent faults on one node never undo each other.
Commands run with `ip netns exec` on namespaces this project created, never the root one.
"""
from __future__ import annotations

import contextlib
import os
import subprocess
from typing import Iterator, Optional

from .netns import NetnsError

IPTABLES_WAIT = "5"  # the xtables lock is shared by every namespace on the machine


@contextlib.contextmanager
def urgent() -> Iterator[None]:
    """The calling thread, and the processes it starts meanwhile (they inherit it), ahead of
    every ordinary thread on the machine (SCHED_FIFO, the lowest real-time priority).

    A fault's commands are a few milliseconds of work, but on two cores shared with three
    JVMs still compiling (Kafka's first run after its cluster started) they waited for a
    core: three namespaces' `iptables-restore` took 58-95 ms. With twelve busy processes on
    the two cores: 45-104 ms as ordinary processes, 6-8 ms like this (the kernel keeps 5% of
    each second for ordinary threads whatever real-time ones do, and these end in
    milliseconds). Where the policy cannot be set (no CAP_SYS_NICE), nothing changes.
    """
    try:
        before = os.sched_getscheduler(0), os.sched_getparam(0)
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except (OSError, AttributeError):
        before = None
    try:
        yield
    finally:
        if before is not None:
            os.sched_setscheduler(0, *before)


def run_sync(ns: str, argv: list[str], stdin: Optional[str] = None, timeout: float = 15.0,
             check: bool = True) -> subprocess.CompletedProcess:
    try:
        with urgent():
            r = subprocess.run(["ip", "netns", "exec", ns, *argv], input=stdin, capture_output=True,
                               text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise NetnsError(f"`{' '.join(argv)}` in {ns} did not finish within {timeout}s") from None
    if check and r.returncode != 0:
        raise NetnsError(f"`{' '.join(argv)}` in {ns} failed: {r.stderr.strip() or r.stdout.strip()}")
    return r


def run_many(cmds: list[tuple[str, list[str], Optional[str]]], timeout: float = 15.0) -> list[tuple[int, str, str]]:
    """Run commands in several namespaces at once and wait for all: (returncode, stdout, stderr) each.

    Called synchronously from the client loop on purpose: the few milliseconds it blocks
    are less than what waking the loop for each thread's result costs while thousands of
    acks are queued, and the fault must land within 100 ms of its trigger.
    """
    with urgent():
        procs = []
        for ns, argv, stdin in cmds:
            p = subprocess.Popen(["ip", "netns", "exec", ns, *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
            procs.append((p, stdin))
        out = []
        for p, stdin in procs:
            try:
                so, err = p.communicate(stdin, timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()
                out.append((-1, "", f"did not finish within {timeout}s"))
                continue
            out.append((p.returncode, so, err.strip()))
    return out


class Chains:
    def __init__(self, ns: str, tag: str) -> None:
        self.ns = ns
        self.cin = f"{tag}-in"[:28]
        self.cout = f"{tag}-out"[:28]
        self.loaded = False

    def load_cmd(self, rules_in: list[str], rules_out: list[str]) -> tuple[str, list[str], str]:
        lines = ["*filter", f":{self.cin} - [0:0]", f":{self.cout} - [0:0]"]
        lines += [f"-A {self.cin} {r}" for r in rules_in]
        lines += [f"-A {self.cout} {r}" for r in rules_out]
        lines += [f"-I INPUT 1 -j {self.cin}", f"-I OUTPUT 1 -j {self.cout}", "COMMIT", ""]
        self.loaded = True  # set first: a half-applied load must still be removed
        return self.ns, ["iptables-restore", "-w", IPTABLES_WAIT, "--noflush"], "\n".join(lines)

    def remove(self) -> None:
        if not self.loaded:
            return
        batch = "\n".join(["*filter", f"-D INPUT -j {self.cin}", f"-D OUTPUT -j {self.cout}",
                           f"-F {self.cin}", f"-F {self.cout}", f"-X {self.cin}", f"-X {self.cout}",
                           "COMMIT", ""])
        r = run_sync(self.ns, ["iptables-restore", "-w", IPTABLES_WAIT, "--noflush"], batch, check=False)
        if r.returncode != 0:
            # something was already gone: remove what is left, one command at a time
            for args in (["-D", "INPUT", "-j", self.cin], ["-D", "OUTPUT", "-j", self.cout],
                         ["-F", self.cin], ["-F", self.cout], ["-X", self.cin], ["-X", self.cout]):
                run_sync(self.ns, ["iptables", "-w", IPTABLES_WAIT, *args], check=False)
        left = run_sync(self.ns, ["iptables", "-w", IPTABLES_WAIT, "-S"], check=False)
        if self.cin in left.stdout or self.cout in left.stdout:
            raise NetnsError(f"could not remove chains {self.cin}/{self.cout} in {self.ns}")
        self.loaded = False


def load(chains: list[tuple["Chains", list[str], list[str]]]) -> None:
    """Load several namespaces' chains at once; raise if any failed (the caller heals)."""
    results = run_many([c.load_cmd(rin, rout) for c, rin, rout in chains])
    errors = [f"{c.ns}: {err}" for (c, _, _), (rc, _, err) in zip(chains, results) if rc != 0]
    if errors:
        raise NetnsError("iptables-restore failed: " + "; ".join(errors))


def rules(ns: str) -> str:
    return run_sync(ns, ["iptables", "-w", IPTABLES_WAIT, "-S"]).stdout


def set_root_qdisc(ns: str, dev: str, spec: list[str]) -> subprocess.CompletedProcess:
    return run_sync(ns, ["tc", "qdisc", "add", "dev", dev, "root", *spec], check=False)


_netem: dict[str, bool] = {}


def has_netem(scratch_ns: str) -> bool:
    """Whether this kernel has the netem qdisc, tried once on the loopback of a namespace of ours
    that carries no traffic (the sandbox's hub)."""
    if "ok" not in _netem:
        r = run_sync(scratch_ns, ["tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"], check=False)
        _netem["ok"] = r.returncode == 0
        if _netem["ok"]:
            run_sync(scratch_ns, ["tc", "qdisc", "del", "dev", "lo", "root"], check=False)
    return _netem["ok"]


def del_root_qdisc(ns: str, dev: str) -> None:
    r = run_sync(ns, ["tc", "qdisc", "del", "dev", dev, "root"], check=False)
    if r.returncode != 0 and "No such file" not in r.stderr and "Cannot delete qdisc with handle of zero" \
            not in r.stderr:
        raise NetnsError(f"`tc qdisc del dev {dev} root` in {ns} failed: {r.stderr.strip()}")


def kill_tcp(nss: list[str], peer_ip: str) -> int:
    """Destroy every TCP socket in the namespaces connected to `peer_ip` (`ss -K`: the
    kernel sends an RST). Returns how many sockets ss listed as destroyed."""
    results = run_many([(ns, ["ss", "-K", "-H", "-tn", "dst", peer_ip], None) for ns in nss])
    errors = [f"{ns}: {err}" for ns, (rc, _, err) in zip(nss, results) if rc != 0]
    if errors:
        raise NetnsError("`ss -K` failed: " + "; ".join(errors))
    return sum(1 for _, out, _ in results for line in out.splitlines() if line.strip())
