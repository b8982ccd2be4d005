"""Spark analysis vs the seeds' dict/set loop on one large history.

    .venv/bin/python benchmarks/analysis.py [--messages 10000000] [--dir /tmp/bc-bench]

Generates a history of one producer and one consumer (send + ack per message, a read with
losses, a redelivered block and reordered blocks: about 3 rows per message), then times
  - the seeds' approach: one Python pass over the events with a dict and sets, computing
    the seeds' figures (counts, missing, duplicates, JF/JB/DJF/DJB), in a subprocess so its
    peak memory is its own;
  - the Spark job (`brokerchaos.analysis.metrics.analyze`), on a warm session, best of
    --repeat runs: every verdict, and with timing=False (`analyze --no-timing`: the seeds'
    figures, no latency, gaps or outages), which is what the loop computes.
Prints one JSON line with both times, the ratio, and peak memory of each side.
`--cold-profile` (with `--keep`) times only the cold `brokerchaos analyze` and takes its CPU
apart: the JVM's by thread kind (tasks, JIT C1 and C2, GC, the rest), and what the command
reaped (its Python, Spark's launcher).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from brokerchaos.history.schema import SCHEMA

CHUNK = 1_000_000


def _const(value, n):
    return pa.DictionaryArray.from_arrays(np.zeros(n, dtype=np.int8), pa.array([value])).cast(pa.string())


def _table(run, client, seq, t, types, producer, value, offset, send_ns=None):
    n = len(seq)
    return pa.table(
        {
            "run": _const(run, n), "client": _const(client, n), "seq": pa.array(seq, pa.int64()),
            "t_ns": pa.array(t, pa.int64()), "type": types, "producer": _const(producer, n),
            "value": pa.array(value, pa.int64()), "offset": offset,
            "node": pa.nulls(n, pa.string()), "detail": pa.nulls(n, pa.string()), "window": pa.nulls(n, pa.int64()),
            "intended_ns": pa.nulls(n, pa.int64()),
            "send_ns": pa.nulls(n, pa.int64()) if send_ns is None else send_ns,
            # format 1.6's consumer-group columns, 1.7's txn and 1.8's topic: none here
            # (benchmarks/groups.py and transactions.py have the first; one topic)
            **{f.name: pa.nulls(n, f.type) for f in SCHEMA
               if f.name in ("group", "partition", "position", "epoch", "txn", "topic")},
        },
        schema=SCHEMA,
    )


def generate(directory: Path, n: int, seed: int = 1, with_send_ns: bool = True) -> int:
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    rows = 0
    # producer: send, ack per message (0.1% nacked), 1 us apart, ack 0.2..5 ms later
    for part, start in enumerate(range(0, n, CHUNK)):
        v = np.arange(start + 1, min(n, start + CHUNK) + 1, dtype=np.int64)
        m = len(v)
        t_send = v * 1_000
        t_ack = t_send + rng.integers(200_000, 5_000_000, m)
        nack = rng.random(m) < 0.001
        types = pa.DictionaryArray.from_arrays(np.where(nack, 2, 1).astype(np.int8), pa.array(["send", "ack", "nack"]))
        seq = np.empty(2 * m, dtype=np.int64)
        seq[0::2] = 2 * v - 1
        seq[1::2] = 2 * v
        t = np.empty(2 * m, dtype=np.int64)
        t[0::2], t[1::2] = t_send, t_ack
        vv = np.repeat(v, 2)
        ty_idx = np.empty(2 * m, dtype=np.int8)
        ty_idx[0::2] = 0
        ty_idx[1::2] = np.where(nack, 2, 1)
        types = pa.DictionaryArray.from_arrays(ty_idx, pa.array(["send", "ack", "nack"])).cast(pa.string())
        offs = pa.array(np.where(ty_idx == 1, vv, -1).astype(str)).cast(pa.string())
        # format 1.4, as the producer writes it: each ack carries its send's time
        send_ns = pa.array(np.repeat(t_send, 2), mask=ty_idx != 1) if with_send_ns else None
        pq.write_table(_table("bench", "p1", seq, t, types, "p1", vv, offs, send_ns),
                       directory / f"p1-{part:05d}.parquet")
        rows += 2 * m
    # consumer: everything in order, except lost messages, a redelivered block, and swapped blocks
    order = np.arange(1, n + 1, dtype=np.int64)
    for _ in range(max(1, n // 1_000_000)):
        a = int(rng.integers(0, n - 20_000))
        head, tail = order[a:a + 10_000].copy(), order[a + 10_000:a + 20_000].copy()
        order[a:a + 10_000], order[a + 10_000:a + 20_000] = tail, head
    keep = rng.random(n) >= 0.0001
    order = order[keep]
    b = int(rng.integers(0, len(order) - 10_000))
    order = np.concatenate([order[:b + 10_000], order[b:b + 10_000], order[b + 10_000:]])
    t0 = n * 1_000 + 10_000_000
    for part, start in enumerate(range(0, len(order), CHUNK)):
        v = order[start:start + CHUNK]
        seq = np.arange(start + 1, start + len(v) + 1, dtype=np.int64)
        types = _const("recv", len(v))
        pq.write_table(_table("bench", "c1", seq, t0 + seq * 500, types, "p1", v, pa.array(v.astype(str))),
                       directory / f"c1-{part:05d}.parquet")
        rows += len(v)
    return rows


DICT_LOOP = r'''
import json, resource, sys, time
import pyarrow.dataset as ds
t0 = time.perf_counter()
sent = {}          # value -> list of offsets where read (the seeds' messages_sent)
pos, neg = set(), set()
prev = None
jf = jb = djf = djb = 0
d = ds.dataset(sys.argv[1], format="parquet")
cols = ["client", "seq", "type", "value", "offset"]
# the seeds track sends and acks as they happen, then read: one pass over producer events...
for batch in d.to_batches(columns=cols, filter=ds.field("type") != "recv", batch_size=1_000_000):
    for ty, v in zip(batch.column("type").to_pylist(), batch.column("value").to_pylist()):
        if ty == "send":
            if v not in sent:
                sent[v] = []
        elif ty == "ack":
            pos.add(v)
        elif ty == "nack":
            neg.add(v)
# ...then one over the reads, in read order (files are per client and in seq order)
for batch in d.to_batches(columns=cols, filter=ds.field("type") == "recv", batch_size=1_000_000):
    for v, o in zip(batch.column("value").to_pylist(), batch.column("offset").to_pylist()):
        got = sent.get(v)
        if got is not None:
            dup = len(got) > 0
            if prev is not None:
                if v > prev + 1:
                    if dup: djf += 1
                    else: jf += 1
                elif v <= prev:
                    if dup: djb += 1
                    else: jb += 1
            got.append(o)
        prev = v
acked_missing = sum(1 for v in pos if not sent[v])
non_acked_received = sum(1 for v, got in sent.items() if got and v not in pos)
dups = sum(1 for got in sent.values() if len(got) > 1)
received = sum(len(got) for got in sent.values())
out = dict(send_count=len(sent), pos=len(pos), neg=len(neg - pos), received=received,
           acked_missing=acked_missing, received_no_ack=non_acked_received, msgs_with_dups=dups,
           jf=jf, jb=jb, djf=djf, djb=djb, seconds=time.perf_counter() - t0,
           peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
print(json.dumps(out))
'''


def dict_loop(directory: Path) -> dict:
    r = subprocess.run([sys.executable, "-c", DICT_LOOP, str(directory)], capture_output=True, text=True, check=True)
    return json.loads(r.stdout)


# The seeds' own figures as one query of a single-process columnar engine (DuckDB), over the
# same files: a reference for what the Spark job costs on one machine. A benchmark
# dependency only (`pip install -e '.[bench]'`, which `make setup` does).
DUCKDB = r'''
import json, resource, sys, time
import duckdb
t0 = time.perf_counter()
con = duckdb.connect()
con.execute("SET enable_progress_bar = false")
files = sys.argv[1] + "/*.parquet"
row = con.execute("""
WITH h AS (SELECT client, seq, type, value FROM read_parquet($f)),
s AS (SELECT DISTINCT value FROM h WHERE type = 'send'),
a AS (SELECT DISTINCT value FROM h WHERE type = 'ack'),
n AS (SELECT DISTINCT value FROM h WHERE type = 'nack'),
r AS (SELECT value, lag(value) OVER (PARTITION BY client ORDER BY seq) AS prev,
             row_number() OVER (PARTITION BY client, value ORDER BY seq) AS k
      FROM h WHERE type = 'recv'),
