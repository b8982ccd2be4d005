"""The first analysis in a JVM is several times slower than the next ones: Spark generates
and compiles ~270 classes for it, and the JIT has not seen the planner's code yet (measured
on a 100,000-message NATS run: 14 s first, then 6.8 s, 3.1 s, 2.5 s). A session pays that
before its first run's write phase, while its first cluster starts, on a small history of
the same shape as a run's, so that a run's verdict comes at the warm speed; and it goes on
warming in the gaps between runs, where no write is under way.

Generated code is cached by its text, which does not depend on the run's names or times,
so what this compiles is what the runs' analyses use.
"""
from __future__ import annotations

import atexit
import contextlib
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Optional, Sequence

from ..history import Recorder
from . import metrics
from .spark import c1_only, get_spark
from .tuning import Tuning

_lock = threading.Lock()
# the JIT keeps compiling Spark's planner for about this many analyses (-XX:+CITime, session
# 17); a session's gaps are not spent on warming past it. Every analysis the process ran
# counts (metrics.ended): a run's warms the JIT as a round does, and a process that analyses
# many sessions (a campaign's, a test run's) stops warming once it has analysed enough
CAP = 32
# with C1 alone (a test run's JVM, spark.one_shot_options) the third analysis already runs at
# the speed of the tenth (a consume-transform-produce run's history, warm rounds: 34, 12, 10,
# 7.9, 9.5, 9.7 s on a loaded machine): a few rounds, not dozens
C1_CAP = 3


def cap(spark) -> int:
    """How many analyses warm this session's JVM: C1_CAP when it compiles with C1 alone."""
    return C1_CAP if c1_only(spark) else CAP


MESSAGES = 2_000  # the small history's


def _history(path: Path, messages: int = MESSAGES) -> None:
    """One run, written as a run writes it: a producer (sends, acks carrying their send time,
    a few nacks), a fault window with a pause in the acks, a read with a redelivered block,
    a swapped pair and a loss."""
    t_fault = messages // 3 * 100_000
    with Recorder(path, "warm-up", "p1", 0) as p:
        for v in range(1, messages + 1):
            t_send = v * 100_000
            t_ack = t_send + 2_000_000
            if t_fault < t_ack < t_fault + 300_000_000:
                t_ack = t_fault + 300_000_000  # held back by the fault
            p.record("send", "p1", v, node="n1", t_ns=t_send)
            if v % 500:
                p.record("ack", "p1", v, offset=str(v), t_ns=t_ack, send_ns=t_send)
            else:
                p.record("nack", "p1", v, t_ns=t_ack)
    with Recorder(path, "warm-up", "nemesis", 0) as n:
        n.record("fault", node="n1", detail="kill leader", t_ns=t_fault, window=1)
        n.record("heal", node="n1", detail="kill leader", t_ns=t_fault + 10**9, window=1)
    read = [v for v in range(1, messages + 1) if v % 500 and v != 7]
    read[10], read[11] = read[11], read[10]
    read[100:100] = read[50:80]  # a block read again
    with Recorder(path, "warm-up", "c1", 0) as c:
        for i, v in enumerate(read):
            c.record("recv", "p1", v, offset=str(v), node="n2", t_ns=10**10 + i * 1000)
        c.record("read_end", detail="complete", t_ns=2 * 10**10)


def warm_up(spark, rounds: int = 1, enough: Optional[threading.Event] = None,
            history: Optional[str] = None) -> int:
    """Up to `rounds` analyses, until `enough` is set, never more than cap(spark) in a process; the
    process's first always (it is several times slower than the next: a run must not wait
    for it). Returns how many ran.

    The JIT keeps compiling Spark's planner for dozens of analyses (54 s of compiler CPU
    over the first 32 in one JVM, measured with -XX:+CITime), so a session warms it while
    its first cluster starts and again in the gaps between runs; each round there is one
    the runs' verdicts do not wait for. Without `history`, a small history's: rounds
    alternate between it read from its files and read once into memory, the two ways a
    run's analysis goes (Tuning.small_bytes); the files first, as most scenarios' runs are
    too large for memory. With `history` (the directory of a run just analysed, larger
    than the small one), that history's: the next run's is most likely of its size and
    shape, and the JIT compiles what runs often, which on 2,000 messages the per-row code
    is not (a 100,000-message run's ordering walk after the small one's rounds: 0.45-0.75
    s; in a loop over histories of its size: 0.11-0.19). A round cut short (WarmUp
    cancels its jobs when a write is about to begin) raises."""
    ran, limit = 0, cap(spark)
    with _lock:
        if metrics.ended() >= limit:
            return 0
        with _source(history) as path:
            while ran < rounds and metrics.ended() < limit:
                if metrics.ended() and enough is not None and enough.is_set():
                    break
                tuning = Tuning(small_bytes=0) if history is None and metrics.ended() % 2 == 0 else Tuning()
                metrics.analyze(spark, metrics.read_history(spark, path), tuning=tuning).release()
                ran += 1
    return ran


