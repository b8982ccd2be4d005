"""A session: N runs of one scenario inside one sandbox.

Per run: start the cluster (or take the previous run's, if it ended healthy), create a
fresh stream, produce while the nemesis waits for its trigger, heal, read everything back,
check the cluster is whole again (else stop it: the next run builds a new one), analyse
the history on Spark.
Every fault is healed in `finally`; every process and namespace goes with the sandbox.
"""
from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import secrets
import signal
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from .analysis import metrics, outages, spark as spark_mod, warmup
from .faults.nemesis import AckGate, Nemesis
from .history import Recorder
from .history.schema import OBSERVER
from .report import console, files, html, session_table
from .sandbox import Sandbox
from .scenario import Scenario
from .systems import SYSTEMS, Deployment, LiveReader
from .systems.base import node_names
from .workload import LiveProgress, ProducerLoop, ProducerProcesses, finish_live, read_all, start_live
from .workload.producer import quick_switches


class Observer:
    """Hooks for callers that want to watch a run (the tests use `before_fault`)."""

    def line(self, text: str) -> None:
        print(text, flush=True)

    async def before_fault(self, deployment: Deployment, nodes: list[str]) -> None:
        pass

    def progress(self, kind: str, done: int, total: int, label: str = "") -> None:
        """`runs` (finished of the session's) and `messages` (sent of the current run's)."""


class Terminated(BaseException):
    """SIGTERM, turned into an exception so that every `finally` (heal, teardown) runs."""


def _on_sigterm(signum, frame):
    raise Terminated()


@dataclass
class SessionResult:
    dir: Path
    verdicts: list[dict] = field(default_factory=list)
    metas: dict[str, dict] = field(default_factory=dict)
    summary: dict = field(default_factory=dict)
    report: Optional[Path] = None
    refused: str = ""  # why the session stopped before its runs were done (an external cluster not whole)


class RunRefused(Exception):
    """A run that must not start: its external cluster is not whole (a node a heal did not
    bring back). The session ends there; the runs before it are analysed."""


