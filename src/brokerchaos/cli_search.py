"""The commands that search: `bisect` (the release where a check's verdict changes) and
`shrink` (the smallest scenario that still fails a check)."""
from __future__ import annotations

import sys
from pathlib import Path

from .cli_guard import _guarded, _observer, _unwritable
from .cli_parser import EXIT_BAD_INPUT


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
    from .cli_tools import machine_lacks

    probes = [bs.on_release(s, v, args.runs) for v, s in on.items()]
    bad = _unwritable(args.out, None) or machine_lacks(probes[:1])
    if bad is not None:
        return bad
    bars = _observer()
    try:
        doc = _guarded(probes, args.spark_master, "bisect",
                       lambda: bs.run(on, check, args.runs, Path(args.out), of=args.over,
                                      spark_master=args.spark_master, observer=bars, command=args.command_line))
    finally:
        if bars is not None:
            bars.close()
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
    from .cli_tools import machine_lacks

    bad = _unwritable(args.out, None) or machine_lacks([first])
    if bad is not None:
        return bad
    bars = _observer()
    try:
        found = _guarded([first], args.spark_master, "shrink",
                         lambda: sk.run(doc, check, args.runs, args.budget, Path(args.out),
                                        spark_master=args.spark_master, observer=bars, command=args.command_line))
    finally:
        if bars is not None:
            bars.close()
    if isinstance(found, int):
        return found
    print("\n" + sk.table(found))
    print(f"Results: {found['dir']}")
    if found.get("reproducer"):
        print(f"Reproducer: {found['reproducer']['file']}")
        return 0
    from .report.expect import EXIT_UNDECIDED

    return EXIT_UNDECIDED
