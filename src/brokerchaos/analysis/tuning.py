"""How the analysis job cuts its work: sizes and thresholds, not results. Every verdict is
the same whatever these are (tests/test_differential.py runs with tiny ones)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tuning:
    # latencies paired message by message (acks without send_ns, end-to-end) are sorted in
    # one aggregation buffer per run; past this many history rows Spark's percentile_approx
    # is used instead, and said (latency_exact = false)
    exact_percentile_rows: int = 6_000_000
    # acks that carry their send time (format 1.4) are ranked instead, exactly at any size:
    # up to this many history rows each run's latencies are sorted in one list; past it a
    # histogram finds the buckets that hold the percentiles' ranks and only those are sorted
    sorted_latency_rows: int = 6_000_000
    # a bucket of more latencies than this is split again before its values are sorted
    rank_bucket_rows: int = 4_000_000
    # consumer events per ordering bucket: big enough that per-bucket overhead stays small,
    # small enough that a 10-million-message stream still spreads over every core
    seq_bucket: int = 1 << 20
    # reads in order are summarised in stretches of at most 2**stretch_bits seqs
    stretch_bits: int = 16
    # time per bucket when consecutive rows are paired by time (gaps)
    time_bucket_ns: int = 1_000_000_000
    # messages are summarised in blocks of 2**block_bits consecutive values, one bit each in
    # a long per outcome; only blocks where something is unusual are looked at one by one
    block_bits: int = 6
    # acks per time bucket on average when ack gaps are found from bucket summaries
    bucket_acks: int = 16
    # blocks to look at message by message, up to which their keys are broadcast to the scan
    broadcast_blocks: int = 1_000_000
    # acked messages never received, up to which their identities are broadcast
    broadcast_lost: int = 1_000_000
    # up to this many value ranges of such blocks also go to the Parquet reader as a filter
    value_ranges: int = 64
    # per-run constants (first fault, bucket width) up to this many runs are a map literal in
    # the expression; a map lookup scans its keys, so more runs get a broadcast join instead
    # (and so do the fault windows' bounds in the gap facts: literals up to this many windows)
    per_run_literal: int = 16
    # up to this many rows, consecutive rows are paired by one lag() per stream (one shuffle)
    # instead of lag() per bucket and a carry between buckets (three): for a run's worth of
    # rows the buckets' extra jobs cost more than the one task they spare
    plain_rows: int = 1_000_000
    # a history up to this many bytes of Parquet (a run of ~80,000 messages; 20 runs of 1,000
    # with a consumer group each are 1.2 MB) is read once into memory as one partition: every
    # query then has no shuffle (one partition already meets any grouping), one task and no
    # file to open, which is what a small run's queries spend their time on; past it, the copy
    # gains nothing over the second core and the reads it spares (2026-12-06, warm: group
    # 20 x 1,000 9.1-9.4 s in memory against 11.2-11.7 s from the files; plain 100 x 1,000,
    # 4.4 MB, 5.6-7.0 against 7.1-7.5 s; one group run of 100,000, 7.1 MB, 7.4-7.7 against
    # 6.6-7.9 s; docs/benchmarks/history.md)
    small_bytes: int = 4 << 20
