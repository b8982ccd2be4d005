"""Clients in the JVM (`options.client: java`), driven as a child process over a small line
protocol (docs/java-clients.md): the harness writes one tab-separated line per operation
on its stdin, the client one per outcome on its stdout.

The sources (`java/*.java`) are compiled once against a server set's jars (`jvm.classpath`:
the client library of the same release as the servers), into the cache beside them, keyed
by the sources' and the jars' digest. A `Bridge` is one client process: `send` writes a
line (sends gathered and written in batches), the lines it answers go to `on_lines` from a
reader thread a chunk at a time, and `call` waits for the
answer to one request, bounded.
"""
from __future__ import annotations

import asyncio
import fcntl
import glob
import hashlib
import itertools
import os
import queue
import shutil
import struct
import subprocess
import threading
from pathlib import Path
from typing import Callable, Optional

from . import jvm
from .base import SystemError_

SOURCES = Path(__file__).parent / "java"
COMPILE_TIMEOUT_S = 300
# a JVM's start on a loaded machine, and a Pulsar client with transactions that waits up to
# 60 s for its coordinators to load (java/PulsarBridge.java)
START_TIMEOUT_S = 120
PUSH_BATCH = 256  # sends gathered before a write, at most (a poll writes what there is)
# the client's own log, to stderr (its file): stdout is the protocol. Kafka 3.9's jars
# log through reload4j, Kafka 4.x's and Pulsar's through log4j 2
LOG4J = ("log4j.rootLogger=INFO, err\nlog4j.appender.err=org.apache.log4j.ConsoleAppender\n"
         "log4j.appender.err.Target=System.err\nlog4j.appender.err.layout=org.apache.log4j.PatternLayout\n"
         "log4j.appender.err.layout.ConversionPattern=[%d] %p %m (%c)%n\n")
LOG4J2 = ("rootLogger.level=INFO\nrootLogger.appenderRef.err.ref=err\nappender.err.type=Console\n"
          "appender.err.name=err\nappender.err.target=SYSTEM_ERR\nappender.err.layout.type=PatternLayout\n"
          "appender.err.layout.pattern=[%d] %p %m (%c)%n\n")


