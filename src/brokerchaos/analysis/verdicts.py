"""The verdicts: each count's definition written once, and the typed result of a run.

A message's outcome is five flags: sent (S), acked (A), nacked (N), unknown (U) and
received at least once (R). A count over them is a formula here, evaluated two ways by the
same definition: per message, on boolean columns, and over a block of 64 messages, on bit
sets in a long (Spark SQL's `&`, `|`, `~` and `bit_count`), so the job and the plain blocks
can never disagree. Counts of deliveries (how often a message was read) need the receive
counts themselves: each gives its per-message expression and what a plain block (every
value received at most once, and sent) contributes. docs/history-format.md defines each in
prose; tests/oracle.py implements them independently.
"""
from __future__ import annotations

from dataclasses import dataclass
import re
from typing import Annotated, Any, Callable, Optional, TypedDict, get_origin, get_type_hints

from pyspark.sql import Column
from pyspark.sql import functions as F


@dataclass(frozen=True)
class Formula:
    """A formula over the outcome flags: `S & A & ~R` is "acked, never received"."""

    op: str
    args: tuple = ()

    def __and__(self, other: "Formula") -> "Formula":
        return Formula("and", (self, other))

    def __invert__(self) -> "Formula":
        return Formula("not", (self,))

    def per_message(self, flags: dict[str, Column]) -> Column:
        """A boolean column, from one boolean column per flag."""
        if self.op == "and":
            return self.args[0].per_message(flags) & self.args[1].per_message(flags)
        if self.op == "not":
            return ~self.args[0].per_message(flags)
        return flags[self.op]

    def bits(self, sets: dict[str, Column]) -> Column:
        """A long whose bit i is the formula for the block's message i, from one bit set per flag."""
        if self.op == "and":
            return self.args[0].bits(sets).bitwiseAND(self.args[1].bits(sets))
        if self.op == "not":
            return F.bitwise_not(self.args[0].bits(sets))
        return sets[self.op]


S, A, N, U, R = (Formula(x) for x in "SANUR")
R1 = Formula("R1")  # received exactly once (in a plain block, R: nothing there is read twice)

# count of messages (sent in this run unless said otherwise) with ...
COUNTS: dict[str, Formula] = {
    "send_count": S,
    "pos_ack_count": S & A,
    # a message resent after an unknown outcome may have been written by the attempt nobody
    # answered: a nack of a later attempt says nothing of it, so unknown wins over nack
    "neg_ack_count": S & N & ~A & ~U,  # only nacks: every attempt refused
    "unknown_count": S & U & ~A,  # an attempt without an answer, and never acked
    "acked_missing": S & A & ~R,
    "missing": S & ~R,
    "received_no_ack": S & R & ~A,
    "received_after_nack": S & R & ~A & N & ~U,
    "received_after_unknown": S & R & ~A & U,
    # the seeds' ReceivedNoAck, as their programs count it: read exactly once and never
    # acked (one read of a message read twice is counted under MsgsWithDups alone)
    "seed_received_no_ack": S & R1 & ~A,
}


@dataclass(frozen=True)
class DeliveryCount:
    """A count of deliveries: per message from its receive counts (`r`: recv rows, `od`:
    distinct offsets, `o`: rows with an offset, `cod`: distinct (consumer, offset)), and
    what a plain block adds, from its recv rows `rn`."""

    per_message: Callable[[Column, Column, Column, Column, Column], Column]
    plain: Callable[[Column], Column]


def _ZERO(rn: Column) -> Column:
    return F.lit(0).cast("long")


DELIVERY_COUNTS: dict[str, DeliveryCount] = {
    "received": DeliveryCount(lambda sent, r, od, o, cod: F.when(sent, r).otherwise(0), lambda rn: rn),
    # receives of messages no producer of the run sent (another run's, or not ours)
    "stowaways": DeliveryCount(lambda sent, r, od, o, cod: F.when(~sent, r).otherwise(0), _ZERO),
    "msgs_with_dups": DeliveryCount(lambda sent, r, od, o, cod: F.when(sent & (r > 1), 1).otherwise(0), _ZERO),
    "duplicate_deliveries": DeliveryCount(lambda sent, r, od, o, cod: F.when(sent & (r > 0), r - 1).otherwise(0),
                                          _ZERO),
    # stored twice: a message read at more than one offset; the messages, and their extra copies
    "msgs_stored_twice": DeliveryCount(lambda sent, r, od, o, cod: F.when(sent & (od > 1), 1).otherwise(0), _ZERO),
    # read more than once, a read without an offset among them: stored twice or delivered
    # twice cannot be told (a plain block reads each message once)
    "dups_without_offsets": DeliveryCount(
        lambda sent, r, od, o, cod: F.when(sent & (r > 1) & (o < r), 1).otherwise(0), _ZERO),
    "stored_duplicates": DeliveryCount(lambda sent, r, od, o, cod: F.when(sent & (od > 1), od - 1).otherwise(0),
                                       _ZERO),
    # delivered twice: read again by the same consumer at the same offset
    "redeliveries": DeliveryCount(lambda sent, r, od, o, cod: F.when(sent, o - cod).otherwise(0), _ZERO),
}

