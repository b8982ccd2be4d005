"""A session: N runs of one scenario inside one sandbox, then one analysis of them all.

Per run (run.py, phases.py): start the cluster (or take the previous run's, if it ended
whole), create a fresh stream, produce while the nemesis waits for its trigger, heal, read
everything back, check the cluster is whole again (else stop it: the next run builds a new
one); with `verdicts: each`, the run's verdict at once. At the end, the session's files
(finish.py). A soak's runs are journalled (journal.py) so that a killed harness loses
nothing. Every fault is healed in `finally`; every process and namespace goes with the
sandbox.
"""
from __future__ import annotations

import asyncio
import gc
import secrets
import signal
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from ..analysis import metrics, spark as spark_mod, warmup
from ..report import console, session_table
from ..sandbox import Sandbox
from ..scenario import Scenario
from . import interpreter
from .finish import finish
from .journal import Journal
from .observe import Observer, _on_sigterm, main_thread
from .pool import ClusterPool, leave, place
from .record import RunRecord
from .run import Clusters, RunRefused, run_one

if TYPE_CHECKING:
    from ..analysis.verdicts import Verdict


# how long a write waits at most for Spark's start-up and first analysis (then it begins
# anyway), and from how long a wait on it is said on the console
SPARK_WAIT_S = 300.0
SPARK_WAIT_SAID_S = 10.0


@dataclass
class SessionResult:
    dir: Path
    verdicts: list[Verdict] = field(default_factory=list)
    metas: dict[str, dict] = field(default_factory=dict)
    summary: dict = field(default_factory=dict)
    report: Optional[Path] = None
    refused: str = ""  # why the session stopped before its runs were done (an external cluster not whole)


