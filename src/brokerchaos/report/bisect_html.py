"""A bisect's page: each release of the list with its runs, the share the check failed and
its interval (a table and a plot), the boundary in words, each probed release's own report
linked."""
from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go

from .html import _e, _fig, _pct, _table, page

COLOURS = {"fails": "#d62728", "holds": "#2ca02c", "undecided": "#7f7f7f"}
BADGES = {"fails": "fail", "holds": "pass", "undecided": "unknown"}  # the session pages' badge classes


def figure(doc: dict) -> go.Figure:
    """Per release probed: the share of decided runs that failed the check, with its 95%
    Wilson interval; releases not probed stay on the axis, empty."""
    probed = {p["version"]: p for p in doc["probes"]}
    x, y, lo, hi, colours, text = [], [], [], [], [], []
    for v in doc["versions"]:
        p = probed.get(v)
        if p is None or not p["decided"]:
            continue
        share = p["violated"] / p["decided"]
        w_lo, w_hi = p["wilson95"]
        x.append(v)
        y.append(share)
        lo.append(share - w_lo)
        hi.append(w_hi - share)
        colours.append(COLOURS[p["outcome"]])
        text.append(f"{p['violated']}/{p['decided']} {p['outcome']}")
    fig = go.Figure(go.Scatter(x=x, y=y, mode="markers+text", text=text, textposition="top center",
                               marker={"size": 12, "color": colours},
                               error_y={"type": "data", "symmetric": False, "array": hi, "arrayminus": lo}))
    fig.update_layout(height=360, template="plotly_white", yaxis={"range": [-0.05, 1.1], "tickformat": ".0%",
                                                                 "title": f"runs failing {doc['check']}"},
                      xaxis={"type": "category", "categoryorder": "array", "categoryarray": doc["versions"],
                             "title": "release"},
                      margin={"l": 20, "r": 20, "t": 30, "b": 40})
    return fig


def bisect_page(doc: dict) -> str:
    probed = {p["version"]: p for p in doc["probes"]}
    rows, classes = [], []
    for v in doc["versions"]:
        p = probed.get(v)
        if p is None:
            rows.append([_e(v), "", "", "", "not probed", ""])
            classes.append("")
            continue
        link = f"<a href='{_e(p['dir'])}/report.html'>{_e(v)}</a>"
        badge = BADGES[p["outcome"]]
        rows.append([link, str(p["runs"]), f"{p['violated']}/{p['decided']}", _pct(*p["wilson95"]),
                     f"<span class='badge {badge}'>{_e(p['outcome'])}</span>", _e("; ".join(_whys(p)))])
        classes.append("fail" if p["outcome"] == "fails" else "")
    table = _table(["release", "runs", "failed", "95% interval", "verdict", "why"], rows, classes, left=1)
    b = doc.get("boundary")
    where = (f"<p><b>{_e(doc['check'])}: {_e(doc['said'])}.</b></p>" if b else
             f"<p><b>No boundary:</b> {_e(doc['said'])}.</p>")
    over = "the client's releases (options.client_version)" if doc.get("over") == "client" else \
        "the servers' releases (cluster.version)"
    body = [f"<h1>brokerchaos bisect: {_e(doc['scenario'])} ({_e(doc['system'])})</h1>", where,
            f"<p>Across {over}.</p>",
            f"<p class='note'>Each release probed: up to {doc['runs_per_release']} runs, stopped at the first "
            f"that fails <code>{_e(doc['check'])}</code>; a release holds when every run passed it. "
            "A release's name links to its session's report.</p>",
            table, _fig(figure(doc), "bisect")]
    if doc.get("command"):
        body.append(f"<p class='note'>Command: <code>{_e(doc['command'])}</code></p>")
    return page(f"brokerchaos bisect {doc['scenario']}", "".join(body))


def write(root: Path, doc: dict) -> Path:
    path = Path(root) / "report.html"
    path.write_text(bisect_page(doc))
    return path


def _whys(p: dict) -> list[str]:
    """Why each run failed the check, and why each it could not decide did not."""
    return p["why"] + [f"undecided {w}" for w in p.get("undecided_why", [])]
