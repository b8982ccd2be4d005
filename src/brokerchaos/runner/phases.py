"""One run's client side, as phases: bring the cluster up, start the readers, write with
the nemeses, heal and read, tear down. Each phase takes what it works on explicitly and
hands what it found to the run's record as a small result (record.py: BringUp, WriteEnd,
GroupEnd, ReadEnd, Health); client_side() is their order.

Everything here runs on the thread the sandbox puts in the client namespace
(Sandbox.run_client); process control (starting the cluster) stays on the main thread.
"""
from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

from ..faults import FAULTS
from ..faults.nemesis import Nemesis, NemesisContext, said
from ..faults.trigger import AckGate
from ..history import Recorder
from ..history.schema import OBSERVER, OUTPUT, TAKES
from ..sandbox import Sandbox
from ..scenario import Scenario, topic_names
from ..systems import Deployment, LiveReader, SystemError_
from ..workload import LiveProgress, ProducerLoop, ProducerProcesses, finish_live, read_all, start_live
from ..workload.group import ConsumerGroup, GroupEvents, Journal, MemberError
from ..workload.producer import quick_switches
from .drops import DropCount
from .endcheck import CopiesWatch, end_check
from .observe import Observer, progress_line
from .record import BringUp, GroupEnd, Health, ReadEnd, RunRecord, WriteEnd
from .topics import bounded_gather
from .replicas import read_replicas
from .whole import WHOLE_S, mechanisms, whole_before_read


@dataclass
class RunContext:
    """What every phase of one run reads: the scenario, the system under test, where the
    history goes, and how the session is told things."""

    scenario: Scenario
    dep: Deployment
    sandbox: Sandbox
    run_id: str
    run_dir: Path
    t_start: float  # monotonic: when the run began (the cluster's start included)
    more: bool  # another run follows, which may take this cluster
    line: Callable[[str], None]
    observer: Observer
    quiet: Callable[[], Awaitable[None]]  # stops the harness's own work before the write
    origin: int = field(default_factory=time.monotonic_ns)  # the run's clock, shared by every recorder

    def recorder(self, client: str) -> Recorder:
        return Recorder(self.run_dir / "history", self.run_id, client, self.origin)


@dataclass
class Readers:
    """The end reader (a live one reads during the write: MQTT) and the live consumers
    (`workload.consumers`), each with the progress the producers tell it of."""

    client: Any  # Reader | LiveReader
    rec: Recorder
    live: bool
    arrived: LiveProgress = field(default_factory=LiveProgress)
    # per topic (None: a run of one), what the consumers whose deliveries are checked got together
    checked: dict = field(default_factory=dict)
    consumers: list = field(default_factory=list)  # (consumer, its recorder or its topic's view, its progress)
    recorders: list = field(default_factory=list)  # the consumers' own recorders, closed at the end
    group: Any = None  # workload.group's ConsumerGroup

    @property
    def trackers(self) -> list[LiveProgress]:
        """Every progress the producers report to (each takes the producers of its topic)."""
        own = [p for _, _, p in self.consumers if p not in self.checked.values()]
        return [self.arrived, *self.checked.values(), *own]

    async def start(self, c: RunContext) -> None:
        if self.live:
            await start_live(self.client, self.rec, self.arrived)
            if getattr(self.client, "start_note", None):  # another node than drawn; VerneMQ's replication
                c.line(f"Reader: {self.client.start_note}")
        for i in range(1, c.scenario.workload.consumers + 1):
            await self._consumer(c, f"l{i}")
        if c.scenario.workload.group is not None:
            self.group = start_group(c)
            try:
                await self.group.start()
            except MemberError as e:  # every run would fail alike: the session ends, in one line
                raise SystemError_(str(e)) from None

    async def _consumer(self, c: RunContext, name: str) -> None:
        """One live consumer: with workload.topics, one of the system's per topic, all
        recording into the consumer's files with their topic on each row."""
        rec = c.recorder(name)
        self.recorders.append(rec)
        mine = []
        for t in topic_names(c.scenario.workload.topics) or [None]:
            con = (c.dep.client if t is None else c.dep.client.for_topic(t)).consumer(name)
            checks = getattr(con, "checks", False)
            prog = self.checked.setdefault(t, LiveProgress(t)) if checks else LiveProgress(t)
            mine.append((con, rec.for_topic(t), prog))
        if any(p not in self.checked.values() for _, _, p in mine):  # before its first delivery
            rec.record("subscribe", detail=OBSERVER)
        for con, view, prog in mine:
            self.consumers.append((con, view, prog))
            await start_live(con, view, prog)

    async def close(self) -> None:
        if self.group is not None:
            await self.group.close()
        if self.live:
            await self.client.close()  # no-op after finish; else stops it receiving
        for con, _, _ in self.consumers:
            await con.close()
        for rec in self.recorders:
            rec.close()
        self.rec.close()


