"""The local cluster environment.

netns mode: one network namespace per broker node plus one for the clients, joined by a
bridge that lives in a hub namespace; the root namespace is never touched. Addresses
come from 198.18.0.0/24 (RFC 2544's benchmarking range) and never leave the hub bridge.

loopback mode (not root, or namespaces unavailable): every node on 127.0.0.1 with its own
ports; process faults still work, network faults do not.

Everything created is recorded under STATE_ROOT/<sid>/ with the owner's PID, so that
`brokerchaos clean` can remove what a crashed session left behind; the owner is also
registered machine-wide (OWNERS), so that a clean run with another state root leaves a
running session's namespaces alone.
"""
from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, Optional

from . import mounts, netns, process, procstat
from .process import Proc

STATE_ROOT = Path(os.environ.get("BROKERCHAOS_STATE", "/tmp/brokerchaos"))
# every session's owner, machine-wide whatever its STATE_ROOT (namespaces are the machine's):
# a `clean` run with another state root (a test's) must not take a running session's
# namespaces for leftovers (seen: a test's clean killed a soak's VerneMQ cluster)
OWNERS = Path("/tmp/brokerchaos-owners")
SUBNET = "198.18.0"


class SandboxError(RuntimeError):
    pass


@dataclass
class Host:
    name: str
    ip: str
    ns: Optional[str]  # None in loopback mode


_proc_start_time = procstat.start_time


def _running(pid: int, start: str) -> bool:
    """That process (pid and start time) exists and is not a zombie (dead, not yet reaped)."""
    f = procstat.fields(pid)
    return f is not None and len(f) > 19 and f[19] == start and f[0] != "Z"


