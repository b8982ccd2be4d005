"""Producers in processes of their own (`workload.processes`).

One Python process records at most ~120,000 msg/s with a client that answers at once, and
far less with a real client library, whose own callbacks share the interpreter with it:
against Kafka or Pulsar the recorded producer, not the broker, set the pace (BENCHMARKS.md).
Here the producers are spread over several processes, each running the same ProducerLoop
with its own client and its own history files, exactly as in the harness's process.

The processes are forked when the write phase is about to begin, so they start with the
deployment as the runner sees it (the stream made, the primary found, the producers' node
chosen) and no recipe to rebuild it; each makes its own connections and never touches the
inherited ones (the systems' `Client.forked()` drops what must not be shared). What the
runner needs while they write comes back over a pipe every few milliseconds: the counters
for the progress lines, the first acks for `after_acks` triggers, each producer's node for
client-node targets; at the end, each producer's outcome per message (the live readers'
"all acked seen").
"""
from __future__ import annotations

import asyncio
import ctypes
import faulthandler
import gc
import multiprocessing
import os
import signal
import sys
import threading
import time
from typing import Callable, Optional

from ..scenario import WorkloadSpec
from .accounting import Accounting

REPORT_EVERY = 0.005  # s; an after_acks trigger learns of the N-th ack this much later at most
START_TIMEOUT = 60.0
GRACE = 60.0  # s past the write deadline a process has to end (its client's close)
STOP_GRACE = 15.0  # s a process has, after SIGTERM, to record its outstanding messages as unknown

_PR_SET_PDEATHSIG = 1


class _Node:
    """`client.node()` of a producer in another process: as last reported."""

    def __init__(self) -> None:
        self.at: Optional[str] = None

    def node(self) -> Optional[str]:
        return self.at


class RemoteProducer:
    """What the runner reads of a ProducerLoop running in another process."""

    def __init__(self, name: str, spec: WorkloadSpec) -> None:
        self.name = name
        self.spec = spec
        self.acct = Accounting(spec.messages)
        self.client = _Node()
        self.stopped_early: Optional[str] = None
        self.late = 0

    def _update(self, row: tuple) -> None:
        a = self.acct
        a.sent, a.pos, a.neg, a.unknown, self.client.at, self.late = row


def _counters(p) -> tuple:
    a = p.acct
    return a.sent, a.pos, a.neg, a.unknown, p.client.node(), p.late


class ProducerProcesses:
    """Runs the named producers in `processes` forked processes; `make(name)` builds one
    ProducerLoop and is called in the process that runs it."""

    def __init__(self, names: list[str], processes: int, spec: WorkloadSpec, make: Callable[[str], object],
                 on_first_ack: Callable[[], None], forked: Callable[[], None] = lambda: None,
                 family: Callable[[str], str] = lambda name: name) -> None:
        self.make = make
        self.forked = forked
        self.on_first_ack = on_first_ack
        self.groups = spread(names, processes, family)
        self.producers = {n: RemoteProducer(n, spec) for n in names}
        self.procs: list = []
        self.conns: list = []
        self.errors: list[str] = []

    @property
    def loops(self) -> list[RemoteProducer]:
        return list(self.producers.values())

    async def start(self, timeout: float = START_TIMEOUT) -> None:
        """Fork the processes and wait until each has built its producers."""
        ctx = multiprocessing.get_context("fork")
        try:
            for group in self.groups:
                mine, theirs = ctx.Pipe()
                # forked from the event loop's thread: it has entered the client namespace (a
                # process inherits the forking thread's), and the parent-death signal is tied
                # to the forking thread (a pool thread's end would take the producers with it)
                p = ctx.Process(target=_child, args=(theirs, mine, group, self.make, self.forked),
                                name=f"brokerchaos producers {','.join(group)}", daemon=True)
                self.conns.append(mine)
                p.start()
                theirs.close()
                self.procs.append(p)
            for p, conn, group in zip(self.procs, self.conns, self.groups):
                msg = await _recv(conn, timeout)
                if msg is None or msg[0] != "ready":
                    why = msg[1] if msg is not None and msg[0] == "error" else f"no answer within {timeout:.0f} s"
                    raise RuntimeError(f"the producer process of {', '.join(group)} (pid {p.pid}) did not start: "
                                       f"{why}")
        except BaseException:
            await asyncio.to_thread(self._stop)
            raise

    async def run(self, deadline: float) -> None:
        """Let every process write until it is done (each bounded by `deadline`, as in-process
        producers are); cancelled, the processes are stopped and record what is outstanding."""
        loop = asyncio.get_running_loop()
        ended = [loop.create_future() for _ in self.procs]
        readers = [threading.Thread(target=self._pump, args=(conn, loop, fut), daemon=True,
                                    name=f"brokerchaos producers {i}")
                   for i, (conn, fut) in enumerate(zip(self.conns, ended))]
        for t in readers:
            t.start()
        try:
            for conn in self.conns:
                conn.send(("go", deadline))
            # a process whose client hangs in close() past the deadline is stopped
            await asyncio.wait_for(asyncio.gather(*ended), max(0.0, deadline - time.monotonic()) + GRACE)
        except asyncio.TimeoutError:
            late = [p for p in self.procs if p.is_alive()]
            for p in late:  # where each was stuck, on stderr, before it is stopped
                os.kill(p.pid, signal.SIGUSR1)
            self.errors.append(f"producer process(es) {', '.join(str(p.pid) for p in late)} still running "
                               f"{GRACE:.0f} s after the write deadline: stopped (their stacks are on stderr)")
        finally:
            await asyncio.to_thread(self._stop, readers)
        if self.errors:
            raise RuntimeError("; ".join(self.errors))

    def _pump(self, conn, loop, fut) -> None:
        """One process's reports, handed to the event loop (a thread: a final report of
        millions of outcomes must not hold the loop while it arrives)."""
        try:
            while True:
                msg = conn.recv()
                loop.call_soon_threadsafe(self._on, msg)
                if msg[0] in ("end", "error"):
                    break
        except (EOFError, OSError):
            loop.call_soon_threadsafe(self._on, ("error", "a producer process ended without its final report"))
        finally:
            loop.call_soon_threadsafe(_resolve, fut)

    def _on(self, msg: tuple) -> None:
        kind = msg[0]
        if kind in ("tick", "end"):
            for _ in range(msg[1]):
                self.on_first_ack()
            for name, row in msg[2].items():
                self.producers[name]._update(row)
            if kind == "end":
                for name, (state, stopped) in msg[3].items():
                    p = self.producers[name]
                    p.acct.state = state
                    p.stopped_early = stopped
                if msg[4]:
                    self.errors.append(msg[4])
        elif kind == "error":
            self.errors.append(msg[1])

    def _stop(self, readers: tuple = ()) -> None:
        for p in self.procs:
            p.join(0 if p.exitcode is not None else 0.5)
            if p.is_alive():  # cancelled, or past the deadline: its finally records the outstanding
                os.kill(p.pid, signal.SIGTERM)
        for p in self.procs:
            p.join(STOP_GRACE)
            if p.is_alive():
                self.errors.append(f"the producer process {p.pid} did not stop within {STOP_GRACE:.0f} s of "
                                   "SIGTERM; killed (its last second of history may be missing)")
                p.kill()
                p.join(5)
        for conn in self.conns:
            conn.close()
        for t in readers:  # each ends with its process's end of the pipe
            t.join(5)


