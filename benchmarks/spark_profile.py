"""Where an analysis's time goes, step by step, from Spark's own event log: the driver
between jobs (planning, AQE's re-planning between stages, Python), the jobs with no task
running (scheduling, stage boundaries, broadcasts) and the tasks themselves (run time,
deserialisation, garbage collection, CPU), and within the tasks the operators' own timing
metrics (a whole stage's duration, sorts, aggregations' builds, broadcasts).

    .venv/bin/python benchmarks/spark_profile.py [--kind plain|group|txn] [--runs 20] [--messages 1000]
                                                 [--rounds 3] [--dir /tmp/brokerchaos-bench] [--conf K=V]

The session is benchmarks/many_runs.py's; the analysis is run `--rounds` times in one
process (the first cold) with Spark's event log on (a spark-defaults.conf of its own,
through SPARK_CONF_DIR), then the log is read back and each round's steps (the analysis's
own laps, job.Clock) printed as one JSON line per round. Issue 67's profile: a step's time
is either Spark's per-job and per-stage price or the work itself, and this says which.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

SQL_START = "org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionStart"
SQL_END = "org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionEnd"
SQL_AQE = "org.apache.spark.sql.execution.ui.SparkListenerSQLAdaptiveExecutionUpdate"
SQL_DRIVER = "org.apache.spark.sql.execution.ui.SparkListenerDriverAccumUpdates"


def _conf_dir(logs: Path, conf: list[str]) -> str:
    d = Path(tempfile.mkdtemp(prefix="brokerchaos-profile-conf-"))
    extra = "".join(f"{c.replace('=', ' ', 1)}\n" for c in conf)
    (d / "spark-defaults.conf").write_text(
        f"spark.eventLog.enabled true\nspark.eventLog.dir file://{logs}\nspark.eventLog.compress false\n{extra}")
    return str(d)


def _union(spans: list[tuple[float, float]]) -> float:
    """Seconds covered by the union of (start, end) spans."""
    total, end = 0.0, None
    for a, b in sorted(spans):
        if end is None or a > end:
            total, end = total + (b - a), b
        elif b > end:
            total, end = total + (b - end), b
    return total


def _plan_metrics(info: dict, into: dict) -> None:
    """accumulator id -> (operator, metric, type) over a plan tree (sparkPlanInfo)."""
    for m in info.get("metrics", ()):
        into[m["accumulatorId"]] = (info["nodeName"], m["name"], m.get("metricType"))
    for child in info.get("children", ()):
        _plan_metrics(child, into)


def _timed(into: dict, ids: dict, at: float, updates) -> None:
    """(at, operator: metric, seconds) of every timing metric among `updates` (id, value)."""
    for aid, value in updates:
        name = ids.get(aid)
        if name and name[2] in ("timing", "nsTiming") and value:
            into.append((at, f"{name[0]}: {name[1]}", int(value) / (1e9 if name[2] == "nsTiming" else 1e3)))


def read_log(path: Path) -> dict[str, list]:
    """The jobs, stages and tasks of an event log, as (start, end) epoch seconds with metrics;
    the operators' timing metrics (`ops`: time, operator: metric, seconds) and each task's
    CPU time."""
    jobs: dict[int, list] = {}
    queries: dict[int, list] = {}
    ids: dict[int, tuple] = {}
    out: dict[str, list] = {"jobs": [], "stages": [], "tasks": [], "queries": [], "ops": []}
    # Spark 4 writes a directory of rolled files (eventlog_v2_*: events_1_*, events_2_*, …)
    files = sorted(path.glob("events_*"), key=lambda f: int(f.name.split("_")[1])) if path.is_dir() else [path]
    for line in (x for f in files for x in f.read_text().splitlines()):
        e = json.loads(line)
        kind = e.get("Event")
        if kind == "SparkListenerJobStart":
            jobs[e["Job ID"]] = [e["Submission Time"] / 1e3, None]
        elif kind == "SparkListenerJobEnd":
            jobs[e["Job ID"]][1] = e["Completion Time"] / 1e3
        elif kind == "SparkListenerStageCompleted":
            s = e["Stage Info"]
            if s.get("Submission Time") and s.get("Completion Time"):
                out["stages"].append((s["Submission Time"] / 1e3, s["Completion Time"] / 1e3))
        elif kind == "SparkListenerTaskEnd":
            i, m = e["Task Info"], e.get("Task Metrics") or {}
            out["tasks"].append((i["Launch Time"] / 1e3, i["Finish Time"] / 1e3, m.get("Executor Run Time", 0) / 1e3,
                                 m.get("Executor Deserialize Time", 0) / 1e3, m.get("JVM GC Time", 0) / 1e3,
                                 m.get("Executor CPU Time", 0) / 1e9))
            _timed(out["ops"], ids, i["Launch Time"] / 1e3,
                   ((a["ID"], a.get("Update")) for a in i.get("Accumulables", ()) if "ID" in a))
        elif kind in (SQL_START, SQL_AQE):  # a plan, and each plan AQE makes of it
            _plan_metrics(e["sparkPlanInfo"], ids)
            if kind == SQL_START:  # posted once the query's physical plan is made
                queries[e["executionId"]] = [e["time"] / 1e3, None]
        elif kind == SQL_DRIVER:  # the driver's own metrics (a broadcast's build and collect)
            at = queries.get(e["executionId"], [0])[0]
            _timed(out["ops"], ids, at, e.get("accumUpdates", ()))
        elif kind == SQL_END and e["executionId"] in queries:
            queries[e["executionId"]][1] = e["time"] / 1e3
    out["jobs"] = [tuple(j) for j in jobs.values() if j[1] is not None]
    out["queries"] = [tuple(q) for q in queries.values() if q[1] is not None]
    return out


def breakdown(log: dict[str, list], a: float, b: float) -> dict:
    """What happened between epoch seconds a and b."""
    jobs = [j for j in log["jobs"] if a <= j[0] < b]
    tasks = [t for t in log["tasks"] if a <= t[0] < b]
    in_jobs = _union(jobs)
    in_tasks = _union([(t[0], t[1]) for t in tasks])
    queries = [q for q in log["queries"] if a <= q[0] < b]
    in_queries = _union(queries + jobs)
    return {"wall_s": round(b - a, 3), "jobs": len(jobs), "stages": sum(1 for s in log["stages"] if a <= s[0] < b),
            "tasks": len(tasks), "queries": len(queries),
            "driver_between_jobs_s": round(b - a - in_jobs, 3),
            # before a query's start: Python building it, Catalyst analysing, optimising, planning
            "outside_queries_s": round(b - a - in_queries, 3),
            # within a query, no job running: AQE's re-planning between stages, the result to Python
            "queries_no_job_s": round(in_queries - in_jobs, 3),
            "jobs_no_task_running_s": round(in_jobs - in_tasks, 3),
            "tasks_running_s": round(in_tasks, 3), "task_run_sum_s": round(sum(t[2] for t in tasks), 3),
            "task_deserialize_sum_s": round(sum(t[3] for t in tasks), 3),
            "task_gc_sum_s": round(sum(t[4] for t in tasks), 3), "task_cpu_sum_s": round(sum(t[5] for t in tasks), 3),
            "operators_s": _top_ops(log["ops"], a, b)}


def _top_ops(ops: list, a: float, b: float, n: int = 8) -> dict:
    """The operators' timing metrics summed between a and b, the largest first. They overlap
    (a whole-stage pipeline's `duration` holds its sorts and aggregations) and are not wall time."""
    total: dict[str, float] = {}
    for at, name, sec in ops:
        if a <= at < b:
            total[name] = total.get(name, 0.0) + sec
    return {k: round(v, 3) for k, v in sorted(total.items(), key=lambda kv: -kv[1])[:n]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kind", choices=("plain", "group", "txn"), default="plain")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--messages", type=int, default=1000, help="per run")
    ap.add_argument("--rounds", type=int, default=3, help="analyses in one process, the first cold")
    ap.add_argument("--dir", default="/tmp/brokerchaos-bench")
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                    help="a Spark setting: in spark-defaults.conf, and set at runtime where Spark allows it")
    args = ap.parse_args()
    import many_runs

    d = Path(args.dir) / f"session-{args.kind}-{args.runs}x{args.messages}"
    if not d.exists():
        many_runs.generate(d, args.runs, args.messages, args.kind)
    logs = Path(tempfile.mkdtemp(prefix="brokerchaos-profile-log-"))
    os.environ["SPARK_CONF_DIR"] = _conf_dir(logs, args.conf)
    from brokerchaos.analysis import job, metrics
    from brokerchaos.analysis.spark import get_spark

    marks: list[tuple[str, float]] = []
    lap = job.Clock.lap

    def marked(self, name: str) -> None:
        lap(self, name)
        marks.append((name, time.time()))

    job.Clock.lap = marked
    spark = get_spark()
    for c in args.conf:  # a runtime SQL setting wins over the builder's
        key, value = c.split("=", 1)
        if spark.conf.isModifiable(key):
            spark.conf.set(key, value)
    rounds = []
    for _ in range(args.rounds):
        marks.clear()
        t0 = time.time()
        metrics.analyze(spark, metrics.read_history(spark, str(d))).release()
        rounds.append((t0, time.time(), list(marks)))
    spark.stop()
    (path,) = list(logs.iterdir())
    log = read_log(path)
    for tmp in (logs, Path(os.environ["SPARK_CONF_DIR"])):  # read: nothing left behind in /tmp
        shutil.rmtree(tmp, ignore_errors=True)
    for i, (t0, t1, steps) in enumerate(rounds):
        out = {"round": "cold" if i == 0 else f"warm {i}", "conf": args.conf, "kind": args.kind, "runs": args.runs,
               "messages_per_run": args.messages, "total": breakdown(log, t0, t1), "steps": {}}
        start = t0
        for name, at in steps:
            out["steps"][name] = breakdown(log, start, at)
            start = at
        out["steps"]["after the last step"] = breakdown(log, start, t1)
        print(json.dumps(out))


if __name__ == "__main__":
    main()