def start_group(c: RunContext) -> ConsumerGroup:
    """workload.group's members, each made in its own process: its recorder, its subscribe
    row naming the group and its kind, the system's member."""
    dep, spec = c.dep, c.scenario.workload.group
    kind = spec.kind or dep.client.group_kinds[0]

    def journal(client: str) -> Path:
        return c.run_dir / "history" / f"{client}.journal"

    def make(client: str, hold=None):
        rec = Journal(journal(client), c.origin)
        rec.record("subscribe", detail=f"{dep.system.name} {kind}" + (TAKES if dep.client.group_takes else ""),
                   group=spec.name)
        events = GroupEvents(rec, spec, hold)  # `hold`: a first incarnation's claim on the group's hold
        return events, dep.client.group_member(client, spec, events)

    (c.run_dir / "history").mkdir(parents=True, exist_ok=True)
    return ConsumerGroup(spec, c.scenario.workload.read_idle, make, c.recorder, journal, dep.client.forked)


async def client_side(c: RunContext, rec: RunRecord) -> None:
    """The run's phases in their order; whatever happens, every fault is healed and every
    client closed (teardown)."""
    gate, producers = AckGate(), []
    nem_rec = c.recorder("nemesis")
    nemeses = make_nemeses(c, nem_rec, gate)
    rec.faults, rec.fault = [n.state for n in nemeses], nemeses[0].state
    readers, watch, drops = None, CopiesWatch(c.dep, c.origin), DropCount(c.dep.roles)
    switches = contextlib.ExitStack()
    try:
        rec.take(await bring_up(c))
        readers = Readers(c.dep.client.reader("c1"), c.recorder("c1"), False)
        readers.live = isinstance(readers.client, LiveReader)  # reads during the write phase (MQTT)
        await readers.start(c)
        rec.leader_at_start = await c.dep.roles.leader()
        await c.quiet()
        switches.enter_context(quick_switches())  # until the read's end (workload/producer.py)
        watch.start()
        await drops.start()
        await write(c, rec, readers, nemeses, gate, producers)
        await heal_before_read(c, rec, nemeses, readers, nem_rec)
        early = c.dep.client.replicas_before_read  # an end read that takes the messages out of the copies
        if early:
            await read_replicas(c, rec)
        await read(c, rec, readers)
        if not early:
            await read_replicas(c, rec)
    finally:
        switches.close()
        await teardown(c, rec, readers, nemeses, nem_rec, watch, drops)


def make_nemeses(c: RunContext, nem_rec: Recorder, gate: AckGate) -> list[Nemesis]:
    """One nemesis per fault of the run, built before the cluster comes up (run.json names
    the faults, the teardown heals them whatever happens); the producers and the consumer
    group are bound when the write starts (`write`)."""
    ctx = NemesisContext(c.dep, c.sandbox, c.scenario.seed, c.run_id, nem_rec, gate, c.line,
                         c.observer.before_fault, c.scenario.workload.topics)
    return [Nemesis(i, spec, ctx) for i, spec in enumerate(c.scenario.faults_for_run(c.run_id))]