def classpath(server_set: str, main: str) -> str:
    """The classpath that runs `main` (a class in java/): the set's jars and the bridge's
    classes, compiled first if the sources or the jars changed."""
    jars = jvm.classpath(server_set)
    sources = sorted(SOURCES.glob("*.java"))
    h = hashlib.sha256()
    for f in sources + [Path(p) for p in sorted(glob.glob(jars))]:
        h.update(f.name.encode() + (f.read_bytes() if f.suffix == ".java" else str(f.stat().st_size).encode()))
    # one directory per program: each compiles its own source (and the protocol's) alone, so
    # two programs of one set (KafkaBridge, KafkaReassign) must not share a `done` mark
    root = jvm.cache_root() / "bridges" / f"{server_set}-{main.rsplit('.', 1)[-1]}-{h.hexdigest()[:16]}"
    if not (root / "done").exists():
        root.parent.mkdir(parents=True, exist_ok=True)
        with open(root.parent / f".{root.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (root / "done").exists():
                _compile(jars, [s for s in sources if _wanted(s, main)], root)
    return f"{jars}:{root / 'classes'}"


def _wanted(source: Path, main: str) -> bool:
    """`main`'s source and the protocol they all speak (each bridge against its own jars)."""
    return source.stem in (main.rsplit(".", 1)[-1], "Protocol")


def _compile(jars: str, sources: list[Path], root: Path) -> None:
    shutil.rmtree(root, ignore_errors=True)
    (root / "classes").mkdir(parents=True)
    try:
        javac = jvm.tool("javac", "openjdk-17-jdk-headless")  # options.client java compiles its bridge once
        r = subprocess.run([javac, "-nowarn", "-encoding", "UTF-8", "--release", "17", "-cp", jars,
                            "-d", str(root / "classes"), *map(str, sources)],
                           capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise SystemError_(f"compiling the Java client ({', '.join(s.name for s in sources)}) took over "
                           f"{COMPILE_TIMEOUT_S}s") from None
    if r.returncode != 0:
        first = next((ln for ln in r.stderr.splitlines() if "error" in ln), r.stderr.strip()[:240])
        raise SystemError_(f"compiling the Java client failed: {first}")
    (root / "done").write_text("ok\n")


def log_configs(log: Path) -> dict[str, str]:
    """The JVM properties that send a Java client's log to its file (both logging libraries)."""
    l1, l2 = log.with_suffix(".log4j.properties"), log.with_suffix(".log4j2.properties")
    l1.parent.mkdir(parents=True, exist_ok=True)
    l1.write_text(LOG4J)
    l2.write_text(LOG4J2)
    return {"log4j.configuration": f"file:{l1}", "log4j2.configurationFile": str(l2)}


def jar_version(server_set: str, artifact: str) -> Optional[str]:
    """The version of `artifact` in a server set's jars (its file name's), e.g. kafka-clients."""
    for p in glob.glob(jvm.classpath(server_set)):
        name = Path(p).name
        if name.startswith(artifact + "-") and name.endswith(".jar"):
            rest = name[len(artifact) + 1:-4]
            if rest[:1].isdigit():
                return rest
    return None


def run_once(main: str, server_set: str, args: list[str], log: Path, timeout: float) -> list[str]:
    """Run `main` (a one-shot program in java/) to its end and return the fields of the one
    line it printed: ["E", NAME, reason] when it failed, or could not say within `timeout`."""
    argv = jvm.argv(classpath(server_set, main), main, 128, *args, props=log_configs(log))
    with open(log, "ab") as err:
        try:
            r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=err, timeout=timeout, start_new_session=True)
        except subprocess.TimeoutExpired:
            return ["E", "REQUEST_TIMED_OUT", f"{main} did not end within {timeout:.0f}s; see {log}"]
    lines = r.stdout.decode("utf-8", "replace").strip().splitlines()
    if not lines:
        return ["E", "UNKNOWN", f"{main} ended ({r.returncode}) without an answer; see {log}"]
    return lines[-1].split("\t")


def frames(buf: bytes) -> tuple[list, bytes]:
    """The answers whole in `buf`, and what is left of it: each text line as its fields, each
    record of a binary block (`B`, k, n: n records of k + 1 little-endian longs) as a tuple:
    a block is unpacked at once (0.2 µs a record, where a line's decode and split took 0.9)."""
    out: list = []
    i, n = 0, len(buf)
    while i < n:
        if buf[i] == 0x42:  # B: no text line starts so (docs/java-clients.md)
            if n - i < 6:
                break
            k, count = buf[i + 1], int.from_bytes(buf[i + 2:i + 6], "little")
            end = i + 6 + 8 * (k + 1) * count
            if end > n:
                break
            out.extend(struct.iter_unpack(f"<{k + 1}q", memoryview(buf)[i + 6:end]))
            i = end
        else:
            j = buf.find(b"\n", i)
            if j < 0:
                break
            out.append(buf[i:j].decode("utf-8", "replace").split("\t"))
            i = j + 1
    return out, buf[i:]


class Bridge:
    """One client process: lines in, lines out. `on_lines(batch)` runs on the reader
    thread with the lines read together, but the answers to `call`s."""

    def __init__(self, name: str, argv: list[str], log: Path, on_lines: Callable[[list[list[str]]], None]) -> None:
        self.name = name
        self.on_lines = on_lines
        self.pending: list[str] = []
        self.replies: dict[str, list] = {}
        self.cond = threading.Condition()
        self.ids = itertools.count(1)
        self.write_lock = threading.Lock()
        self.ready: Optional[str] = None
        self.gone: Optional[str] = None
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as err:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                         start_new_session=True)
        self.reader = threading.Thread(target=self._read, name=f"bridge-{name}", daemon=True)
        self.reader.start()
        with self.cond:
            if not self.cond.wait_for(lambda: self.ready or self.gone, START_TIMEOUT_S):
                self.kill()
                raise SystemError_(f"the Java client {name} did not start within {START_TIMEOUT_S}s; see {log}")
        if self.gone:
            raise SystemError_(f"the Java client {name} ended before it was ready ({self.gone}); see {log}")

    def _read(self) -> None:
        """Reads what the client wrote in chunks; its answers go to `on_lines` a chunk's worth
        at a time (one hand-over per chunk, not per answer): a text line as its fields, a
        delivery of a binary block as a tuple (id, its fields)."""
        fd, rest = self.proc.stdout.fileno(), b""
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                break
            answers, rest = frames(rest + chunk)
            batch = [f for f in answers if type(f) is tuple or self._answer(f)]
            if batch:
                try:
                    self.on_lines(batch)
                except Exception as e:  # a line must never stop the reader
                    print(f"bridge {self.name}: {type(e).__name__}: {e} on {batch[:3]!r}", flush=True)
        with self.cond:
            self.gone = f"exit {self.proc.wait()}"
            self.cond.notify_all()

    def _answer(self, f: list[str]) -> bool:
        """Takes a call's answer or the ready line; False for them, True for the rest."""
        if f[0] not in ("r", "ready"):
            return True
        with self.cond:
            if f[0] == "r":
                self.replies[f[1]] = f[2:]
            else:
                self.ready = f[1] if len(f) > 1 else "?"
            self.cond.notify_all()
        return False

    def push(self, *fields) -> bool:
        """A line kept until `flush_lines` (or until enough gather): sends go out in batches.
        True when it is the first one kept."""
        with self.write_lock:
            self.pending.append("\t".join(fields))
            if len(self.pending) >= PUSH_BATCH:
                self._write_pending()
            return len(self.pending) == 1

    def flush_lines(self) -> None:
        with self.write_lock:
            self._write_pending()

    def _write_pending(self, last: str = "") -> None:
        lines, self.pending = self.pending, []
        if last:
            lines.append(last)
        if not lines:
            return
        if self.gone:
            raise BrokenPipeError(f"the Java client {self.name} is gone ({self.gone})")
        self.proc.stdin.write(("\n".join(lines) + "\n").encode())
        self.proc.stdin.flush()

    def send(self, *fields) -> None:
        """One line now, after whatever was pushed before it."""
        with self.write_lock:
            self._write_pending("\t".join(map(str, fields)))

    def call(self, op: str, timeout: float) -> list[str]:
        """Ask for `op` and wait for its answer: ["ok"] or ["E", kind, NAME, reason]."""
        req = str(next(self.ids))
        self.send(op, req, int(timeout * 1000))
        with self.cond:
            if not self.cond.wait_for(lambda: req in self.replies or self.gone, timeout + 5):
                return ["E", "retriable", "REQUEST_TIMED_OUT", f"no answer to {op} within {timeout + 5:.0f}s"]
            if req not in self.replies:
                return ["E", "fatal", "UNKNOWN", f"the Java client is gone ({self.gone}) during {op}"]
            return self.replies.pop(req)

    def close(self, timeout: float = 10.0) -> None:
        """Ask it to end (its producer closed), then wait; killed by its pid if it will not."""
        try:
            self.send("x")
            self.proc.stdin.close()
        except (OSError, ValueError):
            pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        self.reader.join(5)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()  # our own child, by its pid
            self.proc.wait(5)


