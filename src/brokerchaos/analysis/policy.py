"""The verdict policy, written once: each check a run is held to, and what follows from it.

A check reads one figure of a run's verdict (a count from verdicts.py's formulas) and says
whether the run passes it, fails it or cannot tell. Everything else is derived from this
table: a run's result (`result_of`), a session's rates with their Wilson intervals
(`rates`), the `--expect` names (report/expect.py), the rows of the console's session
summary and of the report, and the CSV columns beyond the seed's.

A check is typed by two things: its `Way` (what a violation is, below) and its `Scope` (which
runs it is about and which reads its judgement needs: every run, the cluster's word, a
consumer group's, transactions', an exactly-once output's, the evidence); its kind in words
(`Check.kind`: "missing", "group-seen") is their pair.

Two ways of check:
- `seen`: a violation is evidence whatever happened after it (a message read twice was read
  twice); its absence is proven only by a read that finished;
- `missing`: the violation is an absence itself (an acked message not read), so both ways
  need a finished read: in a read that did not finish, a missing message is unproven.
And one of the cluster's own word, `cluster`: what it said of its copies once every fault was
healed (a `check` row); a run without that word is undecided by it, whatever the read.

The consumer groups' checks (format 1.6) have the same two kinds over the group's own read
(`group-seen`, `group-missing`: the latter needs the checking read to have finished as
well, since a skip is a stored message the group never processed). A run without a group
is outside them (`NA`): neither in their rates nor in its result. The transactions' checks
(format 1.7) likewise, `txn-seen` and `txn-missing` over the checking read, for the runs
whose producers wrote in transactions; and the exactly-once checks, `eos-seen` and
`eos-missing` over the read of a consume-transform-produce group's output (the missing kind
needs that read, the group's and the checking read to have finished).

The replica checks (format 1.12), `replicas-seen` and `replicas-missing`, judge the copies
read node by node after the end read (`workload.read_replicas`): a run that read none is
outside them; a judgement needs every replica's read finished, a divergence seen excepted.

And the evidence that the run tested what it names (format 1.9), kind `evidence`: its fault
windows did what they name and were undone, the cluster was whole before the read, the
mechanisms the scenario requires happened. A run without such rows (no fault, an older
history) is outside them; a run short of them is `unknown` with the reason in words, never a
pass (`undecides`: the check's violation leaves the run undecided rather than failed), and
counted in the check's rate like any other violation.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Callable, Optional

if TYPE_CHECKING:
    from .verdicts import Verdict

PASS, FAIL, UNDECIDED, NA = "pass", "fail", "undecided", "n/a"


def read_decides(v: Verdict) -> bool:
    """The read reached the end (or a history without read_end rows read something): what
    it did not find is missing, not unread."""
    return not (v["read_complete"] is False or (v["read_complete"] is None and v["recv_rows"] == 0))


class Way(Enum):
    """What a violation of a check is, and so what a judgement of it needs (module docstring)."""

    SEEN = "seen"  # a violation is evidence whatever followed; its absence needs the reads finished
    MISSING = "missing"  # the violation is an absence: both ways need the reads finished
    READ = "read"  # whether the read finished
    WORD = "word"  # the cluster's own word once healed (a `check` row)
    EVIDENCE = "evidence"  # the run tested what it names (format 1.9)


def _always(_v: Verdict) -> bool:
    return True


def _groups_read(v: Verdict) -> bool:
    return v.get("group_read_complete") is True


@dataclass(frozen=True)
class Scope:
    """Which runs a check is about: a run without `has` (its figure of what the scope needs:
    groups, transactions, an exactly-once output) is outside it (n/a), neither in its rate nor
    in its result. `reads`: the reads a judgement of it needs finished; `missing_reads`: what a
    missing kind needs besides."""

    name: str
    has: Optional[str] = None  # None: every run is in it
    outside: str = "not in this run"  # why a run is outside it, in words
    reads: Callable[[Verdict], bool] = read_decides
    missing_reads: Callable[[Verdict], bool] = _always
    optional: bool = True  # its rate is only shown where some run had what it reads


RUN = Scope("run", optional=False)
CLUSTER = Scope("cluster", outside="no end check in this run")
GROUP = Scope("group", "groups", "no consumer group in this run", _groups_read, read_decides)
TXN = Scope("txn", "txns", "no transactions in this run")
EOS = Scope("eos", "eos_outputs", "no consume-transform-produce group in this run",
            lambda v: v.get("eos_read_complete") is True, lambda v: _groups_read(v) and read_decides(v))
EVIDENCE = Scope("evidence")
# a message stored twice is told from one delivered twice by the offsets (Kafka's offsets,
# Pulsar's message ids, a stream's sequence) its reads carry: a run in which a message read
# more than once came without them cannot say (MQTT, a RabbitMQ queue), one without such a
# message can
STORED = Scope("stored", "send_count", "nothing sent in this run",
               lambda v: read_decides(v) and not v.get("dups_without_offsets"))
# the replicas read one by one after the end read (format 1.12, replicas.py): a run that read
# none is outside; a judgement needs every replica's read finished, a seen divergence excepted
REPLICAS = Scope("replicas", "replica_reads", "no replica read one by one in this run",
                 lambda v: v.get("replica_reads_complete") is True)
# the scopes whose checks the console shows in the run's block only where the run has them
SCOPED = (GROUP, TXN, EOS, STORED, REPLICAS)


@dataclass(frozen=True)
class Check:
    name: str  # the rate's name in summary.json, the console and the report: "acked loss"
    key: str  # the verdict figure it reads
    scope: Scope  # which runs it is about
    way: Way  # what a violation is
    fails_run: bool  # a violation makes the run's result fail
    meaning: str  # what a violation is, in words
    expect: Optional[str] = None  # its --expect name
    holds: str = ""  # what --expect asks, in words
    detail: Optional[Callable[[Verdict], str]] = None  # the figures behind a judgement
    # a violation leaves the run unknown, not failed: the run did not test what it names
    undecides: bool = False
    absent: str = ""  # why a run is outside the check (n/a), in words, where not its scope's

    @property
    def kind(self) -> str:
        """Its kind in words, as the verdicts page shows it: "missing", "group-seen", "cluster"."""
        if self.scope is RUN:
            return self.way.value
        return self.scope.name if self.way in (Way.WORD, Way.EVIDENCE) else f"{self.scope.name}-{self.way.value}"

    def count(self, v: Verdict) -> int:
        if self.way is Way.READ:
            return int(v["read_complete"] is False)
        return int((v.get(self.key) if self.scope.optional else v[self.key]) or 0)

    def judge(self, v: Verdict) -> str:
        """pass, fail, undecided or n/a (a group check of a run without a group) for one run's verdict."""
        if self.scope.has is not None:
            return self._judge_scoped(v)
        if self.way is Way.EVIDENCE:
            return NA if v.get(self.key) is None else FAIL if v[self.key] else PASS
        n = self.count(v)
        if self.way is Way.READ:
            return FAIL if n else PASS
        if self.way is Way.WORD:
            return UNDECIDED if v.get(self.key) is None else FAIL if n else PASS
        if self.way is Way.SEEN and n:
            return FAIL
        if not read_decides(v):
            return UNDECIDED
        return FAIL if n else PASS

    def _judge_scoped(self, v: Verdict) -> str:
        """A check of what only some runs have: n/a without it; a seen violation fails at
        once; otherwise the scope's reads (and for a missing kind its `missing_reads` too)
        must have finished for a pass or a fail."""
        if not v.get(self.scope.has):
            return NA
        n = self.count(v)
        if self.way is Way.SEEN and n:
            return FAIL
        if not self.scope.reads(v) or (self.way is Way.MISSING and not self.scope.missing_reads(v)):
            return UNDECIDED
        return FAIL if n else PASS

    def why(self, v: Verdict) -> str:
        return self.detail(v) if self.detail is not None else f"{self.count(v)} {self.meaning}"

    @property
    def outside(self) -> str:
        """Why a run can be outside this check, in words."""
        return self.absent or self.scope.outside


