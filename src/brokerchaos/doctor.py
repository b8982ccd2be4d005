"""`brokerchaos doctor`: what the scenarios need of this machine, probed the way a run uses
it, each need named with the command that supplies it.

The sandbox's verbs are tried for real in a throwaway network namespace of the project's
(`bc-doctor-<pid>`, deleted at once; `brokerchaos clean` removes it if the probe is cut
short): a namespace, a veth pair, an iptables chain, an NFQUEUE rule, a tbf qdisc. The
rest is looked up: programs, the Maven cache, the power-off layer or the Go that builds it,
libfaketime, memory for Spark. `run` asks only what its scenario needs (`missing_for`) and
refuses with one line before anything starts. A system's own needs (its servers, their
versions) are its declaration (`System.machine_setup`, `server_versions`; systems/needs.py):
nothing here names a system.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
from typing import Callable, Optional

from .sandbox import clock, gotool, mounts, netns
from .scenario import Scenario
from .systems import SYSTEMS, jvm, pyclients
from .systems.kafka import librdkafka
from .systems.pulsar import cpp_client
from .systems.needs import APT, Need, package, program
from .systems.base import CAPABILITIES, NETNS

SPARK_MEMORY_GIB = 2  # free memory below which the analysis (a 4 GiB driver heap at most) is at risk


def _in_ns(ns: str, *argv: str) -> Optional[str]:
    r = subprocess.run(["ip", "netns", "exec", ns, *argv], capture_output=True, text=True, timeout=20)
    return None if r.returncode == 0 else f"`{' '.join(argv)}` failed: {(r.stderr or r.stdout).strip()[:160]}"


@functools.cache
def _sandbox() -> dict[str, Optional[str]]:
    """Each sandbox verb tried once in a namespace of our own: key -> None or why not."""
    if os.geteuid() != 0:
        return dict.fromkeys(("netns", "veth", "iptables", "nfqueue", "tc"), "needs root")
    if not shutil.which("ip"):
        return dict.fromkeys(("netns", "veth", "iptables", "nfqueue", "tc"), "no ip (iproute2)")
    ns = f"{netns.PREFIX}doctor-{os.getpid()}"
    out: dict[str, Optional[str]] = {}
    try:
        netns.add(ns)
        out["netns"] = None
    except netns.NetnsError as e:
        return dict.fromkeys(("netns", "veth", "iptables", "nfqueue", "tc"), str(e)[:200])
    try:
        out["veth"] = _in_ns(ns, "ip", "link", "add", "bcd0", "type", "veth", "peer", "name", "bcd1")
        ipt = shutil.which("iptables")
        out["iptables"] = _in_ns(ns, ipt, "-w", "5", "-N", "bc-doctor") if ipt else "no iptables"
        out["nfqueue"] = (_in_ns(ns, ipt, "-w", "5", "-A", "bc-doctor", "-p", "udp", "-j", "NFQUEUE",
                                 "--queue-num", "9", "--queue-bypass") if ipt else "no iptables")
        tc = shutil.which("tc") or "/usr/sbin/tc"
        out["tc"] = _in_ns(ns, tc, "qdisc", "add", "dev", "lo", "root", "tbf", "rate", "1mbit", "burst",
                           "32kbit", "latency", "50ms")
    finally:
        netns.delete(ns)
    return out


def _root() -> Optional[str]:
    return None if os.geteuid() == 0 else "not root"


def _ss_kill() -> Optional[str]:
    ss = program("ss", "/usr/bin/ss", "/usr/sbin/ss")
    if not ss:
        return "no ss"
    helped = subprocess.run([ss, "--help"], capture_output=True, text=True, timeout=10)
    return None if "--kill" in helped.stdout + helped.stderr else "this ss has no -K (--kill)"


def _jdk(name: str, package: str) -> Callable[[], Optional[str]]:
    def probe() -> Optional[str]:
        try:
            jvm.tool(name, package)
        except Exception as e:
            return str(e).split(":")[0]
        return None
    return probe


def _layer() -> Optional[str]:
    return mounts.available()


def _faketime() -> Optional[str]:
    try:
        clock.library()
    except clock.ClockError:
        return "no libfaketime"
    return None


def _go() -> Optional[str]:
    if gotool.find():
        return None
    old = gotool.machine_go()
    return f"{old} is older than Go 1.22" if old else "no Go"


def _spark() -> Optional[str]:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "no pyspark in this Python"
    with open("/proc/meminfo") as f:
        avail = next((int(ln.split()[1]) for ln in f if ln.startswith("MemAvailable:")), 0) / 2 ** 20
    return None if avail >= SPARK_MEMORY_GIB else f"{avail:.1f} GiB free, Spark wants {SPARK_MEMORY_GIB}"


def _sandbox_probe(key: str) -> Callable[[], Optional[str]]:
    return lambda: _sandbox()[key]


NEEDS: dict[str, Need] = {n.name: n for n in (
    Need("root", "namespaces, firewall rules, mounts", "run it as root (sudo)", _root),
    Need("netns", "a network namespace per node", APT.format("iproute2"), _sandbox_probe("netns")),
    Need("veth", "each node's link to the bridge", "a kernel with veth (CONFIG_VETH)", _sandbox_probe("veth")),
    Need("iptables", "partitions, isolation, loss", APT.format("iptables"), _sandbox_probe("iptables")),
    Need("nfqueue", "delay without netem", "a kernel with NFQUEUE (nfnetlink_queue)", _sandbox_probe("nfqueue")),
    Need("tc", "bandwidth limits (tbf)", APT.format("iproute2"), _sandbox_probe("tc")),
    Need("ss-kill", "tcp-kill (ss -K)", APT.format("iproute2"), _ss_kill),
    Need("fuse", "power-off and its layer", "make setup (fuse3, and the layer built with Go)", _layer),
    Need("go", "building the power-off layer", "make setup (fetches Go from the Go module proxy)", _go),
    Need("libfaketime", "the clock fault", APT.format("libfaketime"), _faketime),
    Need("java", "Spark, Kafka, ZooKeeper, Pulsar", APT.format("openjdk-17-jre-headless"),
         _jdk("java", "openjdk-17-jre-headless")),
    Need("javac", "the Java clients (options.client: java)", APT.format("openjdk-17-jdk-headless"),
         _jdk("javac", "openjdk-17-jdk-headless")),
    Need("spark", "the analysis", "make setup (pip install -e .), and free memory", _spark),
    *(n for _, cls in SYSTEMS.items() for n in cls.machine_setup),  # each system's own (System.machine_setup)
    package("chromium", "the report's browser test (make test)", "chromium", "/usr/bin/chromium"),
)}

ANALYSIS = ("java", "spark")
def variants() -> list[tuple[str, str, dict, Optional[str]]]:
    """Each system as it can be deployed, as each declares (System.variants): (label,
    system, options, cluster.version)."""
    from .systems import SYSTEMS

    return [(label, name, opts, version) for name, cls in SYSTEMS.items() for label, opts, version in cls.variants()]


def system_needs(system: str, options: dict, version: Optional[str]) -> tuple[str, ...]:
    """What a local cluster of `system` needs, as the system declares (System.machine_needs)."""
    from .systems import SYSTEMS

    return SYSTEMS.get(system).machine_needs(options, version)


def fault_needs(action: str, params: Optional[dict] = None) -> tuple[str, ...]:
    from .faults.registry import FAULTS

    cls = FAULTS.get(action)
    caps = cls.needs_for(cls.Params.model_validate(params) if params else cls.Params.model_construct())
    return tuple(n for c in sorted(caps) for n in CAPABILITIES[c].machine) + cls.machine


def scenario_needs(s: Scenario) -> list[str]:
    out = list(ANALYSIS)
    if s.external is None:
        out += system_needs(s.system, s.options, s.cluster.version)
        if s.sandbox == "netns":
            out += CAPABILITIES[NETNS].machine[:3]
        for _, f in s.fault_fields():
            out += fault_needs(f.action, f.params)
    if s.options.get("client") == "java":
        out.append("javac")
    return list(dict.fromkeys(out))


def missing(keys) -> list[tuple[Need, str]]:
    return [(NEEDS[k], why) for k in dict.fromkeys(keys) if (why := NEEDS[k].probe())]


def missing_for(s: Scenario) -> Optional[str]:
    """One line naming the first need of the scenario this machine lacks, and its fix."""
    lacks = missing(scenario_needs(s))
    if not lacks:
        return None
    need, why = lacks[0]
    more = f" (and {len(lacks) - 1} more: brokerchaos doctor)" if len(lacks) > 1 else ""
    return f"this machine lacks {need.name} for {need.what} ({why}); fix: {need.fix}{more}"


def _lines(label: str, keys) -> tuple[bool, list[str]]:
    lacks = missing(keys)
    out = [f"  {'ready' if not lacks else 'MISSING':<8} {label}"]
    out += [f"             {n.name}: {why}; fix: {n.fix}" for n, why in lacks]
    return not lacks, out


def report() -> tuple[bool, list[str]]:
    """Per system and per group of fault actions that need the same: ready, or what is
    missing and its fix. True when everything is ready."""
    from .faults.registry import FAULTS

    rows = [("the analysis (Spark)", ANALYSIS)]
    rows += [(label, system_needs(system, opts, version)) for label, system, opts, version in variants()]
    rows.append(("the Java clients (options.client java)", ("javac",)))
    groups: dict[tuple[str, ...], list[str]] = {}
    for action, _ in FAULTS.items():
        groups.setdefault(fault_needs(action), []).append(action)
    faults = [(", ".join(actions), needs) for needs, actions in groups.items()]
    lines, ok = [], True
    for title, section in (("systems", rows), ("fault actions", faults),
                           ("make test", [("the browser test", ("chromium",))])):
        lines.append(title)
        for label, keys in section:
            ready, more = _lines(label, keys)
            ok &= ready
            lines += more
    return ok, lines


def versions() -> list[str]:
    """The servers this harness runs, as resolved here: pinned poms, Debian packages, the
    VerneMQ release."""
    from . import __version__

    return [f"brokerchaos {__version__}", "servers it runs (as resolved on this machine):",
            *(line for _, cls in SYSTEMS.items() for line in cls.server_versions()),
            "Python clients it runs (options.client_version, any release from PyPI, installed once):",
            *(_client_line(c) for c in (librdkafka, cpp_client))]


def _client_line(client) -> str:
    c = client("0.0")
    others = [v for v in pyclients.cached().get(c.dist, []) if v != c.loaded()]
    return (f"  {c.dist:<15} {c.loaded() or 'not installed'} (this interpreter); from "
            f"{'.'.join(map(str, c.oldest))}.0" + (f"; cached: {', '.join(others)}" if others else ""))