async def bring_up(c: RunContext) -> BringUp:
    """The cluster serving (its staged start-up, the client's connection) and the run's
    stream created; the servers' versions and durability settings as they report them."""
    await c.dep.up(timeout=90)
    notes = dict(c.dep.cluster.start_notes)
    c.dep.cluster.start_notes.clear()
    for node, note in notes.items():
        c.line(f"Cluster: {node} {note}")
    await c.dep.client.create_stream(timeout=30)
    extra, topics = topic_names(c.scenario.workload.topics)[1:], None
    if extra:  # the first is the run's stream, created above; the others alike, a few at a time
        await bounded_gather([c.dep.client.for_topic(t).create_stream(timeout=30) for t in extra])
        topics = [c.dep.client.for_topic(t).stream_name for t in topic_names(c.scenario.workload.topics)]
    for f in c.scenario.faults_for_run(c.run_id):  # set-up a fault needs before the write (power-off's settle)
        cls = FAULTS.get(f.action)
        await asyncio.to_thread(cls.before_write, cls.Params.model_validate(f.params), c.dep.cluster)
    return BringUp(round(time.monotonic() - c.t_start, 3), c.dep.cluster.versions(), c.dep.cluster.settings(),
                   c.dep.client.library(), topics, notes or None)


async def write(c: RunContext, rec: RunRecord, readers: Readers, nemeses: list[Nemesis], gate: AckGate,
                producers: list[ProducerLoop]) -> None:
    """Every producer sends its messages while the nemeses wait for their triggers; when the
    write is over each nemesis ends as its own rule says (Nemesis.end_of_write)."""
    w = c.scenario.workload
    group = await start_producers(c, rec, gate, producers, readers.trackers)
    for n in nemeses:  # (one workload, shared by the run's nemeses)
        n.ctx.workload.bind(producers, readers.group)
    tasks = [n.start() for n in nemeses]
    progress = asyncio.create_task(_progress(c, producers))
    t_write = time.monotonic()
    if readers.group is not None and w.group.schedule:
        tasks.append(asyncio.create_task(_scale(c, rec, readers.group, t_write)))
    deadline = t_write + w.write_timeout
    try:
        if group is not None:
            await group.run(deadline)
        else:
            await asyncio.gather(*(p.run(deadline) for p in producers))
    finally:
        progress.cancel()
        for t in tasks[len(nemeses):]:
            t.cancel()  # the group's steps not yet taken are not taken
        for n in nemeses:
            await n.end_of_write()
        said(nemeses, await asyncio.gather(*tasks, progress, return_exceptions=True))
        for n in nemeses:  # a heal whose nemesis was cancelled goes as far as the read needs
            await n.heals.wait_readable()
        write_s = round(time.monotonic() - t_write, 3)
        gc.unfreeze()  # what the run left behind is the collector's again (soaks)
        stopped = [f"{p.name}: {p.stopped_early}" for p in producers if p.stopped_early]
        rec.take(WriteEnd(write_s, "; ".join(stopped) or None,
                          sum(p.late for p in producers) if w.rate is not None else None))
        c.line(progress_line(producers))


async def _scale(c: RunContext, rec: RunRecord, group: ConsumerGroup, t_write: float) -> None:
    """workload.group.schedule: at each step's time into the write, members join or leave
    until that many run (run.json: `group_scaled`)."""
    rec.group_scaled = []
    for step in sorted(c.scenario.workload.group.schedule, key=lambda s: s.at_seconds):
        await asyncio.sleep(max(0.0, t_write + step.at_seconds - time.monotonic()))
        t, changed = time.monotonic(), []
        entry = {"at_s": round(t - t_write, 3), "consumers": step.consumers, "changed": changed}
        rec.group_scaled.append(entry)
        try:
            await group.scale(step.consumers, changed)
        except asyncio.CancelledError:  # the write ended during the step: what it did is kept
            entry["cut_off_s"] = round(time.monotonic() - t, 3)
            raise
        except Exception as e:  # a member that would not start or leave: said, and the steps end
            why = f"{type(e).__name__}: {e}"[:300]
            entry["error"] = why
            group.errors.append(f"scaling to {step.consumers}: {why}")
            c.line(f"Group {group.spec.name}: scaling to {step.consumers} failed: {why}")
            return
        entry["took_s"] = round(time.monotonic() - t, 3)
        c.line(f"Group {group.spec.name}: {step.consumers} members ({', '.join(changed) or 'no change'})")


