"""Observers for integration tests."""
from brokerchaos.runner import Observer


class Quiet(Observer):
    """Keeps a session's console lines out of the test output."""

    def line(self, text):
        pass