rs AS (SELECT * FROM r SEMI JOIN s USING (value)),
c AS (SELECT value, count(*) AS c FROM rs GROUP BY value)
SELECT (SELECT count(*) FROM s), (SELECT count(*) FROM a),
       (SELECT count(*) FROM (SELECT value FROM n EXCEPT SELECT value FROM a)),
       (SELECT count(*) FROM rs),
       (SELECT count(*) FROM (SELECT value FROM a EXCEPT SELECT value FROM c)),
       (SELECT count(*) FROM (SELECT value FROM c EXCEPT SELECT value FROM a)),
       (SELECT count(*) FROM c WHERE c > 1),
       (SELECT count_if(value > prev + 1 AND k = 1) FROM rs), (SELECT count_if(value <= prev AND k = 1) FROM rs),
       (SELECT count_if(value > prev + 1 AND k > 1) FROM rs), (SELECT count_if(value <= prev AND k > 1) FROM rs)
""", {"f": files}).fetchone()
keys = ["send_count", "pos", "neg", "received", "acked_missing", "received_no_ack", "msgs_with_dups",
        "jf", "jb", "djf", "djb"]
out = dict(zip(keys, row))
out.update(seconds=time.perf_counter() - t0, peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
print(json.dumps(out))
'''


def duckdb_query(directory: Path) -> dict | None:
    try:
        import duckdb  # noqa: F401
    except ImportError:
        print("duckdb is not installed (pip install -e '.[bench]'): no DuckDB reference", file=sys.stderr)
        return None
    r = subprocess.run([sys.executable, "-c", DUCKDB, str(directory)], capture_output=True, text=True,
                       check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def cold_command(directory: Path, timing: bool, fast_start: bool = True) -> float:
    """What a user types: `brokerchaos analyze DIR`, JVM start and the written logs included;
    `fast_start=False` without the class archive and the quick JIT (docs/guide/spark.md, "Spark")."""
    exe = Path(sys.executable).with_name("brokerchaos")
    env = dict(os.environ, **({} if fast_start else {"BROKERCHAOS_SPARK_FAST_START": "0"}))
    with tempfile.TemporaryDirectory() as out:
        t = time.perf_counter()
        r = subprocess.run([str(exe), "analyze", str(directory), "--out", out] + ([] if timing else ["--no-timing"]),
                           capture_output=True, text=True, env=env)
        took = time.perf_counter() - t
    if r.returncode not in (0, 3, 4):
        raise SystemExit(f"brokerchaos analyze failed ({r.returncode}): {r.stderr[-2000:]}")
    return took


def _javas_below(pid: int) -> list[int]:
    """The java processes among `pid`'s descendants (Spark's launcher, then its JVM)."""
    parent, javas = {}, []
    for d in Path("/proc").iterdir():
        try:
            stat = (d / "stat").read_text() if d.name.isdigit() else ""
        except OSError:
            continue
        if stat:
            parent[int(d.name)] = int(stat[stat.rindex(")") + 2:].split()[1])
            if stat[stat.index("(") + 1:stat.rindex(")")] == "java":
                javas.append(int(d.name))
    below = []
    for j in javas:
        q = j
        while q > 1 and q != pid:
            q = parent.get(q, 0)
        if q == pid:
            below.append(j)
    return below


def cold_profile(directory: Path) -> dict:
    """`brokerchaos analyze DIR` as cold_command runs it, its CPU taken apart: the JVMs' by
    thread kind (each java process below the command read from /proc every 0.2 s while it
    runs, each thread's last reading counted: an ended JVM is not reaped by the command, so
    its CPU is not in the rusage), and the processes the command reaped (its Python, Spark's
    scripts)."""
    exe = Path(sys.executable).with_name("brokerchaos")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    last: dict[tuple[int, int], tuple[str, float]] = {}
    with tempfile.TemporaryDirectory() as out:
        t = time.perf_counter()
        proc = subprocess.Popen([str(exe), "analyze", str(directory), "--out", out], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        while proc.poll() is None:
            for java in _javas_below(proc.pid):
                last.update({(java, tid): x for tid, x in _threads_cpu(java).items()})
            time.sleep(0.2)
        took = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 3, 4):
        raise SystemExit(f"brokerchaos analyze failed ({proc.returncode})")
    jvm = thread_profile({}, {i: x for i, x in enumerate(last.values())})
    reaped = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return {"seconds": round(took, 2), "jvm_cpu_s": jvm, "jvm_total_cpu_s": round(sum(jvm.values()), 1),
            "reaped_cpu_s": round(reaped, 1)}


def spark_on(directory: Path, master: str, timing: bool = True) -> dict:
    """The every-verdict job twice in a process of its own on `master` (local[1], local[2]...):
    the faster one's seconds, steps, and the JVM's CPU seconds by kind of thread during it."""
    env = dict(os.environ, BROKERCHAOS_SPARK_MASTER=master)
    cmd = [sys.executable, __file__, "--child", "--dir", str(directory)] + ([] if timing else ["--no-timing"])
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


# a JVM thread's name (its comm, cut at 15 characters) -> what it does for an analysis
_THREAD_KINDS = (("Executor task", "tasks"), ("C2 Compiler", "JIT C2"), ("C1 Compiler", "JIT C1"),
                 ("GC Thread", "GC"), ("G1 ", "GC"), ("VM Thread", "GC"))


def _jvm_thread_cpu() -> dict[int, tuple[str, float]]:
    """Every thread of this process's JVM: tid -> (kind, CPU seconds so far), from /proc."""
    from brokerchaos.analysis.spark import get_spark

    return _threads_cpu(get_spark().sparkContext._jvm.java.lang.ProcessHandle.current().pid())


