"""One run of a scenario file through a real session, for integration tests that look at a
single run's verdict, its run.json and its first fault window."""
from dataclasses import dataclass
from pathlib import Path

from brokerchaos import validation as sc
from brokerchaos.runner import Session
from observers import Quiet


@dataclass
class OneRun:
    verdict: dict
    meta: dict  # run.json
    window: dict  # the first fault's first window
    dir: Path  # the run's directory


def one_run(scenario: str, out: Path, name: str, **overrides) -> OneRun:
    s = sc.load(scenario, {"runs": 1, "name": name, **overrides})
    result = Session(s, out, observer=Quiet(), report=False).run()
    (v,) = result.verdicts
    meta = result.metas["run-001"]
    return OneRun(v, meta, meta["faults"][0]["windows"][0], result.dir / "run-001")
