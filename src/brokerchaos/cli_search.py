"""The commands that search: `bisect` (the release where a check's verdict changes) and
`shrink` (the smallest scenario that still fails a check)."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from .cli_guard import _guarded, _observer, _unwritable
from .cli_parser import EXIT_BAD_INPUT


def _searched(args, what: str, machine: list, started: list, work):
    """What every search does around its work: the output path tried, the machine checked for
    `machine`'s scenarios, Java, namespaces and the releases of `started`'s, bars on a
    terminal; `work(bars)`'s result, or an exit code."""
    from .cli_tools import machine_lacks

    bad = _unwritable(args.out, None) or machine_lacks(machine)
    if bad is not None:
        return bad
    bars = _observer()
    try:
        return _guarded(started, args.spark_master, what, lambda: work(bars))
    finally:
        if bars is not None:
            bars.close()


def cmd_bisect(args) -> int:
    from . import bisect as bs
    from . import validation as sc

    def load(version: str):  # the scenario as it runs on one release
        return sc.load(args.scenario, bs.overrides(version, args.over))

    try:
        check = bs.check_of(args.check)
        if args.runs < 1:
            raise sc.ScenarioError("--runs: at least 1")
        versions = bs.versions_of(load, args.versions, of=args.over)
        on = {v: load(v) for v in versions}
    except sc.ScenarioError as e:
        print(f"brokerchaos: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as e:  # a registry that cannot be asked for its list
        print(f"brokerchaos: bisect failed: {e}", file=sys.stderr)
        return 1
    probes = [bs.on_release(s, v, args.runs) for v, s in on.items()]
    doc = _searched(args, "bisect", probes[:1], probes,
                    lambda bars: bs.run(on, check, args.runs, Path(args.out), of=args.over,
                                        spark_master=args.spark_master, observer=bars, command=args.command_line))
    if isinstance(doc, int):
        return doc
    print("\n" + bs.table(doc))
    print(f"Results: {doc['dir']}")
    print(f"Report: {doc['report']}")
    from .report.expect import EXIT_UNDECIDED

    return 0 if doc["boundary"] else EXIT_UNDECIDED


def cmd_shrink(args) -> int:
    from . import bisect as bs
    from . import shrink as sk
    from . import validation as sc

    try:
        check = bs.check_of(args.check)
        for flag, n in (("--runs", args.runs), ("--budget", args.budget)):
            if n < 1:
                raise sc.ScenarioError(f"{flag}: at least 1")
        doc = sc.load_document(args.scenario)
        first = sc.build(doc, {"runs": args.runs})
    except sc.ScenarioError as e:
        print(f"brokerchaos: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    found = _searched(args, "shrink", [first], [first],
                      lambda bars: sk.run(doc, check, args.runs, args.budget, Path(args.out),
                                          spark_master=args.spark_master, observer=bars, command=args.command_line))
    if isinstance(found, int):
        return found
    print("\n" + sk.table(found))
    print(f"Results: {found['dir']}")
    if found.get("reproducer"):
        print(f"Reproducer: {found['reproducer']['file']}")
        return 0
    from .report.expect import EXIT_UNDECIDED

    return EXIT_UNDECIDED


def _resumed(path: str):
    """A resumed exploration's base, seed, space, check and terms, from its explore.json."""
    import json

    from . import bisect as bs
    from . import explore as ex
    from . import fault_space as fs
    from .errors import ScenarioError

    head = Path(path) / ex.EXPLORE_FILE
    if not head.is_file():
        raise ScenarioError(f"--resume: {path} has no {ex.EXPLORE_FILE} (not an exploration)")
    old = json.loads(head.read_text())
    check = ex.PolicyCheck() if old["check"] == ex.PolicyCheck.text else bs.check_of(old["check"])
    terms = ex.Terms(**{k: old[k] for k in ("budget_runs", "runs_each", "minutes", "collect")})
    return old["base"], old["seed"], fs.Space.from_json(old["space"]), check, terms


def _explore_setup(args):
    """The base, its space, check and terms, and each action's first schedule (what the
    machine must offer): from the flags, or from a resumed exploration's own explore.json
    (its terms, unless a flag names new ones)."""
    from . import bisect as bs
    from . import explore as ex
    from . import fault_space as fs
    from . import validation as sc

    for flag, n in (("--budget", args.budget), ("--runs-each", args.runs_each), ("--collect", args.collect)):
        if n is not None and n < 1:
            raise sc.ScenarioError(f"{flag}: at least 1")
    if args.resume:
        doc, seed, space, check, old = _resumed(args.resume)
    elif not args.base:
        raise sc.ScenarioError("explore: give a scenario file or a system's name (or --resume DIR)")
    else:
        doc, seed, old = fs.base_doc(args.base), args.seed, ex.Terms()
        space = fs.space_of(doc, _listed(args.actions), _listed(args.targets), args.max_faults,
                            fs.vary_of(args.vary))
        check = bs.check_of(args.check) if args.check else ex.PolicyCheck()
    given = {"budget_runs": args.budget, "runs_each": args.runs_each, "collect": args.collect,
             "minutes": args.minutes}
    terms = dataclasses.replace(old, **{k: v for k, v in given.items() if v is not None})
    space, firsts = fs.runnable(doc, space, seed, sc.build(doc).workload.messages,
                                named=bool(args.actions) and not args.resume)
    for a, why in space.left_out:
        print(f"explore: {a} left out: {why}")
    firsts = [sc.build(one, {"runs": 1}) for one in firsts]
    return doc, seed, space, check, firsts, terms


def _listed(value):
    return [x.strip() for x in value.split(",") if x.strip()] if value else None


def cmd_explore(args) -> int:
    from . import explore as ex
    from . import validation as sc

    try:
        doc, seed, space, check, firsts, terms = _explore_setup(args)
    except sc.ScenarioError as e:
        print(f"brokerchaos: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    found = _searched(args, "explore", firsts, firsts[:1],
                      lambda bars: ex.run(doc, space, check, seed, terms, Path(args.out), args.resume,
                                          spark_master=args.spark_master, observer=bars,
                                          command=args.command_line))
    if isinstance(found, int):
        return found
    print("\n" + ex.table(found))
    print(f"Results: {found['dir']}")
    if found["violations"]:
        for path in found["violation_files"]:
            print(f"Violation: {path}  (cut it down: brokerchaos shrink {path})")
        from .report.expect import EXIT_VIOLATED

        return EXIT_VIOLATED
    return 0
