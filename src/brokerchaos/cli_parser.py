"""The command line's shape: every command's flags (`brokerchaos --help`), the scenario's
own flags taken from its model (a setting declared once), one-line errors with exit 2."""
from __future__ import annotations

import argparse
import sys
from typing import Optional

EXIT_BAD_INPUT = 2
DESCRIPTION = "brokerchaos: run chaos tests against message brokers and analyse their histories on Spark."


def _bool(text: str) -> bool:
    t = text.lower()
    if t in ("1", "true", "yes", "on"):
        return True
    if t in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {text!r}")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


class _Version(argparse.Action):
    """--version: the project's and the servers' it runs, as resolved here."""

    def __init__(self, option_strings, dest, **kw) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and the server versions it runs")

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        from .doctor import versions

        print("\n".join(versions()))
        parser.exit(0)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="brokerchaos", description=DESCRIPTION)
    p.add_argument("--version", action=_Version)
    sub = p.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")
    for add in (_run, _analyze, _campaign, _soak, _bisect, _shrink, _explore):
        add(sub)
    sub.add_parser("faults", help="list fault actions and targets, and which systems support them")
    from .cli_tools import add_parsers

    add_parsers(sub)
    return p


def _run(sub) -> None:
    """`run`: a scenario file, flags, or both."""
    r = sub.add_parser("run", help="run a scenario: N runs, each with a fresh cluster, a fault and a verdict",
                       description="Run a scenario file, flags, or both (flags win). Results go to "
                                   "OUT/<name>-<time>/: one directory per run with its history, plus "
                                   "results.csv, jumps.csv, duplicates.csv, lost.csv and summary.json.")
    r.add_argument("scenario", nargs="?", help="scenario YAML file (see scenarios/)")
    r.add_argument("--fault", help="fault action, optionally with its target: kill-leader, isolate-leader, "
                                   "tcp-kill-client-node, none (see `brokerchaos faults`)")
    r.add_argument("--fault-param", action="append", metavar="KEY=VALUE",
                   help="a setting of the fault action, repeatable: probability=0.3, delay_ms=50, from=peers")
    r.add_argument("--option", action="append", metavar="KEY=VALUE",
                   help="a setting of the system, repeatable: queue_type=classic, wait_replicas=1 "
                        "(see `brokerchaos faults`)")
    r.add_argument("--after-acks", type=int, help="fire the fault on this positive ack (the seeds' marker)")
    r.add_argument("--at-seconds", type=float, help="fire the fault this long after writing starts")
    _model_flags(r)
    r.add_argument("--verdicts", choices=["auto", "each", "end"], default="auto",
                   help="each: every run's verdict after its read (1-3 s of Spark per run); end: every verdict "
                        "from the session's one analysis at its end (long sessions); auto (default): each up to "
                        "20 runs, else end")
    _out_and_spark(r)
    r.add_argument("--dry-run", action="store_true",
                   help="check the scenario and this machine, print what would run, start nothing")
    _expect_flags(r)


def _analyze(sub) -> None:
    """`analyze`: a history on Spark."""
    a = sub.add_parser("analyze", help="compute every verdict of a history directory on Spark",
                       description="Reads every *.parquet below PATH (history format 1.x, see "
                                   "docs/history-format.md), checks each file's schema, prints the per-run "
                                   "verdicts and writes results.csv, jumps.csv, duplicates.csv, lost.csv and "
                                   "summary.json.")
    a.add_argument("path", help="a history: one run's directory, a whole session, or any tree of Parquet files")
    a.add_argument("--format", choices=["table", "json"], default="table")
    a.add_argument("--no-write", action="store_true", help="print only")
    a.add_argument("--no-timing", action="store_true",
                   help="leave out latency percentiles, ack/receive gaps and outages: the seeds' own figures "
                        "(counts, loss, duplicates, jumps) only, several times faster on large histories")
    _out_and_spark(a, None, "where to write the session outputs (default: PATH)")
    _expect_flags(a)


