"""Spark and the plain-Python oracle must give identical verdicts on any history.

Histories are generated with loss, duplicates, reorders, stowaways, nacks that later
appear, unknowns, late acks, resends, several producers and consumers, several runs,
fault windows with and without heals, complete and incomplete reads, and ties in time.
"""
import dataclasses
import math


from hypothesis import assume, given
from hypothesis import strategies as st

import oracle

from brokerchaos.analysis import metrics
from brokerchaos.analysis.tuning import Tuning

KEYS = [
    "send_count", "pos_ack_count", "neg_ack_count", "unknown_count", "ack_count", "received", "stowaways",
    "acked_missing", "acked_missing_overwritten", "missing", "received_no_ack", "received_after_nack",
    "received_after_unknown", "seed_received_no_ack", "msgs_with_dups", "duplicate_deliveries", "stored_duplicates",
    "msgs_stored_twice", "dups_without_offsets",
    "redeliveries", "jf", "jb", "djf", "djb", "jf0", "out_of_order", "read_complete",
    "recv_rows", "result", "seq_ix", "killed_node", "txm", "rxm", "late_sends",
    "live_consumers", "live_recv_rows", "live_duplicates", "live_redeliveries", "live_read_status",
    "groups", "group_recv_rows", "group_skips", "group_duplicates", "group_dup_stored", "group_dup_handover",
    "group_dup_same", "group_nonmonotonic", "group_commits", "group_commit_failures", "group_commit_backwards",
    "group_read_complete",
    "txns", "txns_committed", "txns_aborted", "txns_unknown", "aborted_reads", "torn_txns", "offset_conflicts",
    "nonmonotonic_reads", "interleaved_txns", "eos_outputs", "eos_recv_rows", "eos_duplicates", "eos_missing",
    "eos_nacked", "eos_read_complete",
    "replica_reads", "replica_reads_complete", "diverged_positions", "diverged_acked", "replicas_diverged",
    "acked_on_no_replica",
]
FLOAT_KEYS = ["max_ack_gap_ms", "max_recv_gap_ms", "max_send_lag_ms", "runtime_s", "txtime_s", "gaptime_s",
              "downtime_s", "tx_downtime_s", "rx_downtime_s"]