def spread(names: list[str], processes: int, family: Callable[[str], str]) -> list[list[str]]:
    """The names dealt over the processes by family, in turn: the streams of one producer
    (`p1.t1`, `p1.t2`…, family `p1`) stay together, in the process that holds its history
    files and its client."""
    families = list(dict.fromkeys(family(n) for n in names))
    mine = [set(families[i::processes]) for i in range(processes)]
    return [[n for n in names if family(n) in m] for m in mine]


def _resolve(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


async def _recv(conn, timeout: float):
    if not await asyncio.to_thread(conn.poll, timeout):
        return None
    try:
        return conn.recv()
    except EOFError:
        return None


# -- in the forked process -----------------------------------------------------------------------

_KEPT: list = []  # a process's producers and clients, never freed before it exits


def become_child(parents_end) -> None:
    """The first steps of a process forked from the harness (producers, group members)."""
    # what came from the harness is never collected here: a pulsar-client object finalized
    # in a forked process waits forever for its threads, which stayed in the harness
    # (apache/pulsar-client-python#127; seen: both processes hung in ~ExecutorService)
    gc.freeze()
    parents_end.close()
    try:
        # the harness's event loop set itself as the wake-up of every signal: a signal
        # here would wake it, in the other process
        signal.set_wakeup_fd(-1)
    except ValueError:
        pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the harness's to handle: it stops us
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the stacks of a process that does not end
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass
    if os.getppid() == 1:  # the harness died while forking
        os._exit(1)


def exit_child(code: int) -> None:
    """Everything recorded and reported: exit without freeing the clients (a pulsar-client
    freed while its IO threads log through Python deadlocks on the interpreter lock)."""
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:
            pass
    os._exit(code)


def _child(conn, parents_end, names: list[str], make, forked) -> None:
    become_child(parents_end)
    code = 0
    try:
        asyncio.run(_child_main(conn, names, make, forked))
    except BaseException as e:
        code = 1
        try:
            conn.send(("error", f"producers {', '.join(names)}: {type(e).__name__}: {e}"))
        except Exception:
            pass
    exit_child(code)


async def _child_main(conn, names: list[str], make, forked) -> None:
    forked()
    loops = [make(n) for n in names]
    _KEPT.append(loops)
    first = [0]

    def counted() -> None:
        first[0] += 1

    for p in loops:
        p.on_first_ack = counted
    conn.send(("ready",))
    go = await asyncio.to_thread(conn.recv)
    main = asyncio.current_task()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main.cancel)
    deadline = go[1]
    reporter = asyncio.create_task(_report(conn, loops, first))
    error = None
    try:
        await asyncio.gather(*(p.run(deadline) for p in loops))
    except asyncio.CancelledError:
        pass  # each loop's finally recorded its outstanding messages as unknown
    except Exception as e:  # as an in-process producer's would, it fails the run
        error = f"producers {', '.join(names)}: {type(e).__name__}: {e}"
    finally:
        reporter.cancel()
        n, first[0] = first[0], 0
        conn.send(("end", n, {p.name: _counters(p) for p in loops},
                   {p.name: (p.acct.state, p.stopped_early) for p in loops}, error))


async def _report(conn, loops, first) -> None:
    last = None
    while True:
        await asyncio.sleep(REPORT_EVERY)
        rows = {p.name: _counters(p) for p in loops}
        if first[0] or rows != last:
            n, first[0] = first[0], 0
            conn.send(("tick", n, rows))
            last = rows
