"""The one way a session's analysis becomes its files: analysis -> the seed's table ->
results.csv, summary.json and the logs -> report.html. `run`, `soak`, `campaign` (through
their sessions) and `analyze` all end here, with the same failure handling: the files come
first, a page that fails to draw is said and loses nothing, and the analysis's cached
frames are released whatever happens."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from ..analysis import outages
from ..report import files, html, session_table
from ..systems import SYSTEMS

if TYPE_CHECKING:
    from ..analysis.verdicts import Verdict


@dataclass
class Finished:
    verdicts: list[Verdict]
    summary: dict
    report: Optional[Path] = None
    report_error: str = ""  # why report.html was not written, if it was asked for and failed

    def report_line(self, session: Path) -> Optional[str]:
        if self.report is not None:
            return f"Report: {self.report}"
        if self.report_error:
            return f"Report: not written ({self.report_error}); `brokerchaos analyze {session}` tries again"
        return None


def finish(spark, df, analysis, metas: dict, out: Optional[Path], report: bool = True,
           extra: Optional[dict] = None) -> Finished:
    """`analysis` of the history `df` as the session's files in `out` (None: none written,
    the summary only), and report.html unless `report` is False; `metas`: the runs'
    run.json; `extra`: facts summary.json keeps beside the verdicts' (why a session stopped)."""
    try:
        verdicts = session_table.complete(analysis.verdicts)
        if out is None:
            return Finished(verdicts, {**files.summarize(verdicts), **(extra or {})})
        summary = files.write_session(analysis, out, metas, backoff_schedules(metas), history=df, extra=extra)
        done = Finished(verdicts, summary)
        if report:
            try:
                done.report = html.write_session(spark, df, analysis, out, metas, summary)
            except Exception as e:  # the page is a view of what is written already: say so, lose nothing
                done.report_error = f"{type(e).__name__}: {e}"
        return done
    finally:
        analysis.release()


def backoff_schedules(metas: dict) -> dict[str, list[outages.Step]]:
    """The back-off steps a session's clients followed, in ms after a failure, from its
    scenario (run.json): the harness's resends, and the client library's reconnects where
    the system declares them. summary.json counts the outages near each step."""
    for m in metas.values():
        sc = m.get("scenario") or {}
        w = sc.get("workload") or {}
        out = {}
        if w.get("retries"):
            out["resend"] = outages.resend_steps(w.get("retry_backoff", 0.1), w.get("retry_backoff_max", 1.0),
                                                 w["retries"])
        system = sc.get("system")
        client = SYSTEMS.get(system).Client if system in SYSTEMS.names() else None
        if client is not None and client.reconnect_steps_ms:
            out["reconnect"] = outages.jittered(client.reconnect_steps_ms, client.reconnect_jitter)
        return out
    return {}
