"""What a CI pipeline expects of a session (`--expect no-loss,ordered,max-outage=10s`): each
run's verdict held against each expectation gives pass, fail or undecided; the session's exit
code is 3 when anything failed, else 4 when anything was undecided, else 0; `--junit FILE`
writes one test case per run and expectation.

A violation seen is a violation even in a read that did not finish (a duplicate read is read
twice whatever comes after); an absence is only proven by a finished read."""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from ..analysis.policy import (
    CHECKS,
    CLUSTER,
    GROUP,
    NA,
    PASS,
    STORED,
    UNDECIDED,
    Check,
    Way,
    evidence_short,
    read_decides,
)

if TYPE_CHECKING:
    from ..analysis.verdicts import Verdict

EXIT_PASS, EXIT_VIOLATED, EXIT_UNDECIDED = 0, 3, 4


class ExpectError(ValueError):
    """An --expect list that cannot be used; the message names the expectation."""

Outcome = tuple[str, str]  # (pass | fail | undecided, the figures that say why)


def _check(c: Check) -> Callable[[dict, Optional[float]], Outcome]:
    """An expectation from the policy table: its judgement, and the figures that say why."""
    def check(v, _arg) -> Outcome:
        status = c.judge(v)
        if status == NA:
            return UNDECIDED, c.outside
        short = evidence_short(v) if c.way is not Way.EVIDENCE else None
        if status == PASS and short:  # a pass is only as good as the evidence that the run tested it
            return UNDECIDED, f"{c.why(v)}, but the run did not test what it names: {short}"
        if status == UNDECIDED and c.scope is GROUP and read_decides(v):
            return status, "a consumer group's read did not finish (" + "; ".join(
                f"{g}: {x.get('read_status') or 'no read_end'}" for g, x in (v.get("consumer_groups") or {}).items()
                if x.get("read_complete") is not True) + ")"
        if status == UNDECIDED and c.scope is STORED and read_decides(v):
            return status, c.why(v)  # a message read twice without offsets: which kind is not known
        if status == UNDECIDED and c.scope is not CLUSTER:
            return status, f"the read did not finish ({v.get('read_status') or 'no read recorded'})"
        return status, c.why(v)
    return check


def _max_outage(v, limit_s: float) -> Outcome:
    if not v.get("timing", True):
        return "undecided", "outages not computed (--no-timing)"
    short = evidence_short(v)
    if short:
        return "undecided", f"the run did not test what it names: {short}"
    gaps = v.get("fault_ack_gaps_ms") or []
    if not gaps:
        return "pass", "no fault window"
    if any(g is None for g in gaps):
        return "fail", "the producer had no ack after a fault to the end of its write"
    worst = max(gaps)
    return ("fail" if worst > limit_s * 1000 else "pass"), f"longest outage {worst:,.0f} ms (limit {limit_s:g} s)"


@dataclass(frozen=True)
class Kind:
    check: Callable[[dict, Optional[float]], Outcome]
    takes: Optional[str]  # what its `=VALUE` is, None: no value
    description: str


KINDS: dict[str, Kind] = {
    **{c.expect: Kind(_check(c), None, c.holds) for c in CHECKS if c.expect},
    "max-outage": Kind(_max_outage, "duration", "every fault window's producer outage, the longest ack-free "
                                                "interval from the fault on, at most DURATION: 500ms, 10s, 2m"),
}


@dataclass(frozen=True)
class Expectation:
    name: str
    arg: Optional[float]
    text: str

    def check(self, v: Verdict) -> Outcome:
        return KINDS[self.name].check(v, self.arg)


def seconds(text: str) -> float:
    """`500ms`, `10s`, `2m`, `6h`, `1d` or plain seconds -> seconds; ValueError otherwise
    (`--expect max-outage=` and `soak --duration` read durations alike)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*", text or "")
    if not m:
        raise ValueError(text)
    return float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}[m.group(2)]


def parse(text: str) -> list[Expectation]:
    """`no-loss,max-outage=10s` -> expectations; a bad one is an ExpectError naming it."""
    out = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        name, _, value = item.partition("=")
        kind = KINDS.get(name)
        if kind is None:
            raise ExpectError(f"--expect: unknown expectation {name!r} (known: {', '.join(KINDS)})")
        if kind.takes is None and value:
            raise ExpectError(f"--expect: {name} takes no value (got {item!r})")
        if kind.takes is not None:
            try:
                arg: Optional[float] = seconds(value)
            except ValueError:
                raise ExpectError(f"--expect: {name} needs a {kind.takes}, e.g. {name}=10s (got {item!r})") from None
        else:
            arg = None
        out.append(Expectation(name, arg, item))
    if not out:
        raise ExpectError("--expect: no expectation given (known: " + ", ".join(KINDS) + ")")
    return out


@dataclass
class Case:
    suite: str
    run: str
    expectation: str
    status: str
    detail: str


def evaluate(suite: str, verdicts: list[Verdict], expectations: list[Expectation]) -> list[Case]:
    return [Case(suite, v["run"], e.text, *e.check(v)) for v in verdicts for e in expectations]


def _code(failed: bool, undecided: bool) -> int:
    return EXIT_VIOLATED if failed else EXIT_UNDECIDED if undecided else EXIT_PASS


def exit_code(cases: list[Case]) -> int:
    statuses = {c.status for c in cases}
    return _code("fail" in statuses, "undecided" in statuses)


def result_exit(results) -> int:
    """Sessions' results (pass, fail, unknown) as one exit code: the same codes as
    expectations, a failed run counting as a violation and an undecided one as undecided."""
    results = set(results)
    return _code("fail" in results, "unknown" in results)


def lines(cases: list[Case]) -> list[str]:
    """The console's account: one line per case that did not pass, and a count."""
    out = [f"  {c.status.upper():9} {c.suite} {c.run}: {c.expectation}: {c.detail}"
           for c in cases if c.status != "pass"]
    n = {s: sum(c.status == s for c in cases) for s in ("pass", "fail", "undecided")}
    return [f"Expectations: {n['pass']} passed, {n['fail']} failed, {n['undecided']} undecided"] + out


JUNIT_CASE = "{run}: {expectation}"  # a test case's name; its classname is the session's suite


def write_junit(path: Path, cases: list[Case]) -> None:
    """One <testsuite> per session, one <testcase> per run and expectation: a violation is a
    <failure>, an undecided case an <error> (the pipeline must not read it as a pass)."""
    root = ET.Element("testsuites", name="brokerchaos")
    for suite in dict.fromkeys(c.suite for c in cases):
        mine = [c for c in cases if c.suite == suite]
        s = ET.SubElement(root, "testsuite", name=suite, tests=str(len(mine)),
                          failures=str(sum(c.status == "fail" for c in mine)),
                          errors=str(sum(c.status == "undecided" for c in mine)))
        for c in mine:
            name = JUNIT_CASE.format(run=c.run, expectation=c.expectation)
            t = ET.SubElement(s, "testcase", classname=suite, name=name)
            if c.status == "fail":
                ET.SubElement(t, "failure", message=c.detail, type="violation").text = c.detail
            elif c.status == "undecided":
                ET.SubElement(t, "error", message=c.detail, type="undecided").text = c.detail
            else:
                ET.SubElement(t, "system-out").text = c.detail
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
