"""A campaign's page: one row per session with each check's rate and its interval, the
heat map, the arms compared where they differ in one setting (Fisher's exact test), and
the outages; each session's own page (html.py) linked."""
from __future__ import annotations

import statistics
from pathlib import Path
from typing import Optional

import plotly.graph_objects as go

from ..analysis import policy
from .html import _e, _fig, _fmt, _ms, _pct, _scenario, _table, page

CHECKS = [(c.name, c.name) for c in policy.CHECKS]


def _checks(sessions: list[dict]) -> list[tuple[str, str]]:
    """The checks some session has a rate for (a cluster's own check only where it was made)."""
    return [(c.name, c.name) for c in policy.reported([s["summary"].get("verdicts") for s in sessions])]


def _arms(scenarios: list[dict]) -> str:
    """What differs between two scenarios, as `path: a vs b` (what a two-armed test compares)."""
    def flat(d: dict, pre: str = "") -> dict:
        out = {}
        for k, v in d.items():
            if isinstance(v, dict):
                out.update(flat(v, f"{pre}{k}."))
            else:
                out[f"{pre}{k}"] = v
        return out

    a, b = (flat({k: v for k, v in s.items() if k != "name"}) for s in scenarios)
    diff = [f"{k}: {a.get(k)} vs {b.get(k)}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    return "; ".join(diff) or "nothing but the name"


def pairs(sessions: list[dict]) -> list[tuple[str, dict, dict]]:
    """The two-armed comparisons in a campaign: (what differs, arm a, arm b). Along each
    matrix axis of two values, the cells that agree on everything else; without a matrix, a
    campaign of exactly two sessions."""
    out = []
    axes: dict[str, list[str]] = {}
    for s in sessions:
        for axis, label in (s.get("axes") or {}).items():
            if label not in axes.setdefault(axis, []):
                axes[axis].append(label)
    for axis, labels in axes.items():
        if len(labels) != 2:
            continue
        groups: dict[tuple, dict[str, dict]] = {}
        for s in sessions:
            if axis not in (s.get("axes") or {}):
                continue
            # the cells agreeing on everything but this axis
            rest = (s.get("base"), tuple(sorted((a, lb) for a, lb in s["axes"].items() if a != axis)))
            groups.setdefault(rest, {})[s["axes"][axis]] = s
        for arms in groups.values():
            if len(arms) == 2:
                out.append((f"{axis}: {labels[0]} vs {labels[1]}", arms[labels[0]], arms[labels[1]]))
    if not axes and len(sessions) == 2:
        x, y = sessions
        out.append((_arms([x.get("scenario_doc") or {}, y.get("scenario_doc") or {}]), x, y))
    return out


def comparison(sessions: list[dict]) -> str:
    """Per two-armed comparison and check, Fisher's exact test on the runs with it, in words."""
    from .stats import fisher_exact

    blocks = []
    for differ, x, y in pairs(sessions):
        lines = []
        for label, key in CHECKS:
            dx, dy = (s["summary"].get("verdicts", {}).get(key) for s in (x, y))
            if not dx or not dy or not dx["of"] or not dy["of"]:
                continue
            if dx["runs"] == dy["runs"] == 0:
                lines.append(f"<li><b>{_e(label)}</b>: no run of either arm had it "
                             f"(0 of {dx['of']}, 0 of {dy['of']}).</li>")
                continue
            p = fisher_exact(dx["runs"], dx["of"] - dx["runs"], dy["runs"], dy["of"] - dy["runs"])
            verdict = ("unlikely to be chance (p < 0.05)" if p < 0.05 else
                       "could be chance (p ≥ 0.05): more runs per arm would tell")
            lines.append(f"<li><b>{_e(label)}</b>: {dx['runs']} of {dx['of']} runs of {_e(x['scenario'])} against "
                         f"{dy['runs']} of {dy['of']} of {_e(y['scenario'])}; Fisher's exact test p = {p:.2g}: "
                         f"the difference is {verdict}.</li>")
        blocks.append(f"<h3>{_e(x['scenario'])} against {_e(y['scenario'])}</h3><p>The arms differ in: "
                      f"<code>{_e(differ)}</code></p><ul>{''.join(lines)}</ul>")
    return f"<h2>Two arms compared</h2>{''.join(blocks)}" if blocks else ""


def heat_figure(sessions: list[dict]) -> go.Figure:
    names = [s["scenario"] for s in sessions]
    z, text = [], []
    checks = _checks(sessions)
    for s in sessions:
        zr, tr = [], []
        for _, key in checks:
            d = s["summary"].get("verdicts", {}).get(key) or {"runs": 0, "of": 0, "wilson95": [None, None]}
            zr.append(d["runs"] / d["of"] if d["of"] else None)
            tr.append(f"{d['runs']}/{d['of']}<br>{_pct(*d['wilson95'])}")
        z.append(zr)
        text.append(tr)
    fig = go.Figure(go.Heatmap(z=z, x=[c for c, _ in checks], y=names, text=text, texttemplate="%{text}",
                               colorscale=[[0, "#f7fbff"], [1, "#d62728"]], zmin=0, zmax=1,
                               colorbar={"title": "share of runs"}))
    fig.update_layout(height=120 + 45 * len(names), template="plotly_white", yaxis={"autorange": "reversed"},
                      margin={"l": 20, "r": 20, "t": 30, "b": 40})
    return fig


def campaign_outage_figure(sessions: list[dict], verdicts: dict[str, list[dict]]) -> Optional[go.Figure]:
    fig = go.Figure()
    for s in sessions:
        vals = [o for v in verdicts.get(s["scenario"], []) for o in v.get("fault_outages_ms") or [] if o is not None]
        if vals:
            fig.add_trace(go.Box(x=vals, name=s["scenario"], boxpoints="all", orientation="h"))
    if not fig.data:
        return None
    fig.update_layout(height=120 + 50 * len(fig.data), template="plotly_white", showlegend=False,
                      xaxis_title="outage per fault window (ms)", margin={"l": 20, "r": 20, "t": 30, "b": 40},
                      yaxis={"autorange": "reversed"})  # in the table's order, top down
    return fig


def campaign_page(name: str, sessions: list[dict], verdicts: dict[str, list[dict]], notes: str = "") -> str:
    rows, classes = [], []
    axes = list(dict.fromkeys(a for s in sessions for a in (s.get("axes") or {})))
    checks = _checks(sessions)
    for s in sessions:
        su = s["summary"]
        outs = [o for v in verdicts.get(s["scenario"], []) for o in v.get("fault_outages_ms") or []]
        ended = sorted(o for o in outs if o is not None)
        cells = []
        for _, key in checks:
            d = su.get("verdicts", {}).get(key) or {"runs": 0, "of": 0, "wilson95": [None, None]}
            cells.append(f"{d['runs']}/{d['of']} ({_pct(*d['wilson95'])})")
        med = _ms(statistics.median(ended)) if ended else "-"
        rows.append([f"<a href='{_e(s['dir'])}/report.html'>{_e(s['scenario'])}</a>"]
                    + [_e((s.get("axes") or {}).get(a, "")) for a in axes] + [_fmt(su.get("runs")),
                     f"<span class='badge {su.get('result', 'unknown')}'>{_e(su.get('result', '?').upper())}</span>"]
                    + cells + [med, _ms(ended[-1]) if ended else "-", str(len(outs) - len(ended))])
        classes.append(su.get("result") if su.get("result") != "pass" else "")
    table = _table(["scenario"] + axes + ["runs", "result"] + [c for c, _ in checks]
                   + ["outage p50", "outage max", "never ended"], rows, classes, left=1 + len(axes))
    box = campaign_outage_figure(sessions, verdicts)
    notes_html = "".join(f"<p>{_e(par)}</p>" for par in notes.strip().split("\n\n")) if notes.strip() else ""
    body = [f"<h1>brokerchaos campaign: {_e(name)}</h1>", notes_html,
            "<p class='note'>Each cell: runs with it / runs (95% Wilson interval). Acked loss counts only runs "
            "whose read finished. A scenario's name links to its own report.</p>",
            table, _fig(heat_figure(sessions), "heat"), comparison(sessions),
            "<h2>Outages</h2>" + (_fig(box, "outages") if box is not None else "<p class='note'>None ended.</p>")]
    return page(f"brokerchaos campaign {name}", "".join(body))


def write_campaign(root: Path, name: str, sessions: list[dict], verdicts: dict[str, list[dict]],
                   notes: str = "") -> Path:
    for s in sessions:
        s.setdefault("scenario_doc", _scenario(Path(root) / s["dir"], {}))
    path = Path(root) / "report.html"
    path.write_text(campaign_page(name, sessions, verdicts, notes))
    return path