async def start_producers(c: RunContext, rec: RunRecord, gate: AckGate, producers: list[ProducerLoop],
                          trackers: list[LiveProgress]):
    """The run's producers, in the harness's process or spread over processes of their own
    (`workload.processes`); returns the process group, if any."""
    dep, w = c.dep, c.scenario.workload
    # where one run can receive another's messages, names carry the run id (the seed's
    # sequence id), so those are stowaways and not this run's messages
    bases = [f"p{i}" + (f"-{c.run_id}" if dep.system.tags_runs else "") for i in range(1, w.producers + 1)]
    # with workload.topics, each producer writes every topic: one stream of 1, 2, 3… per
    # (producer, topic), named `p1.t3`, recorded in the producer's own files with the topic
    streams = {f"{b}.{t}" if t else b: (b, t) for b in bases for t in topic_names(w.topics) or [None]}
    names = list(streams)
    recs: dict[str, Recorder] = {}

    def producer(name: str) -> ProducerLoop:
        base, topic = streams[name]
        if topic is None:
            return ProducerLoop(name, dep.client.producer(name), c.recorder(name), w, gate.on_first_ack)
        if base not in recs:
            recs[base] = c.recorder(base)
        return ProducerLoop(name, dep.client.for_topic(topic).producer(name), recs[base].for_topic(topic), w,
                            gate.on_first_ack)

    group = None
    if w.processes > 1:
        group = ProducerProcesses(names, w.processes, w, producer, gate.on_first_ack, dep.client.forked,
                                  family=lambda name: streams[name][0])
        await group.start()
        rec.producer_processes = [p.pid for p in group.procs]
        producers.extend(group.loops)
    else:
        producers.extend(producer(name) for name in names)
    for p in producers:
        for t in trackers:
            t.add(p)
    return group


async def _progress(c: RunContext, producers: list[ProducerLoop]) -> None:
    total = sum(p.spec.messages for p in producers)
    while True:
        await asyncio.sleep(1.0)
        c.line(progress_line(producers))
        c.observer.progress("messages", sum(p.acct.sent for p in producers), total)


async def heal_before_read(c: RunContext, rec: RunRecord, nemeses: list[Nemesis], readers: Readers,
                           nem_rec: Recorder) -> None:
    """The faults healed at `before-read`; the cluster whole again (bounded: every node the
    faults did not mean to leave down serving, the stream ready; a `whole` row), and who
    leads it."""
    for n in reversed(nemeses):
        if n.spec.heal == "before-read":
            await n.heal_for_read("before read")
    # a node a heal could not bring back will not come back by waiting long
    failed = any(w.heal_error for n in nemeses for w in n.windows)
    await whole_before_read(c.dep, nemeses, readers.group, rec, nem_rec, c.line, bound=10.0 if failed else WHOLE_S)
    for n in nemeses:
        await n.settle(5)
    if any(n.windows and n.spec.target == "leader" for n in nemeses):
        try:
            rec.leader_before_read = await c.dep.roles.leader()
        except Exception as e:
            rec.leader_before_read = f"unavailable: {type(e).__name__}"


