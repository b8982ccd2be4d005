"""The transactions' verdicts (format 1.7) on small recorded histories whose answers are
known: a positive and a negative control for each, Spark and the oracle alike."""
import oracle
from histories import H

from brokerchaos.analysis import policy
from brokerchaos.report import console

KEYS = ("txns", "txns_committed", "txns_aborted", "txns_unknown", "aborted_reads", "torn_txns", "offset_conflicts",
        "nonmonotonic_reads", "acked_missing", "received_after_nack", "result")


def _both(spark_analyze, h: H, tmp_path) -> dict:
    return oracle.agreed(spark_analyze, h.rows, tmp_path, KEYS)


def _txns(h: H, outcomes: list[str], size: int = 3, producer: str = "p1") -> H:
    """Transactions of `size` messages (1.., in order), each ended as `outcomes` says: every
    message sent, then its transaction's outcome on one row each, at its offset."""
    v = 0
    for k, kind in enumerate(outcomes, 1):
        values = range(v + 1, v + size + 1)
        for x in values:
            h.ev(producer, "send", producer, x)
        for x in values:
            detail = "aborted: on purpose" if kind == "nack" else None
            h.ev(producer, kind, producer, x, offset=None if kind == "unknown" else f"0:{x - 1}", detail=detail,
                 txn=k)
        v += size
    return h


def _read(h: H, values, offsets=None) -> H:
    for x in values:
        h.ev("c1", "recv", "p1", x, offset=f"0:{(offsets or {}).get(x, x - 1)}")
    return h.ev("c1", "read_end", detail="complete")


def test_committed_transactions_read_whole_and_aborted_ones_unread_pass(spark_analyze, tmp_path):
    h = _read(_txns(H(), ["ack", "nack", "ack", "unknown"]), [1, 2, 3, 7, 8, 9])
    v = _both(spark_analyze, h, tmp_path)
    assert (v["txns"], v["txns_committed"], v["txns_aborted"], v["txns_unknown"]) == (4, 2, 1, 1), v
    assert v["aborted_reads"] == v["torn_txns"] == v["offset_conflicts"] == 0 and v["result"] == "pass", v
    assert {c.name: c.judge(v) for c in policy.CHECKS if c.scope is policy.TXN} == {
        "aborted reads": "pass", "torn transactions": "pass", "offset conflicts": "pass",
        "nonmonotonic reads": "pass", "interleaved transactions": "pass"}


def test_a_message_of_an_aborted_transaction_read_is_an_aborted_read(spark_analyze, tmp_path):
    h = _read(_txns(H(), ["ack", "nack"]), [1, 2, 3, 5])
    v = _both(spark_analyze, h, tmp_path)
    assert v["aborted_reads"] == 1 and v["received_after_nack"] == 1 and v["result"] == "fail", v
    assert policy.BY_NAME["aborted reads"].judge(v) == "fail"


def test_a_committed_transaction_read_in_part_is_torn(spark_analyze, tmp_path):
    h = _read(_txns(H(), ["ack", "ack"]), [1, 2, 3, 4, 6])
    v = _both(spark_analyze, h, tmp_path)
    assert v["torn_txns"] == 1 and v["acked_missing"] == 1 and v["result"] == "fail", v
    assert policy.BY_NAME["torn transactions"].judge(v) == "fail"
    block = console.run_block(v)  # the run's block shows its transactions' checks
    assert "Torn transactions:" in block and "1 (fail)" in block.split("Torn transactions:")[1].split("\n")[0], block
    assert "Exactly-once loss" not in block, block  # no output read: outside those checks
    # a committed transaction not read at all is lost, not torn
    h = _read(_txns(H(), ["ack", "ack"]), [1, 2, 3])
    v = _both(spark_analyze, h, tmp_path / "2")
    assert v["torn_txns"] == 0 and v["acked_missing"] == 3, v
    # in a read that did not finish, a part read is not yet proof of a torn one
    h = _txns(H(), ["ack"]).ev("c1", "recv", "p1", 1, offset="0:0").ev("c1", "read_end", detail="incomplete: gone")
    v = _both(spark_analyze, h, tmp_path / "3")
    assert v["torn_txns"] == 1 and policy.BY_NAME["torn transactions"].judge(v) == "undecided", v


def test_two_messages_at_one_offset_are_an_offset_conflict(spark_analyze, tmp_path):
    # 4 was reported at 0:3 and read there; 5 was read at 0:3 too
    h = _read(_txns(H(), ["ack", "ack"]), [1, 2, 3, 4, 5, 6], offsets={5: 3})
    v = _both(spark_analyze, h, tmp_path)
    assert v["offset_conflicts"] == 1 and v["result"] == "fail", v
    assert policy.BY_NAME["offset conflicts"].judge(v) == "fail"