@st.composite
def history(draw, read_after_write: bool = False):
    """`read_after_write`: as the seeds' runs, every consumer reads after the producers
    have finished and every ack carries its send time (format 1.4)."""
    rnd = draw(st.randoms(use_true_random=False))
    rows = []
    for run in draw(st.sampled_from([["r1"], ["r1", "r2"], ["alpha", "r7"]])):
        clients: dict[str, list] = {}
        producers = [f"p{i}" for i in range(1, draw(st.integers(1, 3)) + 1)]
        sent = []
        for p in producers:
            evs = clients.setdefault(p, [])
            # a transactional producer (format 1.7): its outcome rows name their transaction
            # (mixed outcomes in one make it committed if any is an ack), nacks keep an offset
            size = draw(st.sampled_from([None, None, 2, 3]))
            for v in range(1, draw(st.integers(0, 25)) + 1):
                sent.append((p, v))
                for _ in range(draw(st.integers(1, 2))):  # a resend is another send row
                    # at a steady rate a send row carries its intended time: this far before it
                    evs.append(("send", p, v, rnd.choice([None, None, 0, 2_000_000, 150_000_000])))
                    outcome = draw(st.sampled_from(["ack", "ack", "ack", "nack", "unknown", None]))
                    # the position an ack names: the message's own (where a read finds it),
                    # another value's (the broker gave it away), or none
                    at = rnd.choice([f"0:{v}", f"0:{v}", f"0:{v + 1}", None])
                    txn = [] if size is None else [{"txn": (v - 1) // size + 1}]
                    if outcome:
                        evs.append((outcome, p, v, at if outcome == "ack" or (txn and outcome == "nack") else None,
                                    *txn))
                    if outcome == "unknown" and draw(st.booleans()):
                        evs.append(("ack", p, v, at, *txn))  # late ack
        for c in [f"c{i}" for i in range(1, draw(st.integers(0, 2)) + 1)]:
            evs = clients.setdefault(c, [])
            if draw(st.integers(0, 3)) == 0:
                evs.append(("subscribe", None, None, "observer"))  # a live consumer that only observes
            pool = sent + [("p1", 999), ("px", 1), (None, None)]
            picks = []
            for _ in range(draw(st.integers(0, 40))):
                if sent and rnd.random() < 0.15:
                    # a stretch read in order, as most real reads are
                    i = int(rnd.random() * len(sent))
                    picks.extend(sent[i:i + 1 + int(rnd.random() * 12)])
                else:
                    picks.append(rnd.choice(pool) if rnd.random() < 0.3 or not sent
                                 else sent[min(len(sent) - 1, int(rnd.random() * len(sent)))])
            # a read of a partitioned topic names the partition of each message (format 1.11)
            parts = draw(st.sampled_from([None, None, ["0"], ["0", "1"]]))
            for p, v in picks:
                # one offset per value (a redelivery), a second one (stored twice), or none; Kafka's
                # form, so that reads out of order are nonmonotonic ones
                off = rnd.choice([f"0:{v}", f"0:{v}", f"1:{v}", None])
                where = [] if parts is None else [{"partition": rnd.choice(parts)}]
                evs.append(("recv", p, v, None if v is None else off, *where))
            end = draw(st.sampled_from(["complete", "complete", "incomplete: gone", None]))
            if end:
                evs.append(("read_end", None, None, end))
        if not read_after_write:
            for gi in range(1, draw(st.integers(0, 2)) + 1):
                _group(draw, rnd, clients, f"g{gi}", sent)
        _replicas(draw, rnd, clients, sent)
        # fault windows, with ids (format 1.1) or without (older histories), their events
        # interleaved so that windows overlap and heal in any order; a window's id rides in
        # `value` here and goes to the `window` column below
        ids = draw(st.booleans())
        windows = []
        for k in range(draw(st.integers(0, 3))):
            w = k + 1 if ids else None
            evs = [("fault", None, w, "kill leader")]
            if draw(st.booleans()):
                evs.append(("heal", None, w, "kill leader (after duration)"))
                if draw(st.booleans()):
                    evs.append(("ready", None, w, "kill leader: cluster whole again"))
            windows.append(evs)
        nem = clients.setdefault("nemesis", [])
        while any(windows):
            nem.append(rnd.choice([w for w in windows if w]).pop(0))
        # interleave clients (each keeps its own order), time strictly non-decreasing
        queues = {c: list(evs) for c, evs in clients.items() if evs}
        seq = {c: 0 for c in queues}
        t = 0
        while queues:
            c = rnd.choice([q for q in sorted(queues) if not (
                read_after_write and q.startswith("c") and any(x.startswith("p") for x in queues))])
            ty, p, v, x, *more = queues[c].pop(0)
            if not queues[c]:
                del queues[c]
            t += rnd.choice([0, 1, 5, 1000, 250_000, 3_000_000])
            seq[c] += 1
            nemesis = ty in ("fault", "heal", "ready")
            rows.append({**dict(run=run, client=c, seq=seq[c], t_ns=t, type=ty, producer=p,
                                value=None if nemesis else v, window=v if nemesis else None,
                                offset=x if ty in ("ack", "recv", "nack") else None,
                                node="n1" if ty in ("fault", "heal", "ready") else
                                rnd.choice(["n1", "n2", "n3", None]) if ty in ("send", "recv") else None,
                                detail=x if ty in ("fault", "heal", "read_end", "ready", "subscribe", "commit")
                                else None, intended_ns=t - x if ty == "send" and x is not None else None),
                         **(more or [{}])[0]})
        if read_after_write or draw(st.booleans()):
            # a producer of format 1.4: each message's first ack carries its first send's start
            start: dict = {}
            for r in rows:
                k = (r["run"], r["producer"], r["value"])
                if r["run"] != run:
                    continue
                if r["type"] == "send" and k not in start:
                    start[k] = r["t_ns"] if r["intended_ns"] is None else r["intended_ns"]
                elif r["type"] == "ack" and start.get(k) is not None:
                    r["send_ns"] = start[k]
                    start[k] = None
    return rows


def _group(draw, rnd, clients: dict, g: str, sent: list) -> None:
    """A consumer group's members (format 1.6): assignments and revocations, deliveries with
    a partition and a position (in order, again, back, or none), commits that succeed or
    fail, and how each member's read ended. A group that takes messages out of the store (a
    RabbitMQ queue's) names the message its acks are for; another group's commits may too."""
    takes = draw(st.booleans())
    for mi in range(1, draw(st.integers(1, 3)) + 1):
        evs = clients.setdefault(f"m{g}{mi}", [])
        evs.append(("subscribe", None, None, "rabbitmq queue; takes" if takes else "kafka", {"group": g}))
        pool = sent + [("p1", 999), (None, None)]
        for _ in range(draw(st.integers(0, 30))):
            k, part = rnd.random(), rnd.choice(["0", "1"])
            if k < 0.1:
                evs.append((rnd.choice(["assign", "revoke"]), None, None, None,
                            {"group": g, "partition": part, "epoch": rnd.randint(1, 3)}))
            elif k < 0.25:
                p, v = rnd.choice(pool) if pool and rnd.random() < 0.6 else (None, None)
                evs.append(("commit", p, v, rnd.choice(["ok", "ok", "ok", "acked", "failed: rebalance"]),
                            {"group": g, "partition": rnd.choice([part, part, None]),
                             "position": rnd.choice([rnd.randint(0, 30), rnd.randint(0, 30), None])}))
            elif pool:
                p, v = rnd.choice(pool) if rnd.random() < 0.2 or not sent else sent[int(rnd.random() * len(sent))]
                off = rnd.choice([f"0:{v}", f"0:{v}", f"1:{v}", None])
                pos = None if v is None else rnd.choice([v, v, v, v - 1, None])
                evs.append(("recv", p, v, off if v is not None else None,
                            {"group": g, "partition": rnd.choice([part, part, part, None]), "position": pos,
                             "epoch": rnd.choice([1, None])}))
        end = draw(st.sampled_from(["complete", "complete", "incomplete: no delivery for 10s", "left", None]))
        if end:
            evs.append(("read_end", None, None, end, {"group": g}))
    if draw(st.booleans()):
        _output(draw, rnd, clients, g, sent)


def _replicas(draw, rnd, clients: dict, sent: list) -> None:
    """Replica readers (format 1.12), one node's copy each: most of what was sent at its own
    offset, some missing, some at another message's offset (a copy that diverged), in a
    stream of one partition or two; each read finished or not."""
    parts = draw(st.sampled_from([[None], [None], ["0", "1"]]))
    for node in draw(st.sampled_from([[], [], ["n1"], ["n1", "n2"], ["n1", "n2", "n3"]])):
        evs = clients.setdefault(f"replica-{node}", [])
        evs.append(("subscribe", None, None, "replica", {"node": node}))
        for p, v in sent:
            k = rnd.random()
            if k < 0.15:
                continue
            off = f"0:{v + 1}" if k < 0.2 else f"0:{v}"
            evs.append(("recv", p, v, off, {"partition": parts[v % len(parts)], "node": node}))
        if rnd.random() < 0.1:
            evs.append(("recv", "px", 1, "0:1", {"partition": parts[0], "node": node}))
        end = draw(st.sampled_from(["complete", "complete", "incomplete: node down", None]))
        if end:
            evs.append(("read_end", None, None, end))


def _output(draw, rnd, clients: dict, g: str, sent: list) -> None:
    """The end read of a consume-transform-produce group's output (its subscribe detail
    `output`): messages once, twice, missing, never sent, undecodable; its read finished or not."""
    evs = clients.setdefault(f"{g}-out", [])
    evs.append(("subscribe", None, None, "output", {"group": g}))
    pool = sent + [("p1", 999), (None, None)]
    for _ in range(draw(st.integers(0, 30))):
        p, v = rnd.choice(pool) if rnd.random() < 0.2 or not sent else sent[int(rnd.random() * len(sent))]
        evs.append(("recv", p, v, None if v is None else rnd.choice([f"0:{v}", f"1:{v}", None])))
    end = draw(st.sampled_from(["complete", "complete", "incomplete: no progress", None]))
    if end:
        evs.append(("read_end", None, None, end))


def _same_groups(got: dict, exp: dict) -> None:
    assert sorted(got) == sorted(exp)
    for g in got:
        a, b = dict(got[g]), dict(exp[g])
        oa, ob = a.pop("outages_ms"), b.pop("outages_ms")
        assert a == b, (g, a, b)
        assert len(oa) == len(ob) and all(_close(x, y) for x, y in zip(oa, ob)), (g, oa, ob)


def _close(a, b):
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def _lat_close(a, b):
    if a is None or b is None:
        return a is None and b is None
    return all(_close(a[k], b[k]) for k in ("p50", "p99", "p999", "max"))


SMALL = Tuning(
    # tiny buckets, so that these small histories cross bucket boundaries in the ordering
    # walk and in the gap computation, as large ones do
    seq_bucket=4, time_bucket_ns=2_000_000,
    # blocks of 4 values, so that plain and closer-looked-at blocks mix within a run
    block_bits=2, stretch_bits=3,
    # ack gaps from buckets of about 2 acks: both the bucket answer and the walk are used
    bucket_acks=2,
    # one run: per-run constants as a map literal; two: as a broadcast join (thousands of runs)
    per_run_literal=1,
    # consecutive rows paired by buckets and a carry, as in large histories
    plain_rows=0,
)


@given(rows=history(), plain_rows=st.sampled_from([0, 3, 10 ** 9]), in_memory=st.booleans(), ranked=st.booleans(),
       value_ranges=st.sampled_from([64, 0]))
def test_spark_matches_oracle(rows, plain_rows, in_memory, ranked, value_ranges, spark_analyze, tmp_path_factory):
    if not rows:
        return
    _assume_recordable(rows)
    # or, as in a run's own analysis, row by row in one lag() per stream; or (3) each way by
    # size, as a large history's ack gaps: buckets paired by one lag(), then the walk
    tuning = dataclasses.replace(SMALL, plain_rows=plain_rows)
    # a small history is read into memory as one partition (no shuffle at all); a large one
    # is read from its files in parallel: both ways, whatever the history's size
    tuning = dataclasses.replace(tuning, small_bytes=1 << 30 if in_memory else 0)
    # blocks looked at closely named by a filter of literals, or (more value ranges than
    # that) by a join with the block summary's keys
    tuning = dataclasses.replace(tuning, value_ranges=value_ranges)
    if ranked:
        # latency ranked through a histogram, as past 6 M rows, its buckets split down to 2 values
        tuning = dataclasses.replace(tuning, sorted_latency_rows=0, rank_bucket_rows=2)
    _check(spark_analyze(rows, tmp_path_factory.mktemp("h"), tuning), rows)


@given(rows=history(read_after_write=True), in_memory=st.booleans())
def test_spark_matches_oracle_on_runs_read_after_their_write(rows, in_memory, spark_analyze, tmp_path_factory):
    """The seeds' runs (the read after the write, every ack with its send time), at the sizes
    of a run's own analysis: latency and ack gaps in one query (metrics.ack_facts)."""
    if not rows:
        return
    _assume_recordable(rows)
    tuning = Tuning(small_bytes=1 << 30 if in_memory else 0, block_bits=2, stretch_bits=3)
    _check(spark_analyze(rows, tmp_path_factory.mktemp("h"), tuning), rows)


def _assume_recordable(rows) -> None:
    # a run of nothing but an observer's rows (no producer sent, nobody else read, no fault)
    # is no run the harness can record, and has no verdict: the oracle has no rows to end it
    watched = {(r["run"], r["client"]) for r in rows if r["type"] == "subscribe"
               and (r["detail"] in ("observer", "replica") or r.get("group") is not None)}
    assume(all(any((r["run"], r["client"]) not in watched for r in rows if r["run"] == run)
               for run in {r["run"] for r in rows}))


def _check(a, rows) -> None:
    expected = oracle.analyze(rows)
    assert [v["run"] for v in a.verdicts] == [v["run"] for v in expected]
    for got, exp in zip(a.verdicts, expected):
        for k in KEYS:
            assert got[k] == exp[k], (got["run"], k, got[k], exp[k])
        for k in FLOAT_KEYS:
            assert _close(got[k], exp[k]), (k, got[k], exp[k])
        for key in ("fault_outages_ms", "fault_ack_gaps_ms", "fault_recv_gaps_ms", "group_outage_ms"):
            assert len(got[key]) == len(exp[key])
            for x, y in zip(got[key], exp[key]):
                assert _close(x, y), (key, got[key], exp[key])
        assert _lat_close(got["ack_latency_ms"], exp["ack_latency_ms"]), (got["ack_latency_ms"], exp["ack_latency_ms"])
        _same_groups(got["consumer_groups"], exp["consumer_groups"])
        assert _lat_close(got["e2e_latency_ms"], exp["e2e_latency_ms"]), (got["e2e_latency_ms"], exp["e2e_latency_ms"])
    got_jumps = sorted(
        (r["run"], r["consumer"], r["producer"], r["class"], r["from_value"], r["to_value"], r["size"], r["seq"])
        for r in a.jumps.collect()
    )
    exp_jumps = sorted((v["run"], *j) for v in expected for j in v["_jumps"])
    assert got_jumps == exp_jumps
    got_dups = sorted((r["run"], r["producer"], r["value"], r["deliveries"], r["offsets"])
                      for r in a.duplicates.collect())
    assert got_dups == sorted((v["run"], *d) for v in expected for d in v["_dups"])
    got_lost = sorted((r["run"], r["producer"], r["value"], r["acked_at"], r["first_ack_ns"], r["read_there"])
                      for r in a.losses.collect())
    assert got_lost == sorted((v["run"], *x) for v in expected for x in v["_lost"])


def test_a_small_history_is_read_into_memory_once_and_a_larger_one_from_its_files(spark, tmp_path):
    from brokerchaos.analysis import warmup

    warmup._history(tmp_path)  # 2,000 messages: nacks, a fault window, a block read twice, a loss
    df = metrics.read_history(spark, str(tmp_path))
    small = metrics._in_memory(df, Tuning())
    assert small is not None
    # one partition, so that no query above it needs a shuffle
    assert small.rdd.getNumPartitions() == 1
    small.unpersist()
    assert metrics._in_memory(df, Tuning(small_bytes=0)) is None
    a = metrics.analyze(spark, df)
    b = metrics.analyze(spark, df, tuning=Tuning(small_bytes=0))
    try:
        assert a.verdicts == b.verdicts
        v = a.verdicts[0]
        assert (v["acked_missing"], v["neg_ack_count"], v["fault_ack_gaps_ms"] != [None]) == (1, 4, True)
        assert sorted(r["value"] for r in a.duplicates.collect()) == sorted(r["value"] for r in b.duplicates.collect())
    finally:
        a.release()
        b.release()