async def read(c: RunContext, rec: RunRecord, readers: Readers) -> None:
    """The live consumers finish, then the end reader reads (or finishes reading) everything."""
    w = c.scenario.workload
    t_read = time.monotonic()
    if readers.group is not None:
        status = await readers.group.finish(w.read_timeout)
        rec.take(GroupEnd(status, readers.group.pids(), readers.group.held_by()))
        if w.group.commit == "transaction":
            rec.output_read_status = await read_output(c, w.group.name)
    if readers.consumers:
        ends = await asyncio.gather(*(finish_live(con, r, prog, w.read_idle, w.read_timeout)
                                      for con, r, prog in readers.consumers))
        rec.live_read_status = "; ".join(sorted(set(ends)))
    if readers.live:
        status = await finish_live(readers.client, readers.rec, readers.arrived, w.read_idle, w.read_timeout)
    elif w.topics > 1:
        status = await read_topics(c, readers.rec)
    else:
        status = await read_all(readers.client, readers.rec, w.read_idle, w.read_timeout, c.line)
    readers.rec.close()
    t_end = time.monotonic()
    rec.take(ReadEnd(status, round(t_end - t_read, 3), t_end))


async def read_topics(c: RunContext, rec: Recorder) -> str:
    """workload.topics' end read: each topic read by a reader of its own (client c1, the
    topic on its rows), a few at a time; "complete" when every one was, else each topic's
    own status."""
    w = c.scenario.workload
    names = topic_names(w.topics)
    ends = await bounded_gather([read_all(c.dep.client.for_topic(t).reader("c1"), rec.for_topic(t), w.read_idle,
                                          w.read_timeout) for t in names])
    bad = [f"{t}: {e}" for t, e in zip(names, ends) if e != "complete"]
    c.line(f"Read {len(names)} topics: {len(names) - len(bad)} complete")
    return "complete" if not bad else "; ".join(bad)[:2000]


async def read_output(c: RunContext, group: str) -> str:
    """What a consume-transform-produce group wrote, read back from the beginning by a client
    of its own (`<group>-out`, its subscribe naming the group: the exactly-once verdicts')."""
    w = c.scenario.workload
    out = c.recorder(f"{group}-out")
    try:
        out.record("subscribe", detail=OUTPUT, group=group)
        return await read_all(c.dep.client.output_reader(f"{group}-out"), out, w.read_idle, w.read_timeout)
    finally:
        out.close()


async def teardown(c: RunContext, rec: RunRecord, readers, nemeses: list[Nemesis], nem_rec: Recorder,
                   watch: CopiesWatch, drops: DropCount) -> None:
    """Every fault healed, the cluster checked for the next run, every client closed."""
    try:
        for n in reversed(nemeses):
            await n.heal_active("end of run")
        for n in nemeses:
            await n.settle(0)
            await n.finish_effects()
        mechanisms(c.scenario.requires, nemeses, nem_rec)
        if c.dep.cluster.restarts:  # the supervisor's, during this run (a reused cluster's are the next run's)
            rec.restarts, c.dep.cluster.restarts = list(c.dep.cluster.restarts), []
        await drops.record(nem_rec, rec, c.line)
        await end_check(c.dep, rec, nem_rec, c.line, watch)  # before check_health drops the stream
        await check_health(c, rec)
    finally:
        await watch.stop()  # (the end check stopped it, unless it never came)
        if readers is not None:
            await readers.close()
        nem_rec.close()
        await c.dep.client.close()


async def check_health(c: RunContext, rec: RunRecord) -> None:
    """May the next run take this cluster? Only if it is whole again; its stream is then
    dropped (the next run's is another). An external cluster keeps no stream of ours."""
    s, dep = c.scenario, c.dep
    ok = False
    if c.more and s.cluster.reuse and dep.reusable and rec.read_status is not None:
        ok, why = await dep.healthy(timeout=30)
        rec.take(Health(ok, why))
    if ok or s.external:
        await _bounded(dep.client.drop_stream(), 30)
        extra = topic_names(s.workload.topics)[1:]
        if extra:
            await _bounded(bounded_gather([dep.client.for_topic(t).drop_stream() for t in extra]), 60)


async def _bounded(coro, timeout: float) -> None:
    """A best-effort step at the end of a run (freeing the run's stream), never longer than `timeout`."""
    try:
        await asyncio.wait_for(coro, timeout)
    except Exception:  # best effort: the run's verdict does not depend on it
        pass