class Sandbox:
    def __init__(self, node_names: list[str], mode: str = "auto") -> None:
        self.sid = secrets.token_hex(3)
        self.node_names = node_names
        self.requested_mode = mode
        self.mode = ""
        self.why_no_netns = ""
        self.dir = STATE_ROOT / self.sid
        self.hosts: dict[str, Host] = {}
        self.client: Optional[Host] = None
        self.namespaces: list[str] = []
        self.procs: list[Proc] = []
        self._ports: dict[tuple[str, int], int] = {}

    # -- lifecycle ---------------------------------------------------------------
    def __enter__(self) -> "Sandbox":
        try:
            self.create()
        except BaseException:
            self.teardown()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.teardown()

    def ns_name(self, member: str) -> str:
        return f"{netns.PREFIX}{self.sid}-{member}"

    def create(self) -> None:
        if self.requested_mode in ("auto", "netns"):
            ok, why = netns.can_create()
            if not ok and self.requested_mode == "netns":
                raise SandboxError(f"cannot create network namespaces: {why}")
            self.mode = "netns" if ok else "loopback"
            self.why_no_netns = why
        else:
            self.mode = "loopback"
            self.why_no_netns = "loopback sandbox requested"
        self.dir.mkdir(parents=True, exist_ok=True)
        self._write_owner()
        if self.mode == "loopback":
            for name in self.node_names:
                self.hosts[name] = Host(name, "127.0.0.1", None)
            self.client = Host("client", "127.0.0.1", None)
            return
        hub = self.ns_name("hub")
        self._add_ns(hub)
        netns.ip("-n", hub, "link", "add", "br0", "type", "bridge")
        netns.ip("-n", hub, "link", "set", "br0", "up")
        members = [(name, 11 + i) for i, name in enumerate(self.node_names)] + [("client", 100)]
        for name, octet in members:
            ns = self.ns_name(name)
            self._add_ns(ns)
            veth = f"v-{name}"[:15]
            netns.ip("-n", hub, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            netns.ip("-n", hub, "link", "set", veth, "master", "br0", "up")
            netns.ip("-n", ns, "addr", "add", f"{SUBNET}.{octet}/24", "dev", "eth0")
            netns.ip("-n", ns, "link", "set", "eth0", "up")
            host = Host(name, f"{SUBNET}.{octet}", ns)
            if name == "client":
                self.client = host
            else:
                self.hosts[name] = host

    def _add_ns(self, ns: str) -> None:
        netns.add(ns)
        self.namespaces.append(ns)
        self._write_owner()

    def _write_owner(self) -> None:
        info = {
            "pid": os.getpid(),
            "start": _proc_start_time(os.getpid()),
            "namespaces": self.namespaces,
            # loopback-mode processes have no namespace to find them by; clean uses these.
            "procs": [
                {"pid": p.pid, "start": _proc_start_time(p.pid), "exe": p.argv[0]} for p in self.procs
            ],
            "created": time.time(),
        }
        tmp = self.dir / "owner.json.tmp"
        tmp.write_text(json.dumps(info))
        os.replace(tmp, self.dir / "owner.json")
        mine = OWNERS / self.sid
        if not mine.exists():
            OWNERS.mkdir(parents=True, exist_ok=True)
            mine.write_text(json.dumps({"pid": info["pid"], "start": info["start"], "state": str(self.dir)}))

    def teardown(self) -> None:
        errors = []
        try:
            process.terminate_all(list(reversed(self.procs)), grace=2.0)
        except Exception as e:  # keep going: everything else must still be removed
            errors.append(f"{', '.join(p.name for p in self.procs)}: {e}")
        self.procs.clear()
        for ns in reversed(self.namespaces):
            _kill_ns_pids(ns)
            netns.delete(ns)
        self.namespaces.clear()
        errors += _unmount_all(self.dir)
        shutil.rmtree(self.dir, ignore_errors=True)
        (OWNERS / self.sid).unlink(missing_ok=True)
        if errors:
            raise SandboxError("teardown: " + "; ".join(errors))

    # -- processes -------------------------------------------------------------
    def spawn(self, host: Host, name: str, argv: list[str], log: Path, env: Optional[dict] = None) -> Proc:
        p = process.spawn(name, argv, host.ns, log, env=env)
        self.procs.append(p)
        self._write_owner()
        return p

    def forget(self, proc: Proc) -> None:
        if proc in self.procs:
            self.procs.remove(proc)

    def port(self, host: Host, default: int) -> int:
        """The port a service listens on: its default inside a namespace, a free one on loopback."""
        if self.mode == "netns":
            return default
        key = (host.name, default)
        if key not in self._ports:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                self._ports[key] = s.getsockname()[1]
        return self._ports[key]

    @property
    def network_faults(self) -> bool:
        return self.mode == "netns"

    # -- client side -----------------------------------------------------------
    def run_client(self, fn: Callable[[], Awaitable[Any]], timeout: float) -> Any:
        """Run `fn()` on an event loop in a thread that has entered the client namespace.

        The harness itself stays in the root namespace; only this thread's sockets live in
        the client host. A Ctrl-C or SIGTERM in the main thread cancels the coroutine, whose
        `finally` blocks (healing, the last history rows) run before we return.

        Completion is tracked with our own Event, not Thread.is_alive(): when a signal
        handler raises inside Thread.join(), CPython 3.11 marks the still-running thread
        as stopped, and we would exit under it and lose its last rows.
        """
        result: dict[str, Any] = {}
        loop_box: dict[str, Any] = {}
        done = threading.Event()

        def body() -> None:
            try:
                if self.client and self.client.ns:
                    netns.enter(self.client.ns)
                loop = asyncio.new_event_loop()
                loop_box["loop"] = loop
                task = loop.create_task(fn())
                loop_box["task"] = task
                result["value"] = loop.run_until_complete(task)
            except BaseException as e:  # handed to the caller
                result["error"] = e
            finally:
                loop = loop_box.get("loop")
                if loop is not None:
                    loop.close()
                done.set()

        t = threading.Thread(target=body, name="client-ns", daemon=True)
        t.start()
        try:
            if not done.wait(timeout):
                where = self._waiting_in(loop_box)
                self._cancel(loop_box, done)
                raise SandboxError(f"client work did not finish within {timeout:.0f}s; waiting in: {where}")
        except BaseException:
            if not done.is_set():
                self._cancel(loop_box, done)
            raise
        if "error" in result:
            raise result["error"]
        return result.get("value")

    @staticmethod
    def _waiting_in(loop_box: dict) -> str:
        """Where each of the loop's tasks waits (the innermost frames of its await chain),
        asked on the loop's own thread: what a bound that ran out says about the wait it cut."""
        loop, box, asked = loop_box.get("loop"), {}, threading.Event()

        def look() -> None:
            box["where"] = "; ".join(filter(None, (_await_chain(t) for t in asyncio.all_tasks(loop))))
            asked.set()

        try:
            loop.call_soon_threadsafe(look)
        except (AttributeError, RuntimeError):  # no loop, or closed
            return "(no loop)"
        return box.get("where") or "(nothing pending)" if asked.wait(2) else "(the loop does not answer)"

    @staticmethod
    def _cancel(loop_box: dict, done: threading.Event) -> None:
        loop, task = loop_box.get("loop"), loop_box.get("task")
        if loop is not None and task is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:
                pass
        # bounded: the coroutine's own waits (heal, close) are bounded well below this
        done.wait(60)


def _await_chain(task: asyncio.Task, keep: int = 3) -> str:
    """A pending task's await chain, outermost first, as its last `keep` frames
    (`file:line function`)."""
    frames, c = [], task.get_coro()
    while c is not None and getattr(c, "cr_frame", None) is not None:
        f = c.cr_frame
        frames.append(f"{Path(f.f_code.co_filename).name}:{f.f_lineno} {f.f_code.co_name}")
        c = getattr(c, "cr_await", None)
    return " > ".join(frames[-keep:])


def _kill_ns_pids(ns: str) -> None:
    """Kill whatever still runs inside one of *our* namespaces (they are ours by construction)."""
    import signal

    for pid in netns.pids(ns):
        if netns.pid_inode(pid) == _safe_inode(ns):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 5
    while netns.pids(ns) and time.monotonic() < deadline:
        time.sleep(0.05)


def _unmount_all(root: Path) -> list[str]:
    errors = []
    for where in mounts.mounted_under(root):
        try:
            mounts.unmount(where)
        except mounts.MountError as e:
            errors.append(str(e))
    return errors


def _safe_inode(ns: str) -> Optional[int]:
    try:
        return netns.inode(ns)
    except OSError:
        return None


def _running_elsewhere() -> set[str]:
    """The sessions of the machine-wide registry whose owner still runs (any state root);
    the entries of those that do not are removed."""
    live = set()
    for f in sorted(OWNERS.iterdir()) if OWNERS.is_dir() else []:
        try:
            info = json.loads(f.read_text())
            alive = info.get("start") is not None and _proc_start_time(info["pid"]) == info["start"]
        except (OSError, ValueError, KeyError, TypeError):
            alive = False
        if alive:
            live.add(f.name)
        else:
            f.unlink(missing_ok=True)
    return live


def _owner(d: Path) -> tuple[bool, dict]:
    """Whether the session directory's owner still runs, and what its owner.json holds."""
    try:
        info = json.loads((d / "owner.json").read_text())
    except (OSError, ValueError):
        return False, {}
    try:
        return info.get("start") is not None and _proc_start_time(info["pid"]) == info["start"], info
    except (KeyError, AttributeError):
        return False, info


def _clean_session(d: Path, info) -> list[str]:
    """A dead session's processes killed (ours: pid and start time match), its mounts undone,
    its state directory removed; one line per thing removed."""
    removed: list[str] = []
    killed = []
    for p in info.get("procs", []) if isinstance(info, dict) else []:
        if p.get("start") and _proc_start_time(p["pid"]) == p["start"]:
            try:
                os.kill(p["pid"], 9)
                killed.append(p)
                removed.append(f"process {p['pid']} ({p.get('exe')})")
            except ProcessLookupError:
                pass
    # gone before the namespaces go (a broker still dying holds its sockets open)
    deadline = time.monotonic() + 10
    while any(_running(p["pid"], p["start"]) for p in killed) and time.monotonic() < deadline:
        time.sleep(0.05)
    # a data directory on a killed power-off layer: still mounted, answering nothing
    for where in mounts.mounted_under(d):
        removed.append(f"mount {where}")
    for e in _unmount_all(d):
        removed.append(f"error: {e}")
    shutil.rmtree(d, ignore_errors=True)
    removed.append(f"state {d}")
    return removed


def clean(all_sessions: bool = False) -> list[str]:
    """Remove leftovers of sessions whose owner died (or of every session with `all_sessions`).

    Returns one line per thing removed.
    """
    removed: list[str] = []
    live: set[str] = set()
    if STATE_ROOT.is_dir():
        for d in sorted(STATE_ROOT.iterdir()):
            alive, info = _owner(d)
            if alive and not all_sessions:
                live.add(d.name)
                continue
            removed += _clean_session(d, info)
    if not all_sessions:
        live |= _running_elsewhere()
    for ns in netns.list_all():
        if not ns.startswith(netns.PREFIX):
            continue
        sid = ns[len(netns.PREFIX):].split("-", 1)[0]
        if sid in live:
            continue
        n = len(netns.pids(ns))
        _kill_ns_pids(ns)
        netns.delete(ns)
        removed.append(f"namespace {ns}" + (f" ({n} processes killed)" if n else ""))
    return removed
