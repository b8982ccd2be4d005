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
settings.register_profile("ci", max_examples=40, derandomize=True, **_common)
settings.register_profile("explore", max_examples=300, derandomize=False, **_common)
settings.load_profile(os.environ.get("BROKERCHAOS_HYPOTHESIS", "ci"))


@pytest.fixture(scope="session")
def spark():
    """One SparkSession for the whole test run (the project's rule for sessions too)."""
    from brokerchaos.analysis.spark import get_spark

    return get_spark()


@pytest.fixture(scope="session")
def spark_analyze(spark):
    """rows (list of dicts in format v1) -> verdicts, through the real Spark job."""
    import pyarrow as pa

    from brokerchaos.analysis import metrics
    from brokerchaos.history.schema import SCHEMA

    last: list = []

    def run(rows, tmp_path):
        table = pa.Table.from_pylist(rows, schema=SCHEMA)
        import pyarrow.parquet as pq

        tmp_path.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, tmp_path / "h.parquet")
        df = metrics.read_history(spark, str(tmp_path))
        # the previous example's logs are no longer read: one analysis cached at a time
        while last:
            last.pop().release()
        last.append(metrics.analyze(spark, df))
        return last[0]

    yield run
    while last:
        last.pop().release()


def needs_root():
    return pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces")
