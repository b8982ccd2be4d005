"""The recording's own cost per message: the producer loop against a client that costs nothing.

    .venv/bin/python benchmarks/producer_floor.py [--messages 200000] [--rounds 5] [--in-flight 10000]
                                                  [--batch 256] [--profile]

No broker: the client answers every send itself, in bursts as a library's poll hands them
over (`--batch` sends answered per burst, from a poller on the event loop, as confluent-kafka's
`poll()` calls back). What is measured is therefore only what the harness adds to a
library's own loop: the in-flight bound, the accounting, the ack-timeout queue, the payload,
the two history rows a message (Parquet written as in a run), and the event loop's steps.

Prints one JSON line: CPU µs per message (the process's, all threads) and msg/s, best and
median of the rounds. With `--profile`, one more round under cProfile, its top functions
to stderr (they say where the time goes, never how fast: cProfile doubles it).

This is the floor a recorded producer cannot go below on one core: a recorded producer's
CPU per message is this plus its client library's, and `benchmarks/producer.py` compares
it with the library's bare loop (BENCHMARKS.md).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from brokerchaos.history import Recorder  # noqa: E402
from brokerchaos.scenario import WorkloadSpec  # noqa: E402
from brokerchaos.workload.producer import ProducerLoop  # noqa: E402


class AtOnce:
    """A client whose every send is acked by its poller's next burst (offsets as Kafka's)."""

    def __init__(self, batch: int) -> None:
        self.batch = batch
        self.queued: list[int] = []
        self.on_outcome = None
        self.on_event = None
        self.poller = None
        self.offset = 0

    async def open(self, on_outcome) -> None:
        self.on_outcome = on_outcome
        self.poller = asyncio.create_task(self._poll())

    def node(self) -> str:
        return "n1"

    async def send(self, value: int, payload: bytes) -> None:
        self.queued.append(value)

    def send_now(self, value: int, payload: bytes) -> bool:
        self.queued.append(value)
        return True

    async def _poll(self) -> None:
        while True:
            self.answer()
            await asyncio.sleep(0)

    def answer(self) -> None:
        done, self.queued = self.queued[:self.batch], self.queued[self.batch:]
        for v in done:
            self.offset += 1
            self.on_outcome(v, "ack", f"0:{self.offset}", "n1", None)

    async def close(self) -> None:
        self.poller.cancel()
        await asyncio.gather(self.poller, return_exceptions=True)
        while self.queued:
            self.answer()


def one_round(spec: WorkloadSpec, batch: int, out: Path, k: int, profile: bool = False) -> tuple[float, float]:
    rec = Recorder(out / f"round-{k}", f"round-{k}", "p1", time.monotonic_ns())
    loop = ProducerLoop("p1", AtOnce(batch), rec, spec)
    prof = None
    if profile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    c0, t0 = time.process_time(), time.perf_counter()
    asyncio.run(loop.run(time.monotonic() + 600))
    rec.close()
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    if prof is not None:
        import pstats

        prof.disable()
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(20)
    if loop.acct.pos != spec.messages:
        raise SystemExit(f"round {k}: {loop.acct.pos} of {spec.messages} acked")
    return cpu * 1e6 / spec.messages, spec.messages / wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--in-flight", type=int, default=10_000)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args()
    spec = WorkloadSpec(messages=a.messages, in_flight=a.in_flight)
    with tempfile.TemporaryDirectory(prefix="bc-floor-") as tmp:
        got = [one_round(spec, a.batch, Path(tmp), k) for k in range(a.rounds)]
        if a.profile:
            one_round(spec, a.batch, Path(tmp), a.rounds, profile=True)
    cpu, rate = [g[0] for g in got], [g[1] for g in got]
    print(json.dumps({"messages": a.messages, "in_flight": a.in_flight, "batch": a.batch,
                      "cpu_us_per_msg": {"best": round(min(cpu), 2), "median": round(statistics.median(cpu), 2)},
                      "msgs_per_s": {"best": round(max(rate)), "median": round(statistics.median(rate))}}))


if __name__ == "__main__":
    main()
