"""Where the JVM's CPU goes in a warm analysis, by Spark's mechanism: a Java Flight Recorder
sampling of the driver and executor threads, each sample given to the first mechanism its
stack shows (closure cleaning, task serialisation, code generation, the plan's description,
analysis, optimisation, planning, broadcasts, the tasks' own work, scheduling, listeners),
next to the number of Spark jobs and stages per analysis and the JVM's CPU by thread kind
(the JIT compilers and the garbage collector are not sampled by JFR: /proc counts them,
benchmarks/analysis.py's reading).

    .venv/bin/python benchmarks/jvm_profile.py [--kind plain|group|txn] [--runs 20] [--messages 1000]
                                               [--warm 3] [--rounds 2] [--quick-jit] [--dir /tmp/brokerchaos-bench]

The session is benchmarks/many_runs.py's. `--warm` analyses first (not recorded), then
`--rounds` recorded ones; `--quick-jit` starts the JVM as `make test` and a one-shot
`analyze` do (C1 alone). Issue 67's question: is a small analysis's time the work or
Spark's price per job? Prints one JSON line.
"""
from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

# a sample goes to the first of these its stack holds (frames named "class.method")
MECHANISMS = (
    ("closure cleaning", ("ClosureCleaner",)),
    ("task (de)serialisation", ("JavaSerializer", "ObjectOutputStream.writeObject", "ObjectInputStream.readObject")),
    ("code generation", ("codegen.CodeGenerator", "org.codehaus.janino", "org.codehaus.commons")),
    ("the plan's description", ("QueryExecution.explainString",)),
    ("broadcast", ("BroadcastExchangeExec", "TorrentBroadcast")),
    ("analysis", ("analysis.Analyzer", "QueryExecution.assertAnalyzed", "CheckAnalysis")),
    ("optimisation", ("optimizer.Optimizer", "SparkOptimizer", "QueryExecution.optimizedPlan")),
    ("planning, AQE's re-planning", ("QueryPlanner", "AdaptiveSparkPlanExec", "QueryExecution.executedPlan")),
    ("the tasks' own work", ("Executor$TaskRunner",)),
    ("scheduling", ("DAGScheduler", "TaskSchedulerImpl", "TaskSetManager")),
    ("listeners, status", ("AsyncEventQueue", "LiveListenerBus", "AppStatusListener")),
)


def mechanism(frames: list[str]) -> str:
    for name, keys in MECHANISMS:
        if any(k in f for f in frames for k in keys):
            return name
    return "other"


def samples(jfr: Path, since: float) -> list[list[str]]:
    """Each execution sample's stack from `since` (a time.time()) on, leaf first."""
    text = subprocess.check_output(["jfr", "print", "--stack-depth", "1024", "--json", "--events",
                                    "jdk.ExecutionSample", str(jfr)])
    events = [e for e in json.loads(text)["recording"]["events"] if _epoch(e["values"]["startTime"]) >= since]
    return [[f"{f['method']['type']['name'].replace('/', '.')}.{f['method']['name']}"
             for f in e["values"]["stackTrace"]["frames"]] for e in events]


def _epoch(stamp: str) -> float:
    """JFR's ISO time (nanoseconds, an offset) as seconds since the epoch."""
    import datetime

    day, frac = (stamp.split(".") + ["0"])[:2]
    digits = "".join(ch for ch in frac if ch.isdigit())
    zone = frac[len(digits):] or "Z"
    base = datetime.datetime.fromisoformat(day + ("+00:00" if zone == "Z" else zone)).timestamp()
    return base + float(f"0.{digits or 0}")


def _jobs(spark, group: str) -> tuple[int, int]:
    tracker = spark.sparkContext.statusTracker()
    jobs = tracker.getJobIdsForGroup(group)
    stages = sum(len(tracker.getJobInfo(j).stageIds) for j in jobs if tracker.getJobInfo(j))
    return len(jobs), stages


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kind", choices=("plain", "group", "txn"), default="plain")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--messages", type=int, default=1000, help="per run")
    ap.add_argument("--warm", type=int, default=3, help="analyses before the recorded ones")
    ap.add_argument("--rounds", type=int, default=2, help="analyses recorded")
    ap.add_argument("--quick-jit", action="store_true", help="C1 alone, as make test and a one-shot analyze")
    ap.add_argument("--dir", default="/tmp/brokerchaos-bench")
    args = ap.parse_args()
    import many_runs
    from analysis import _jvm_thread_cpu, thread_profile

    d = Path(args.dir) / f"session-{args.kind}-{args.runs}x{args.messages}"
    if not d.exists():
        many_runs.generate(d, args.runs, args.messages, args.kind)
    from brokerchaos.analysis import metrics
    from brokerchaos.analysis.spark import get_spark, one_shot_options

    options = one_shot_options(0) if args.quick_jit else []
    # recording from the JVM's start: started later, JFR's instrumentation of the JDK's
    # classes sends their compiled code back to the JIT, whose work would be counted
    jfr = Path(tempfile.mkdtemp(prefix="brokerchaos-jfr-")) / "p.jfr"
    spark = get_spark(java_options=[*options, "-XX:FlightRecorderOptions:stackdepth=1024",
                                    "-XX:StartFlightRecording=name=bc,settings=default", "-Xlog:jfr+startup=error"])
    pid = str(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())

    def analyse(group: str) -> None:
        spark.sparkContext.setJobGroup(group, group)
        metrics.analyze(spark, metrics.read_history(spark, str(d))).release()

    for i in range(args.warm):
        analyse(f"warm-{i}")
    before, t0 = _jvm_thread_cpu(), time.time()
    for i in range(args.rounds):
        analyse(f"round-{i}")
    wall, after = time.time() - t0, _jvm_thread_cpu()
    subprocess.run(["jcmd", pid, "JFR.dump", "name=bc", f"filename={jfr}"], check=True, capture_output=True)
    jobs = [_jobs(spark, f"round-{i}") for i in range(args.rounds)]
    spark.stop()
    stacks = samples(jfr, t0)
    jfr.unlink()
    jfr.parent.rmdir()
    share = collections.Counter(mechanism(s) for s in stacks)
    cpu = {k: round(v / args.rounds, 2) for k, v in thread_profile(before, after).items()}
    print(json.dumps({
        "kind": args.kind, "runs": args.runs, "messages_per_run": args.messages, "quick_jit": args.quick_jit,
        "wall_s_per_analysis": round(wall / args.rounds, 2),
        "jvm_cpu_s_per_analysis": round(sum(cpu.values()), 2),
        "jobs_stages_per_analysis": jobs[0],
        "cpu_s_by_thread_kind": dict(sorted(cpu.items(), key=lambda kv: -kv[1])),
        "samples": len(stacks),
        "sampled_share_by_mechanism": {k: round(v / len(stacks), 3) for k, v in share.most_common()},
    }))


if __name__ == "__main__":
    main()
