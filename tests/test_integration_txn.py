"""Transactions on Apache Kafka for real (format 1.7): a transactional producer through
librdkafka, its transaction coordinator killed mid-write (the negative control: nothing
aborted read, nothing torn, no offset holding two messages), and the same producer read
read_uncommitted (the positive control: the aborted transactions' messages are read)."""
import os

import pyarrow.dataset as ds
import pytest

from brokerchaos import validation as sc
from brokerchaos.runner import Session
from observers import Quiet

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
]


def _run(tmp_path, name: str, **flags):
    s = sc.load("scenarios/kafka-txn-kill-coordinator.yaml", {"runs": 1, "name": name, **flags})
    result = Session(s, tmp_path, observer=Quiet(), report=False).run()
    (v,) = result.verdicts
    return v, result.metas["run-001"], result


def _outcomes(result):
    rows = ds.dataset(str(result.dir / "run-001" / "history"), format="parquet").to_table(
        columns=["client", "type", "value", "offset", "detail", "txn"]).to_pylist()
    return [r for r in rows if r["client"] == "p1" and r["type"] in ("ack", "nack", "unknown")]


def test_a_killed_transaction_coordinator_aborts_reads_nothing_and_tears_nothing(tmp_path, spark):
    v, meta, result = _run(tmp_path, "it-txn-kill-coordinator", messages=8000)
    assert meta["fault"]["nodes"] and meta["fault"]["nodes"][0] in ("n1", "n2", "n3"), meta["fault"]
    assert v["txns"] >= 790 and v["txns_committed"] > 0 and v["txns_aborted"] > 0, v
    # about one in five aborted on purpose, and each of their messages a nack naming it
    rows = _outcomes(result)
    purpose = {r["txn"] for r in rows if r["type"] == "nack" and r["detail"].startswith("aborted: on purpose")}
    assert 0.1 < len(purpose) / v["txns"] < 0.3, (len(purpose), v["txns"])
    assert all(r["txn"] is not None for r in rows if r["detail"] != "no answer within ack_timeout"), rows[:3]
    assert v["read_complete"] is True, v["read_status"]
    assert v["aborted_reads"] == 0 and v["torn_txns"] == 0 and v["offset_conflicts"] == 0, v
    assert v["acked_missing"] == 0 and v["result"] == "pass", v


def test_read_uncommitted_reads_the_aborted_transactions(tmp_path, spark):
    v, _, result = _run(tmp_path, "it-txn-read-uncommitted", messages=3000, option=["isolation=read_uncommitted"],
                        fault="none", after_acks=1000)
    rows = _outcomes(result)
    aborted = {r["value"] for r in rows if r["type"] == "nack"}
    assert aborted and v["txns_aborted"] > 0, v
    # every aborted message is in the log, marked aborted: a read_uncommitted read gets it
    assert v["aborted_reads"] == len(aborted) and v["result"] == "fail", v
    assert v["torn_txns"] == 0 and v["offset_conflicts"] == 0 and v["acked_missing"] == 0, v
