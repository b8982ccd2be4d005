"""brokerchaos: run chaos tests against message brokers and analyse their histories on Spark."""
from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Optional

from .cli_guard import _guarded, _java_ok, _observer, _unwritable
from .cli_parser import EXIT_BAD_INPUT, build_parser


def _expectations(args):
    """The parsed --expect list (None without it), or an exit code: checked before anything starts."""
    from .report import expect

    if args.expect is None:
        if args.junit:
            print("brokerchaos: error: --junit needs --expect (what the test cases check)", file=sys.stderr)
            return EXIT_BAD_INPUT
        return None
    try:
        return expect.parse(args.expect)
    except ValueError as e:
        print(f"brokerchaos: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT


def _refused(what: str, why: str) -> int:
    """A session stopped before its runs were done (its files hold the runs before): exit 1."""
    print(f"brokerchaos: {what} stopped: {why}", file=sys.stderr)
    return 1


def _result_exit(results) -> int:
    from .report.expect import result_exit

    return result_exit(results)


def _judge(args, exps, sessions: list[tuple[str, list[dict]]], otherwise: int) -> int:
    """With --expect, the exit code is the expectations' (and the JUnit file is written);
    without, `otherwise`."""
    if exps is None:
        return otherwise
    from .report import expect

    cases = [c for name, verdicts in sessions for c in expect.evaluate(name, verdicts, exps)]
    out = sys.stderr if getattr(args, "format", None) == "json" else sys.stdout  # stdout is the JSON
    for line in expect.lines(cases):
        print(line, file=out)
    if args.junit:
        expect.write_junit(Path(args.junit), cases)
        print(f"JUnit: {args.junit}", file=out)
    return expect.exit_code(cases)


def _flag_keys() -> list[str]:
    from .scenario import FLAG_PATHS

    return ["option", "fault", "fault_param", "after_acks", "at_seconds", *FLAG_PATHS]


def _seconds(text: str) -> float:
    from .report.expect import seconds

    s = seconds(text)
    if s <= 0:
        raise ValueError(text)
    return s


def cmd_soak(args) -> int:
    from . import validation as sc

    duration = None
    if args.duration is not None:
        try:
            duration = _seconds(args.duration)
        except ValueError:
            print(f"brokerchaos: error: --duration: cannot read {args.duration!r} (e.g. 90s, 30m, 6h)",
                  file=sys.stderr)
            return EXIT_BAD_INPUT
    if args.runs is None and duration is None:
        print("brokerchaos: error: give --runs N or --duration, or both", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.runs is not None and args.runs < 1:
        print("brokerchaos: error: --runs: must be at least 1", file=sys.stderr)
        return EXIT_BAD_INPUT
    resume = Path(args.resume) if args.resume else None
    try:
        scenario = _soak_scenario(args, resume)
    except (sc.ScenarioError, ValueError) as e:
        print(f"brokerchaos: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    bad = _unwritable(str(resume) if resume is not None else args.out, None,
                      "--resume" if resume is not None else "--out")
    if bad is not None:
        return bad
    from .cli_tools import machine_lacks

    bad = machine_lacks([scenario])
    if bad is not None:
        return bad
    from .runner import Session

    result = _guarded([scenario], args.spark_master, "soak",
                      lambda: Session(scenario, Path(args.out), spark_master=args.spark_master, resume=resume,
                                      duration=duration, soak=True, command=args.command_line).run())
    if isinstance(result, int):
        return result
    if result.refused:
        return _refused("soak", result.refused)
    return _result_exit([result.summary["result"]])


def _soak_scenario(args, resume: Optional[Path]):
    """The soak's scenario: the file given, or the one a soak to resume kept (its runs set by --runs)."""
    from . import validation as sc

    if resume is None:
        if not args.scenario:
            raise sc.ScenarioError("give a scenario file (or --resume DIR)")
        return sc.load(args.scenario, {"runs": args.runs or 100_000})
    if args.scenario:
        raise sc.ScenarioError("give a scenario or --resume DIR, not both (a session keeps its scenario)")
    if not (resume / "scenario.json").is_file():
        raise sc.ScenarioError(f"--resume: '{resume}' is not a session directory (no scenario.json)")
    kind = _session_kind(resume)
    if kind != "soak":
        raise sc.ScenarioError(f"--resume: '{resume}' is a `{kind}` session, not a soak's: a soak resumes "
                               f"only its own directory (start a new soak for this scenario)")
    doc = json.loads((resume / "scenario.json").read_text())
    # the file holds every field; only the fault shape the session was given counts
    if doc.get("fault_mix"):
        doc.pop("fault", None)
        doc.pop("faults", None)
    elif doc.get("faults"):
        doc.pop("fault", None)
    if args.runs is not None:
        doc["runs"] = args.runs
    return sc.build(doc)


def _session_kind(session: Path) -> str:
    """`soak` or `run`, as the session wrote it (session.json); a session from before that
    file is a run's when the command it kept (command.txt) was not `brokerchaos soak`."""
    try:
        return json.loads((session / "session.json").read_text())["kind"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        words = (session / "command.txt").read_text().split()
    except OSError:
        return "soak"  # before session.json, a soak kept no command.txt
    return words[1] if len(words) > 1 else "run"


def cmd_run(args) -> int:
    from . import validation as sc

    overrides = {k: getattr(args, k) for k in _flag_keys()}
    if overrides["after_acks"] is not None and overrides["at_seconds"] is not None:
        print("brokerchaos: error: give only one of --after-acks, --at-seconds", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        scenario = sc.load(args.scenario, overrides)
    except sc.ScenarioError as e:
        print(f"brokerchaos: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    exps = _expectations(args)
    if isinstance(exps, int):
        return exps
    bad = _unwritable(args.out, args.junit)
    if bad is not None:
        return bad
    from .cli_tools import dry_run, machine_lacks

    lacks = machine_lacks([scenario])
    if lacks is not None or args.dry_run:
        return lacks if lacks is not None else dry_run(scenario, args.out)
    from .analysis.spark import one_run_options
    from .runner import Session

    w = scenario.workload
    bars = _observer()
    try:
        result = _guarded([scenario], args.spark_master, "run",
                          lambda: Session(scenario, Path(args.out), spark_master=args.spark_master, observer=bars,
                                          command=args.command_line, verdicts=args.verdicts,
                                          java_options=one_run_options(scenario.runs, w.messages * w.producers)).run())
    finally:
        if bars is not None:
            bars.close()
    if isinstance(result, int):
        return result
    if result.refused:
        return _refused("run", result.refused)
    # the scenario's name, not the session's: a CI keeps a test's history by its name
    return _judge(args, exps, [(scenario.name, result.verdicts)],
                  _result_exit([result.summary["result"]]))


def cmd_campaign(args) -> int:
    from . import campaign as cp
    from .errors import ScenarioError

    try:
        spec, scenarios = cp.load(args.campaign, {"runs": args.runs, "messages": args.messages})
    except ScenarioError as e:
        print(f"brokerchaos: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    exps = _expectations(args)
    if isinstance(exps, int):
        return exps
    resume = Path(args.resume) if args.resume else None
    if resume is not None:
        try:
            cp.check_resume(spec, scenarios, resume)
        except ScenarioError as e:
            print(f"brokerchaos: error: {e}", file=sys.stderr)
            return EXIT_BAD_INPUT
    bad = _unwritable(str(resume) if resume is not None else args.out, args.junit,
                      "--resume" if resume is not None else "--out")
    if bad is None:
        from .cli_tools import machine_lacks

        bad = machine_lacks(scenarios)
    if bad is not None:
        return bad
    bars = _observer()
    try:
        out = _guarded(scenarios, args.spark_master, "campaign",
                       lambda: cp.run(spec, scenarios, Path(args.out), spark_master=args.spark_master, resume=resume,
                                      command=args.command_line, observer=bars))
    finally:
        if bars is not None:
            bars.close()
    if isinstance(out, int):
        return out
    print("\n" + cp.table(out["sessions"]))
    from .report.console import outage_lines

    for line in ["Across the campaign:"] + outage_lines(out.get("outages")) if out.get("outages") else []:
        print(line)
    print(f"Results: {out['dir']}")
    print(f"Report: {out['report']}")
    refused = [f"{x['scenario']}: {x['summary']['refused']}" for x in out["sessions"] if x["summary"].get("refused")]
    if refused:
        return _refused("campaign", "; ".join(refused))
    return _judge(args, exps, out["verdicts"], _result_exit(s["summary"].get("result") for s in out["sessions"]))


def cmd_analyze(args) -> int:
    from .history.files import HistoryError, check

    path = Path(args.path)
    if not path.exists():
        print(f"brokerchaos: error: path '{path}' does not exist", file=sys.stderr)
        return EXIT_BAD_INPUT
    exps = _expectations(args)
    if isinstance(exps, int):
        return exps
    root = path if path.is_dir() else path.parent
    bad = _unwritable(None if args.no_write else (str(root) if args.out is None else args.out), args.junit,
                      "--out" if args.out is not None else "path (where its files are written; --out elsewhere, "
                                                           "or --no-write)")
    if bad is not None:
        return bad
    try:
        checked = check(path)
    except HistoryError as e:
        print(f"brokerchaos: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not checked.files:
        print(f"brokerchaos: error: path '{path}' holds no .parquet history files", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not _java_ok(args.spark_master):
        return 1
    from .analysis import metrics
    from .analysis.spark import get_spark, one_shot_options
    from .report import console, files
    from .runner import finish

    try:
        spark = get_spark(args.spark_master, one_shot_options(checked.bytes))
        df = metrics.read_history(spark, *checked.paths)
        analysis = metrics.analyze(spark, df, timing=not args.no_timing)
        metas = files.load_metas(root)
        out = None if args.no_write else Path(args.out) if args.out is not None else root
        done = finish(spark, df, analysis, metas, out)
    finally:
        checked.cleanup()
    if args.format == "json":
        print(json.dumps(done.verdicts, indent=2, default=str))
    else:
        for v in done.verdicts:
            print(f"\n=== {v['run']} ===")
            print(console.run_block(v, metas.get(v["run"])))
        print("\n" + console.summary_table(done.verdicts, metas))
        print(console.summary_lines(done.summary))
        said = done.report_line(root)
        if said:
            print(said)
    return _judge(args, exps, [(path.resolve().name, done.verdicts)], 0)


def cmd_faults(args) -> int:
    from .faults import FAULTS, TARGETS
    from .faults.base import NoParams, supported
    from .systems import SYSTEMS
    from .systems.base import HOOKS, LOCAL_VERBS, NETNS

    local = {name: cls.local_capabilities() for name, cls in SYSTEMS.items()}
    print("Fault actions (--fault ACTION or ACTION-TARGET, e.g. kill-leader; settings with --fault-param K=V):")
    for name, cls in FAULTS.items():
        systems = [s for s, offers in local.items() if supported(cls, offers)]
        needs = ", ".join(sorted(cls.needs)) or "nothing"
        print(f"  {name:<16} {cls.description}")
        where = ", ".join(systems) or ("external clusters (--external) of any system" if HOOKS in cls.needs
                                       else "-")
        print(f"  {'':<16} needs: {needs}; systems: {where}")
        print(f"  {'':<16} seen by: {cls.observes}")
        for s, system in SYSTEMS.items():
            why = system.refusal(cls.needs)
            if why:
                print(f"  {'':<16} not on {s}: {why}")
        if cls.Params is not NoParams:
            _print_fields(cls.Params)
    print("\nTargets (--target), resolved when the fault fires:")
    for name, fn in TARGETS.items():
        print(f"  {name:<16} {(fn.__doc__ or '').strip()}")
    print(f"  {'n1, n2, …':<16} that node;  n1,n2: several;  followers[1]: n of a role, chosen with the seed")
    print(f"  {'n1|n2,n3':<16} groups (partition only); one group alone is set against the rest")
    print(f"  {'peers, clients':<16} in a fault's `from` setting: every untargeted node; the client host")
    print("\nCapabilities: a local cluster offers " + ", ".join(sorted(LOCAL_VERBS | {NETNS}))
          + " (netns: in the namespace sandbox only); an external cluster file offers the verbs whose hooks "
            "every node has, and hooks")
    print("\nSystems (--system NAME; settings with --option K=V or `options:`):")
    for name, cls in SYSTEMS.items():
        own = cls.offers | cls.local_offers()
        extra = f"  [offers {', '.join(sorted(own))}]" if own else ""
        print(f"  {name:<16} {cls.description}{extra}")
        _print_fields(cls.Options)
    return 0


def _print_fields(model) -> None:
    for pname, finfo in model.model_fields.items():
        key = finfo.alias or pname
        req = "required" if finfo.is_required() else \
            "optional" if finfo.default is None else f"default {finfo.default}"
        print(f"  {'':<16}   {key}: {finfo.description} ({req})")


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    from .systems.jvm import jit_error

    bad = jit_error()
    if bad:
        print(f"brokerchaos: {bad}", file=sys.stderr)
        return EXIT_BAD_INPUT
    # as typed, for the report's header (the session's scenario.json is what reproduces it)
    args.command_line = shlex.join(["brokerchaos", *(sys.argv[1:] if argv is None else argv)])
    from .cli_search import cmd_bisect, cmd_explore, cmd_shrink
    from .cli_tools import cmd_clean, cmd_doctor, cmd_fetch, cmd_new

    return {"run": cmd_run, "analyze": cmd_analyze, "campaign": cmd_campaign, "soak": cmd_soak, "bisect": cmd_bisect,
            "shrink": cmd_shrink, "explore": cmd_explore, "faults": cmd_faults, "clean": cmd_clean,
            "fetch": cmd_fetch, "doctor": cmd_doctor, "new": cmd_new}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