class Session:
    EACH_UP_TO = 20
    GAP_ROUNDS = 4  # warm-up analyses at most in a gap between runs (each ~0.6 s)
    BLOCKS_AT_END = 10

    def __init__(
        self,
        scenario: Scenario,
        out: Path,
        spark_master: Optional[str] = None,
        observer: Optional[Observer] = None,
        resume: Optional[Path] = None,
        duration: Optional[float] = None,
        soak: bool = False,
        command: Optional[str] = None,
        report: bool = True,
        verdicts: str = "auto",
    ) -> None:
        self.s = scenario
        self.out = Path(out)
        self.spark_master = spark_master
        self.obs = observer or Observer()
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        # a soak goes on in the directory of the session it resumes (its runs stay, in order)
        self.dir = Path(resume) if resume is not None else self.out / f"{scenario.name}-{stamp}"
        self.resuming = resume is not None
        # a soak: no new run starts after this many seconds (runs: the most in the session)
        self.duration = duration
        self._kept: dict[str, dict] = {}  # finished runs' verdicts, as verdicts.jsonl holds them
        self._kept_analysis: Optional[tuple] = None  # (run, history, analysis): _one_analysis()
        # a soak's per-run look is the verdicts only (no gaps or latency: several times
        # faster); the session's analysis at the end has everything
        self.soak = soak or resume is not None or duration is not None
        self._deployment: Optional[Deployment] = None  # the cluster, kept between runs while healthy
        self._deployment_from = ""
        self._rebuild_why = ""
        self.command = command
        self.report = report  # report.html at the end (a test of verdicts alone goes without)
        self._output = None  # output.txt: every line the session printed, time-stamped
        # on an external cluster every name the session gives (streams, client ids) carries
        # this mark: the cluster may hold earlier sessions' streams under the same run ids
        self.tag = self._session_facts().get("tag", "") if self.resuming else \
            (f"{int(time.time()):x}{secrets.token_hex(2)}" if scenario.external else "")
        # each run's verdict after its read ("each"), or every verdict from the session's one
        # analysis at its end ("end"): a run's own analysis costs 1-3 s whatever its size, which
        # over a thousand short runs is most of the session, and the session's analysis does
        # it again. auto: each for up to EACH_UP_TO runs and in a soak (its progress line
        # is made of verdicts), else end
        if verdicts == "auto":
            verdicts = "each" if self.soak or scenario.runs <= self.EACH_UP_TO else "end"
        self.verdicts = verdicts

    def _line(self, text: str) -> None:
        if self._output is not None:
            stamp = datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
            self._output.write("".join(f"{stamp} {line}\n" for line in text.split("\n")))
            self._output.flush()
        self.obs.line(text)

    def run(self) -> SessionResult:
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
        s = self.s
        result = SessionResult(self.dir)
        first = 1
        if self.resuming:
            first = self._take_over(result)
        else:
            (self.dir / "scenario.json").write_text(s.model_dump_json(indent=2))
            (self.dir / self.FACTS).write_text(json.dumps(
                {"kind": "soak" if self.soak else "run", "tag": self.tag, "external": s.external}, indent=2))
            if self.command:
                (self.dir / "command.txt").write_text(self.command + "\n")
        t_begin = time.monotonic()
        self._warm = spark_mod.warm_up_async(self.spark_master, analysis=self.verdicts == "each")
        old = signal.signal(signal.SIGTERM, _on_sigterm) if _main_thread() else None
        try:
            system = SYSTEMS.get(s.system)
            hosts = node_names(s.cluster.nodes)
            if not s.external:
                hosts += list(system.service_hosts(s))
            # an external cluster is reached from the root namespace, like any other client
            with Sandbox(hosts, "loopback" if s.external else s.sandbox) as sb, self._cluster():
                self._announce(sb)
                where = f"external cluster {s.external}" if s.external else f"sandbox {sb.mode}"
                for i in range(first, s.runs + 1):
                    if self.duration is not None and time.monotonic() - t_begin >= self.duration:
                        self._line(f"Soak: {self.duration:.0f} s reached; no new run")
                        break
                    run_id = f"run-{i:03d}"
                    self._line(f"\n=== {s.name} {run_id} ({i}/{s.runs}) on {s.system}, {where} ===")
                    self.obs.progress("runs", i - 1, s.runs, f"{s.name} {run_id}")
                    try:
                        meta = self._run_one(sb, run_id, i)
                    except RunRefused as e:
                        result.refused = str(e)
                        self._line(f"Run refused: {e}")
                        break
                    self.obs.progress("runs", i, s.runs, f"{s.name} {run_id}")
                    result.metas[run_id] = meta
                    t_read_end = meta.pop("_t_read_end", None)
                    if self.verdicts == "each":
                        t_an = time.monotonic()
                        v, steps = self.analyze_run(run_id, keep=self._one_analysis())
                        phases = meta.setdefault("phases", {})
                        phases["analysis_s"] = round(time.monotonic() - t_an, 3)
                        phases["analysis_steps_s"] = steps
                        if v is not None:
                            result.verdicts.append(v)
                            self._line(console.run_block(v, meta))
                            self._keep_verdict(v)
                        if t_read_end is not None:
                            # what a user waits for: the read's end to the verdict on the screen
                            phases["verdict_after_read_s"] = round(time.monotonic() - t_read_end, 3)
                        self._write_meta(meta)
                        if i < s.runs:
                            # the JIT is still compiling Spark's planner after a few analyses:
                            # the gap before the next write warms it further (stopped by
                            # _quiet_before_write; the next verdicts 15-25% sooner), on this
                            # run's own history when it is larger than the small one
                            own = s.workload.messages * s.workload.producers > warmup.MESSAGES
                            self._warm = spark_mod.warm_up_async(
                                self.spark_master, rounds=self.GAP_ROUNDS,
                                history=str(self.dir / run_id / "history") if own else None)
                    if self.soak:
                        self._line(console.soak_line(self._kept))
        finally:
            if old is not None:
                signal.signal(signal.SIGTERM, old)
            self._stop_warm()  # a soak's end or an error between runs: nothing of it may linger
        if not result.metas:  # refused before its first run: nothing to analyse
            result.summary = {"result": "unknown", "runs": 0, "refused": result.refused}
            self._line(f"Results: {self.dir}")
            return result
        t_an = time.monotonic()
        spark = spark_mod.get_spark(self.spark_master)
        if self._kept_analysis is not None and list(result.metas) == [self._kept_analysis[0]]:
            # a session of one run: its files come from that run's own analysis, not a second one
            _, df, analysis = self._kept_analysis
        else:
            df = metrics.read_history(spark, str(self.dir))
            analysis = metrics.analyze(spark, df)
        self._kept_analysis = None
        report_error = ""
        try:
            result.verdicts = session_table.complete(analysis.verdicts)
            if self.verdicts == "end":
                self._line(f"\nAnalysis: {len(result.verdicts)} runs in {time.monotonic() - t_an:.1f} s")
                for v in result.verdicts:
                    if not self.resuming or v["run"] not in self._kept:
                        self._keep_verdict(v)
                # every run is in the table below; the runs that did not pass get their block
                failed = [v for v in result.verdicts if v["result"] != "pass"]
                for v in failed[:self.BLOCKS_AT_END]:
                    self._line(console.run_block(v, result.metas.get(v["run"])))
                if len(failed) > self.BLOCKS_AT_END:
                    self._line(f"... and {len(failed) - self.BLOCKS_AT_END} more runs that did not pass: results.csv")
            result.summary = files.write_session(analysis, self.dir, result.metas, backoff_schedules(result.metas),
                                                 history=df,
                                                 extra={"refused": result.refused} if result.refused else None)
            try:
                if self.report:
                    result.report = html.write_session(spark, df, analysis, self.dir, result.metas, result.summary)
            except Exception as e:  # the page is a view of what is written already: say so, lose nothing
                report_error = f"{type(e).__name__}: {e}"
        finally:
            analysis.release()
        self._line("\n" + console.summary_table(result.verdicts, result.metas))
        self._line(console.summary_lines(result.summary))
        self._line(f"Results: {self.dir}")
        if result.report or report_error:
            self._line(f"Report: {result.report}" if result.report else
                       f"Report: not written ({report_error}); `brokerchaos analyze {self.dir}` tries again")
        return result

    # -- a soak: what survives the harness ------------------------------------------------
    VERDICTS = "verdicts.jsonl"

    def _take_over(self, result: SessionResult) -> int:
        """Resume a session: its finished runs stay as they are, a run the harness was killed
        in is marked incomplete (its history is kept, so the analysis reports it; it is never
        run again under its id), and the next run gets the next index."""
        indices = []
        for d in sorted(self.dir.glob("run-*")):
            if not d.is_dir() or not d.name[4:].isdigit():
                continue
            indices.append(int(d.name[4:]))
            f = d / "run.json"
            try:
                meta = json.loads(f.read_text())
            except (OSError, ValueError):
                meta = {"run": d.name, "index": int(d.name[4:])}
            if meta.get("status") != "finished":
                meta["status"] = "incomplete"
                meta["incomplete"] = "cut short: the harness stopped during this run"
                f.write_text(json.dumps(meta, indent=2, default=str))
            result.metas[d.name] = meta
        self._kept = self._read_kept()
        self._line(f"Resuming {self.dir}: {len(indices)} runs there "
                      f"({sum(1 for m in result.metas.values() if m.get('status') == 'incomplete')} incomplete)")
        return max(indices, default=0) + 1

    def _read_kept(self) -> dict[str, dict]:
        kept: dict[str, dict] = {}
        try:
            lines = (self.dir / self.VERDICTS).read_text().splitlines()
        except OSError:
            return kept
        for line in lines:
            try:
                v = json.loads(line)
            except ValueError:  # a line cut by a kill mid-write
                continue
            kept[v["run"]] = v  # once per run, whatever was appended twice
        return kept

    def _keep_verdict(self, v: dict) -> None:
        """Each finished run's verdict, appended at once: the soak's progress survives a kill."""
        self._kept[v["run"]] = v
        with open(self.dir / self.VERDICTS, "a") as fh:
            fh.write(json.dumps(v, default=str) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    FACTS = "session.json"  # what kind of session this is, and its tag

    def _session_facts(self) -> dict:
        try:
            return json.loads((self.dir / self.FACTS).read_text())
        except (OSError, ValueError):
            return {}

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

    # -- one run ---------------------------------------------------------------
    def _run_one(self, sb: Sandbox, run_id: str, index: int) -> dict:
        """One run, on the previous run's cluster when that ended healthy (and reuse is on),
        else on a new one; the cluster is stopped here unless the next run may reuse it."""
        s = self.s
        run_dir = self.dir / run_id
        meta: dict = {"run": run_id, "index": index, "system": s.system, "sandbox": sb.mode,
                      "scenario": s.model_dump(), "started": time.time(), "status": "running"}
        dep = self._deployment
        fresh = dep is None
        if fresh:
            dep = Deployment(SYSTEMS.get(s.system), s, sb, run_id, run_dir / "logs", self.tag)
        if s.external:
            self._check_whole(dep, run_id)
        # written now, so that a harness killed during the run leaves it marked as such
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "run.json").write_text(json.dumps(meta, indent=2, default=str))
        if fresh:
            label = dep.cluster.label
            meta["cluster"] = label if index == 1 or label != "started" else f"started ({self._rebuild_why})"
            self._deployment, self._deployment_from = dep, run_id
        else:
            dep.begin_run(run_id, run_dir / "logs")
            meta["cluster"] = f"reused (started in {self._deployment_from})"
        meta["stream"] = dep.ctx.stream_name
        self._line(f"Cluster: {meta['cluster']}")
        keep = False
        t_run = time.monotonic()
        try:
            t0 = time.monotonic()
            if fresh:
                dep.cluster.start()
            more = index < s.runs
            meta.update(sb.run_client(lambda: self._client_side(dep, sb, run_id, run_dir, t0, more),
                                      timeout=self._run_bound()))
            keep = bool(meta.get("healthy_after"))
        finally:
            try:
                if not keep:
                    self._drop_deployment()
                    self._rebuild_why = f"rebuilt: {meta.get('health_after', 'the run did not finish')}"
            finally:
                meta["finished"] = time.time()
                meta["status"] = "finished"
                meta["phases"] = self._phases(meta, t_run)
                run_dir.mkdir(parents=True, exist_ok=True)  # a cluster that failed to start made none
                self._write_meta(meta)
        return meta

    def _check_whole(self, dep: Deployment, run_id: str) -> None:
        """An external cluster must be whole before a run: one the harness cannot rebuild,
        left degraded by a heal that did not bring a node back, would make every later run
        a test of another cluster than the user's. A node still coming up (a cluster started
        just before the session) has the cluster file's `hook_timeout` to answer."""
        down = dep.down()
        if down:
            bound = dep.cluster.file.hook_timeout
            self._line(f"Waiting up to {bound:.0f} s for the external cluster: {'; '.join(down)}")
            deadline = time.monotonic() + bound
            while down and time.monotonic() < deadline:
                time.sleep(0.5)
                down = dep.down()
        if down:
            self._deployment = None  # nothing of ours to stop: an external cluster stays as it is
            raise RunRefused(f"{run_id} not started: the external cluster is not whole ({'; '.join(down)}); "
                             f"bring it back (its `start` hooks) and run again")

    @staticmethod
    def _phases(meta: dict, t_run: float) -> dict:
        """Where a run's time went: the brokers' own phases (cluster ready, write, read) and
        the harness's (before the write: clients, leader lookup; between write and read:
        heals, waiting for the stream; after the read: heal, health check, the stream
        dropped, the cluster stopped unless reused). `harness_s` is everything but write and read."""
        run_s = time.monotonic() - t_run
        p = {"run_s": round(run_s, 3)}
        for k in ("cluster_ready_s", "write_s", "read_s"):
            if meta.get(k) is not None:
                p[k] = meta[k]
        p["harness_s"] = round(run_s - (meta.get("write_s") or 0) - (meta.get("read_s") or 0), 3)
        if meta.get("_t_read_end") is not None:
            p["after_read_s"] = round(time.monotonic() - meta["_t_read_end"], 3)
        return p

    def _write_meta(self, meta: dict) -> None:
        (self.dir / meta["run"] / "run.json").write_text(
            json.dumps({k: v for k, v in meta.items() if not k.startswith("_")}, indent=2, default=str))

    @contextlib.contextmanager
    def _cluster(self):
        try:
            yield
        finally:
            self._drop_deployment()

    def _drop_deployment(self) -> None:
        dep, self._deployment = self._deployment, None
        if dep is not None:
            dep.stop()

    def _run_bound(self) -> float:
        w = self.s.workload
        # connecting gets 90 s per node boot (RabbitMQ boots its nodes one by one) and one more
        # for a joiner booted a second time
        return 90 * (self.s.cluster.nodes + 1) + 30 + w.write_timeout + w.read_timeout + 60

    async def _client_side(self, dep: Deployment, sb: Sandbox, run_id: str, run_dir: Path, t0: float,
                           more: bool = False) -> dict:
        s, w = self.s, self.s.workload
        hist = run_dir / "history"
        origin = time.monotonic_ns()
        nem = Recorder(hist, run_id, "nemesis", origin)
        out: dict = {}
        gate = AckGate()
        producers: list[ProducerLoop] = []

        def client_nodes() -> list[str]:
            return [n for n in (p.client.node() for p in producers) if n]

        nemeses = [
            Nemesis(i, spec, dep, sb, s.seed, run_id, nem, gate, client_nodes, self._line, self.obs.before_fault)
            for i, spec in enumerate(s.faults_for_run(run_id))
        ]
        out["faults"] = [n.state for n in nemeses]
        out["fault"] = nemeses[0].state

        async def heal(why: str, when: Optional[str] = None) -> None:
            for n in reversed(nemeses):
                if when is None or n.spec.heal == when:
                    await n.heal_active(why)

        reader: Optional[Recorder] = None
        reader_client = None
        live = False
        consumers: list = []  # (live consumer, its recorder, its progress)
        switches = contextlib.ExitStack()
        try:
            await dep.up(timeout=90)
            await dep.client.create_stream(timeout=30)
            out["cluster_ready_s"] = round(time.monotonic() - t0, 3)
            out["servers"] = dep.cluster.versions()
            out["server_settings"] = dep.cluster.settings()
            reader_client = dep.client.reader("c1")
            live = isinstance(reader_client, LiveReader)  # reads during the write phase (MQTT)
            reader = Recorder(hist, run_id, "c1", origin)
            arrived = LiveProgress()
            if live:
                await start_live(reader_client, reader, arrived)
            checked = LiveProgress()  # what the consumers whose deliveries are checked have seen, together
            trackers = [arrived, checked]  # every progress the producers report to
            for i in range(1, w.consumers + 1):
                c = dep.client.consumer(f"l{i}")
                rec = Recorder(hist, run_id, f"l{i}", origin)
                prog = checked if getattr(c, "checks", False) else LiveProgress()
                if prog is not checked:
                    rec.record("subscribe", detail=OBSERVER)
                    trackers.append(prog)
                consumers.append((c, rec, prog))
                await start_live(c, rec, prog)
            out["leader_at_start"] = await dep.roles.leader()
            await self._quiet_before_write()
            switches.enter_context(quick_switches())  # until the read's end (workload/producer.py)
            # where one run can receive another's messages, names carry the run id (the
            # seed's sequence id), so those are stowaways and not this run's messages
            names = [f"p{i}" + (f"-{run_id}" if dep.system.tags_runs else "") for i in range(1, w.producers + 1)]

            def producer(name: str) -> ProducerLoop:
                return ProducerLoop(name, dep.client.producer(name), Recorder(hist, run_id, name, origin), w,
                                    gate.on_first_ack)

            group = None
            if w.processes > 1:
                group = ProducerProcesses(names, w.processes, w, producer, gate.on_first_ack, dep.client.forked)
                await group.start()
                out["producer_processes"] = [p.pid for p in group.procs]
                producers.extend(group.loops)
            else:
                producers.extend(producer(name) for name in names)
            for p in producers:
                for t in trackers:
                    t.add(p)
            nem_tasks = [asyncio.create_task(n.run()) for n in nemeses]
            progress = asyncio.create_task(self._progress(producers))
            t_write = time.monotonic()
            deadline = t_write + w.write_timeout
            try:
                if group is not None:
                    await group.run(deadline)
                else:
                    await asyncio.gather(*(p.run(deadline) for p in producers))
            finally:
                progress.cancel()
                for n, task in zip(nemeses, nem_tasks):
                    if not task.done() and n.injecting is not None:
                        # an operation under way (a rolling restart) finishes, bounded
                        n.stopping = True
                        await asyncio.wait([task], timeout=n.injecting)
                    if not task.done() and (n.healing or n.active is not None and n.spec.duration is not None):
                        # a window under way lasts its configured duration (no new window starts)
                        n.stopping = True
                        await asyncio.wait([task], timeout=(n.spec.duration or 0) + 5)
                    if not task.done():
                        if not n.windows:
                            n.state["why"] = f"trigger not reached (acks: {gate.acks})"
                        task.cancel()
                await asyncio.gather(*nem_tasks, progress, return_exceptions=True)
                for n in nemeses:  # a heal whose nemesis was cancelled finishes before the read
                    await n.wait_healed()
                out["write_s"] = round(time.monotonic() - t_write, 3)
                gc.unfreeze()  # what the run left behind is the collector's again (soaks)
                stopped = [f"{p.name}: {p.stopped_early}" for p in producers if p.stopped_early]
                out["write_stopped_early"] = "; ".join(stopped) or None
                if w.rate is not None:
                    out["late_sends"] = sum(p.late for p in producers)
                self._line(self._progress_line(producers))
            await heal("before read", "before-read")
            if any(w.get("heal_error") for n in nemeses for w in n.windows):
                # a node the heal did not bring back: the stream cannot be whole, no use waiting
                out["stream_ready_before_read"] = "not waited for: a heal failed"
            elif any(n.windows for n in nemeses):
                out["stream_ready_before_read"] = await dep.roles.wait_stream_ready(timeout=30)
                for n in nemeses:
                    await n.settle(5)
            if any(n.windows and n.spec.target == "leader" for n in nemeses):
                try:
                    out["leader_before_read"] = await dep.roles.leader()
                except Exception as e:
                    out["leader_before_read"] = f"unavailable: {type(e).__name__}"
            t_read = time.monotonic()
            if consumers:
                ends = await asyncio.gather(*(finish_live(c, rec, prog, w.read_idle, w.read_timeout)
                                              for c, rec, prog in consumers))
                out["live_read_status"] = "; ".join(sorted(set(ends)))
            if live:
                out["read_status"] = await finish_live(reader_client, reader, arrived, w.read_idle, w.read_timeout)
            else:
                out["read_status"] = await read_all(reader_client, reader, w.read_idle, w.read_timeout, self._line)
            reader.close()
            out["_t_read_end"] = time.monotonic()
            out["read_s"] = round(out["_t_read_end"] - t_read, 3)
        finally:
            switches.close()
            try:
                await heal("end of run")
                for n in nemeses:
                    await n.settle(0)
                ok = False
                if more and s.cluster.reuse and dep.reusable and out.get("read_status") is not None:
                    # the next run may take this cluster only if it is whole again
                    ok, why = await dep.healthy(timeout=30)
                    out["healthy_after"], out["health_after"] = ok, why
                if ok or s.external:  # an external cluster keeps no stream of ours
                    await _bounded(dep.client.drop_stream(), 30)
            finally:
                if live and reader_client is not None:
                    await reader_client.close()  # no-op after finish; else stops it receiving
                for c, rec, _ in consumers:
                    await c.close()
                    rec.close()
                if reader is not None:
                    reader.close()
                nem.close()
                await dep.client.close()
        return out

    async def _quiet_before_write(self) -> None:
        """Nothing of the harness's own may stall the producers: a stall is an ack gap the
        analysis would count as the broker's outage. The Spark JVM's start-up (begun with the
        session, so that it overlaps the first cluster's) held the interpreter for 0.5 s a
        second into a first run's write (a 503 ms ack gap with no fault at all): it is done
        first. And gc.freeze() moves what exists now out of the collector's way: full
        collections scanning it paused a 2,000 msg/s producer for 28–115 ms (unfrozen when
        the write phase ends, so that nothing is kept for good over a long session)."""
        await asyncio.to_thread(self._stop_warm)
        gc.collect()
        gc.freeze()

    def _stop_warm(self) -> None:
        warm = getattr(self, "_warm", None)
        if warm is not None and warm.is_alive():
            warm.stop(300)

    async def _progress(self, producers: list[ProducerLoop]) -> None:
        total = sum(p.spec.messages for p in producers)
        while True:
            await asyncio.sleep(1.0)
            self._line(self._progress_line(producers))
            self.obs.progress("messages", sum(p.acct.sent for p in producers), total)

    @staticmethod
    def _progress_line(producers: list[ProducerLoop]) -> str:
        sent = sum(p.acct.sent for p in producers)
        pos = sum(p.acct.pos for p in producers)
        neg = sum(p.acct.neg for p in producers)
        unk = sum(p.acct.unknown for p in producers)
        return f"Send count: {sent} Ack count: {pos + neg} Pos: {pos} Neg: {neg} Unknown: {unk}"


