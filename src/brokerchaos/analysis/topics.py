"""Verdicts per topic (`workload.topics`, format 1.8): the same analysis over a view of the
history in which each (run, topic) is a run of its own, `<run>~<topic>`. A row about one
topic (a producer's, a reader's, an `owner` row) goes to that topic's run; a row about none
(faults, heals, a cut-short read) goes to every topic's of its run. So every verdict, each
fault window's outage and its parts included, is defined once (metrics.py) and given per
topic as it is per run."""
from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .frames import local_table
from .verdicts import PER_TOPIC, shown

if TYPE_CHECKING:
    from .verdicts import Verdict

SEP = "~"
# what a run's verdict keeps of each topic's (`topics` in summary.json): the figures the verdict
# marks PER_TOPIC
TOPIC_KEYS = shown(PER_TOPIC)


def topic_view(spark: SparkSession, df: DataFrame, topics: dict[str, list]) -> DataFrame:
    """The rows of the runs in `topics` (run -> its topics), each topic's as a run of its own."""
    pairs = F.broadcast(local_table(spark, [(r, t) for r, ts in sorted(topics.items()) for t in ts],
                                              "run string, _t string"))
    own = (df.join(pairs.select("run").distinct(), "run", "left_semi").where(F.col("topic").isNotNull())
           .withColumn("run", F.concat_ws(SEP, "run", "topic")))
    shared = (df.where(F.col("topic").isNull()).join(pairs, "run")
              .withColumn("run", F.concat_ws(SEP, "run", "_t")).drop("_t"))
    return own.unionByName(shared)


def attach(verdicts: list[Verdict], per_topic: list[dict]) -> None:
    """Each run's verdict gets `topics`: per topic, TOPIC_KEYS of that topic's verdict."""
    by_run = {v["run"]: v for v in verdicts}
    for tv in per_topic:
        run, _, topic = tv["run"].rpartition(SEP)
        if run in by_run:
            by_run[run].setdefault("topics", {})[topic] = {k: tv.get(k) for k in TOPIC_KEYS}
    for v in verdicts:
        if v.get("topics"):
            v["topics"] = dict(sorted(v["topics"].items(), key=lambda kv: (len(kv[0]), kv[0])))
