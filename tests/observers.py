"""Observers and helpers for integration tests."""
import asyncio
import contextlib
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
    directly: yields (sandbox, system); stops the cluster and the sandbox whatever happens."""
    with Sandbox(hosts, "netns") as sb:
        system = system_cls(scenario, sb, "run-001", logdir)
        try:
            system.start()
            yield sb, system
        finally:
            system.stop()


async def until(cond, timeout):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.05)
