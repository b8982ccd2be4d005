import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).parent))

# CI runs the same examples every time, so a red build is about the change, not about a
# lucky draw; BROKERCHAOS_HYPOTHESIS=explore draws many fresh ones to hunt for mismatches.
_common = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                                      HealthCheck.data_too_large])
# 8: each example is a whole Spark analysis of every concern (17-23 s warm with C1 alone,
# 2026-12-07: Spark's price per job, not its 400 rows), and `make test` must stay
# under 45 minutes with real Kafka and Pulsar clusters and the disk faults in it; the
# unit tests of the jump classes and the recorded histories cover the named cases, and
# `explore` draws many more
settings.register_profile("ci", max_examples=8, derandomize=True, **_common)
settings.register_profile("explore", max_examples=300, derandomize=False, **_common)
settings.load_profile(os.environ.get("BROKERCHAOS_HYPOTHESIS", "ci"))


# a test's rough cost in seconds by its marks, for the order the workers take files in
_COST = (("integration", 40.0), ("spark", 8.0), ("root", 4.0))


def _cost(item) -> float:
    marks = {m.name for m in item.iter_markers()}
    return next((c for name, c in _COST if name in marks), 0.3)


def pytest_collection_modifyitems(config, items):
    # `make test-fast` leaves out what needs a JVM: every test that takes a Spark fixture
    for item in items:
        if {"spark", "spark_analyze"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.spark)
    # two workers, a file each at a time (--dist loadfile, --no-loadscope-reorder): the
    # costliest files first, so that what is left at the end is short and the workers end
    # together (by test count, the few-but-long broker files came last: one worker ran on
    # alone for two minutes)
    if hasattr(config, "workerinput"):  # an xdist worker: each reports this order to the controller
        cost: dict = {}
        for item in items:
            cost[item.path] = cost.get(item.path, 0.0) + _cost(item)
        items.sort(key=lambda item: -cost[item.path])


@pytest.fixture(scope="session")
def spark():
    """One SparkSession for the whole test run (the project's rule for sessions too), with
    C1 alone as a one-shot analysis has it: the suite's analyses are many and small, and its
    two cores are busy with brokers. Measured on three of the suite's sessions, analysed three
    times each in one JVM (2026-11-29): 78 s of the JVM's CPU against 128 s with both tiers
    (C2 still compiling in the third round), the same wall time idle."""
    from brokerchaos.analysis.spark import get_spark, one_shot_options

    return get_spark(java_options=one_shot_options(0))


@pytest.fixture(scope="session")
def spark_analyze(spark):
    """rows (list of dicts in the history format) -> analysis, through the real Spark job;
    `tuning` cuts the work differently (the verdicts must not change)."""
    import pyarrow as pa

    from brokerchaos.analysis import metrics
    from brokerchaos.analysis.tuning import Tuning
    from brokerchaos.history.schema import SCHEMA
    from brokerchaos.report import session_table

    last: list = []

    def run(rows, tmp_path, tuning: Tuning = metrics.DEFAULT):
        rows = [{"window": None, "intended_ns": None, **r} for r in rows]
        table = pa.Table.from_pylist(rows, schema=SCHEMA)
        import pyarrow.parquet as pq

        tmp_path.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, tmp_path / "h.parquet")
        df = metrics.read_history(spark, str(tmp_path))
        # the previous example's logs are no longer read: one analysis cached at a time
        while last:
            last.pop().release()
        last.append(metrics.analyze(spark, df, tuning=tuning))
        last[0].verdicts[:] = session_table.complete(last[0].verdicts)
        return last[0]

    yield run
    while last:
        last.pop().release()


@pytest.fixture(scope="module")
def _module_pool():
    from brokerchaos.runner import ClusterPool

    with ClusterPool() as pool:
        yield pool


@pytest.fixture
def cluster_pool(request, _module_pool):
    """A module opts in (`pytest.mark.usefixtures("cluster_pool")`): its sessions whose servers
    are configured alike share one cluster (runner/pool.py), as a campaign's do, one kept at a
    time and stopped after the module's last test. A test marked `fresh_cluster` (it reads
    the logs of the run that started its cluster, or asserts a start) has clusters of its own."""
    from brokerchaos.runner import ClusterPool

    if not request.node.get_closest_marker("fresh_cluster"):
        yield _module_pool
        return
    _module_pool.close()
    ClusterPool.current = None
    try:
        yield None
    finally:
        ClusterPool.current = _module_pool


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "fresh_cluster: in a module whose sessions share clusters (cluster_pool), this test's start "
                   "their own")
    config.addinivalue_line(
        "markers", "effects(states, why): the fault-window effect states (besides observed) this test's sessions "
                   "may show, and why: a positive control of the evidence checks, or a fault no look can see")


@pytest.fixture(autouse=True)
def every_window_seen_in_effect(request, monkeypatch):
    """Every session a test runs shows each of its fault windows' effect as observed and its
    cluster whole before the read (issue 60's negative controls, all of make test), unless
    the test says which other states it shows and why (`@pytest.mark.effects`)."""
    from brokerchaos.runner import session as session_mod

    marker = request.node.get_closest_marker("effects")
    allowed = {"observed", *(marker.args[0] if marker else ())}
    real = session_mod.Session.run
    seen: list = []

    def run(self):
        result = real(self)
        seen.append(result)
        return result

    monkeypatch.setattr(session_mod.Session, "run", run)
    yield
    for result in seen:
        for v in result.verdicts:
            odd = [e["detail"] for e in v.get("effects") or [] if e["state"] not in allowed]
            assert not odd, f"{v['run']}: a fault window not seen in effect: {odd}"
            assert not v.get("not_whole") or "not whole" in allowed, \
                f"{v['run']}: the cluster was not whole before the read: {v.get('whole_detail')}"


def needs_root():
    return pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces")