def _evidence(key: str, none: str) -> Callable[[dict], str]:
    def detail(v: Verdict) -> str:
        from .evidence import words

        return words(v).get(key) or none
    return detail


CHECKS: tuple[Check, ...] = (
    Check("acked loss", "acked_missing", RUN, Way.MISSING, True, "acked messages missing", expect="no-loss",
          holds="no acked message missing from a finished read"),
    Check("nack then received", "received_after_nack", RUN, Way.SEEN, True, "messages read after a nack",
          expect="no-nack-received", holds="no message read after the broker nacked it"),
    Check("duplicates", "msgs_with_dups", RUN, Way.SEEN, False, "messages read more than once", expect="no-duplicates",
          holds="no message read more than once",
          detail=lambda v: f"{v['msgs_with_dups']} messages read more than once "
                           f"({v['duplicate_deliveries']} extra deliveries)"),
    Check("reordering", "out_of_order", RUN, Way.SEEN, False, "messages read out of order", expect="ordered",
          holds="no message read out of order: no JF/JB/DJF/DJB",
          detail=lambda v: f"{v['out_of_order']} out of order (JF {v['jf']}, JB {v['jb']}, DJF {v['djf']}, "
                           f"DJB {v['djb']})"),
    Check("stored duplicates", "msgs_stored_twice", STORED, Way.SEEN, False,
          "messages stored more than once (read at two or more offsets)", expect="no-stored-duplicates",
          holds="no message stored twice: each read at one offset only (a retried send the broker wrote again is "
                "one; Kafka's idempotent producer is meant to make it none)",
          detail=lambda v: f"{v.get('msgs_stored_twice') or 0} messages stored more than once "
                           f"({v.get('stored_duplicates') or 0} extra copies)" + (
                               f"; {v['dups_without_offsets']} read more than once without an offset on every "
                               "read: stored or delivered twice cannot be told" if v.get("dups_without_offsets")
                               else "")),
    Check("incomplete read", "read_complete", RUN, Way.READ, False, "reads that did not finish"),
    Check("under-replication", "under_replicated", CLUSTER, Way.WORD, False, "ledgers under-replicated at the end",
          expect="replicated", holds="the cluster itself reports nothing short of copies once every fault is "
                                     "healed (Pulsar with options.autorecovery: no ledger under-replicated)",
          detail=lambda v: v.get("end_check") or "no end check in this run"),
    Check("group skips", "group_skips", GROUP, Way.MISSING, True, "stored messages a consumer group never processed",
          expect="no-skips", holds="every message the read found was processed by every consumer group"),
    Check("group duplicates", "group_duplicates", GROUP, Way.SEEN, False, "messages a consumer group processed again",
          expect="no-group-duplicates", holds="no message processed more than once by a consumer group",
          detail=lambda v: f"{v.get('group_duplicates') or 0} processed again (stored twice "
                           f"{v.get('group_dup_stored') or 0}, to another consumer {v.get('group_dup_handover') or 0}"
                           f", to the same one {v.get('group_dup_same') or 0})"),
    Check("group nonmonotonic", "group_nonmonotonic", GROUP, Way.SEEN, False,
          "deliveries not past the consumer's previous position", expect="group-monotonic",
          holds="each consumer's positions in a partition only move forward between assignments"),
    Check("commits backwards", "group_commit_backwards", GROUP, Way.SEEN, False,
          "commits below an earlier commit of the partition", expect="commits-forward",
          holds="no committed position of a group's partition goes back"),
    Check("aborted reads", "aborted_reads", TXN, Way.SEEN, True, "messages of aborted transactions read",
          expect="no-aborted-reads", holds="no message of an aborted transaction in the (read_committed) read"),
    Check("torn transactions", "torn_txns", TXN, Way.MISSING, True, "committed transactions read in part",
          expect="whole-transactions", holds="every committed transaction read whole or not at all"),
    Check("offset conflicts", "offset_conflicts", TXN, Way.SEEN, True, "offsets holding two different messages",
          expect="consistent-offsets", holds="no offset at which two different messages were reported or read"),
    Check("nonmonotonic reads", "nonmonotonic_reads", TXN, Way.SEEN, True,
          "reads not past the reader's previous offset in the partition", expect="monotonic-reads",
          holds="each reader's offsets in a partition only move forward"),
    Check("interleaved transactions", "interleaved_txns", TXN, Way.SEEN, True,
          "reads of a transaction's message after a later transaction's of the same producer in the partition",
          expect="txns-in-order", holds="no producer's transactions mixed in a partition: each read before the next"),
    Check("exactly-once duplicates", "eos_duplicates", EOS, Way.SEEN, True,
          "messages a consume-transform-produce group wrote to its output more often than the input holds them",
          expect="exactly-once", holds="no message in a consume-transform-produce group's output more often than "
                                       "in its input"),
    Check("exactly-once loss", "eos_missing", EOS, Way.MISSING, True,
          "acked messages missing from a consume-transform-produce group's output", expect="eos-no-loss",
          holds="every acked message in the output of a consume-transform-produce group that finished"),
    Check("exactly-once nacked", "eos_nacked", EOS, Way.SEEN, True,
          "nacked (aborted) messages in a consume-transform-produce group's output", expect="eos-committed-only",
          holds="no message of a nacked or aborted write in a consume-transform-produce group's output"),
    Check("replicas diverge", "replicas_diverged", REPLICAS, Way.SEEN, True,
          "positions holding different messages on two replicas, or acked messages on some replicas and not on "
          "others, once the cluster was whole", expect="replicas-agree",
          holds="every replica read one by one holds the same message at each position and every acked message its "
                "partition's other replicas hold",
          detail=lambda v: f"{v.get('replicas_diverged') or 0} diverged: {v.get('diverged_positions') or 0} positions "
                           f"holding different messages, {v.get('diverged_acked') or 0} acked messages on some "
                           "replicas only (divergence.csv)"),
    Check("acked on no replica", "acked_on_no_replica", REPLICAS, Way.MISSING, True,
          "acked messages on no replica's copy (the broker lost them, not the read)", expect="acked-on-a-replica",
          holds="every acked message is on some replica's copy, each read one by one to its end"),
    Check("fault not in effect", "faults_not_in_effect", EVIDENCE, Way.EVIDENCE, True,
          "fault windows whose effect the harness did not see (failed, never fired, not observed or not undone)",
          expect="fault-in-effect", holds="every fault window did what its action names, as the harness saw it "
                                          "(brokerchaos faults: what each action is seen by), and its heal undid it",
          detail=_evidence("faults_not_in_effect", "every fault window's effect observed"), undecides=True,
          absent="no fault window in this run"),
    Check("cluster not whole", "not_whole", EVIDENCE, Way.EVIDENCE, True,
          "runs not whole again before the read (a node down, the cluster or the stream short)",
          expect="cluster-whole", holds="before the read, every node the faults did not mean to leave down serves, "
                                        "and the cluster says it and the stream are whole",
          detail=_evidence("not_whole", "whole before the read"), undecides=True,
          absent="no whole check in this history"),
    Check("mechanism missing", "mechanisms_missing", EVIDENCE, Way.EVIDENCE, True,
          "mechanisms the scenario requires that did not occur", expect="mechanism",
          holds="every mechanism the scenario `requires` happened in the run (its question was asked)",
          detail=_evidence("mechanisms_missing", "every required mechanism occurred"), undecides=True,
          absent="the scenario requires no mechanism"),
)
BY_NAME = {c.name: c for c in CHECKS}


