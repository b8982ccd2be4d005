"""A run's outages taken apart, in its report section: one stacked bar per fault window (per
topic in a run of several, the first MAX_BARS) in which a mark was seen, detect, serve,
reconnect and resume (analysis/parts.py), and a table of each topic's verdicts."""
from __future__ import annotations

import html
from typing import TYPE_CHECKING, Optional

import plotly.graph_objects as go

from ..analysis.parts import PARTS

if TYPE_CHECKING:
    from ..analysis.verdicts import Verdict

PART_COLORS = {"detect": "#d62728", "serve": "#ff7f0e", "reconnect": "#1f77b4", "resume": "#2ca02c"}
MAX_BARS = 40
TOPIC_COLUMNS = ("send_count", "pos_ack_count", "acked_missing", "msgs_with_dups", "jb", "max_ack_gap_ms", "result")


def _bars(v: Verdict) -> list[tuple[str, dict]]:
    """(label, parts) per window, or per window and topic."""
    out = []
    sources = [(f"{t} ", x) for t, x in (v.get("topics") or {}).items()] or [("", v)]
    for prefix, x in sources:
        for i, p in enumerate(x.get("outage_parts") or [], 1):
            if p is not None and p["order"]:  # a bar of nothing but `resume` says nothing
                out.append((f"{prefix}window {i}", p))
    return out[:MAX_BARS]


def parts_figure(v: Verdict) -> Optional[go.Figure]:
    bars = _bars(v)
    if not bars:
        return None
    labels = [b for b, _ in bars][::-1]
    fig = go.Figure()
    for part in PARTS:
        fig.add_trace(go.Bar(y=labels, x=[p[f"{part}_ms"] for _, p in bars][::-1], name=part, orientation="h",
                             marker_color=PART_COLORS[part],
                             hovertext=[f"{part}: {p[f'{part}_ms']:.0f} ms of {p['outage_ms']:.0f} ms; marks "
                                        f"{', '.join(p['order']) or 'none'}" for _, p in bars][::-1],
                             hoverinfo="text"))
    fig.update_layout(barmode="stack", height=120 + 22 * len(bars), template="plotly_white",
                      title="each outage taken apart (ms): fault → cluster noticed → owner serving → client "
                            "reconnected → first ack",
                      margin={"l": 110, "r": 20, "t": 50, "b": 40}, legend={"orientation": "h"})
    return fig


def topics_table(v: Verdict) -> str:
    """Each topic's verdicts (a run of several topics), as a small HTML table."""
    topics = v.get("topics") or {}
    if not topics:
        return ""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in ("topic", *TOPIC_COLUMNS, "outage per fault"))
    rows = []
    for t, x in topics.items():
        outs = ", ".join("-" if o is None else f"{o:,.0f} ms" for o in x.get("fault_ack_gaps_ms") or [])
        cells = [t, *(x.get(c) for c in TOPIC_COLUMNS), outs or "-"]
        rows.append("<tr>" + "".join(f"<td>{html.escape('-' if c is None else str(c))}</td>" for c in cells)
                    + "</tr>")
    return f"<h3>Per topic</h3><table><tr>{head}</tr>{''.join(rows)}</table>"
