"""What survives the harness in a session's directory: what kind of session it is and its
tag (session.json), each finished run's verdict appended at once (verdicts.jsonl), and, for
a session resumed after a kill, the runs already there (a run cut short is marked
incomplete and never run again under its id)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import pyarrow.compute as pc
import pyarrow.dataset as ds

from ..history import Recorder

if TYPE_CHECKING:
    from ..analysis.verdicts import Verdict

FACTS = "session.json"
VERDICTS = "verdicts.jsonl"
CUT_SHORT = "cut-short"  # the history client of a run's cut-short row


def mark_cut_short(run_dir: Path, run_id: str, why: str) -> bool:
    """A run the harness stopped in: one read_end row saying so, from a client of its own,
    so that the analysis never takes the history for a finished read (a live receiver's rows
    alone would decide, and could pass). Nothing when the run wrote no history, or was marked
    already."""
    hist = run_dir / "history"
    files = sorted(str(f) for f in hist.glob("*.parquet")) if hist.is_dir() else []
    if not files or any(Path(f).name.startswith(CUT_SHORT) for f in files):
        return False
    last = pc.max(ds.dataset(files).to_table(columns=["t_ns"]).column("t_ns")).as_py() or 0
    with Recorder(hist, run_id, CUT_SHORT, 0) as r:
        r.record("read_end", detail=f"incomplete: {why}", t_ns=last + 1)
    return True


class Journal:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.kept: dict[str, dict] = {}  # finished runs' verdicts, as verdicts.jsonl holds them

    def facts(self) -> dict:
        try:
            return json.loads((self.dir / FACTS).read_text())
        except (OSError, ValueError):
            return {}

    def begin(self, scenario_json: str, kind: str, tag: str, external: Optional[str], command: Optional[str]) -> None:
        """A new session's files: its scenario, its kind and tag, the command that made it."""
        (self.dir / "scenario.json").write_text(scenario_json)
        (self.dir / FACTS).write_text(json.dumps({"kind": kind, "tag": tag, "external": external}, indent=2))
        if command:
            (self.dir / "command.txt").write_text(command + "\n")

    def take_over(self) -> tuple[dict[str, dict], int]:
        """The runs of a session to resume (run.json of each, a run the harness was killed in
        marked incomplete: its history is kept, so the analysis reports it), and the index
        of the next run."""
        metas: dict[str, dict] = {}
        indices = []
        for d in sorted(self.dir.glob("run-*")):
            if not d.is_dir() or not d.name[4:].isdigit():
                continue
            indices.append(int(d.name[4:]))
            f = d / "run.json"
            try:
                meta = json.loads(f.read_text())
            except (OSError, ValueError):
                meta = {"run": d.name, "index": int(d.name[4:])}
            if meta.get("status") != "finished":
                meta["status"] = "incomplete"
                meta.setdefault("incomplete", "cut short: the harness stopped during this run")
                mark_cut_short(d, d.name, meta["incomplete"])
                f.write_text(json.dumps(meta, indent=2, default=str))
            metas[d.name] = meta
        self.kept = self._read_kept()
        return metas, max(indices, default=0) + 1

    def _read_kept(self) -> dict[str, dict]:
        kept: dict[str, dict] = {}
        try:
            lines = (self.dir / VERDICTS).read_text().splitlines()
        except OSError:
            return kept
        for line in lines:
            try:
                v = json.loads(line)
            except ValueError:  # a line cut by a kill mid-write
                continue
            kept[v["run"]] = v  # once per run, whatever was appended twice
        return kept

    def keep(self, v: Verdict) -> None:
        """A finished run's verdict, appended at once: the soak's progress survives a kill."""
        self.kept[v["run"]] = v
        with open(self.dir / VERDICTS, "a") as fh:
            fh.write(json.dumps(v, default=str) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
