"""Latency percentiles ranked through a histogram (histories past 6 M rows) against a plain
sort of every latency: equal whatever the buckets hold or how often they are split."""
from __future__ import annotations

import random

import pytest

from brokerchaos.analysis import metrics
from brokerchaos.analysis.tuning import Tuning

from oracle import _lat


def _acks(spark, runs: dict[str, list[int]]):
    rows = [(run, 1_000_000_000 + i * 1000 + x, 1_000_000_000 + i * 1000)
            for run, lats in runs.items() for i, x in enumerate(lats)]
    # an ack that does not carry its send time counts for nothing
    rows.append(("one", 10**9, None))
    return spark.createDataFrame(rows, "run string, t_ns long, send_ns long")


@pytest.mark.parametrize("bucket_rows", [1, 2, 5, 1_000_000])
def test_ranked_percentiles_equal_a_sort_of_every_latency(spark, bucket_rows):
    rnd = random.Random(bucket_rows)
    runs = {
        # decades apart, most of them in one bucket, and the same value hundreds of times
        "spread": [rnd.randint(1, 10**10) for _ in range(300)] + [rnd.randint(2_000_000, 2_050_000)
                                                                   for _ in range(400)] + [3_000_000] * 300,
        "one": [42],
        "equal": [7_000] * 50,
        # a clock that went backwards: zero and negative latencies share one bucket
        "odd": [0, -5, -5, 3, 10**6, -1, 2, 2, 2, 10**9],
        "two": [1, 2],
    }
    got = metrics.ranked_ack_latency(_acks(spark, runs), Tuning(rank_bucket_rows=bucket_rows))
    for run, lats in runs.items():
        exp = _lat([x / metrics.MS for x in lats])
        g = got[run]
        assert g["_ack_p"] == [exp["p50"], exp["p99"], exp["p999"]], run
        assert g["_ack_max"] == exp["max"]
