"""The user's files and paths, checked before anything starts: one line naming what is wrong.

A scenario, campaign or cluster file is read here (a directory, a binary file, an empty one
and a YAML syntax error each get their own line, with the line and column of the error);
an output directory or file is tried (a file created there and removed) so that a run never
finds out at its end that it cannot write its results.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Optional

import yaml

from .errors import ScenarioError


class _Unique(yaml.SafeLoader):
    """YAML's safe loader that refuses a key given twice in one mapping: YAML keeps the last
    and says nothing, and a run would silently use another value than the one read first."""


def _mapping(loader: _Unique, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} given twice (first at line {seen[key].line + 1})", key_node.start_mark)
            seen[key] = key_node.start_mark
        except TypeError:  # an unhashable key: the constructor says so below
            pass
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_Unique.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def read_yaml(path: str | Path, what: str, empty_ok: bool = False) -> Any:
    """The YAML document in `path`; `what` names it in the error ("scenario file"). An empty
    document (nothing, or only comments) is refused unless `empty_ok`."""
    p = Path(path)
    where = f"{what} '{p}'"
    if p.is_dir():
        raise ScenarioError(f"{where}: is a directory, not a file")
    if not p.exists():
        raise ScenarioError(f"{where}: not found")
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise ScenarioError(f"{where}: cannot read it ({e.strerror})") from None
    try:
        if b"\0" in raw:
            raise UnicodeDecodeError("utf-8", raw, raw.index(b"\0"), raw.index(b"\0") + 1, "NUL byte")
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ScenarioError(f"{where}: not a text file (byte {e.start} is not UTF-8 text)") from None
    try:
        doc = yaml.load(text, Loader=_Unique)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ScenarioError(f"{where}: invalid YAML{at}: {e.problem or e.context}") from None
    except yaml.YAMLError as e:
        raise ScenarioError(f"{where}: invalid YAML ({str(e).splitlines()[0]})") from None
    if not empty_ok and (doc is None or doc == {}):
        raise ScenarioError(f"{where}: is empty (a file of defaults alone is refused: give at least `system:`)")
    return doc


def directory_error(path: str | Path, flag: str) -> Optional[str]:
    """Why results cannot be written below `path` (None if they can): it is tried, and what
    the trial created is removed again."""
    if not str(path).strip():
        return f"{flag}: empty (give a directory)"
    p = Path(path)
    where = f"{flag} '{p}'"
    if p.exists() and not p.is_dir():
        return f"{where}: exists and is not a directory"
    missing, q = [], p.absolute()
    while not q.exists() and q != q.parent:
        missing.append(q)
        q = q.parent
    if not q.is_dir():
        return f"{where}: '{q}' is a file, not a directory"
    made: list[Path] = []
    try:
        for d in reversed(missing):
            d.mkdir()
            made.append(d)
        fd, probe = tempfile.mkstemp(dir=p, prefix=".brokerchaos-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        return f"{where}: cannot write there ({e.strerror})"
    finally:
        for d in reversed(made):
            try:
                d.rmdir()
            except OSError:
                pass
    return None


def file_error(path: str | Path, flag: str) -> Optional[str]:
    """Why a file cannot be written at `path` (None if it can): tried, and removed again if
    the trial created it."""
    if not str(path).strip():
        return f"{flag}: empty (give a file)"
    p = Path(path)
    where = f"{flag} '{p}'"
    if p.is_dir():
        return f"{where}: is a directory, not a file"
    why = directory_error(p.parent, flag)
    if why or not p.parent.exists():  # a directory still to be made was tried, and removed again
        return why
    existed = p.exists()
    try:
        with open(p, "a"):
            pass
    except OSError as e:
        return f"{where}: cannot write it ({e.strerror})"
    if not existed:
        try:
            p.unlink()
        except OSError:
            pass
    return None
