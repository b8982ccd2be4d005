"""Which Parquet files are a history, and whether a reader of this version can read them.

Checked with pyarrow (file footers only) before Spark reads anything, so that a file from
another tool gets one line naming the file and column instead of a JVM stack trace.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .schema import EVENT_TYPES, FORMAT_VERSION, SCHEMA, VERSION_KEY

# the columns every row of a history has a value in
REQUIRED = ("run", "client", "seq", "t_ns", "type")
# rows a producer writes, which always carry the message's producer and value
PRODUCER_TYPES = ("send", "ack", "nack", "unknown")


class HistoryError(ValueError):
    """A file this version cannot read as a history; the message names the file and column."""


def history_files(path: Path) -> list[Path]:
    """Every `*.parquet` at any depth below `path` (or `path` itself); a writer may leave `*.tmp`."""
    if path.is_file():
        return [path] if path.suffix == ".parquet" else []
    return sorted(p for p in path.rglob("*.parquet") if p.is_file())


def _version(schema: pa.Schema) -> Optional[tuple[int, int]]:
    raw = (schema.metadata or {}).get(VERSION_KEY)
    if raw is None:
        return None  # written by 1.0, or by another tool from the format document
    try:
        major, _, minor = raw.decode().partition(".")
        return int(major), int(minor or 0)
    except ValueError:
        return (-1, 0)


@dataclass
class Checked:
    """Paths for Spark to read: the originals, unless some file needed a normalised copy."""

    paths: list[str]
    files: int
    bytes: int = 0  # the history files' size on disk
    _tmp: Optional[tempfile.TemporaryDirectory] = None

    def cleanup(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


def _null_count(pf: pq.ParquetFile, column: str) -> int:
    """Nulls in a column, from the row groups' statistics where every one has them (the
    footer alone), else by reading the column."""
    md = pf.metadata
    i = pf.schema_arrow.get_field_index(column)
    counts = []
    for g in range(md.num_row_groups):
        st = md.row_group(g).column(i).statistics
        if st is None or not st.has_null_count:
            return pf.read(columns=[column]).column(0).null_count
        counts.append(st.null_count)
    return sum(counts)


def _check_rows(f: Path, pf: pq.ParquetFile) -> None:
    """What the analysis cannot do without: the columns every row has, each with a value in
    every row, an event type the format knows in `type`, and a producer and value column
    with something in them where the file holds a producer's rows."""
    names = set(pf.schema_arrow.names)
    for col in REQUIRED:
        if col not in names:
            raise HistoryError(f"history file '{f}': no column '{col}' (every row needs {', '.join(REQUIRED)}: "
                               f"docs/history-format.md)")
    rows = pf.metadata.num_rows
    if rows == 0:
        return
    for col in REQUIRED:
        nulls = _null_count(pf, col)
        if nulls:
            what = "is empty" if nulls == rows else f"is null in {nulls} of {rows} rows"
            raise HistoryError(f"history file '{f}': column '{col}' {what} (every row needs one: "
                               f"docs/history-format.md)")
    # read as a dictionary: its few distinct values decoded once (10 M messages: 0.12 s, 0.63 plain)
    typed = pq.ParquetFile(f, read_dictionary=["type"]).read(columns=["type"]).column(0)
    kinds = set(typed.unique().to_pylist())
    unknown = sorted(kinds - set(EVENT_TYPES))
    if unknown:
        raise HistoryError(f"history file '{f}': column 'type' holds {unknown[0]!r}, which is not an event type of "
                           f"the format ({', '.join(EVENT_TYPES)}; docs/history-format.md)")
    sent = sorted(kinds & set(PRODUCER_TYPES))
    for col in ("producer", "value") if sent else ():
        if col not in names or _null_count(pf, col) == rows:
            raise HistoryError(f"history file '{f}': column '{col}' is {'missing' if col not in names else 'empty'}, "
                               f"and the file holds a producer's rows ({', '.join(sent)})")
    _check_placed(f, pf, names)


def _check_placed(f: Path, pf: pq.ParquetFile, names: set[str]) -> None:
    """A member's position is in a partition: a row with a `position` and no `partition`
    would drop out of the verdicts that compare positions (group_nonmonotonic, commits
    backwards, the group's outages), so it is refused, not left out."""
    if "position" not in names or _null_count(pf, "position") == pf.metadata.num_rows:
        return
    t = pf.read(columns=[c for c in ("type", "position", "partition") if c in names])
    unplaced = pc.is_valid(t.column("position"))
    if "partition" in names:
        unplaced = pc.and_(unplaced, pc.is_null(t.column("partition")))
    n = pc.sum(unplaced.cast(pa.int64())).as_py() or 0
    if n:
        first = t.column("type").filter(unplaced)[0].as_py()
        raise HistoryError(f"history file '{f}': rows with a 'position' and no 'partition': {n} (the first a "
                           f"'{first}'; a member's position is in a partition; group_nonmonotonic and commits "
                           f"backwards compare positions per partition: docs/history-format.md)")


def check(path: Path) -> Checked:
    """Check every history file below `path`: version, each known column's type, and the
    rows (_check_rows: required columns, event types).

    A column whose type is null (what pyarrow and pandas infer for a column of Nones) is an
    empty column: such a file is copied with the column cast to its type, and Spark reads the
    copy. A missing optional column is empty too (Spark fills it with nulls). Anything else
    raises HistoryError.
    """
    files = history_files(path)
    size = sum(f.stat().st_size for f in files)
    want = {f.name: f.type for f in SCHEMA}
    fixes: list[tuple[Path, pa.Schema]] = []
    for f in files:
        try:
            pf = pq.ParquetFile(f)
            schema = pf.schema_arrow
        except (OSError, pa.ArrowException) as e:
            raise HistoryError(f"history file '{f}': not readable as Parquet ({str(e).splitlines()[0]})") from None
        v = _version(schema)
        if v is not None and v[0] != FORMAT_VERSION[0]:
            raise HistoryError(f"history file '{f}': format version {schema.metadata[VERSION_KEY].decode()}; "
                               f"this brokerchaos reads {FORMAT_VERSION[0]}.x")
        nulls = False
        for col in schema:
            expected = want.get(col.name)
            if expected is None or col.type == expected:
                continue
            if pa.types.is_null(col.type):
                nulls = True
                continue
            if pa.types.is_large_string(col.type) and pa.types.is_string(expected):
                nulls = True  # same values; Spark wants the plain type
                continue
            raise HistoryError(f"history file '{f}': column '{col.name}' is {col.type}, expected {expected} "
                               f"(docs/history-format.md)")
        _check_rows(f, pf)
        if nulls:
            fixes.append((f, schema))
    if not fixes:
        return Checked([str(path)], len(files), size)
    tmp = tempfile.TemporaryDirectory(prefix="brokerchaos-history-")
    fixed = {f for f, _ in fixes}
    out = [str(f) for f in files if f not in fixed]
    for i, (f, _) in enumerate(fixes):
        t = pq.read_table(f)
        cols = [t.column(c.name).cast(want[c.name]) if c.name in want else t.column(c.name) for c in t.schema]
        fields = [pa.field(c.name, want.get(c.name, c.type)) for c in t.schema]
        dest = Path(tmp.name) / f"{i:06d}-{f.name}"
        pq.write_table(pa.Table.from_arrays(cols, schema=pa.schema(fields)), dest)
        out.append(str(dest))
    return Checked(out, len(files), size, tmp)
