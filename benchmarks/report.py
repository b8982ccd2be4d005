"""report.html for a generated session: how long it takes and how big the page is.

    .venv/bin/python benchmarks/report.py [--runs 1] [--messages 10000000] [--dir /tmp/brokerchaos-bench]

The session is benchmarks/many_runs.py's (per run: send + ack per message, a fault with a
300 ms ack outage, a read; every tenth run loses 0.1%: those runs get the value-against-
position plot). The analysis runs once (not timed here: see many_runs.py and analysis.py),
then the report is written twice (cold and warm) and one JSON line printed: seconds, the
page's bytes, and the bytes that are not plotly.js (what grows with the session).
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from many_runs import generate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--messages", type=int, default=10_000_000, help="per run")
    ap.add_argument("--dir", default="/tmp/brokerchaos-bench")
    args = ap.parse_args()
    d = Path(args.dir) / f"report-{args.runs}x{args.messages}"
    if not d.exists():
        t = time.perf_counter()
        generate(d, args.runs, args.messages)
        print(f"generated in {time.perf_counter() - t:.1f}s at {d}", file=sys.stderr)

    from plotly.offline import get_plotlyjs

    from brokerchaos.analysis import metrics
    from brokerchaos.analysis.spark import get_spark
    from brokerchaos.report import files, html, session_table

    spark = get_spark()
    df = metrics.read_history(spark, str(d))
    a = metrics.analyze(spark, df)
    session_table.complete(a.verdicts)
    out_dir = d / "out"
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    summary = files.summarize(a.verdicts)
    out = {"runs": args.runs, "messages_per_run": args.messages}
    for name in ("cold", "warm"):
        t = time.perf_counter()
        page = html.write_session(spark, df, a, out_dir, {}, summary)
        out[f"{name}_s"] = round(time.perf_counter() - t, 2)
    a.release()
    size = page.stat().st_size
    out["page_bytes"] = size
    out["data_bytes"] = size - len(get_plotlyjs())
    out["runs_drawn"] = page.read_text().count("<section id='")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