def backoff_schedules(metas: dict) -> dict[str, list[float]]:
    """The back-off steps a session's clients followed, in ms after a failure, from its
    scenario (run.json): the harness's resends, and the client library's reconnects where
    the system declares them. summary.json counts the outages near each step."""
    for m in metas.values():
        sc = m.get("scenario") or {}
        w = sc.get("workload") or {}
        out = {}
        if w.get("retries"):
            out["resend"] = outages.resend_steps(w.get("retry_backoff", 0.1), w.get("retry_backoff_max", 1.0),
                                                 w["retries"])
        system = sc.get("system")
        steps = SYSTEMS.get(system).Client.reconnect_steps_ms if system in SYSTEMS.names() else ()
        if steps:
            out["reconnect"] = list(steps)
        return out
    return {}


def campaign_outages(verdicts: list[dict], spark_master: Optional[str] = None) -> dict:
    """The outage distributions across every window of a campaign's sessions."""
    return outages.summary(spark_mod.get_spark(spark_master), verdicts, {})


async def _bounded(coro, timeout: float) -> None:
    """A best-effort step at the end of a run (freeing the run's stream), never longer than `timeout`."""
    try:
        await asyncio.wait_for(coro, timeout)
    except Exception:  # best effort: the run's verdict does not depend on it
        pass


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()
