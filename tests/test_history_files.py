"""What the recorder writes and what `analyze` accepts: event types, the format version in
each file, and files written by other tools checked before Spark reads them."""
import json
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from brokerchaos import cli
from brokerchaos.history import FORMAT_VERSION, SCHEMA, VERSION_KEY, Recorder


def test_recorder_refuses_an_unknown_event_type_and_writes_the_version(tmp_path):
    rec = Recorder(tmp_path, "r1", "p1", time.monotonic_ns())
    with pytest.raises(ValueError, match="unknown history event type 'acked'"):
        rec.record("acked", "p1", 1)
    rec.record("send", "p1", 1)
    rec.record("fault", node="n1", detail="kill leader", window=7)
    rec.close()
    (f,) = tmp_path.glob("*.parquet")
    meta = pq.read_schema(f).metadata
    assert meta[VERSION_KEY] == ".".join(map(str, FORMAT_VERSION)).encode() == b"1.12"
    rows = pq.read_table(f).to_pylist()
    assert [(r["type"], r["window"]) for r in rows] == [("send", None), ("fault", 7)]


def _foreign_rows(run="X"):
    """A history as another tool would write it from the format document: plain Python
    values, and columns with nothing in them."""
    rows = []
    for v in range(1, 6):
        rows.append({"run": run, "client": "w", "seq": 2 * v - 1, "t_ns": 1000 * v, "type": "send",
                     "producer": "w", "value": v, "offset": None, "node": None, "detail": None})
        rows.append({"run": run, "client": "w", "seq": 2 * v, "t_ns": 1000 * v + 10, "type": "ack",
                     "producer": "w", "value": v, "offset": None, "node": None, "detail": None})
    for i, v in enumerate([1, 2, 3, 5], 1):
        rows.append({"run": run, "client": "r", "seq": i, "t_ns": 10_000 + i, "type": "recv",
                     "producer": "w", "value": v, "offset": None, "node": None, "detail": None})
    return rows


def test_null_typed_columns_are_empty_columns(tmp_path, capsys, spark):
    table = pa.Table.from_pylist(_foreign_rows())  # pyarrow infers null for node, offset, detail
    assert pa.types.is_null(table.schema.field("node").type)
    pq.write_table(table, tmp_path / "h.parquet")
    assert cli.main(["analyze", str(tmp_path), "--format", "json", "--no-write"]) == 0
    (v,) = json.loads(capsys.readouterr().out)
    assert (v["send_count"], v["pos_ack_count"], v["received"], v["acked_missing"]) == (5, 5, 4, 1)
    assert v["result"] == "fail" and v["faults"] == []


def test_a_real_type_mismatch_is_one_line_naming_file_and_column(tmp_path, capsys):
    rows = _foreign_rows()
    for r in rows:
        r["value"] = str(r["value"])
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "bad.parquet")
    assert cli.main(["analyze", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "bad.parquet" in err and "column 'value' is string, expected int64" in err


def test_a_newer_major_version_is_refused(tmp_path, capsys):
    schema = SCHEMA.with_metadata({VERSION_KEY: b"2.0"})
    rows = [{**r, "window": None} for r in _foreign_rows()]
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp_path / "future.parquet")
    assert cli.main(["analyze", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "future.parquet" in err and "format version 2.0" in err


def test_a_file_that_is_not_parquet_is_refused(tmp_path, capsys):
    (tmp_path / "junk.parquet").write_bytes(b"PAR1 not really")
    assert cli.main(["analyze", str(tmp_path)]) == 2
    assert "junk.parquet" in capsys.readouterr().err


# -- foreign histories the analysis would misread: refused before Spark starts ---------------

def _refused(tmp_path, capsys, rows, *words, name="h.parquet"):
    pq.write_table(pa.Table.from_pylist(rows) if isinstance(rows, list) else rows, tmp_path / name)
    assert cli.main(["analyze", str(tmp_path), "--no-write"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and name in err, err
    for w in words:
        assert w in err, err


def test_an_unknown_event_type_is_refused_not_dropped(tmp_path, capsys):
    rows = _foreign_rows()
    for r in rows:
        if r["type"] == "ack":
            r["type"] = "acked"  # read as PASS with every ack dropped, before
    _refused(tmp_path, capsys, rows, "column 'type' holds 'acked'", "not an event type")


def test_a_file_without_the_required_columns_is_refused(tmp_path, capsys):
    _refused(tmp_path, capsys, pa.table({"a": [1, 2], "b": ["x", "y"]}), "no column 'run'")
    rows = [{k: v for k, v in r.items() if k != "seq"} for r in _foreign_rows()]
    _refused(tmp_path, capsys, rows, "no column 'seq'", name="h.parquet")


def test_a_required_column_with_nothing_in_it_is_refused(tmp_path, capsys):
    rows = [{**r, "run": None} for r in _foreign_rows()]
    _refused(tmp_path, capsys, rows, "column 'run' is empty")
    rows = _foreign_rows()
    rows[3]["t_ns"] = None
    _refused(tmp_path, capsys, rows, "column 't_ns' is null in 1 of 14 rows")
    rows = [{**r, "value": None} for r in _foreign_rows()]
    _refused(tmp_path, capsys, rows, "column 'value' is empty", "producer's rows (ack, send)")


def test_a_nemesis_file_needs_no_producer_or_value(tmp_path):
    from brokerchaos.history.files import check

    rows = [{"run": "X", "client": "nemesis", "seq": 1, "t_ns": 5, "type": "fault", "producer": None, "value": None,
             "offset": None, "node": "n1", "detail": "kill leader"}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "nemesis.parquet")
    pq.write_table(pa.Table.from_pylist(_foreign_rows()), tmp_path / "w.parquet")
    assert check(tmp_path).files == 2


def test_a_member_position_without_its_partition_is_refused_not_dropped(tmp_path, capsys):
    """A delivery with a position and no partition dropped out of group_nonmonotonic before
    (a pass on rows never compared); it is refused with the column named."""
    rows = _foreign_rows()
    for i, r in enumerate(rows):
        r.update(group=None, partition=None, position=None)
        if r["client"] == "r":
            r.update(group="g1", partition="0", position=i)
    from brokerchaos.history.files import check

    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "ok.parquet")
    assert check(tmp_path).files == 1
    (tmp_path / "ok.parquet").unlink()
    rows[-1]["partition"] = None
    _refused(tmp_path, capsys, rows, "rows with a 'position' and no 'partition': 1 (the first a 'recv'")
