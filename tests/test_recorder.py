import os
import signal
import subprocess
import sys
import textwrap
import time

import pyarrow.dataset as ds

from brokerchaos.history import SCHEMA, Recorder


def test_flushes_whole_files_with_the_v1_schema(tmp_path):
    rec = Recorder(tmp_path, "run-1", "p1", time.monotonic_ns(), max_rows=100)
    for v in range(1, 251):
        rec.record("send", "p1", v)
    assert len(list(tmp_path.glob("*.parquet"))) == 2  # two full buffers so far
    rec.close()
    t = ds.dataset(str(tmp_path), format="parquet").to_table()
    assert t.schema.equals(SCHEMA)
    assert t.num_rows == 250
    assert t.column("seq").to_pylist() == list(range(1, 251))


def test_what_was_flushed_survives_a_kill(tmp_path):
    # a recorder in another process, SIGKILLed mid-run: every flushed file stays readable
    code = textwrap.dedent(f"""
        import time
        from brokerchaos.history import Recorder
        rec = Recorder({str(tmp_path)!r}, "r", "p1", time.monotonic_ns(), flush_interval=0.05)
        v = 0
        while True:
            v += 1
            rec.record("send", "p1", v)
            rec.maybe_flush()
            if v % 1000 == 0:
                time.sleep(0.01)
    """)
    p = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 30
        while len(list(tmp_path.glob("*.parquet"))) < 3:
            assert time.monotonic() < deadline, "recorder wrote nothing"
            time.sleep(0.05)
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
    # a kill mid-write may leave a *.tmp; the format says readers take only *.parquet
    t = ds.dataset(sorted(str(p) for p in tmp_path.glob("*.parquet")), format="parquet").to_table()
    vals = t.column("value").to_pylist()
    assert len(vals) > 0 and sorted(vals) == list(range(1, len(vals) + 1))
