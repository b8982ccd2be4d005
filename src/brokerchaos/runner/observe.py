"""Who watches a session: its console lines and progress, the tests' hook before a fault,
and SIGTERM turned into an exception so that every `finally` (heal, teardown) runs."""
from __future__ import annotations

import threading


class Observer:
    """Hooks for callers that want to watch a run (the tests use `before_fault`)."""

    def line(self, text: str) -> None:
        print(text, flush=True)

    async def before_fault(self, deployment, nodes: list[str]) -> None:
        pass

    def progress(self, kind: str, done: int, total: int, label: str = "") -> None:
        """`runs` (finished of the session's) and `messages` (sent of the current run's)."""


class Terminated(BaseException):
    """SIGTERM, turned into an exception so that every `finally` (heal, teardown) runs."""


def _on_sigterm(signum, frame):
    raise Terminated()


def main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def progress_line(producers) -> str:
    """The seeds' progress line over every producer of the run."""
    sent = sum(p.acct.sent for p in producers)
    pos = sum(p.acct.pos for p in producers)
    neg = sum(p.acct.neg for p in producers)
    unk = sum(p.acct.unknown for p in producers)
    return f"Send count: {sent} Ack count: {pos + neg} Pos: {pos} Neg: {neg} Unknown: {unk}"
