"""An exploration's page: the violation found (its file to shrink), each schedule tried with
its outcome and its session's report linked, and the coverage: each (action, target) at each
moment, tried and explored (a plot and a table)."""
from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go

from .bisect_html import BADGES
from .html import _e, _fig, _table, page


def figure(doc: dict) -> go.Figure:
    """Explored schedules per (action, target) and moment; a cell with a violation says so."""
    cov = doc["coverage"]
    moments = sorted({c["moment"] for c in cov}, key=lambda m: float(m.rstrip("%")))
    rows = sorted({f"{c['action']} {c['target']}" for c in cov})
    at = {(f"{c['action']} {c['target']}", c["moment"]): c for c in cov}
    z, text = [], []
    for r in rows:
        cells = [at.get((r, m)) for m in moments]
        z.append([c["explored"] if c else 0 for c in cells])
        text.append([(f"{c['explored']}/{c['tried']}" + (f" ({c['failed']} failed)" if c["failed"] else ""))
                     if c else "" for c in cells])
    fig = go.Figure(go.Heatmap(x=moments, y=rows, z=z, text=text, texttemplate="%{text}", colorscale="Blues",
                               colorbar={"title": "explored"}, zmin=0))
    fig.update_layout(height=160 + 28 * len(rows), template="plotly_white",
                      xaxis={"type": "category", "title": "trigger: the ack at this share of the write"},
                      yaxis={"type": "category", "title": ""}, margin={"l": 20, "r": 20, "t": 30, "b": 40})
    return fig


def _schedules(doc: dict) -> str:
    rows, classes = [], []
    for e in doc["schedules"]:
        what = "<br>".join([_e(_fault_words(f)) for f in e["faults"]]
                           + [f"<code>{_e(k)}: {_e(str(v))}</code>" for k, v in (e.get("drawn") or {}).items()])
        badge = BADGES[e["outcome"]]
        why = e["why"] + [f"undecided {w}" for w in e.get("undecided_why", [])]
        rows.append([f"<a href='{_e(e['dir'])}/report.html'>{e['i']}</a>", what, f"{e['failed']}/{e['decided']}",
                     f"<span class='badge {badge}'>{_e(e['outcome'])}</span>", _e("; ".join(why))])
        classes.append("fail" if e["outcome"] == "fails" else "")
    return _table(["#", "faults", "failed", "outcome", "why"], rows, classes, left=2)


def _fault_words(f: dict) -> str:
    window = f"for {f['duration']:g} s" if f.get("duration") else "healed before the read"
    params = ", ".join(f"{k}={v}" for k, v in (f.get("params") or {}).items())
    return (f"{f['action']} {f['target']}" + (f" ({params})" if params else "")
            + f" at ack {f['trigger']['after_acks']:,}, {window}")


def explore_page(doc: dict) -> str:
    v = doc["violations"]
    found = (f"<p><b>Found:</b> schedule {v[0]['i']} failed {_e(doc['check'])} ({_e('; '.join(v[0]['why']))}). "
             f"Cut it down: <code>brokerchaos shrink {_e(doc.get('violation_file', ''))}</code></p>") if v else \
        f"<p><b>No violation</b> of {_e(doc['check'])} in the schedules explored.</p>"
    found += "".join(f"<p><b>Also failed:</b> schedule {o['i']} ({_e('; '.join(o['why']))}): "
                     f"<code>brokerchaos shrink {_e(path)}</code></p>"
                     for o, path in zip(v[1:], doc.get("violation_files", [])[1:]))
    cov = _table(["action", "target", "moment", "tried", "explored", "failed"],
                 [[_e(c["action"]), _e(c["target"]), c["moment"], str(c["tried"]), str(c["explored"]),
                   str(c["failed"])] for c in doc["coverage"]],
                 ["fail" if c["failed"] else "" for c in doc["coverage"]], left=2)
    sp = doc["space"]
    body = [f"<h1>brokerchaos explore: {_e(doc['scenario'])} ({_e(doc['system'])})</h1>", found,
            f"<p>{_e(doc['said'])}.</p>",
            f"<p class='note'>Seed {doc['seed']}; each schedule 1 to {sp['max_faults']} faults drawn from "
            f"{_e(', '.join(sp['actions']))} on {_e(', '.join(sp['targets']))}, at the ack of "
            f"{_e(', '.join(f'{m:.0%}' for m in sp['moments']))} of the write"
            + "".join(f"; {_e(k)} drawn from {_e(', '.join(map(str, v)))}" for k, v in (sp.get("vary") or {}).items())
            + ". A schedule is explored when its "
            "runs were decided: one whose fault did not take effect, or whose read did not finish, was tried "
            "but not explored. A schedule's number links to its session's report."
            + "".join(f" Left out: {_e(a)} ({_e(w)})." for a, w in (sp.get("left_out") or {}).items()) + "</p>",
            "<h2>Schedules</h2>", _schedules(doc), "<h2>Coverage</h2>", _fig(figure(doc), "coverage"), cov]
    if doc.get("command"):
        body.append(f"<p class='note'>Command: <code>{_e(doc['command'])}</code></p>")
    return page(f"brokerchaos explore {doc['scenario']}", "".join(body))


def write(path: Path, doc: dict) -> Path:
    Path(path).write_text(explore_page(doc))
    return Path(path)