class CallError:
    """A failed call or delivery as the Java client named it, asked as confluent-kafka's
    KafkaError is (name, str, and how a transactional call's failure is to be taken)."""

    def __init__(self, fields: list[str]) -> None:
        # [kind,] NAME, reason
        self.kind = fields[0] if len(fields) > 2 else ""
        self._name, self._reason = (fields[-2], fields[-1]) if len(fields) >= 2 else ("UNKNOWN", " ".join(fields))

    def name(self) -> str:
        return self._name

    def str(self) -> str:
        return f"java {self._reason}"

    def retriable(self) -> bool:
        return self.kind == "retriable"

    def fatal(self) -> bool:
        return self.kind == "fatal"

    def txn_requires_abort(self) -> bool:
        return self.kind == "abortable"


class CallFailed(Exception):
    """Raised by a Handle's blocking call; args[0] is its CallError (as KafkaException's is)."""


class Written:
    """Where a message went, as a delivery callback is handed it: `partition()` and
    `offset()` (Kafka); `fields` the whole place (Pulsar's message id). Numbers from a
    binary block, strings from a text line."""

    def __init__(self, fields) -> None:
        self.fields = fields

    def partition(self) -> int:
        return int(self.fields[0]) if self.fields else -1

    def offset(self) -> Optional[int]:
        return int(self.fields[1]) if len(self.fields) > 1 else None


