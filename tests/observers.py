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