def test_a_run_without_transactions_is_outside_their_checks(spark_analyze, tmp_path):
    h = _read(H().sent_acked(range(1, 4)), [1, 2, 3], offsets={1: 0, 2: 0})
    v = _both(spark_analyze, h, tmp_path)
    assert v["txns"] == 0 and v["offset_conflicts"] == 0, v
    assert {policy.BY_NAME[n].judge(v) for n in ("aborted reads", "torn transactions", "offset conflicts")} == {"n/a"}


def test_a_reader_going_back_in_a_partition_is_a_nonmonotonic_read(spark_analyze, tmp_path):
    # c1 reads 1, 2, 3 of partition 0 in order, then offset 1 again and 2 of partition 1;
    # c2 reads partition 0 from its start on its own: only c1's step back counts
    h = _txns(H(), ["ack", "ack"])
    for x in (1, 2, 3):
        h.ev("c1", "recv", "p1", x, offset=f"0:{x - 1}")
    h.ev("c1", "recv", "p1", 2, offset="0:1")
    h.ev("c1", "recv", "p1", 4, offset="1:0")
    for x in (1, 2, 3, 4, 5, 6):
        h.ev("c2", "recv", "p1", x, offset=f"0:{x - 1}")
    h.ev("c1", "read_end", detail="complete").ev("c2", "read_end", detail="complete")
    v = _both(spark_analyze, h, tmp_path)
    assert v["nonmonotonic_reads"] == 1 and v["result"] == "fail", v
    assert policy.BY_NAME["nonmonotonic reads"].judge(v) == policy.FAIL


def test_reads_moving_forward_in_each_partition_are_monotonic(spark_analyze, tmp_path):
    h = _read(_txns(H(), ["ack", "ack"]), [1, 2, 3, 4, 5, 6])
    v = _both(spark_analyze, h, tmp_path)
    assert v["nonmonotonic_reads"] == 0 and v["result"] == "pass", v


EOS = ("eos_outputs", "eos_recv_rows", "eos_duplicates", "eos_missing", "eos_nacked", "eos_read_complete",
       "group_read_complete", "group_skips", "offset_conflicts", "result")


def _ctp(h: H, processed, output, end="complete") -> H:
    """A consume-transform-produce group g1 (commit: transaction): its member processed
    `processed`; the end read of its output (client g1-out) found `output`, in that order."""
    h.member("g1-m1").processed("g1-m1", processed).ev("g1-m1", "read_end", detail="complete", group="g1")
    h.ev("g1-out", "subscribe", detail="output", group="g1")
    for i, x in enumerate(output):
        h.ev("g1-out", "recv", "p1", x, offset=f"0:{i}")  # the output's own offsets: no conflict with the input's
    return h.ev("g1-out", "read_end", detail=end) if end else h


def _eos(spark_analyze, output, tmp_path, end="complete") -> dict:
    read = [1, 2, 3, 7, 8, 9]  # the committed transactions; 4..6 aborted
    h = _ctp(_read(_txns(H(), ["ack", "nack", "ack"]), read), read, output, end)
    return oracle.agreed(spark_analyze, h.rows, tmp_path, EOS)


def test_an_output_holding_each_committed_message_once_passes_exactly_once(spark_analyze, tmp_path):
    v = _eos(spark_analyze, [1, 2, 3, 7, 8, 9], tmp_path)
    assert (v["eos_outputs"], v["eos_recv_rows"], v["eos_duplicates"], v["eos_missing"], v["eos_nacked"]) == \
        (1, 6, 0, 0, 0), v
    assert v["eos_read_complete"] is True and v["offset_conflicts"] == 0 and v["result"] == "pass", v
    assert {c.name: c.judge(v) for c in policy.CHECKS if c.scope is policy.EOS} == {
        "exactly-once duplicates": "pass", "exactly-once loss": "pass", "exactly-once nacked": "pass"}


def test_a_message_twice_in_the_output_is_an_exactly_once_duplicate(spark_analyze, tmp_path):
    v = _eos(spark_analyze, [1, 2, 3, 3, 7, 8, 9], tmp_path)
    assert v["eos_duplicates"] == 1 and v["eos_recv_rows"] == 7 and v["result"] == "fail", v
    assert policy.BY_NAME["exactly-once duplicates"].judge(v) == "fail"
    assert "Exactly-once duplicates: 1 (fail)" in " ".join(console.run_block(v).split()), console.run_block(v)
    # seen: proof even in an output read that did not finish
    v = _eos(spark_analyze, [1, 1], tmp_path / "2", end="incomplete: no progress")
    assert v["eos_duplicates"] == 1 and policy.BY_NAME["exactly-once duplicates"].judge(v) == "fail", v


