"""Bad input: one line naming the field, exit code 2 (cli.py), before anything starts.

Kept apart from the models so that every layer (scenario, systems, faults, campaigns) can
raise and word it without importing another.
"""
from __future__ import annotations

from pydantic import ValidationError


class ScenarioError(ValueError):
    """A scenario, cluster file or campaign that cannot run; the message names the field."""


def first_error(e: ValidationError, within: str = "", what: str = "scenario") -> str:
    """One line for a validation error's first problem; `within` is the field path of a
    nested model validated on its own (a fault's params, a system's options)."""
    err = e.errors()[0]
    loc = ".".join([within] * bool(within) + [str(p) for p in err["loc"]])
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = "unknown field"
    return f"{what} field '{loc}': {msg}" if loc else f"{what}: {msg}"
