"""Reading a history, and the frame helpers every concern of the analysis shares: the
Spark schema, per-run literals, a lag() that does not put a whole stream in one task, the
small-history path (one partition in memory)."""
from __future__ import annotations

import math
from typing import Any, Optional

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from ..history.schema import SCHEMA
from .tuning import Tuning


# Spark's DDL for the history schema, derived so the two cannot drift apart.
_DDL = {"string": "string", "int64": "long"}


SPARK_SCHEMA = ", ".join(f"{f.name} {_DDL[str(f.type)]}" for f in SCHEMA)


MS = 1_000_000.0


DEFAULT = Tuning()


def columns_once(build):
    """`build(*args)`'s columns, built once per Spark context and arguments.

    A Column is an immutable expression tree in the JVM, and building one from Python costs
    a py4j round trip per function and operator: the block summary's ~60 aggregates took
    90 ms of each analysis to build, the same every time. They are kept per context (a
    stopped session's JVM objects are gone; the context itself is the key, as an id could be
    a new context's) and per argument (the Tuning, a flag).
    """
    cache: dict = {}

    def get(*args):
        from pyspark import SparkContext

        key = (SparkContext._active_spark_context, args)
        if key not in cache:
            if len(cache) > 8:
                cache.clear()
            cache[key] = build(*args)
        return cache[key]

    return get


def read_history(spark: SparkSession, *paths: str) -> DataFrame:
    """Every `*.parquet` file at any depth below each path, in format v1."""
    return (
        spark.read.schema(SPARK_SCHEMA)
        .option("recursiveFileLookup", "true")
        .option("pathGlobFilter", "*.parquet")
        .parquet(*[str(p) for p in paths])
    )


# up to this many rows a small table is an inline VALUES table (local_table); past it, the
# query text would cost more to parse than the Python workers it spares
LOCAL_ROWS = 1_000


def _sql_literal(v: Any) -> str:
    """`v` as a Spark SQL literal: a string as its UTF-8 bytes (no quoting to get wrong)."""
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, int):
        return f"{v}L" if -(1 << 63) <= v < (1 << 63) else f"{v}BD"
    if isinstance(v, float):
        return f"{v!r}D" if math.isfinite(v) else f"CAST('{v!r}' AS DOUBLE)"
    if isinstance(v, str):
        return f"CAST(X'{v.encode().hex()}' AS STRING)" if v else "''"
    if isinstance(v, (list, tuple)):
        return f"ARRAY({', '.join(_sql_literal(x) for x in v)})"
    raise TypeError(f"no SQL literal for {type(v).__name__}")


def local_table(spark: SparkSession, rows, ddl: str) -> DataFrame:
    """A small table of Python values (`ddl`: "run string, n long") made in the JVM as an
    inline VALUES table, a local relation. PySpark's createDataFrame of a list makes a Python
    RDD instead, and every task that scans it (each join with it, each broadcast of it) runs
    a Python worker to unpickle it: an analysis needed no Python worker but for these, and
    starting them cost the first analysis in a process 2-4 s (20 runs x 1,000 messages:
    plain 20.2 against 22.0 s, group 34.1-34.7 against 37.9-38.4 s; warm, the same)."""
    rows = [tuple(r) for r in rows]
    if len(rows) > LOCAL_ROWS:
        return spark.createDataFrame(rows, ddl)
    fields = _ddl_fields(ddl)
    cols = [f"_c{i}" for i in range(len(fields))]
    values = ", ".join("(" + ", ".join(_sql_literal(v) for v in r) + ")" for r in rows) or \
        "(" + ", ".join("NULL" for _ in fields) + ")"
    select = ", ".join(f"CAST({c} AS {ty}) AS `{name}`" for c, (name, ty) in zip(cols, fields))
    where = "" if rows else " WHERE false"
    return spark.sql(f"SELECT {select} FROM VALUES {values} AS t({', '.join(cols)}){where}")


