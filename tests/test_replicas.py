"""The replica verdicts (format 1.12) on small recorded histories: each replica's copy read
one by one, against the others and against what was acked; Spark and the oracle agree."""
import pytest

import oracle
from histories import H

from brokerchaos.analysis import policy

pytestmark = pytest.mark.spark
KEYS = ("replica_reads", "replica_reads_complete", "diverged_positions", "diverged_acked", "replicas_diverged",
        "acked_on_no_replica", "result", "acked_missing", "acked_missing_overwritten", "recv_rows", "read_complete")


def _both(spark_analyze, rows, tmp_path):
    """The Spark job's analysis and verdict, once the oracle agrees on KEYS."""
    a = spark_analyze(rows, tmp_path)
    (v,), (o,) = a.verdicts, oracle.analyze(rows)
    assert {k: v[k] for k in KEYS} == {k: o[k] for k in KEYS}
    return a, v


def _copy(h: H, node: str, held: dict[int, int], end: str = "complete") -> H:
    """One replica's copy read: `held` maps an offset to the value stored there."""
    h.ev(f"replica-{node}", "subscribe", node=node, detail="replica")
    for off, v in sorted(held.items()):
        h.ev(f"replica-{node}", "recv", "p1", v, offset=str(off), node=node)
    return h.ev(f"replica-{node}", "read_end", detail=end)


def _restarted_leader() -> H:
    """NATS's restarted leader (docs/findings/nats.md): n1 acked 9 and 10 and was cut off; n2
    and n3 stored 11 and 12 at those positions and acked them; n1 came back keeping its tail."""
    h = H().sent_acked(range(1, 13))
    h.rows = [r if not (r["type"] == "ack" and r["value"] in (11, 12)) else {**r, "offset": str(r["value"] - 2)}
              for r in h.rows]
    h.read([v for v in range(1, 9)] + [11, 12])
    h.rows = [r if not (r["client"] == "c1" and r["value"] in (11, 12)) else {**r, "offset": str(r["value"] - 2)}
              for r in h.rows]
    _copy(h, "n1", {o: o for o in range(1, 11)})
    for n in ("n2", "n3"):
        _copy(h, n, {**{o: o for o in range(1, 9)}, 9: 11, 10: 12})
    return h


def test_a_restarted_leader_s_kept_tail_is_a_divergence_at_its_positions(spark_analyze, tmp_path):
    h = _restarted_leader()
    a, v = _both(spark_analyze, h.rows, tmp_path)
    # the end read (n2's copy) sees 9 and 10 overwritten; the replicas say where and on which node
    assert (v["acked_missing"], v["acked_missing_overwritten"]) == (2, 2)
    assert (v["replica_reads"], v["diverged_positions"], v["diverged_acked"]) == (3, 2, 4)
    assert v["acked_on_no_replica"] == 0 and v["result"] == "fail"
    assert policy.BY_NAME["replicas diverge"].judge(v) == policy.FAIL
    assert policy.BY_NAME["acked on no replica"].judge(v) == policy.PASS
    log = sorted((r["kind"], r["offset"], r["producer"], r["value"], r["nodes"], r["missing_on"])
                 for r in a.divergence.collect())
    assert log == [("acked on some", "10", "p1", 10, "n1", "n2 n3"), ("acked on some", "10", "p1", 12, "n2 n3", "n1"),
                   ("acked on some", "9", "p1", 9, "n1", "n2 n3"), ("acked on some", "9", "p1", 11, "n2 n3", "n1"),
                   ("position", "10", None, None, "n1 p1:10; n2 p1:12; n3 p1:12", None),
                   ("position", "9", None, None, "n1 p1:9; n2 p1:11; n3 p1:11", None)]


def test_copies_that_agree_pass_and_leave_the_end_read_s_figures_as_they_were(spark_analyze, tmp_path):
    plain = H().sent_acked(range(1, 11)).read(range(1, 11))
    v0 = oracle.agreed(spark_analyze, plain.rows, tmp_path / "a", KEYS)
    h = H().sent_acked(range(1, 11)).read(range(1, 11))
    for n in ("n1", "n2", "n3"):
        _copy(h, n, {o: o for o in range(1, 11)})
    v = oracle.agreed(spark_analyze, h.rows, tmp_path / "b", KEYS)
    assert (v["replica_reads"], v["replicas_diverged"], v["acked_on_no_replica"]) == (3, 0, 0)
    assert v["result"] == "pass" and policy.BY_NAME["replicas diverge"].judge(v) == policy.PASS
    same = ("recv_rows", "received", "msgs_with_dups", "acked_missing", "read_complete", "read_status", "jf", "jb")
    assert {k: v[k] for k in same} == {k: v0[k] for k in same}
    # a run without replica reads is outside the checks
    assert v0["replica_reads"] == 0 and policy.BY_NAME["replicas diverge"].judge(v0) == policy.NA


def test_an_acked_message_on_no_replica_fails_only_once_every_copy_was_read_to_its_end(spark_analyze, tmp_path):
    h = H().sent_acked(range(1, 11)).read([v for v in range(1, 11) if v != 5])
    for n in ("n1", "n2"):
        _copy(h, n, {o: o for o in range(1, 11) if o != 5})
    v = oracle.agreed(spark_analyze, h.rows, tmp_path / "a", KEYS)
    assert (v["acked_on_no_replica"], v["replicas_diverged"], v["result"]) == (1, 0, "fail")
    assert "acked on no replica: 1 acked messages on no replica" in " ".join(v["result_why"])
    # one copy's read did not finish: the absence is unproven there (the end read still fails the run)
    h = H().sent_acked(range(1, 11)).read(range(1, 11))
    _copy(h, "n1", {o: o for o in range(1, 11) if o != 5})
    _copy(h, "n2", {o: o for o in range(1, 5)}, end="incomplete: n2 down")
    v = oracle.agreed(spark_analyze, h.rows, tmp_path / "b", KEYS)
    assert v["acked_on_no_replica"] == 1 and v["replica_reads_complete"] is False
    assert policy.BY_NAME["acked on no replica"].judge(v) == policy.UNDECIDED and v["result"] == "unknown"