COUNT_KEYS = tuple(COUNTS) + tuple(DELIVERY_COUNTS)
# JF0: a stream's first read is not its producer's first value (the seeds' readers start
# from "the value before the first", so the first read is a jump forward to them; ours
# has nothing before it); the seeds' JF column is JF + JF0
JUMP_CLASSES = ("JF", "JB", "DJF", "DJB", "JF0")


def count_columns_per_message(sent, acked, nacked, unk, recv_n, recv_od, recv_o, recv_cod) -> list[Column]:
    """Every count, aggregated over a table of one row per message."""
    flags = {"S": sent, "A": acked, "N": nacked, "U": unk, "R": recv_n > 0, "R1": recv_n == 1}
    out = [F.sum(F.when(f.per_message(flags), 1).otherwise(0)).alias(k) for k, f in COUNTS.items()]
    out += [F.sum(d.per_message(sent, recv_n, recv_od, recv_o, recv_cod)).alias(k)
            for k, d in DELIVERY_COUNTS.items()]
    return out


def count_columns_over_blocks(plain: Column, sets: dict[str, Column], rn: Column) -> list[Column]:
    """Every count, aggregated over the plain blocks of a table of bit-set blocks."""
    sets = {**sets, "R1": sets["R"]}  # a plain block reads each of its values at most once
    out = [F.sum(F.when(plain, F.bit_count(f.bits(sets))).otherwise(0)).alias(k) for k, f in COUNTS.items()]
    out += [F.sum(F.when(plain, d.plain(rn)).otherwise(0)).alias(k) for k, d in DELIVERY_COUNTS.items()]
    return out


class Latency(TypedDict):
    p50: float
    p99: float
    p999: float
    max: float


# where a figure of the verdict shows besides the run's own (its Annotated marks below):
# summed over a session's runs (summary.json's `totals`), kept per topic of a run of several
# (summary.json's `topics`)
TOTAL, PER_TOPIC = "total", "per topic"


class Fault(TypedDict):
    t_ms: float
    until_ms: float
    node: Optional[str]
    detail: Optional[str]
    window: Optional[int]


