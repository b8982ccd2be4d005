"""A consumer group (`workload.group`, history format 1.6): each member in a process of its
own, forked from the harness as the producers are (processes.py), so that a fault can kill
it like a node and the heal can start another in its place.

A member slot (`g1-m1`) holds one process at a time; each process is an *incarnation* with
its own client name (`g1-m1`, then `g1-m1-r2`, …), its own history files and its own
`subscribe` row naming the group, so that a member killed and started again is, to the
analysis, another member of the same group (a message it processes again is handed over).
The system writes the member (`Client.group_member`), which tells a GroupEvents what the
group hands it; here each message is processed (`process_ms`) and recorded, the member run,
told to finish, and its `read_end` recorded.

A member's rows go to a *journal* first (`<client>.journal` beside the history files), one
line written to the kernel per row as it happens: a member killed right after processing
a message has recorded it (a Parquet recorder's buffer of up to a second would die with
it, and what it had processed would be taken for a skip). The harness turns each journal
into the member's Parquet files when the group has finished (`collect`).
"""
from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable, Optional

from ..history import Recorder
from ..history.schema import ACKED, COMMIT_OK, LEFT, REWOUND
from ..scenario import HOLD_S, GroupSpec
from .payload import decode
from .processes import become_child, exit_child

START_TIMEOUT = 60.0
STOP_GRACE = 10.0
LEAVE_SIGNAL = signal.SIGUSR2  # the harness asks a member to leave the group (scale-in, a stop)


class MemberError(RuntimeError):
    """A member's process did not start (its library, its broker connection): said in one line."""


class Leave(BaseException):
    """Raised in a member's main thread by LEAVE_SIGNAL: it stops where it is (the message in
    hand unfinished, as a shutdown hook that does not wait), closes its consumer (which
    leaves the group: Kafka's LeaveGroup, MQTT's UNSUBSCRIBE) and ends with read_end `left`.
    A BaseException, so that no member's `except Exception` takes it for an error."""


_asked_to_leave = threading.Event()  # in a member's process: LEAVE_SIGNAL came


def _leave(_sig, _frame) -> None:
    signal.signal(LEAVE_SIGNAL, signal.SIG_IGN)  # once
    _asked_to_leave.set()
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # in plain code: raised where it is
        raise Leave() from None
    # In an event loop, an exception raised here lands in whatever runs at that moment, and
    # asyncio's own callbacks catch BaseException: a Leave raised inside a socket
    # transport's send() was logged as a fatal write error and dropped, and the member
    # stayed in the group (1 leave in ~4 on Redis). The loop's tasks are cancelled
    # instead, from the loop itself, and the member's run ends in CancelledError.
    loop.call_soon_threadsafe(_cancel_all, loop)


def _cancel_all(loop) -> None:
    for task in asyncio.all_tasks(loop):
        task.cancel()


_FIELDS = ("type", "producer", "value", "offset", "detail", "group", "partition", "position", "epoch")


class Journal:
    """A member's rows, a line each, written as they happen (the module docstring); `t_ns` on
    the run's clock (`origin`, as a Recorder's)."""

    def __init__(self, path: Path, origin: int) -> None:
        self.path = path
        self.origin = origin
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def record(self, type_: str, producer=None, value=None, offset=None, detail=None, group=None, partition=None,
               position=None, epoch=None) -> None:
        row = [time.monotonic_ns() - self.origin, type_, producer, value, offset, detail, group, partition, position,
               epoch]
        os.write(self.fd, (json.dumps(row, separators=(",", ":")) + "\n").encode())

    def close(self) -> None:
        os.close(self.fd)


def collect(path: Path, rec: Recorder) -> int:
    """A journal's rows into the member's recorder (its Parquet files), then the journal
    removed; a last line cut off by a kill is left out. Returns the rows."""
    n = 0
    with open(path, "rb") as fh:
        for line in fh:
            try:
                t, *row = json.loads(line)
            except ValueError:
                continue  # the process died in the middle of this line
            rec.record(row[0], **{k: v for k, v in zip(_FIELDS[1:], row[1:])}, t_ns=t)
            n += 1
    rec.close()
    path.unlink()
    return n


_resumed = threading.Event()  # in a member's process: SIGCONT came while it held


def _until_resumed(limit: float, held: Callable[[], None]) -> None:
    """Tell the harness (`held`) once the SIGCONT handler is in place (a pause that came
    before it would be missed), then wait for SIGCONT, `limit` s at most."""
    try:
        before = signal.signal(signal.SIGCONT, lambda _sig, _frame: _resumed.set())
    except ValueError:  # not the main thread: no handler of its own
        held()
        time.sleep(limit)
        return
    try:
        held()
        # short sleeps, not one wait: the kernel may hand SIGCONT to another of the process's
        # threads (the finish thread, in a read), and then nothing wakes a wait in this one;
        # the handler runs here after the sleep it lands in (a wait of 60 s outlived a pause)
        deadline = time.monotonic() + limit
        while not _resumed.is_set() and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        signal.signal(signal.SIGCONT, before)


