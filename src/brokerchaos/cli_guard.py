"""What every command that starts runs checks first, and what it runs them in: the output
paths tried, Java and the namespaces there, the servers' releases fetched, an interruption
turned into an exit code; bars on a terminal."""
from __future__ import annotations

import sys
from typing import Optional

from .cli_parser import EXIT_BAD_INPUT


def _unwritable(out: Optional[str], junit: Optional[str], out_flag: str = "--out") -> Optional[int]:
    """Where results and the JUnit file go, tried before anything starts (one line, exit 2):
    a run must not find out at its end that it cannot write what it found."""
    from .inputs import directory_error, file_error

    why = (directory_error(out, out_flag) if out is not None else None) or \
        (file_error(junit, "--junit") if junit is not None else None)
    if why:
        print(f"brokerchaos: error: {why}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return None


def _java_ok(master) -> bool:
    from .analysis.spark import check_java

    try:
        check_java(master)
        return True
    except RuntimeError as e:
        print(f"brokerchaos: error: {e}", file=sys.stderr)
        return False


def _netns_needed(scenario) -> str:
    """Network faults need the namespace sandbox; say so before anything starts."""
    from .faults import FAULTS
    from .sandbox import netns

    for path, f in scenario.fault_fields():
        cls = FAULTS.get(f.action)
        if "netns" in cls.needs_for(cls.Params.model_validate(f.params)):
            ok, why = netns.can_create()
            if not ok:
                return f"scenario field '{path}.action': fault {f.action!r} needs network namespaces ({why})"
    return ""


def _guarded(scenarios, spark_master, what: str, work):
    """What every command that runs scenarios does around them: the namespace and Java checks
    before anything starts, then `work()`; an exit code instead of its result when it cannot
    run or is interrupted."""
    for s in scenarios:
        err = _netns_needed(s)
        if err:
            prefix = f"{s.name}: " if len(scenarios) > 1 else ""
            print(f"brokerchaos: error: {prefix}{err}", file=sys.stderr)
            return EXIT_BAD_INPUT
    if not _java_ok(spark_master):
        return 1
    from .errors import ScenarioError
    from .runner import Terminated
    from .sandbox import SandboxError
    from .systems import SYSTEMS, SystemError_

    for s in scenarios:  # a server release named by cluster.version, fetched once
        try:
            SYSTEMS.get(s.system).install(s)
        except ScenarioError as e:
            print(f"brokerchaos: error: {e}", file=sys.stderr)
            return EXIT_BAD_INPUT
        except SystemError_ as e:
            print(f"brokerchaos: {what} failed: {e}", file=sys.stderr)
            return 1

    try:
        return work()
    except (SystemError_, SandboxError) as e:
        print(f"brokerchaos: {what} failed: {e}", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, Terminated):
        print("brokerchaos: interrupted; faults healed, cluster and sandbox removed", file=sys.stderr)
        return 130


def _observer():
    """Bars on a terminal, plain lines otherwise (runner/observe.py)."""
    from .runner.observe import terminal_bars

    return terminal_bars()
