"""The bucketed previous-row helper must equal a plain lag() whatever the bucket size."""
import random

from pyspark.sql import Window
from pyspark.sql import functions as F

from brokerchaos.analysis.metrics import with_previous


def test_bucketed_previous_equals_plain_lag(spark):
    rnd = random.Random(7)
    rows = []
    for stream in ("a", "b", "c"):
        seqs = sorted(rnd.sample(range(1, 500), 120))  # gaps: some buckets are empty
        rows += [(stream, s, rnd.randint(1, 1000)) for s in seqs]
    df = spark.createDataFrame(rows, "k string, seq long, v long")
    expect = {(r["k"], r["seq"]): r["p"] for r in
              df.withColumn("p", F.lag("v").over(Window.partitionBy("k").orderBy("seq"))).collect()}
    for bucket in (1, 3, 7, 64, 1 << 20):
        got = {(r["k"], r["seq"]): r["prev"] for r in with_previous(df, ["k"], "seq", "v", bucket).collect()}
        assert got == expect, bucket


def test_a_local_table_holds_the_values_a_python_list_gave_it(spark):
    """frames.local_table: an inline VALUES table in the JVM, the same rows and types as
    createDataFrame of the list (quotes, backslashes, non-ASCII, nulls, big and negative
    numbers, arrays), no Python RDD under it; past LOCAL_ROWS, createDataFrame itself."""
    from brokerchaos.analysis import frames

    ddl = "run string, n long, w int, ms double, on array<string>"
    rows = [("r'1\\\\\"x", -(1 << 62), 3, 1.5, ["a", "b"]), ("ünï ` 😀", None, None, None, []),
            (None, 0, -1, float("nan"), None), ("", 1 << 40, 7, -0.0, ["", None])]
    got = frames.local_table(spark, rows, ddl)
    want = spark.createDataFrame(rows, ddl)
    assert got.schema == want.schema
    key = repr  # NaN != NaN: compare their printed forms
    assert sorted(map(key, got.collect())) == sorted(map(key, want.collect()))
    assert "LocalTableScan" in got._jdf.queryExecution().executedPlan().toString()
    empty = frames.local_table(spark, [], ddl)
    assert empty.schema == want.schema and empty.count() == 0
    many = [(str(i), i) for i in range(frames.LOCAL_ROWS + 1)]
    assert frames.local_table(spark, many, "run string, n long").count() == len(many)