class GroupEvents:
    """What a member's library says, as history rows (format 1.6) of its journal; a
    message handed over is processed (`process_ms`) before its `recv` row is written."""

    def __init__(self, rec: Journal, spec: GroupSpec, hold: Optional[Callable[[], bool]] = None) -> None:
        self.rec = rec
        self.spec = spec
        # `hold_after`, in a first incarnation (`hold`: claims the group's one hold, HoldPoint)
        self.hold_after = spec.hold_after if hold is not None else None
        self.claim = hold
        self.processed = 0
        self.on_hold: Callable[[], None] = lambda: None  # tells the harness (HoldPoint.began)

    def process(self, payload: bytes, partition: str, position: int, offset: str) -> None:
        if self.spec.commit in ("before", "auto"):
            self._hold()  # this one handed over, acked or stored, and not processed
        if self.spec.process_ms:
            time.sleep(self.spec.process_ms / 1000)
        producer, value = decode(payload)
        self.rec.record("recv", producer, value, offset=offset,
                        detail=None if value is not None else f"not a brokerchaos payload: {payload[:64]!r}",
                        group=self.spec.name, partition=partition, position=position)
        self.processed += 1
        if self.spec.commit in ("after", "transaction"):
            self._hold()  # this one processed, not committed or acked

    def _hold(self) -> None:
        """Past `hold_after` messages processed, hold (once) what is in hand until killed, or
        until paused and resumed (a pause's heal: it goes on where it stopped), HOLD_S at most."""
        if self.hold_after is not None and self.processed >= self.hold_after:
            self.hold_after = None
            if self.claim():  # the first member of the group to get here, alone
                _until_resumed(HOLD_S, self.on_hold)

    def commit(self, partition: str, position: Optional[int], error: Optional[str] = None,
               cumulative: bool = True, message: Optional[bytes] = None) -> None:
        """A position made durable (`cumulative`: everything before it too, Kafka's commit),
        or one message's ack (`cumulative=False`: its position, detail `acked`). `message`:
        the acked message's payload, where the ack takes it out of the broker (a queue's)."""
        ok = COMMIT_OK if cumulative else ACKED
        producer, value = decode(message) if message is not None else (None, None)
        self.rec.record("commit", producer, value, detail=ok if error is None else f"failed: {error}"[:200],
                        group=self.spec.name, partition=partition, position=position)

    def assign(self, partition: str, epoch: Optional[int] = None) -> None:
        self.rec.record("assign", group=self.spec.name, partition=partition, epoch=epoch)

    def rewind(self, partition: str, position: Optional[int]) -> None:
        """The member moved itself back to `position` (a consume-transform-produce member after
        a transaction that did not commit): an `assign` row whose detail says so, since its
        deliveries start again there as after an assignment."""
        self.rec.record("assign", detail=REWOUND, group=self.spec.name, partition=partition, position=position)

    def revoke(self, partition: str, epoch: Optional[int] = None, lost: bool = False) -> None:
        self.rec.record("revoke", detail="lost" if lost else None, group=self.spec.name, partition=partition,
                        epoch=epoch)

    def flush(self) -> None:
        """Nothing to do: every row is written as it happens."""


@dataclass
class Incarnation:
    client: str
    proc: object
    conn: object
    ended: Optional[str] = None  # its read_end detail, once it reported one


class HoldPoint:
    """The group's one hold (`hold_after`), shared with the members' processes (forked): the
    first member, in its first incarnation, to have processed `hold_after` messages claims it
    (`slot`: its number, g1-m<slot>) and says when it began to hold (`t`, monotonic ns)."""

    def __init__(self) -> None:
        ctx = multiprocessing.get_context("fork")
        self.slot = ctx.Value("i", 0)
        self.t = ctx.Value("q", 0, lock=False)

    def claim(self, slot: int) -> bool:
        with self.slot.get_lock():
            if self.slot.value:
                return False
            self.slot.value = slot
            return True

    def began(self) -> None:
        self.t.value = time.monotonic_ns()


@dataclass
class Slot:
    name: str
    runs: list[Incarnation] = field(default_factory=list)

    @property
    def now(self) -> Optional[Incarnation]:
        return self.runs[-1] if self.runs else None

    def next_client(self) -> str:
        return self.name if not self.runs else f"{self.name}-r{len(self.runs) + 1}"