class Handle:
    """A Java client's producer as the harness's producer classes drive a library's:
    `produce(topic, value, on_delivery)` never blocks, `poll()` runs the delivery callbacks
    on the caller's thread (the event loop's), and the blocking calls (flush and the
    transactional ones) wait for the client's answer and raise `failed(CallError)`."""

    def __init__(self, main: str, server_set: str, argv_tail: list[str], props: dict, log: Path,
                 on_line: Optional[Callable[[list[str]], None]] = None) -> None:
        self.callbacks: dict[str, Callable] = {}
        self.ids = itertools.count(1)
        self.done: "queue.SimpleQueue[list[list[str]]]" = queue.SimpleQueue()  # batches of lines
        self.lock = threading.Lock()
        self.on_other = on_line
        cp = classpath(server_set, main)
        argv = jvm.argv(cp, main, 256, *argv_tail, props=props)
        self.bridge = Bridge(log.stem, argv, log, self.done.put)
        self.version = self.bridge.ready

    def failed(self, err: CallError) -> Exception:
        return CallFailed(err)

    def error(self, fields: list[str]):
        return CallError(fields)

    def produce(self, topic: str, value: bytes, on_delivery: Callable) -> None:
        mid = next(self.ids)
        with self.lock:
            self.callbacks[mid] = on_delivery
        try:
            if self.bridge.push("s", str(mid), value.decode()):
                self._write_soon()
        except (OSError, ValueError) as e:
            self.done.put([["d", mid, "E", "UNKNOWN", f"the Java client is gone: {e}"]])

    def _write_soon(self) -> None:
        """The sends gathered written once the event loop's current step is over (the sends
        of one step in one write), or by the next poll when not called on a loop."""
        try:
            asyncio.get_running_loop().call_soon(self._write)
        except RuntimeError:
            pass

    def _write(self) -> None:
        try:
            self.bridge.flush_lines()
        except (OSError, ValueError):
            pass  # gone: close() reports what never got an answer

    def poll(self, timeout: float = 0) -> int:
        """Writes the sends gathered, then runs the callbacks of the outcomes read."""
        self._write()
        n = 0
        while True:
            try:
                batch = self.done.get_nowait()
            except queue.Empty:
                return n
            for f in batch:
                n += self._deliver(f)

    def _deliver(self, f) -> int:
        if type(f) is tuple:  # a delivered send from a binary block: (id, its place's fields)
            with self.lock:
                cb = self.callbacks.pop(f[0], None)
            if cb is None:
                return 0
            cb(None, Written(f[1:]))
            return 1
        if f[0] != "d":
            if self.on_other is not None:
                self.on_other(f)
            return 0
        with self.lock:
            cb = self.callbacks.pop(int(f[1]), None)
        if cb is None:
            return 0
        cb(self.error(f[3:]), Written([])) if f[2] == "E" else cb(None, Written(f[2:]))
        return 1

    def __len__(self) -> int:
        with self.lock:
            return len(self.callbacks)

    def _call(self, op: str, timeout: float) -> list[str]:
        ans = self.bridge.call(op, timeout)
        if ans[0] != "ok":
            raise self.failed(self.error(ans[1:]))
        return ans[1:]

    def flush(self, timeout: float = 5.0) -> int:
        """What is still unreported once the client's flush returned or `timeout` passed."""
        self.bridge.call("flush", timeout)
        return len(self)

    def purge(self, *args) -> None:
        """The Java clients have no purge: what is unsent goes out or fails by its timeout,
        and a close ends the rest (each with its report)."""

    def init_transactions(self, timeout: float) -> None:
        self._call("init", timeout)

    txn_id: Optional[str] = None  # the open transaction's id, where the client names it (Pulsar's TxnID)

    def begin_transaction(self) -> None:
        ans = self._call("begin", 10.0)
        self.txn_id = ans[0] if ans else None

    def commit_transaction(self, timeout: float) -> None:
        self._call("commit", timeout)

    def abort_transaction(self, timeout: float) -> None:
        self._call("abort", timeout)

    reports_after_close = True  # close() reports what never got an answer: a poll after it serves them

    def close(self) -> None:
        """The client closed (5 s for what is in flight), its process ended; every message
        without a report then gets one: unknown, it may have been written."""
        self.bridge.close()
        with self.lock:
            left = list(self.callbacks)
        self.done.put([["d", mid, "E", "UNKNOWN", "no report before the Java client closed"] for mid in left])
