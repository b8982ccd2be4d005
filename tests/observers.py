"""Observers and helpers for integration tests."""
import asyncio
import contextlib
import os
import signal
import socket
import time

from brokerchaos.runner import Observer
from brokerchaos.sandbox import Sandbox


class Quiet(Observer):
    """Keeps a session's console lines out of the test output."""

    def line(self, text):
        pass


@contextlib.contextmanager
def started(system_cls, scenario, hosts, logdir):
    """A system's cluster started in a fresh sandbox, for tests that drive its clients
    directly: yields (sandbox, deployment); stops the cluster and the sandbox whatever happens."""
    from brokerchaos.systems import Deployment

    with Sandbox(hosts, "netns") as sb:
        dep = Deployment(system_cls, scenario, sb, "run-001", logdir)
        try:
            dep.cluster.start()
            yield sb, dep
        finally:
            dep.stop()


async def until(cond, timeout):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.05)


def free_port() -> int:
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


def kill_ours(pid: int, exe_prefix: str) -> None:
    """SIGKILL a process a test started, after checking it still runs what it started."""
    try:
        exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        return
    if exe.startswith(exe_prefix):
        os.kill(pid, signal.SIGKILL)


def client_events(run_dir) -> list[tuple[str, str, float]]:
    """A run's disconnect/reconnect rows: (type, node, ms after the first fault row), in time
    order. A graceful stop's disconnect comes before that row, which is written once the
    node is down."""
    import pyarrow.dataset as ds

    rows = ds.dataset(str(run_dir / "history")).to_table(columns=["type", "node", "t_ns"]).to_pylist()
    t0 = min(r["t_ns"] for r in rows if r["type"] == "fault")
    return [(r["type"], r["node"], (r["t_ns"] - t0) / 1e6) for r in sorted(rows, key=lambda r: r["t_ns"])
            if r["type"] in ("disconnect", "reconnect")]


# -- clusters started by hand, as docs/external.md walks a user through them -----------------

DOCS_EXTERNAL = __import__("pathlib").Path(__file__).resolve().parents[1] / "docs" / "external"


def by_hand(tmp_path, name: str, edit=None):
    """The docs' directory `docs/external/<name>` copied to tmp_path, its cluster file
    changed by `edit(doc)` if given, its ports checked free, then started with its own
    up.sh, as the docs say. Returns the copy's directory; stop_by_hand() ends it."""
    import shutil
    import subprocess

    import yaml

    d = tmp_path / name
    shutil.copytree(DOCS_EXTERNAL / name, d)
    f = d / "cluster.yaml"
    doc = yaml.safe_load(f.read_text())
    if edit is not None:
        edit(doc)
        f.write_text(yaml.safe_dump(doc))
    ports = [int(a.rpartition(":")[2]) for n in doc["nodes"].values()
             for a in [n["address"], *n.get("services", {}).values()]]
    busy = []
    for p in ports:
        with socket.socket() as so:
            if so.connect_ex(("127.0.0.1", p)) == 0:
                busy.append(p)
    assert not busy, f"ports {busy} of docs/external/{name} are in use (a cluster left by an earlier test?)"
    env = {**os.environ, "PATH": os.environ.get("PATH", "") + ":/usr/sbin:/usr/bin"}
    subprocess.run([str(d / "up.sh")], check=True, timeout=30, env=env, capture_output=True)
    return d


def stop_by_hand(d, exe_prefix: str) -> None:
    """SIGKILL every process whose pid the directory kept (checked to be what it started)."""
    for pidf in d.glob("*.pid"):
        try:
            kill_ours(int(pidf.read_text()), exe_prefix)
        except ValueError:
            pass


# -- what this test process owns (the suite runs on parallel workers: another worker's
# sandboxes and processes live beside ours and are never ours to count)

def namespaces_of(pid: int) -> list[str]:
    """The namespaces the sandboxes of process `pid` recorded (their owner.json)."""
    import json

    from brokerchaos.sandbox.sandbox import STATE_ROOT

    out = []
    for f in STATE_ROOT.glob("*/owner.json"):
        try:
            info = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if info.get("pid") == pid:
            out += info.get("namespaces") or []
    return out


def namespaces_not_of_others() -> set[str]:
    """Every namespace on the machine but those another live process's sandbox recorded:
    a sandbox records its owner before it adds a namespace and removes the record after."""
    import json

    from brokerchaos.sandbox import netns
    from brokerchaos.sandbox.sandbox import STATE_ROOT

    others = set()
    for f in STATE_ROOT.glob("*/owner.json"):
        try:
            info = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if info.get("pid") != os.getpid():
            others |= set(info.get("namespaces") or [])
            others |= {n for n in netns.list_all() if n.startswith(f"{netns.PREFIX}{f.parent.name}-")}
    return set(netns.list_all()) - others


def descendants(pid: int) -> set[int]:
    """The processes below `pid` (children, their children, …), from /proc."""
    parent = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    parent[int(p)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    out, todo = set(), [pid]
    while todo:
        cur = todo.pop()
        kids = [c for c, pp in parent.items() if pp == cur and c not in out]
        out.update(kids)
        todo += kids
    return out