class ConsumerGroup:
    """The members of one group. `make(client, hold)` is called in the member's process and
    returns (its GroupEvents, the system's member): its journal opened, its subscribe row
    written; `hold` (a first incarnation's) claims the group's HoldPoint.
    `recorder(client)` makes the Parquet recorder its journal is collected into, `journal(client)`
    names the journal."""

    def __init__(self, spec: GroupSpec, idle: float, make: Callable[..., object],
                 recorder: Callable[[str], Recorder], journal: Callable[[str], Path],
                 forked: Callable[[], None] = lambda: None) -> None:
        self.spec = spec
        self.idle = idle
        self.make = make
        self.recorder = recorder
        self.journal = journal
        self.forked = forked
        self.slots = {f"{spec.name}-m{i}": Slot(f"{spec.name}-m{i}") for i in range(1, spec.consumers + 1)}
        self.errors: list[str] = []
        self.hold = HoldPoint()

    def holder(self) -> Optional[str]:
        """The member holding its work in hand now (`hold_after`), while its first
        incarnation runs; else None."""
        slot = self.slots.get(self.held_by() or "")
        if slot is None or len(slot.runs) != 1 or not slot.runs[0].proc.is_alive():
            return None
        return slot.name

    def held_by(self) -> Optional[str]:
        """The member slot that held its work in this run (`hold_after`), if one did."""
        return f"{self.spec.name}-m{self.hold.slot.value}" if self.hold.t.value else None

    async def holding(self) -> int:
        """Wait until a member holds; when it began to, monotonic ns."""
        while not self.hold.t.value:
            await asyncio.sleep(0.01)
        return self.hold.t.value

    def _running(self, name: str) -> Incarnation:
        """The slot's process now; LookupError if it is not running."""
        inc = self.slots[name].now
        if inc is None or not inc.proc.is_alive():
            raise LookupError(f"group member {name} is not running")
        return inc

    def names(self) -> list[str]:
        """The member slots, whose process is running now."""
        return [n for n, s in self.slots.items() if s.now is not None and s.now.proc.is_alive()]

    def owns(self, name: str) -> bool:
        return name in self.slots

    def pid_of(self, name: str) -> Optional[int]:
        """The pid of the slot's running process (None: none runs)."""
        inc = self.slots[name].now
        return inc.proc.pid if inc is not None and inc.proc.is_alive() else None

    def pids(self) -> dict[str, int]:
        """Every incarnation's pid, by its client name."""
        return {inc.client: inc.proc.pid for s in self.slots.values() for inc in s.runs}

    async def start(self, timeout: float = START_TIMEOUT) -> None:
        for name in self.slots:
            await self.start_member(name, timeout)

    async def start_member(self, name: str, timeout: float = START_TIMEOUT) -> None:
        """Fork the slot's next incarnation and wait until its member is built."""
        slot = self.slots[name]
        client = slot.next_client()
        ctx = multiprocessing.get_context("fork")
        mine, theirs = ctx.Pipe()
        hold = (self.hold, int(name[len(self.spec.name) + 2:])) if not slot.runs else None  # a first incarnation
        p = ctx.Process(target=_member, args=(theirs, mine, client, self.make, self.forked, self.idle, hold),
                        name=f"brokerchaos group member {client}", daemon=True)
        p.start()
        theirs.close()
        slot.runs.append(Incarnation(client, p, mine))
        msg = await _recv(mine, timeout)
        if msg is None or msg[0] != "ready":
            why = msg[1] if msg is not None and msg[0] == "error" else f"no answer within {timeout:.0f} s"
            await asyncio.to_thread(_stop, p)
            raise MemberError(f"group member {client} (pid {p.pid}) did not start: {why}")

    async def kill(self, name: str) -> int:
        """SIGKILL the slot's running process (ours: forked above); returns when, monotonic ns."""
        inc = self._running(name)
        t = time.monotonic_ns()
        os.kill(inc.proc.pid, signal.SIGKILL)
        await asyncio.to_thread(inc.proc.join, 10)
        inc.ended = "killed"
        return t

    def pause(self, name: str) -> int:
        """SIGSTOP the slot's running process: alive, silent (no heartbeat, no processing);
        returns when, monotonic ns."""
        inc = self._running(name)
        t = time.monotonic_ns()
        os.kill(inc.proc.pid, signal.SIGSTOP)
        return t

    def resume(self, name: str) -> None:
        """SIGCONT the slot's process, if it is still there."""
        inc = self.slots[name].now
        if inc is not None and inc.proc.is_alive():
            os.kill(inc.proc.pid, signal.SIGCONT)

    async def leave(self, name: str, timeout: float = 3 * STOP_GRACE) -> int:
        """Ask the slot's running process to leave the group and wait for its end; returns
        when it was asked, monotonic ns."""
        inc = self._running(name)
        t = time.monotonic_ns()
        os.kill(inc.proc.pid, LEAVE_SIGNAL)
        await self._end(inc, timeout)
        await asyncio.to_thread(inc.proc.join, STOP_GRACE)
        return t

    async def scale(self, n: int, changed: Optional[list[str]] = None) -> list[str]:
        """Members joined (new slots, numbered on) or asked to leave (the last started first)
        until `n` run; the slots that changed (added to `changed` as each is done)."""
        running = self.names()
        changed = [] if changed is None else changed
        while len(running) + len(changed) < n:
            name = f"{self.spec.name}-m{len(self.slots) + 1}"
            self.slots[name] = Slot(name)
            await self.start_member(name)
            changed.append(name)
        for name in running[n:][::-1]:
            await self.leave(name)
            changed.append(name)
        return changed

    def down(self, name: str) -> bool:
        inc = self.slots[name].now
        return inc is None or not inc.proc.is_alive()

    async def finish(self, timeout: float) -> str:
        """Tell every running member to finish (process what is left until the group has
        committed all there is, or neither it nor the group moves for `idle` s); their
        read_end details."""
        running = [s.now for s in self.slots.values() if s.now is not None and s.now.proc.is_alive()]
        for inc in running:
            try:
                inc.conn.send(("finish",))
            except OSError:
                pass
        ends = await asyncio.gather(*(self._end(inc, timeout) for inc in running))
        return "; ".join(sorted(set(ends))) if ends else "incomplete: no member running"

    async def _end(self, inc: Incarnation, timeout: float) -> str:
        msg = await _recv(inc.conn, timeout)
        if msg is not None and msg[0] == "end":
            inc.ended = msg[1]
        else:
            inc.ended = f"incomplete: {msg[1] if msg is not None else f'no end within {timeout:.0f} s'}"
            self.errors.append(f"group member {inc.client}: {inc.ended}")
        return inc.ended

    async def close(self) -> None:
        """Every member process stopped, every journal collected into the history."""
        for s in self.slots.values():
            for inc in s.runs:
                await asyncio.to_thread(_stop, inc.proc)
                try:
                    inc.conn.close()
                except OSError:
                    pass
        await asyncio.to_thread(self.collect)

    def collect(self) -> int:
        """The journals of the members that have stopped, into their Parquet files."""
        n = 0
        for s in self.slots.values():
            for inc in s.runs:
                path = self.journal(inc.client)
                if not inc.proc.is_alive() and path.exists():
                    n += collect(path, self.recorder(inc.client))
        return n


