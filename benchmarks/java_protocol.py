"""The harness's side of the Java clients' protocol, per message: a delivered send answered
as a text line or as a record of a binary block (docs/java-clients.md).

    .venv/bin/python benchmarks/java_protocol.py [--messages 200000] [--rounds 3]

No JVM and no broker: `jclient.Handle` drives a small Python child that answers every send
at once, gathering its answers until the harness's next `flush` as the bridges' writer
thread gathers them: one side in text lines (`d <id> <partition> <offset>`, the format
before 2026-12-08), the other in binary blocks. Measured: this process's CPU per message
(all its threads: the sends' lines, the reader thread's parsing, the callbacks run by
`poll`, a Kafka-style `<partition>:<offset>` made from each answer), not the child's.
Prints one JSON line: each round's µs per message, text and binary alternated.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from brokerchaos.systems import jclient

_HEAD = textwrap.dedent("""
    import struct, sys
    out, recs = sys.stdout.buffer, []
    print("ready\\t1", flush=True)
    for line in sys.stdin.buffer:
        f = line.rstrip(b"\\n").split(b"\\t")
        if f[0] == b"x":
            break
""")
TEXT = _HEAD + textwrap.indent(textwrap.dedent("""
    if f[0] == b"s":
        out.write(b"d\\t%s\\t0\\t%d\\n" % (f[1], int(f[1]) + 99))
    else:
        out.write(b"r\\t%s\\tok\\n" % f[1])
        out.flush()
"""), "    ")
BINARY = _HEAD + textwrap.indent(textwrap.dedent("""
    if f[0] == b"s":
        recs.append(struct.pack("<3q", int(f[1]), 0, int(f[1]) + 99))
    else:
        out.write(b"B\\x02" + struct.pack("<i", len(recs)) + b"".join(recs))
        recs.clear()
        out.write(b"r\\t%s\\tok\\n" % f[1])
        out.flush()
"""), "    ")


def one(code: str, n: int, log: Path) -> float:
    """µs of this process's CPU per message, `n` sends through a Handle answered by `code`."""
    jclient.classpath = lambda s, m: ""
    jclient.jvm.argv = lambda cp, main, heap, *a, props=None: [sys.executable, "-c", code]
    h = jclient.Handle("x.Main", "set", [], {}, log)
    got = [0]

    def delivered(err, w) -> None:
        assert err is None
        f"{w.partition()}:{w.offset()}"  # what the Kafka driver records from it
        got[0] += 1

    c0 = time.process_time()
    for i in range(n):
        h.produce("t", b"p1:%d" % i, delivered)
        if i % 1000 == 999:  # the answers gathered so far written, as the bridge's writer does
            h.flush(10)
            h.poll(0)
    h.flush(30)
    deadline = time.monotonic() + 60
    while got[0] < n and time.monotonic() < deadline:
        h.poll(0)
        time.sleep(0.001)
    cpu = time.process_time() - c0
    h.close()
    if got[0] != n:
        raise SystemExit(f"{got[0]} of {n} answers came back")
    return cpu * 1e6 / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    out: dict = {"text": [], "binary": []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(a.rounds):
            out["text"].append(round(one(TEXT, a.messages, Path(tmp) / "t.log"), 2))
            out["binary"].append(round(one(BINARY, a.messages, Path(tmp) / "b.log"), 2))
    print(json.dumps({"messages": a.messages, "us_per_msg": out,
                      "median": {k: statistics.median(v) for k, v in out.items()}}))


if __name__ == "__main__":
    main()