def _threads_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """Every thread of process `pid` (a JVM): tid -> (kind, CPU seconds so far)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:  # it ended
        return out
    for t in tasks:
        try:
            name = (t / "comm").read_text().strip()
            stat = (t / "stat").read_text()
        except OSError:
            continue
        f = stat[stat.rindex(")") + 2:].split()
        kind = next((k for prefix, k in _THREAD_KINDS if name.startswith(prefix)), "other (planning, scheduling)")
        out[int(t.name)] = (kind, (int(f[11]) + int(f[12])) / tick)
    return out


def thread_profile(before: dict, after: dict) -> dict[str, float]:
    """CPU seconds per kind of thread between two _jvm_thread_cpu() readings (a thread that
    ended in between is not counted: Spark's task and compiler threads are pooled)."""
    out: dict[str, float] = {}
    for tid, (kind, cpu) in after.items():
        out[kind] = out.get(kind, 0.0) + cpu - (before[tid][1] if tid in before else 0.0)
    return {k: round(v, 1) for k, v in sorted(out.items(), key=lambda kv: -kv[1])}


def _jvm_peak_mb() -> float | None:
    from brokerchaos.analysis.spark import get_spark

    sc = get_spark().sparkContext
    try:
        pid = sc._jvm.java.lang.ProcessHandle.current().pid()
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except Exception:  # not on a local JVM
        return None
    return None


def spark_job(directory: Path, repeat: int, timing: bool = True, profile: bool = False) -> dict:
    from brokerchaos.analysis import metrics
    from brokerchaos.analysis.spark import get_spark

    from brokerchaos.report import files

    spark = get_spark()
    # warm-up: JVM start, class loading, JIT on a first pass
    metrics.analyze(spark, metrics.read_history(spark, str(directory)), timing=timing).release()
    times, logs = [], []
    verdict = None
    steps = None
    cpu = None
    for _ in range(repeat):
        before = _jvm_thread_cpu() if profile else None
        t = time.perf_counter()
        a = metrics.analyze(spark, metrics.read_history(spark, str(directory)), timing=timing)
        times.append(time.perf_counter() - t)
        if times[-1] == min(times):
            verdict, steps = a.verdicts[0], a.meta.get("seconds")
            cpu = thread_profile(before, _jvm_thread_cpu()) if profile else None
        # what `brokerchaos analyze` does next: results.csv, jumps.csv, duplicates.csv
        with tempfile.TemporaryDirectory() as out:
            t = time.perf_counter()
            files.write_session(a, Path(out), {})
            logs.append(time.perf_counter() - t)
        a.release()
    return {"seconds": min(times), "all_seconds": [round(x, 2) for x in times], "verdict": verdict, "steps": steps,
            "logs_seconds": round(min(logs), 2), "jvm_cpu_s": cpu,
            "python_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "jvm_peak_rss_mb": _jvm_peak_mb()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=10_000_000)
    ap.add_argument("--dir", default="/tmp/brokerchaos-bench")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--keep", action="store_true", help="reuse a history already generated in --dir")
    ap.add_argument("--no-cold", action="store_true", help="leave out the cold `brokerchaos analyze` command")
    ap.add_argument("--no-cores", action="store_true", help="leave out the local[1] / local[2] comparison")
    ap.add_argument("--cold-profile", action="store_true",
                    help="only the cold command, its CPU taken apart (the JVM's by thread kind, the rest)")
    ap.add_argument("--old-format", action="store_true",
                    help="acks without send_ns (format 1.3): latency pairs every send with its ack")
    ap.add_argument("--once", action="store_true",
                    help="only one analysis (every verdict, cold in its process) and its peak memory: for "
                         "histories too large for the loop (100 M messages: ~42 GB)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--no-timing", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        # twice: the first analysis of a JVM is also its JIT's; the second is a warm session's
        sp = spark_job(Path(args.dir), 2, timing=not args.no_timing, profile=True)
        print(json.dumps({k: sp[k] for k in ("seconds", "all_seconds", "steps", "jvm_cpu_s")}))
        return
    d = Path(args.dir) / (f"h{args.messages}" + ("-1.3" if args.old_format else ""))
    if not (args.keep and d.exists()):
        import shutil

        shutil.rmtree(d, ignore_errors=True)
        t = time.perf_counter()
        rows = generate(d, args.messages, with_send_ns=not args.old_format)
        print(f"generated {rows:,} rows in {time.perf_counter() - t:.1f}s at {d}", file=sys.stderr)
    if args.cold_profile:
        print(json.dumps({"messages": args.messages, **cold_profile(d)}))
        return
    if args.once:
        from brokerchaos.analysis import metrics
        from brokerchaos.analysis.spark import get_spark

        spark = get_spark()
        t = time.perf_counter()
        a = metrics.analyze(spark, metrics.read_history(spark, str(d)))
        took = time.perf_counter() - t
        v = a.verdicts[0]
        a.release()
        print(json.dumps({"messages": args.messages, "spark_once_s": round(took, 1), "steps_s": a.meta["seconds"],
                          "send_count": v["send_count"], "acked_missing": v["acked_missing"],
                          "msgs_with_dups": v["msgs_with_dups"], "jf": v["jf"], "jb": v["jb"],
                          "python_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                          "jvm_peak_rss_mb": _jvm_peak_mb()}))
        return
    loop = dict_loop(d)
    print(f"dict/set loop: {loop['seconds']:.1f}s, peak {loop['peak_rss_mb']:.0f} MB", file=sys.stderr)
    sp = spark_job(d, args.repeat)
    print(f"spark, every verdict: {sp['seconds']:.1f}s (runs {sp['all_seconds']}) {sp['steps']}; "
          f"then the logs: {sp['logs_seconds']:.1f}s", file=sys.stderr)
    quick = spark_job(d, args.repeat, timing=False)
    print(f"spark, --no-timing: {quick['seconds']:.1f}s (runs {quick['all_seconds']}) {quick['steps']}; "
          f"then the logs: {quick['logs_seconds']:.1f}s", file=sys.stderr)
    v = sp["verdict"]
    assert all(quick["verdict"][k] == v[k] for k in ("send_count", "acked_missing", "msgs_with_dups", "jf", "jb",
                                                      "djf", "djb", "received"))
    # both must agree on the figures they share
    same = {k: (loop[k2], v[k]) for k2, k in [("send_count", "send_count"), ("acked_missing", "acked_missing"),
                                              ("msgs_with_dups", "msgs_with_dups"), ("jf", "jf"), ("jb", "jb"),
                                              ("djf", "djf"), ("djb", "djb"), ("received", "received")]}
    assert all(a == b for a, b in same.values()), same
    duck = duckdb_query(d)
    if duck is not None:
        print(f"duckdb, the seeds' figures: {duck['seconds']:.1f}s, peak {duck['peak_rss_mb']:.0f} MB", file=sys.stderr)
        assert all(duck[k] == loop[k] for k in ("send_count", "pos", "neg", "received", "acked_missing",
                                                 "received_no_ack", "msgs_with_dups", "jf", "jb", "djf", "djb")), \
            (duck, loop)
    cold = {}
    if not args.no_cold:
        prof = cold_profile(d)
        print(f"brokerchaos analyze, cold, taken apart: {prof}", file=sys.stderr)
        cold = {"analyze_cold_s": round(cold_command(d, True), 2), "analyze_cold_profile": prof,
                "analyze_cold_no_timing_s": round(cold_command(d, False), 2),
                "analyze_cold_no_fast_start_s": round(cold_command(d, True, fast_start=False), 2)}
        print(f"brokerchaos analyze, cold: {cold}", file=sys.stderr)
    cores, by_master = {}, {}
    if not args.no_cores:
        by_master = {m: spark_on(d, m) for m in ("local[1]", "local[2]")}
        cores = {m: round(x["seconds"], 2) for m, x in by_master.items()}
        print(f"every verdict by cores: {cores}; each run {[x['all_seconds'] for x in by_master.values()]}",
              file=sys.stderr)
        for m, x in by_master.items():
            print(f"  {m}: JVM CPU s by thread {x['jvm_cpu_s']}; steps {x['steps']}", file=sys.stderr)
    print(json.dumps({
        "messages": args.messages, "cores": os.cpu_count(),
        "dict_loop_s": round(loop["seconds"], 2), "dict_loop_peak_mb": round(loop["peak_rss_mb"]),
        "spark_s": round(sp["seconds"], 2), "spark_runs_s": sp["all_seconds"],
        "speedup": round(loop["seconds"] / sp["seconds"], 2), "spark_steps_s": sp["steps"],
        "spark_no_timing_s": round(quick["seconds"], 2), "spark_no_timing_runs_s": quick["all_seconds"],
        "speedup_no_timing": round(loop["seconds"] / quick["seconds"], 2), "spark_no_timing_steps_s": quick["steps"],
        "spark_logs_s": sp["logs_seconds"], "spark_no_timing_logs_s": quick["logs_seconds"],
        "spark_python_peak_mb": round(sp["python_peak_rss_mb"]),
        "spark_jvm_peak_mb": None if sp["jvm_peak_rss_mb"] is None else round(sp["jvm_peak_rss_mb"]),
        "agree": {k: a for k, (a, b) in same.items()},
        "duckdb_s": None if duck is None else round(duck["seconds"], 2),
        "duckdb_peak_mb": None if duck is None else round(duck["peak_rss_mb"]),
        "spark_no_timing_over_duckdb": None if duck is None else round(quick["seconds"] / duck["seconds"], 2),
        **cold,
        **({"cold_speedup": round(loop["seconds"] / cold["analyze_cold_s"], 2)} if cold else {}),
        "spark_by_master_s": cores,
        "spark_by_master_runs_s": {m: x["all_seconds"] for m, x in by_master.items()},
        "by_master_jvm_cpu_s": {m: x["jvm_cpu_s"] for m, x in by_master.items()},
        "by_master_steps_s": {m: x["steps"] for m, x in by_master.items()},
        **({"local2_over_local1": round(cores["local[1]"] / cores["local[2]"], 2)} if cores else {}),
    }))


if __name__ == "__main__":
    main()