def _stop(p) -> None:
    p.join(0 if p.exitcode is not None else 0.5)
    if p.is_alive():
        os.kill(p.pid, signal.SIGCONT)  # one left paused hears the SIGTERM
        os.kill(p.pid, signal.SIGTERM)
        p.join(STOP_GRACE)
    if p.is_alive():
        p.kill()
        p.join(5)


async def _recv(conn, timeout: float):
    if not await asyncio.to_thread(conn.poll, timeout):
        return None
    try:
        return conn.recv()
    except (EOFError, OSError):
        return None


def _member(conn, parents_end, client: str, make, forked, idle: float, hold) -> None:
    become_child(parents_end)
    code = 0
    try:
        forked()
        events, member = make(client, None if hold is None else partial(hold[0].claim, hold[1]))
        if hold is not None:
            events.on_hold = hold[0].began
        finishing = threading.Event()

        def wait() -> None:
            try:
                conn.recv()
            except (EOFError, OSError):
                pass  # the harness is gone: finish
            finishing.set()

        threading.Thread(target=wait, daemon=True, name="finish").start()
        signal.signal(LEAVE_SIGNAL, _leave)
        conn.send(("ready",))
        try:
            detail = member.run(finishing, idle)
        except Leave:
            detail = LEFT
        except asyncio.CancelledError:  # the way a member in an event loop leaves (_leave)
            if not _asked_to_leave.is_set():
                raise
            detail = LEFT
        except Exception as e:
            detail = f"incomplete: {type(e).__name__}: {e}"[:300]
        signal.signal(LEAVE_SIGNAL, signal.SIG_IGN)
        member.close()  # its last commits and revocations come before its read_end
        events.rec.record("read_end", detail=detail, group=events.spec.name)
        conn.send(("end", detail))
    except BaseException as e:
        code = 1
        try:
            conn.send(("error", f"{client}: {type(e).__name__}: {e}"))
        except Exception:
            pass
    exit_child(code)
