"""What the Java clients' line protocol costs (docs/java-clients.md): the same write phase
recorded through each library, on the same cluster settings.

    sudo .venv/bin/python benchmarks/java_clients.py [--messages 50000] [--rate 0] [--out /tmp/bc-bench-java]
        [--case kafka ...]

For each case (Kafka 3.9: librdkafka, java; Pulsar 4.0: cpp, java; Kafka and Pulsar in
transactions of 10 through the Java client) one run of `brokerchaos run` as a user runs it:
no fault, `--messages`, no rate limit unless `--rate` (the write as fast as the recorded
producer goes, in_flight 10,000). The rate is acks ÷ (last ack − first send) from the
run's own history; the rows are one JSON line per case.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pyarrow.dataset as ds

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

from brokerchaos import validation as sc  # noqa: E402
from brokerchaos.runner import Session  # noqa: E402
from observers import Quiet  # noqa: E402

CASES = [
    ("kafka", "scenarios/kafka-acksall-kill-leader.yaml", ["client=librdkafka"], {}),
    ("kafka", "scenarios/kafka-acksall-kill-leader.yaml", ["client=java"], {}),
    ("pulsar", "scenarios/pulsar-kill-broker.yaml", ["client=cpp"], {}),
    ("pulsar", "scenarios/pulsar-kill-broker.yaml", ["client=java"], {}),
    ("kafka-txn", "scenarios/kafka-txn-kill-coordinator.yaml", ["client=librdkafka"], {}),
    ("kafka-txn", "scenarios/kafka-txn-kill-coordinator.yaml", ["client=java"], {}),
    ("pulsar-txn", "scenarios/pulsar-txn-kill-owner.yaml", ["client=java"], {}),
]


def rate(run_dir: Path) -> tuple[int, float]:
    rows = ds.dataset(str(run_dir / "history"), format="parquet").to_table(
        columns=["client", "type", "t_ns"]).to_pylist()
    mine = [r for r in rows if r["client"] == "p1"]
    sends = [r["t_ns"] for r in mine if r["type"] == "send"]
    acks = [r["t_ns"] for r in mine if r["type"] == "ack"]
    return len(acks), len(acks) / ((max(acks) - min(sends)) / 1e9)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--txn-messages", type=int, default=10_000)
    ap.add_argument("--rate", type=float, default=0)
    ap.add_argument("--out", default="/tmp/bc-bench-java")
    ap.add_argument("--case", action="append", help="only these cases (kafka, pulsar, kafka-txn, pulsar-txn)")
    a = ap.parse_args()
    for name, scenario, option, _ in CASES:
        if a.case and name not in a.case:
            continue
        txn = name.endswith("-txn")
        flags = {"runs": 1, "name": f"bench-{name}-{option[0].split('=')[1]}", "fault": "none", "option": option,
                 "messages": a.txn_messages if txn else a.messages, "in_flight": 10_000, "after_acks": 1}
        s = sc.load(scenario, flags)
        s.workload.rate = a.rate or None
        result = Session(s, Path(a.out), observer=Quiet(), report=False).run()
        acks, per_s = rate(result.dir / "run-001")
        print(json.dumps({"case": name, "client": option[0].split("=")[1], "acked": acks, "msg_per_s": round(per_s),
                          "result": result.verdicts[0]["result"]}), flush=True)


if __name__ == "__main__":
    main()