def reported(rate_tables: list[dict]) -> list[Check]:
    """The checks a table of sessions shows, from their rates (`rates()`, summary.json's
    `verdicts`): every check, an optional one (a `cluster` or a group check) only where some
    run had what it reads."""
    return [c for c in CHECKS if not c.scope.optional or any(c.name in (t or {}) for t in rate_tables)]


def result_of(v: Verdict) -> str:
    """pass / fail / unknown: the checks that fail a run; one that cannot decide, or whose
    violation says the run did not test what it names (`undecides`), makes the run unknown
    (never a pass), unless another already failed it."""
    judged = [(c, c.judge(v)) for c in CHECKS if c.fails_run]
    if any(j == FAIL and not c.undecides for c, j in judged):
        return "fail"
    return "unknown" if any(j == UNDECIDED or (j == FAIL and c.undecides) for c, j in judged) else "pass"


def reasons(v: Verdict) -> list[str]:
    """Why the run is not a pass, in words: each check that fails it or leaves it undecided."""
    out = []
    for c in CHECKS:
        if not c.fails_run:
            continue
        j = c.judge(v)
        if j == FAIL:
            out.append(f"{c.name}: {c.why(v)}")
        elif j == UNDECIDED:
            out.append(f"{c.name}: undecided, " + (f"the read did not finish ({v.get('read_status')})"
                                                   if not read_decides(v) else c.why(v)))
    return out


def evidence_short(v: Verdict) -> Optional[str]:
    """What the run's evidence lacks, in words (None when it tested what it names): a data
    expectation it passes is then undecided."""
    bad = [f"{c.name}: {c.why(v)}" for c in CHECKS if c.way is Way.EVIDENCE and c.judge(v) == FAIL]
    return "; ".join(bad) or None


def rates(verdicts: list[Verdict], wilson) -> dict[str, dict]:
    """Per check, how many runs violated it of the runs it decided, with `wilson(k, n)`'s
    95% interval: a run whose read did not finish is out of a check it cannot decide, as it
    is out of the pass/fail count. An optional check no run had is left out."""
    out = {}
    for c in CHECKS:
        judged = [c.judge(v) for v in verdicts]
        k, n = judged.count(FAIL), sum(j in (PASS, FAIL) for j in judged)
        if c.scope.optional and not n:
            continue  # the cluster never gave its word, or no run had a group
        lo, hi = wilson(k, n)
        out[c.name] = {"runs": k, "of": n, "wilson95": [lo, hi]}
    return out