def _campaign(sub) -> None:
    """`campaign`: several scenarios, one table."""
    c = sub.add_parser("campaign", help="run several scenarios (e.g. dedup off and on), one table across them",
                       description="Runs every scenario of a campaign file as its own session and writes "
                                   "results.csv (every run of every session, with a Scenario column) and "
                                   "summary.json next to them.")
    c.add_argument("campaign", help="campaign YAML: name, scenarios (files), overrides (settings for all), "
                                    "matrix (axis: label: settings)")
    c.add_argument("--resume", metavar="DIR", help="go on in this campaign directory: finished cells are kept, "
                                                   "a cell cut short goes on from its next run")
    c.add_argument("--runs", type=int, help="runs per scenario (overrides the files)")
    c.add_argument("--messages", type=int, help="messages per producer per run")
    _out_and_spark(c)
    _expect_flags(c)


def _soak(sub) -> None:
    """`soak`: runs after runs on one cluster."""
    k = sub.add_parser("soak", help="runs after runs on one long-lived cluster, resumable",
                       description="Successive runs of one scenario on a cluster kept between runs while it is "
                                   "healthy (rebuilt when it is not), one fault per run drawn from the scenario's "
                                   "fault_mix with its seed; each finished run's verdict is appended to "
                                   "verdicts.jsonl at once and a progress line printed. Killed, it loses nothing: "
                                   "`--resume DIR` goes on in the same directory, and the run it was killed in is "
                                   "reported incomplete.")
    k.add_argument("scenario", nargs="?", help="scenario YAML (not with --resume: the session's own is used)")
    k.add_argument("--runs", type=int, help="the most runs in the session, resumed ones included")
    k.add_argument("--duration", help="start no run after this long: 90s, 30m, 6h (or seconds)")
    k.add_argument("--resume", metavar="DIR", help="a soak session's directory to go on in")
    _out_and_spark(k)


def _bisect(sub) -> None:
    """`bisect`: one scenario across releases, to the one that changed a verdict."""
    b = sub.add_parser("bisect", help="run a scenario across server releases and find the one where a check's "
                                      "verdict changes",
                       description="Probes the scenario on releases of its server (cluster.version), both ends "
                                   "first, then halving: a release fails the check at its first run that fails it, "
                                   "holds when --runs runs all pass it (a run it cannot decide is replaced, up to "
                                   "--runs more). Prints each release probed and the "
                                   "boundary: the last release where the check fails and the first where it "
                                   "holds (or the reverse). Writes bisect.json and report.html beside each "
                                   "release's session.")
    b.add_argument("scenario", help="scenario YAML file")
    b.add_argument("--versions", required=True, metavar="A..B|A,B,C",
                   help="the releases: A..B, every release the system's registry lists from A to B (NATS: the "
                        "Go module proxy; Kafka, Pulsar: Maven Central; their Python clients: PyPI), or a list A,B,C")
    b.add_argument("--over", choices=["server", "client"], default="server",
                   help="what the releases are: the servers' (cluster.version, the default) or the client's "
                        "(options.client_version: kafka-clients or pulsar-client-original with client: java, "
                        "confluent-kafka or pulsar-client otherwise)")
    b.add_argument("--check", default="no-loss", help="the check whose verdict is searched: any --expect name "
                                                      "(no-loss, no-duplicates, ordered, max-outage=10s, …); "
                                                      "default no-loss")
    b.add_argument("--runs", type=int, default=5, help="runs that must all pass for a release to hold "
                                                       "(default 5; a release fails at its first failing run; "
                                                       "runs the check cannot decide do not count)")
    _out_and_spark(b)


def _shrink(sub) -> None:
    """`shrink`: a failing scenario cut down to the smallest that still fails."""
    k = sub.add_parser("shrink", help="cut a failing scenario down to the smallest that still fails a check",
                       description="Runs the scenario --runs times for its failure rate, then tries smaller "
                                   "ones — fewer faults (halves first, then one at a time), shorter windows, "
                                   "earlier triggers, fewer messages, fewer nodes — each a session stopped at its "
                                   "first run that fails the check, or when enough runs passed to see a failure "
                                   "at half the original's rate; the first that fails is kept and the search "
                                   "starts again from it, up to --budget runs. The smallest is run --runs times "
                                   "again and written as reproducer.yaml with its rate and the command that "
                                   "replays it; shrink.json has every step.")
    k.add_argument("scenario", help="scenario YAML file (one that fails the check)")
    k.add_argument("--check", default="no-loss", help="the check that must keep failing: any --expect name "
                                                      "(no-loss, no-duplicates, ordered, …); default no-loss")
    k.add_argument("--runs", type=int, default=3, help="runs of the original, and of the reproducer, for their "
                                                       "rates (default 3)")
    k.add_argument("--budget", type=int, default=60, help="runs the search may spend on candidates (default 60)")
    _out_and_spark(k)


