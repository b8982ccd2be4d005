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
