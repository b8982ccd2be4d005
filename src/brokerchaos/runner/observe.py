"""Who watches a session: its console lines and progress, the tests' hook before a fault,
and SIGTERM turned into an exception so that every `finally` (heal, teardown) runs."""
from __future__ import annotations

import sys
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


def terminal_bars():
    """Bars on a terminal (a maintained library's: tqdm), plain lines otherwise."""
    if not (sys.stdout.isatty() and sys.stderr.isatty()):
        return None
    from tqdm import tqdm

    class Bars(Observer):
        """A bar for the session's runs and one for the current run's messages, on stderr;
        every line the session prints goes above them (tqdm.write), as it would without."""

        def __init__(self) -> None:
            self.bars: dict[str, tqdm] = {}

        def line(self, text: str) -> None:
            tqdm.write(text, file=sys.stdout)

        def progress(self, kind: str, done: int, total: int, label: str = "") -> None:
            if kind == "runs":
                self._drop("messages")  # a run starts or ends: its messages' bar goes
            bar = self.bars.get(kind)
            if bar is None or bar.total != total or done < bar.n:
                self._drop(kind)
                bar = self.bars[kind] = tqdm(total=total, desc=kind, unit="run" if kind == "runs" else "msg",
                                             position=0 if kind == "runs" else 1, leave=False, file=sys.stderr,
                                             dynamic_ncols=True)
            bar.n = done
            if label:
                bar.set_postfix_str(label, refresh=False)
            bar.refresh()

        def _drop(self, kind: str) -> None:
            bar = self.bars.pop(kind, None)
            if bar is not None:
                bar.close()

        def close(self) -> None:
            for kind in list(self.bars):
                self._drop(kind)

    return Bars()