def _ddl_fields(ddl: str) -> list[tuple[str, str]]:
    """("run", "string"), … of a DDL string; a type's own commas (array<…>, map<…>) kept."""
    out, depth, cur = [], 0, ""
    for ch in ddl + ",":
        if ch == "," and depth == 0:
            name, ty = cur.strip().split(None, 1)
            out.append((name, ty))
            cur = ""
            continue
        depth += (ch == "<") - (ch == ">")
        cur += ch
    return out


def count_when(cond) -> Any:
    return F.sum(F.when(cond, 1).otherwise(0))


def with_previous(df: DataFrame, keys: list[str], order: str, value: str, bucket: int,
                  plain: bool = False) -> DataFrame:
    """Adds `prev`: `value` of the previous row in `order` within `keys`.

    A plain lag() over Window.partitionBy(keys) puts a whole stream in one task; with one
    producer and one consumer that is one core. Instead the order is cut into buckets, lag()
    runs per bucket in parallel, and the first row of each bucket takes the last value of
    the previous non-empty bucket from a (small) per-bucket table. `plain`: the input is
    small (Tuning.plain_rows), and one lag() is one shuffle where buckets take three.
    """
    if plain:
        return df.withColumn("prev", F.lag(value).over(Window.partitionBy(*keys).orderBy(order)))
    d = df.withColumn("_b", F.floor(F.col(order) / F.lit(bucket)))
    w = Window.partitionBy(*keys, "_b").orderBy(order)
    d = d.withColumn("_lag", F.lag(value).over(w))
    last = d.groupBy(*keys, "_b").agg(F.max_by(value, order).alias("_last"))
    carry = last.withColumn(
        "_carry", F.lag("_last").over(Window.partitionBy(*keys).orderBy("_b"))
    ).drop("_last")
    return (
        d.join(carry, [*keys, "_b"])
        .withColumn("prev", F.coalesce(F.col("_lag"), F.col("_carry")))
        .drop("_lag", "_carry", "_b")
    )


def with_per_run(df: DataFrame, values: dict[str, int], name: str, inner: bool = False,
                  t: Tuning = DEFAULT) -> DataFrame:
    """`df` with a column `name` holding `values[run]`: null for other runs, or (`inner`)
    only the rows of the runs in `values`."""
    if not values:
        return df.where(F.lit(False)) if inner else df.withColumn(name, F.lit(None).cast("long"))
    if len(values) <= t.per_run_literal:
        pairs = [x for run, v in sorted(values.items()) for x in (F.lit(run), F.lit(v).cast("long"))]
        d = df.withColumn(name, F.try_element_at(F.create_map(*pairs), F.col("run")))
        return d.where(F.col(name).isNotNull()) if inner else d
    # a session of thousands of runs: a map literal that size cost 40 s per pass over 1 M
    # messages (each row's lookup walks the keys), and so did `isin`; a hash join costs
    # nothing
    table = local_table(df.sparkSession, sorted(values.items()), f"_run string, {name} long")
    return df.join(F.broadcast(table), F.col("run") == F.col("_run"), "inner" if inner else "left").drop("_run")


def only_runs(df: DataFrame, runs, t: Tuning) -> DataFrame:
    """The rows of these runs."""
    return with_per_run(df, dict.fromkeys(runs, 0), "_keep", inner=True, t=t).drop("_keep")


def in_memory(df: DataFrame, t: Tuning) -> Optional[DataFrame]:
    """A small history (Tuning.small_bytes) as one cached partition, else None.

    coalesce(1), unlike repartition(1), says its output is a single partition, so the
    planner adds no exchange for any grouping, window or join above it: every query of the
    analysis is one stage of one task over rows already in memory. The size is the scan's
    own estimate (the files' bytes), known without a job.
    """
    jdf = getattr(df, "_jdf", None)
    if jdf is None:  # a Spark Connect session: the plain path is as exact
        return None
    # a Scala BigInt: py4j hands over a number or an object, by version; both print as one
    size = int(str(jdf.queryExecution().optimizedPlan().stats().sizeInBytes()))
    if size > t.small_bytes:
        return None
    return df.coalesce(1).persist(StorageLevel.MEMORY_ONLY)