class Session:
    EACH_UP_TO = 20
    GAP_ROUNDS = 4  # warm-up analyses at most in a gap between runs (each ~0.6 s)
    BLOCKS_AT_END = 10

    def __init__(self, scenario: Scenario, out: Path, spark_master: Optional[str] = None,
                 observer: Optional[Observer] = None, resume: Optional[Path] = None,
                 duration: Optional[float] = None, soak: bool = False, command: Optional[str] = None,
                 report: bool = True, verdicts: str = "auto", pool: Optional[ClusterPool] = None,
                 stop_when: Optional[Callable[[Verdict], Optional[str]]] = None,
                 java_options: Sequence[str] = ()) -> None:
        self.s = scenario
        # what a child interpreter is given to run the same session (interpreter.py)
        self.args = dict(scenario=scenario, out=out, spark_master=spark_master, observer=observer, resume=resume,
                         duration=duration, soak=soak, command=command, report=report, verdicts=verdicts,
                         stop_when=stop_when, java_options=java_options)
        self.java_options = java_options  # the Spark JVM's, if this session starts it (spark.one_run_options)
        # a stopping rule (bisect: a release's first failing run decides it): given each run's
        # verdict, why no further run is needed, or None; verdicts are then judged run by run
        self.stop_when = stop_when
        # clusters kept between sessions (pool.py): the open pool unless one is given
        self.pool = pool if pool is not None else ClusterPool.current
        self.spark_master = spark_master
        self.obs = observer or Observer()
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        # a soak goes on in the directory of the session it resumes (its runs stay, in order)
        self.dir = Path(resume) if resume is not None else Path(out) / f"{scenario.name}-{stamp}"
        self.resuming = resume is not None
        self.journal = Journal(self.dir)
        # a soak: no new run starts after this many seconds (runs: the most in the session)
        self.duration = duration
        self._kept_analysis: Optional[tuple] = None  # (run, history, analysis): _one_analysis()
        # a soak's per-run look is the verdicts only (no gaps or latency: several times
        # faster); the session's analysis at the end has everything
        self.soak = soak or resume is not None or duration is not None
        self.command = command
        self.report = report  # report.html at the end (a test of verdicts alone goes without)
        self._output = None  # output.txt: every line the session printed, time-stamped
        self._warm = None
        # on an external cluster every name the session gives (streams, client ids) carries
        # this mark: the cluster may hold earlier sessions' streams under the same run ids
        # (and on a cluster a pool may hand to another session, whose run ids are ours too)
        marked = scenario.external or (self.pool is not None and self.pool.admits(scenario))
        self.tag = self.journal.facts().get("tag", "") if self.resuming else \
            (f"{int(time.time()):x}{secrets.token_hex(2)}" if marked else "")
        # each run's verdict after its read ("each"), or every verdict from the session's one
        # analysis at its end ("end"): a run's own analysis costs 1-3 s whatever its size, which
        # over a thousand short runs is most of the session, and the session's analysis does
        # it again. auto: each for up to EACH_UP_TO runs and in a soak (its progress line
        # is made of verdicts), else end
        if stop_when is not None:
            verdicts = "each"
        elif verdicts == "auto":
            verdicts = "each" if self.soak or scenario.runs <= self.EACH_UP_TO else "end"
        self.verdicts = verdicts

    def _line(self, text: str) -> None:
        if self._output is not None:
            stamp = datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
            self._output.write("".join(f"{stamp} {line}\n" for line in text.split("\n")))
            self._output.flush()
        self.obs.line(text)

    def run(self) -> SessionResult:
        other = interpreter.elsewhere(self)
        if other is not None:  # a Python client release this interpreter did not load
            return interpreter.run(self, *other)
        self.dir.mkdir(parents=True, exist_ok=True)
        # appended to: a resumed soak's output goes on in the same file
        with open(self.dir / "output.txt", "a") as self._output:
            try:
                return self._run()
            finally:
                self._output = None
                kept, self._kept_analysis = self._kept_analysis, None
                if kept is not None:  # the session ended before its files: nothing of it stays cached
                    kept[2].release()

    def _run(self) -> SessionResult:
        result = SessionResult(self.dir)
        first = self._begin(result)
        self._warm = warmup.warm_up_async(self.spark_master, analysis=self.verdicts == "each",
                                          java_options=self.java_options)
        old = signal.signal(signal.SIGTERM, _on_sigterm) if main_thread() else None
        try:
            self._runs(result, first)
        finally:
            if old is not None:
                signal.signal(signal.SIGTERM, old)
            self._stop_warm()  # a soak's end or an error between runs: nothing of it may linger
        if not result.metas:  # refused before its first run: nothing to analyse
            result.summary = {"result": "unknown", "runs": 0, "refused": result.refused}
            self._line(f"Results: {self.dir}")
            return result
        self._finish(result)
        return result

    def _begin(self, result: SessionResult) -> int:
        """The session's own files, or those of the session it resumes; the first run's index."""
        if not self.resuming:
            self.journal.begin(self.s.model_dump_json(indent=2), "soak" if self.soak else "run", self.tag,
                               self.s.external, self.command)
            return 1
        result.metas, first = self.journal.take_over()
        incomplete = sum(1 for m in result.metas.values() if m.get("status") == "incomplete")
        self._line(f"Resuming {self.dir}: {len(result.metas)} runs there ({incomplete} incomplete)")
        return first

    def _runs(self, result: SessionResult, first: int) -> None:
        s = self.s
        t_begin = time.monotonic()
        sb, clusters = place(self.pool, s, self.tag, self._line)
        ended = False
        try:
            self._announce(sb)
            for i in range(first, s.runs + 1):
                if self.duration is not None and time.monotonic() - t_begin >= self.duration:
                    self._line(f"Soak: {self.duration:.0f} s reached; no new run")
                    break
                if not self._one(result, sb, clusters, i):
                    break
            ended = True
        finally:
            leave(self.pool, sb, clusters, ended, self.dir.name)

    def _one(self, result: SessionResult, sb: Sandbox, clusters: Clusters, i: int) -> bool:
        """Run i of the session, and its verdict (verdicts: each); False when the session stops here."""
        s = self.s
        run_id = f"run-{i:03d}"
        where = f"external cluster {s.external}" if s.external else f"sandbox {sb.mode}"
        self._line(f"\n=== {s.name} {run_id} ({i}/{s.runs}) on {s.system}, {where} ===")
        self.obs.progress("runs", i - 1, s.runs, f"{s.name} {run_id}")
        try:
            rec = run_one(s, sb, clusters, self.dir, run_id, i, self.obs, self._line, self._quiet_before_write)
        except RunRefused as e:
            result.refused = str(e)
            self._line(f"Run refused: {e}")
            return False
        self.obs.progress("runs", i, s.runs, f"{s.name} {run_id}")
        if self.verdicts == "each":
            self._judge(result, rec)
        result.metas[run_id] = rec.to_json()
        if self.soak:
            self._line(console.soak_line(self.journal.kept))
        why = self.stop_when(result.verdicts[-1]) if self.stop_when and result.verdicts else None
        if why and i < s.runs:
            self._line(f"Stopping after {run_id}: {why}")
            return False
        return True

    def _judge(self, result: SessionResult, rec: RunRecord) -> None:
        """The run's verdict now, on the console and in the journal; then, before the next
        write, the JIT warmed further in the gap (stopped by _quiet_before_write; the next
        verdicts 15-25% sooner), on this run's own history when it is larger than the small one."""
        t_an = time.monotonic()
        v, steps = self.analyze_run(rec.run, keep=self._one_analysis())
        rec.phases.update(analysis_s=round(time.monotonic() - t_an, 3), analysis_steps_s=steps)
        if v is not None:
            result.verdicts.append(v)
            self._line(console.run_block(v, rec.to_json()))
            self.journal.keep(v)
        if rec.t_read_end is not None:
            # what a user waits for: the read's end to the verdict on the screen
            rec.phases["verdict_after_read_s"] = round(time.monotonic() - rec.t_read_end, 3)
        rec.write(self.dir / rec.run)
        if rec.index < self.s.runs:
            w = self.s.workload
            own = w.messages * w.producers > warmup.MESSAGES
            self._warm = warmup.warm_up_async(self.spark_master, rounds=self.GAP_ROUNDS,
                                              history=str(self.dir / rec.run / "history") if own else None)

    def _finish(self, result: SessionResult) -> None:
        """The session's analysis (a session of one run: that run's own), its files and page."""
        t_an = time.monotonic()
        spark = spark_mod.get_spark(self.spark_master)
        if self._kept_analysis is not None and list(result.metas) == [self._kept_analysis[0]]:
            _, df, analysis = self._kept_analysis
        else:
            df = metrics.read_history(spark, str(self.dir))
            analysis = metrics.analyze(spark, df)
        self._kept_analysis = None
        done = finish(spark, df, analysis, result.metas, self.dir, report=self.report,
                      extra={"refused": result.refused} if result.refused else None)
        result.verdicts, result.summary, result.report = done.verdicts, done.summary, done.report
        if self.verdicts == "end":
            self._end_blocks(result, time.monotonic() - t_an)
        self._line("\n" + console.summary_table(result.verdicts, result.metas))
        self._line(console.summary_lines(result.summary))
        self._line(f"Results: {self.dir}")
        said = done.report_line(self.dir)
        if said:
            self._line(said)

    def _end_blocks(self, result: SessionResult, seconds: float) -> None:
        """verdicts: end: every run is in the table; the runs that did not pass get their block."""
        self._line(f"\nAnalysis: {len(result.verdicts)} runs in {seconds:.1f} s")
        for v in result.verdicts:
            if not self.resuming or v["run"] not in self.journal.kept:
                self.journal.keep(v)
        failed = [v for v in result.verdicts if v["result"] != "pass"]
        for v in failed[:self.BLOCKS_AT_END]:
            self._line(console.run_block(v, result.metas.get(v["run"])))
        if len(failed) > self.BLOCKS_AT_END:
            self._line(f"... and {len(failed) - self.BLOCKS_AT_END} more runs that did not pass: results.csv")

    def _announce(self, sb: Sandbox) -> None:
        if sb.mode != "netns" and not self.s.external:  # an external cluster's nodes are not ours to place
            self._line(f"note: network namespaces unavailable ({sb.why_no_netns}); nodes run on loopback ports"
                       " and network faults are unavailable")

    def _one_analysis(self) -> bool:
        """A session of one run (not a soak, whose runs are analysed without timing, nor a
        resumed one) has the verdict of its run analysed once: the session's files come from it."""
        return self.s.runs == 1 and not self.soak and not self.resuming

    def analyze_run(self, run_id: str, keep: bool = False) -> tuple[Optional[dict], dict]:
        """The run's verdict, and the seconds its analysis spent per step; `keep`: the
        analysis is kept for the session's files."""
        spark = spark_mod.get_spark(self.spark_master)
        df = metrics.read_history(spark, str(self.dir / run_id / "history"))
        analysis = metrics.analyze(spark, df, timing=not self.soak)
        if keep:
            self._kept_analysis = (run_id, df, analysis)
        else:
            analysis.release()  # the run's own block shows verdicts only; the logs are the session's
        v = session_table.complete(analysis.verdicts)[0] if analysis.verdicts else None
        return v, analysis.meta.get("seconds", {})

    async def _quiet_before_write(self) -> None:
        """Nothing of the harness's own may stall the producers: a stall is an ack gap the
        analysis would count as the broker's outage. The Spark JVM's start-up (begun with the
        session, so that it overlaps the first cluster's) held the interpreter for 0.5 s a
        second into a first run's write (a 503 ms ack gap with no fault at all): it is done
        first. And gc.freeze() moves what exists now out of the collector's way: full
        collections scanning it paused a 2,000 msg/s producer for 28–115 ms (unfrozen when
        the write phase ends, so that nothing is kept for good over a long session). A long
        wait (a loaded machine: 87 s was seen) is said, so that a silent pause is explained."""
        t0 = time.monotonic()
        await asyncio.to_thread(self._stop_warm)
        waited = time.monotonic() - t0
        if waited >= SPARK_WAIT_SAID_S:
            self._line(f"Spark: the write waited {waited:.1f} s for Spark's start-up and first analysis "
                       "(a stall in the write would count as the broker's outage)")
        gc.collect()
        gc.freeze()

    def _stop_warm(self) -> None:
        warm = self._warm
        if warm is not None and warm.is_alive():
            warm.stop(SPARK_WAIT_S)