def _stored_twice() -> H:
    h = H().sent_acked([1, 2, 3])
    for i, x in enumerate([1, 2, 2, 3]):
        h.ev("c1", "recv", "p1", x, offset=f"0:{i}")
    return h.ev("c1", "read_end", detail="complete")


def test_a_message_stored_twice_in_the_input_may_be_copied_twice(spark_analyze, tmp_path):
    # a plain producer's resend stored 2 at two offsets: its two copies are two records
    v = oracle.agreed(spark_analyze, _ctp(_stored_twice(), [1, 2, 2, 3], [1, 2, 2, 3]).rows, tmp_path, EOS)
    assert v["eos_duplicates"] == 0 and v["eos_recv_rows"] == 4 and v["result"] == "pass", v
    # a third copy is one too many
    v = oracle.agreed(spark_analyze, _ctp(_stored_twice(), [1, 2, 2, 3], [1, 2, 2, 2, 3]).rows, tmp_path / "2", EOS)
    assert v["eos_duplicates"] == 1 and v["result"] == "fail", v


def test_an_acked_message_missing_from_the_output_is_exactly_once_loss(spark_analyze, tmp_path):
    v = _eos(spark_analyze, [1, 2, 3, 7, 8], tmp_path)
    assert v["eos_missing"] == 1 and v["result"] == "fail", v
    assert policy.BY_NAME["exactly-once loss"].judge(v) == "fail"
    # an output read that did not finish proves no loss, and no pass
    v = _eos(spark_analyze, [1, 2, 3], tmp_path / "2", end="incomplete: no progress")
    assert v["eos_missing"] == 3 and v["eos_read_complete"] is False and v["result"] == "unknown", v
    assert policy.BY_NAME["exactly-once loss"].judge(v) == "undecided"


def test_an_aborted_message_in_the_output_is_exactly_once_nacked(spark_analyze, tmp_path):
    v = _eos(spark_analyze, [1, 2, 3, 5, 7, 8, 9], tmp_path)
    assert v["eos_nacked"] == 1 and v["eos_duplicates"] == v["eos_missing"] == 0 and v["result"] == "fail", v
    assert policy.BY_NAME["exactly-once nacked"].judge(v) == "fail"


def test_a_run_without_an_output_read_is_outside_the_exactly_once_checks(spark_analyze, tmp_path):
    h = _read(_txns(H(), ["ack"]), [1, 2, 3])
    v = oracle.agreed(spark_analyze, h.rows, tmp_path, EOS)
    assert v["eos_outputs"] == 0 and v["eos_read_complete"] is None, v
    assert {c.judge(v) for c in policy.CHECKS if c.scope is policy.EOS} == {"n/a"}


def test_a_transaction_read_after_a_later_one_of_its_producer_in_the_partition_is_interleaved(spark_analyze,
                                                                                           tmp_path):
    # transactions 1 (1..3) and 2 (4..6): 3 read after 4 in partition 0
    h = _read(_txns(H(), ["ack", "ack"]), [1, 2, 4, 3, 5, 6], offsets={4: 2, 3: 3})
    v = oracle.agreed(spark_analyze, h.rows, tmp_path, KEYS + ("interleaved_txns",))
    assert v["interleaved_txns"] == 1 and v["nonmonotonic_reads"] == 0 and v["result"] == "fail", v
    assert policy.BY_NAME["interleaved transactions"].judge(v) == "fail"


def test_transactions_read_in_order_per_partition_are_not_interleaved(spark_analyze, tmp_path):
    # transaction 2 in partition 1 read before transaction 1 in partition 0: partitions are
    # read in any order; and another producer's transactions mix with p1's freely
    h = _txns(_txns(H(), ["ack", "ack"]), ["ack"], producer="p2")
    for p, x, off in [("p1", 4, "1:0"), ("p1", 5, "1:1"), ("p1", 6, "1:2"), ("p2", 1, "0:9"), ("p1", 1, "0:0"),
                      ("p2", 2, "0:10"), ("p1", 2, "0:1"), ("p1", 3, "0:2"), ("p2", 3, "0:11")]:
        h.ev("c1", "recv", p, x, offset=off)
    h.ev("c1", "read_end", detail="complete")
    v = oracle.agreed(spark_analyze, h.rows, tmp_path, KEYS + ("interleaved_txns",))
    assert v["interleaved_txns"] == 0 and v["txns"] == 3, v
    assert policy.BY_NAME["interleaved transactions"].judge(v) == "pass", v