class Verdict(TypedDict, total=False):
    """Everything the analysis says about one run (docs/history-format.md)."""

    run: str
    # COUNT_KEYS
    send_count: Annotated[int, TOTAL, PER_TOPIC]
    pos_ack_count: Annotated[int, TOTAL, PER_TOPIC]
    neg_ack_count: Annotated[int, TOTAL, PER_TOPIC]
    unknown_count: Annotated[int, TOTAL, PER_TOPIC]
    acked_missing: Annotated[int, TOTAL, PER_TOPIC]
    missing: Annotated[int, TOTAL, PER_TOPIC]
    received_no_ack: Annotated[int, TOTAL, PER_TOPIC]
    received_after_nack: Annotated[int, PER_TOPIC]
    received_after_unknown: Annotated[int, PER_TOPIC]
    seed_received_no_ack: Annotated[int, PER_TOPIC]
    received: Annotated[int, TOTAL, PER_TOPIC]
    stowaways: Annotated[int, TOTAL, PER_TOPIC]
    msgs_with_dups: Annotated[int, TOTAL, PER_TOPIC]
    duplicate_deliveries: Annotated[int, TOTAL, PER_TOPIC]
    msgs_stored_twice: Annotated[int, TOTAL, PER_TOPIC]
    dups_without_offsets: Annotated[int, TOTAL, PER_TOPIC]
    stored_duplicates: Annotated[int, TOTAL, PER_TOPIC]
    redeliveries: Annotated[int, TOTAL, PER_TOPIC]
    acked_missing_overwritten: Annotated[int, TOTAL, PER_TOPIC]
    ack_count: int
    # ordering
    jf: Annotated[int, TOTAL, PER_TOPIC]
    jb: Annotated[int, TOTAL, PER_TOPIC]
    djf: Annotated[int, TOTAL, PER_TOPIC]
    djb: Annotated[int, TOTAL, PER_TOPIC]
    jf0: int
    out_of_order: Annotated[int, PER_TOPIC]
    # consumer groups (format 1.6; groups.py): summed over the run's groups, and per group
    # (its figures, read_complete and read_status) under consumer_groups
    groups: int
    group_recv_rows: int
    group_skips: int
    group_duplicates: int
    group_dup_stored: int
    group_dup_handover: int
    group_dup_same: int
    group_nonmonotonic: int
    group_commits: int
    group_commit_failures: int
    group_commit_backwards: int
    group_read_complete: Optional[bool]
    # per fault window, the longest a partition of any group went without a delivery, from
    # the fault on (None: none had one after it; timing off)
    group_outage_ms: list[Optional[float]]
    consumer_groups: dict[str, dict]
    # transactions (format 1.7; 0 in a run without them): analysis/transactions.py
    txns: int
    txns_committed: int
    txns_aborted: int
    txns_unknown: int
    aborted_reads: int
    torn_txns: int
    offset_conflicts: int
    nonmonotonic_reads: int
    interleaved_txns: int
    # exactly once (a consume-transform-produce group's output read back; 0 and None without one)
    eos_outputs: int
    eos_recv_rows: int
    eos_duplicates: int
    eos_missing: int
    eos_nacked: int
    eos_read_complete: Optional[bool]
    # the replicas read one by one (format 1.12, analysis/replicas.py; 0 and None without)
    replica_reads: int
    replica_reads_complete: Optional[bool]
    replica_status: Optional[str]
    diverged_positions: Optional[int]
    diverged_acked: Optional[int]
    replicas_diverged: Optional[int]
    acked_on_no_replica: Optional[int]
    # the cluster's own account of its copies once healed (a `check` row; None without one)
    under_replicated: Optional[int]
    end_check: Optional[str]
    # the read
    read_complete: Annotated[Optional[bool], PER_TOPIC]
    read_status: Annotated[Optional[str], PER_TOPIC]
    recv_rows: int
    # availability and latency (None with timing off)
    max_ack_gap_ms: Annotated[Optional[float], PER_TOPIC]
    max_recv_gap_ms: Optional[float]
    faults: list[Fault]
    fault_outages_ms: Annotated[list[Optional[float]], PER_TOPIC]
    # each outage in its parts, detect, serve, reconnect and resume (ms, adding up to it;
    # analysis/parts.py), the marks not seen and the largest part; None where it never ended
    outage_parts: Annotated[list[Optional[dict]], PER_TOPIC]
    # workload.topics > 1: the same verdicts per topic (analysis/topics.py, TOPIC_KEYS)
    topics: dict[str, dict]
    # each window's longest ack-free interval from the fault on, and the consumers' longest
    # delivery gap in it (None: none ended it / no consumer read across it)
    fault_ack_gaps_ms: Annotated[list[Optional[float]], PER_TOPIC]
    fault_recv_gaps_ms: Annotated[list[Optional[float]], PER_TOPIC]
    ack_latency_ms: Annotated[Optional[Latency], PER_TOPIC]
    e2e_latency_ms: Optional[Latency]
    # live consumers that only observed (`workload.consumers`; subscribe rows "observer")
    live_consumers: int
    live_recv_rows: Annotated[int, PER_TOPIC]
    live_duplicates: Annotated[int, PER_TOPIC]
    live_redeliveries: int
    live_read_status: Annotated[Optional[str], PER_TOPIC]
    latency_exact: bool
    timing: bool
    # at a steady rate (`workload.rate`): sends more than 100 ms after their intended time,
    # and the longest lag (None without a rate, or with timing off)
    late_sends: Optional[int]
    max_send_lag_ms: Optional[float]
    # what the VerneMQ seed's table is made of (report/session_table.py)
    facts: dict[str, Any]
    # the evidence that the run tested what it names (format 1.9; evidence.py): each fault
    # window's effect as the harness saw it (window, node, state, detail), how many windows
    # were not seen in effect or not undone and how many could not be told (None: no window
    # rows), what was short of a whole cluster before the read (None: no check), and the
    # mechanisms the scenario requires (name, occurred, evidence) and how many did not occur
    effects: list[dict]
    faults_not_in_effect: Optional[int]
    effects_not_known: Optional[int]
    not_whole: Optional[int]
    whole_detail: Optional[str]
    mechanisms: list[dict]
    mechanisms_missing: Optional[int]
    # what the broker itself counted of what it dropped on purpose over the run (format 1.10):
    # the messages (None: no count kept, or it could not be read) and each counter in words
    broker_dropped: Optional[int]
    broker_drops: Optional[str]
    # pass / fail / unknown (policy.result_of), and why it is not a pass, in words
    result: Annotated[str, PER_TOPIC]
    result_why: list[str]


def shown(where: str) -> tuple[str, ...]:
    """The verdict's figures marked `where` (TOTAL, PER_TOPIC), in the order Verdict declares them."""
    hints = get_type_hints(Verdict, include_extras=True)
    return tuple(k for k, t in hints.items() if get_origin(t) is Annotated and where in t.__metadata__)


def type_words(key: str) -> str:
    """A figure's type as Verdict declares it, without where it shows: "Optional[bool]"."""
    t = Verdict.__annotations__[key]
    t = getattr(t, "__forward_arg__", t)
    return re.sub(r"^Annotated\[(.+?)(, (TOTAL|PER_TOPIC))+\]$", r"\1", t)