def _explore(sub) -> None:
    """`explore`: fault schedules drawn and run until one fails."""
    x = sub.add_parser("explore", help="draw fault schedules from what a system offers and run them until one "
                                       "fails the policy (or a check)",
                       description="Draws schedules from the system's fault actions (those its local cluster "
                                   "supports, or --actions) x targets x trigger moments x windows, one to "
                                   "--max-faults faults each, seeded; runs each as a session on a cluster kept "
                                   "between them, judged by the verdict policy (or --check); stops at the first "
                                   "violation (--collect N: the N-th), or when --budget runs or --minutes are "
                                   "spent. A schedule whose faults did not take effect is tried, not explored. "
                                   "Every schedule is a line of explore.jsonl (--resume DIR goes on); "
                                   "explore.json, report.html (schedules, coverage) and the first violation as "
                                   "violation-N.yaml, ready for `brokerchaos shrink`.")
    x.add_argument("base", nargs="?", help="a scenario YAML file (its system, settings and workload; its faults "
                                           "replaced), or a system's name (its defaults)")
    x.add_argument("--seed", type=int, default=0, help="the draws' seed (default 0): the same seed, the same "
                                                       "schedules")
    x.add_argument("--budget", type=int, help="runs the search may spend, resumed ones included (default 20; "
                                              "resumed: the exploration's own)")
    x.add_argument("--minutes", type=float, help="start no schedule after this many minutes")
    x.add_argument("--runs-each", type=int, help="runs per schedule (default 1)")
    x.add_argument("--max-faults", type=int, default=2, help="faults per schedule, at most (default 2)")
    x.add_argument("--actions", help="the actions drawn from, comma-separated (default: every one the system "
                                     "offers)")
    x.add_argument("--targets", help="the targets drawn from, comma-separated (default: leader, follower, "
                                     "followers, random, minority, all, client-node)")
    x.add_argument("--vary", action="append", metavar="KEY=V1,V2",
                   help="a setting of the system drawn too, repeatable: acks=1,all or sync_interval=always,2m")
    x.add_argument("--collect", type=int, help="stop at this many violations (default 1)")
    x.add_argument("--check", help="one check instead of the whole policy: any --expect name (no-loss, …)")
    x.add_argument("--resume", metavar="DIR", help="an exploration's directory to go on in (its base, seed "
                                                   "and space are its own)")
    _out_and_spark(x)


def _out_and_spark(p: argparse.ArgumentParser, out: Optional[str] = "results",
                   out_help: str = "results directory (default results/)") -> None:
    """Where the outputs go, and the Spark that computes them: every command that analyses."""
    p.add_argument("--out", default=out, help=out_help)
    p.add_argument("--spark-master", help="Spark master URL (default local[*]; env BROKERCHAOS_SPARK_MASTER)")


def _expect_flags(p: argparse.ArgumentParser) -> None:
    from .report.expect import KINDS

    p.add_argument("--expect", metavar="LIST",
                   help="what every run must show, comma-separated: " + ", ".join(
                       f"{k}{'=' + v.takes.upper() if v.takes else ''} ({v.description})" for k, v in KINDS.items())
                   + ". Exit 0 when all hold, 3 when one is violated, 4 when a run could not decide")
    p.add_argument("--junit", metavar="FILE", help="with --expect: a JUnit XML file, one test case per run and "
                                                   "expectation (a violation a failure, undecided an error)")


def _model_flags(p: argparse.ArgumentParser) -> None:
    """A flag per scenario field marked `cli` (scenario.py): its name, type and help come from
    the model, so a setting is declared in one place."""
    import typing

    from .scenario import cli_fields, flag_of

    for path, f in cli_fields():
        name = flag_of(path, f)
        ann = f.annotation
        if typing.get_origin(ann) is typing.Union:  # Optional[X]
            ann = next(a for a in typing.get_args(ann) if a is not type(None))
        kw: dict = {"dest": name, "help": f.description}
        if typing.get_origin(ann) is typing.Literal:
            kw["choices"] = list(typing.get_args(ann))
        elif ann is bool:
            kw.update(type=_bool, metavar="BOOL")
        else:
            kw["type"] = ann
        p.add_argument("--" + name.replace("_", "-"), **kw)
