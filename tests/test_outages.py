"""Outage distributions (analysis/outages.py), the per-window producer and consumer gaps
they are built from, and the windows a rolling restart records itself."""
import numpy as np
import pytest

from brokerchaos.analysis import outages


def test_resend_steps_follow_the_producers_doubling_backoff():
    assert outages.resend_steps(0.1, 1.0, 60)[:6] == [100.0, 300.0, 700.0, 1500.0, 2500.0, 3500.0]
    assert outages.resend_steps(0.1, 1.0, 2) == [100.0, 300.0]  # no more steps than resends
    assert outages.resend_steps(0.0, 1.0, 5) == []


def test_near_steps_counts_outages_within_50_ms_of_each_step():
    got = outages.near_steps([100.0, 300.0], [60.0, 149.0, 151.0, 250.0, 351.0, None])
    assert [g["outages"] for g in got] == [2, 1]


def test_a_jittered_step_counts_from_its_earliest_to_its_latest():
    # the Pulsar availability seed: delays of 100, 200, 400, 800 ms, each after the first up
    # to 10% shorter, so the 1,500 ms step comes as early as 1,360 ms
    steps = outages.jittered([100.0, 300.0, 700.0, 1500.0], (-0.10, 0.0))
    assert steps == [(100.0, 100.0, 100.0), (300.0, 280.0, 300.0), (700.0, 640.0, 700.0), (1500.0, 1360.0, 1500.0)]
    got = outages.near_steps(steps, [1320.0, 1305.0, 1550.0, 1551.0, 600.0, 589.0])
    assert [g["outages"] for g in got] == [0, 0, 1, 2]
    assert (got[3]["from_ms"], got[3]["to_ms"]) == (1310.0, 1550.0)
    # a client without jitter keeps its steps as they are: ±50 ms
    assert outages.jittered([200.0, 400.0], (0.0, 0.0)) == [200.0, 400.0]
    assert [g["outages"] for g in outages.near_steps([1500.0], [1320.0, 1460.0])] == [1]


@pytest.mark.spark
def test_distribution_on_spark_matches_numpy(spark):
    rng = np.random.default_rng(7)
    vals = list(rng.choice([100, 300, 700, 1500], 400) + rng.normal(0, 20, 400)) + [None, None]
    d = outages.distribution(spark, vals)
    ended = np.array([v for v in vals if v is not None])
    assert d["windows"] == 402 and d["unended"] == 2 and d["count"] == 400
    for q in (50, 90, 99):
        assert d[f"p{q}"] == pytest.approx(np.percentile(ended, q))
    assert d["max"] == pytest.approx(ended.max())
    hist = dict((lo, n) for lo, n in d["histogram"])
    assert sum(hist.values()) == 400
    assert set(hist) <= {0, 100, 200, 300, 600, 700, 1400, 1500}  # steps, not a smear
    assert hist[1400] + hist[1500] == int(((ended >= 1400) & (ended < 1600)).sum())
    assert outages.distribution(spark, [None])["count"] == 0


def _acks(t0, t1, every, producer="p1", start_value=1):
    rows, v = [], start_value
    for t in range(t0, t1, every):
        rows += [dict(run="r1", client=producer, seq=2 * v - 1, t_ns=t, type="send", producer=producer, value=v),
                 dict(run="r1", client=producer, seq=2 * v, t_ns=t, type="ack", producer=producer, value=v)]
        v += 1
    return rows, v


@pytest.mark.spark
def test_rolling_restart_windows_each_get_their_own_producer_and_consumer_gap(spark_analyze, tmp_path):
    ms = 1_000_000
    rows, v = _acks(0, 1000 * ms, ms)
    # three restarts, each its own window (ids as a rolling restart makes them); acks stop
    # for 120, 320 and 720 ms after each stop
    nem, seq = [], 0
    for i, t in enumerate([200, 500, 850], 1):
        wid = 10**6 + 1000 + i
        for kind, at in (("fault", t), ("heal", t + 50), ("ready", t + 90)):
            seq += 1
            nem.append(dict(run="r1", client="nemesis", seq=seq, t_ns=at * ms, type=kind, node=f"n{i}",
                            detail=f"rolling-restart n{i} ({i} of 3)", window=wid))
    gaps = [(200, 320), (500, 820), (850, 1570)]
    rows = [r for r in rows if not any(a * ms < r["t_ns"] < b * ms for a, b in gaps)]
    more, _ = _acks(1570 * ms, 1700 * ms, ms, start_value=v)
    # a live consumer that misses the same stretches, 5 ms behind
    recv = [dict(run="r1", client="c1", seq=k, t_ns=r["t_ns"] + 5 * ms, type="recv", producer="p1",
                 value=r["value"], offset=str(r["value"])) for k, r in enumerate(
                     (r for r in rows + more if r["type"] == "ack"), 1)]
    a = spark_analyze(rows + more + nem + recv, tmp_path)
    (verdict,) = a.verdicts
    assert len(verdict["faults"]) == 3
    assert verdict["fault_ack_gaps_ms"] == pytest.approx([120, 320, 720])
    # the consumer's gap overlapping each window, counted from the fault on
    assert verdict["fault_recv_gaps_ms"] == pytest.approx([120, 320, 720])
    d = outages.summary(a.jumps.sparkSession, [verdict], {"resend": [100.0, 300.0, 700.0]})
    assert d["producer"]["count"] == 3 and d["producer"]["max"] == pytest.approx(720)
    assert [s["outages"] for s in d["schedules"]["resend"]] == [1, 1, 1]
    assert d["consumer"]["count"] == 3
