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
    assert meta[VERSION_KEY] == ".".join(map(str, FORMAT_VERSION)).encode() == b"1.4"
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