@contextlib.contextmanager
def _source(history: Optional[str]):
    """The history to warm on: `history`, else the small one, written for the rounds."""
    if history is not None:
        yield history
        return
    global _small
    if _small is None:
        d = tempfile.mkdtemp(prefix="brokerchaos-warm-up-")
        _history(Path(d))
        atexit.register(shutil.rmtree, d, True)
        _small = d
    yield _small


# the small history, written once per process and kept until it exits: a round cut short
# returns while its cancelled job's tasks may still be reading the files (deleted at the
# round's end, they logged FILE_NOT_EXIST errors from Spark's executor)
_small: Optional[str] = None


def first_done() -> bool:
    """The process's first analysis is behind it."""
    return metrics.ended() > 0


class WarmUp(threading.Thread):
    """The JVM's start and (`analysis`) small analyses in the background (warm_up):
    while the first cluster starts, and between runs. `stop()` says a write is about to begin:
    the process's first analysis is waited for (a run's verdict must not be the cold one),
    any later one is cut short by cancelling its Spark jobs."""

    ROUNDS = 4  # while the first cluster starts
    TAG = "brokerchaos-warm-up"

    def __init__(self, master: Optional[str], analysis: bool, rounds: int = ROUNDS,
                 history: Optional[str] = None, java_options: Sequence[str] = ()) -> None:
        super().__init__(name="spark-warm-up", daemon=True)
        self.master, self.analysis, self.rounds, self.history = master, analysis, rounds, history
        self.java_options = java_options  # for the JVM, if this thread starts it
        self._enough = threading.Event()

    def enough(self) -> None:
        self._enough.set()

    def run(self) -> None:
        try:
            spark = get_spark(self.master, self.java_options)
            if self.analysis:
                sc = spark.sparkContext
                sc.addJobTag(self.TAG)  # this thread's jobs, for the canceller
                done = threading.Event()
                # started from here, in the root namespace where the JVM listens: stop() is
                # called from the client namespace's threads, which cannot reach it
                threading.Thread(target=self._canceller, args=(sc, done), name="spark-warm-up-cancel",
                                 daemon=True).start()
                try:
                    warm_up(spark, self.rounds, self._enough, self.history)
                finally:
                    done.set()
                    sc.removeJobTag(self.TAG)
        except Exception:  # a round cancelled by stop(); else the real call reports it
            pass

    def _canceller(self, sc, done: threading.Event) -> None:
        while not done.wait(0.02):
            if self._enough.is_set() and first_done():
                # a job submitted after a cancel is not cancelled by it: again until the
                # round gives up (at its first cancelled job, ~0.1 s of planning apart)
                try:
                    sc.cancelJobsWithTag(self.TAG)
                except Exception:  # the session is stopping: nothing left to cancel
                    return

    def stop(self, timeout: float) -> None:
        """Return when the thread has ended, or after `timeout` seconds (it is a daemon)."""
        self.enough()
        self.join(timeout)


def warm_up_async(master: Optional[str] = None, analysis: bool = True, rounds: int = WarmUp.ROUNDS,
                  history: Optional[str] = None, java_options: Sequence[str] = ()) -> WarmUp:
    """Start the JVM in the background while the first cluster starts, and (`analysis`) warm
    it with small analyses, so that the first runs' verdicts come at the warm speed; called
    again after a run's verdict, the gap before the next write warms it further. The write
    phase calls stop(). `history`: warm on that run's history instead of the small one."""
    w = WarmUp(master, analysis, rounds, history, java_options)
    w.start()
    return w
