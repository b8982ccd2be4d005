"""Bad input: one line naming the field, exit code 2 (cli.py), before anything starts.

Kept apart from the models so that every layer (scenario, systems, faults, campaigns) can
raise and word it without importing another.
"""
from __future__ import annotations

import difflib

from pydantic import ValidationError


class ScenarioError(ValueError):
    """A scenario, cluster file or campaign that cannot run; the message names the field."""


def first_error(e: ValidationError, within: str = "", what: str = "scenario") -> str:
    """One line for a validation error's first problem; `within` is the field path of a
    nested model validated on its own (a fault's params, a system's options)."""
    errors = e.errors()
    # an unknown key first: a misspelt required key is also reported missing, and the
    # missing one alone would hide the typo
    unknown = [x for x in errors if x["type"] == "extra_forbidden"]
    err = (unknown or errors)[0]
    loc = ".".join([within] * bool(within) + [str(p) for p in err["loc"]])
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = "unknown field"
        parent, key = tuple(err["loc"][:-1]), str(err["loc"][-1])
        missing = [str(x["loc"][-1]) for x in errors if x["type"] == "missing" and tuple(x["loc"][:-1]) == parent]
        close = difflib.get_close_matches(key, missing, n=1)
        if close:
            msg += f" (did you mean '{close[0]}', which is required?)"
    return f"{what} field '{loc}': {msg}" if loc else f"{what}: {msg}"
