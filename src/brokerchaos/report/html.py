"""report.html: one self-contained page per session (and per campaign), drawn with plotly.

Self-contained means no request of any kind when opened: plotly.js is inlined once per page,
nothing is fetched (no CDN, no fonts, no MathJax). The data behind the plots comes from
analysis.timeline, already aggregated: a page is a few MB whatever the session's size.
"""
from __future__ import annotations

import html
import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

from ..analysis.timeline import BUCKET_NS, RunTimeline
from . import session_table
from .files import JUMP_NAMES, SEED_COLUMNS, _csv_row
from .parts_html import parts_figure, topics_table

if TYPE_CHECKING:
    from ..analysis.verdicts import Verdict

COLORS = {"send": "#8c8c8c", "ack": "#2ca02c", "nack": "#d62728", "unknown": "#ff7f0e", "recv": "#1f77b4"}
JUMP_COLORS = {"JF": "#9467bd", "JB": "#e377c2", "DJF": "#17becf", "DJB": "#bcbd22", "JF0": "#8c564b"}
# rows of the lost and jump logs printed under a run's plot (the CSVs have them all)
TABLE_ROWS = 20
CONFIG = {"displaylogo": False, "responsive": True}
# runs drawn with their own section: a 1,000-run soak would otherwise be a page of 1,000
# timelines; the runs that did not pass come first, then the others in order
MAX_RUN_SECTIONS = 50

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em auto;max-width:1200px;color:#222;
padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.25em;margin-top:2em;border-bottom:1px solid #ddd}h3{font-size:1.05em}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}td,th{border:1px solid #ddd;padding:2px 6px;
text-align:right}th{background:#f4f4f4}td.l,th.l{text-align:left}tr.fail td{background:#fde2e2}
tr.unknown td{background:#fff3cd}.badge{padding:1px 8px;border-radius:8px;color:#fff;font-size:.8em}
.pass{background:#2ca02c}.fail{background:#d62728}.unknown{background:#e0a800}code{background:#f4f4f4;
padding:1px 4px}dl{display:grid;grid-template-columns:max-content auto;gap:2px 12px}dt{font-weight:600}
dd{margin:0}.scroll{overflow-x:auto}.note{color:#666;font-size:.85em}
"""


def _e(x: Any) -> str:
    return html.escape("" if x is None else str(x))


def _fig(fig: go.Figure, name: str) -> str:
    return pio.to_html(fig, full_html=False, include_plotlyjs=False, config=CONFIG, div_id=name)


def _ms(x: Optional[float]) -> str:
    return "never ended" if x is None else f"{x:,.0f} ms"


def _pct(lo: Optional[float], hi: Optional[float]) -> str:
    return "-" if lo is None else f"{100 * lo:.0f}–{100 * hi:.0f}%"


def page(title: str, body: str) -> str:
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{_e(title)}</title>"
            f"<style>{STYLE}</style><script>{get_plotlyjs()}</script></head><body>{body}</body></html>")


def _table(header: list[str], rows: list[list], classes: Optional[list[str]] = None, left: int = 0) -> str:
    th = "".join(f"<th class='l'>{_e(h)}</th>" if i < left else f"<th>{_e(h)}</th>" for i, h in enumerate(header))
    out = [f"<div class='scroll'><table><tr>{th}</tr>"]
    for k, row in enumerate(rows):
        cls = f" class='{classes[k]}'" if classes and classes[k] else ""
        tds = "".join(f"<td class='l'>{c}</td>" if i < left else f"<td>{c}</td>" for i, c in enumerate(row))
        out.append(f"<tr{cls}>{tds}</tr>")
    out.append("</table></div>")
    return "".join(out)


def _fmt(x: Any) -> str:
    if x is None:
        return "NA"
    if isinstance(x, float):
        return f"{x:,.3f}".rstrip("0").rstrip(".") if abs(x) < 1000 else f"{x:,.0f}"
    if isinstance(x, int):
        return f"{x:,}"
    return _e(x)


def _link(run: str, drawn: Optional[set] = None) -> str:
    return f"<a href='#{_e(run)}'>{_e(run)}</a>" if drawn is None or run in drawn else _e(run)


def drawn_runs(verdicts: list[Verdict], limit: int = MAX_RUN_SECTIONS) -> list[str]:
    """The runs that get a section, in session order: every one that did not pass first,
    then the others, up to `limit`."""
    ranked = [v["run"] for v in verdicts if v["result"] != "pass"] + [v["run"] for v in verdicts
                                                                      if v["result"] == "pass"]
    keep = set(ranked[:limit])
    return [v["run"] for v in verdicts if v["run"] in keep]


# -- the header -------------------------------------------------------------------------------

def _faults_text(s: dict) -> str:
    def one(f: dict) -> str:
        if not f or f.get("action", "none") == "none":
            return "none"
        when = f.get("trigger") or {}
        at = (f"after {when['after_acks']:,} acks" if when.get("after_acks") is not None
              else f"at {when.get('at_seconds')} s" if when.get("at_seconds") is not None else "")
        dur = f", for {f['duration']} s" if f.get("duration") else ""
        params = " ".join(f"{k}={v}" for k, v in (f.get("params") or {}).items())
        return " ".join(x for x in (f"{f['action']}-{f['target']}", params, at + dur) if x)

    faults = s.get("faults") or []
    mix = s.get("fault_mix") or []
    if mix:
        return "mix of: " + "; ".join(one(f) for f in mix)
    return "; ".join(one(f) for f in faults) if faults else one(s.get("fault") or {})


def header(scenario: dict, metas: dict, session_dir: Path, command: Optional[str]) -> str:
    s = scenario
    if not s.get("system"):
        return (f"<dl><dt>History</dt><dd>{_e(session_dir)}</dd><dt>Scenario</dt><dd>not known: no scenario.json "
                "or run.json with this history (written by another tool?)</dd></dl>")
    cl = s.get("cluster") or {}
    servers: dict = {}
    for m in metas.values():
        servers.update(m.get("servers") or {})
    version = ", ".join(f"{n} {v}" for n, v in sorted(servers.items())) or cl.get("version") or "the packaged default"
    wl = s.get("workload") or {}
    durability = ", ".join(f"{k}={v}" for k, v in sorted((s.get("options") or {}).items())) or "system defaults"
    durability += f"; replicas {cl.get('replicas')}; dedup {str(wl.get('dedup')).lower()}"
    reproduce = f"brokerchaos run {shlex.quote(str(session_dir / 'scenario.json'))}"
    rows = [
        ("Scenario", s.get("name")), ("System", s.get("system")), ("Server version", version),
        ("Cluster", f"{cl.get('nodes')} nodes" + (f", external {s['external']}" if s.get("external") else "")),
        ("Durability", durability),
        ("Workload", f"{_fmt(wl.get('messages'))} messages, {_fmt(wl.get('in_flight'))} in flight, "
                     f"{_fmt(wl.get('producers'))} producer(s)"
                     + (f" in {wl['processes']} processes" if (wl.get("processes") or 1) > 1 else "")
                     + f", rate {wl.get('rate') or 'unbounded'}"),
        ("Fault(s)", _faults_text(s)), ("Seed", s.get("seed")), ("Runs", s.get("runs")),
    ]
    dl = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in rows)
    cmd = f"<dt>Command</dt><dd><code>{_e(command)}</code></dd>" if command else ""
    dl += f"{cmd}<dt>Reproduce</dt><dd><code>{_e(reproduce)}</code></dd>"
    return f"<dl>{dl}</dl>"


# -- the per-run tables -----------------------------------------------------------------------

def run_tables(verdicts: list[Verdict], metas: dict, drawn: Optional[set] = None) -> str:
    classes = [v["result"] if v["result"] != "pass" else "" for v in verdicts]
    seed_cols = [c for c, _ in SEED_COLUMNS]
    extra = ["result", "unknown_count", "stowaways", "max_ack_gap_ms", "fault_outages_ms"]
    rows = []
    for i, v in enumerate(verdicts, 1):
        r = _csv_row(i, v, metas.get(v["run"], {}))
        rows.append([_link(v["run"], drawn)] + [_fmt(r.get(c)) for c in seed_cols] + [_fmt(r.get(c)) for c in extra])
    seed = _table(["Run"] + seed_cols + extra, rows, classes, left=1)
    vm = [[_link(v["run"], drawn)] + [_fmt(x) for x in session_table.row(v)[1:]] for v in verdicts]
    verne = _table([c for c, _ in session_table.COLUMNS], vm, classes, left=1)
    return (f"<h3>The seeds' columns</h3>{seed}<h3>The VerneMQ seed's table (seconds)</h3>{verne}"
            "<p class='note'>NA: does not apply or never ended. Rx error: how the receiver's read ended "
            "(nil: no error).</p>")


# -- one run ----------------------------------------------------------------------------------

def _s(t_ns: Optional[float], t0: int) -> Optional[float]:
    return None if t_ns is None else (t_ns - t0) / 1e9


def timeline_figure(v: Verdict, tl: RunTimeline) -> Optional[go.Figure]:
    t0 = tl.t0
    if t0 is None:
        return None
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08, row_heights=[0.55, 0.45],
                        subplot_titles=("messages per 100 ms", "ack latency (ms, by ack time)"))
    # every bucket from the first row to the last: an empty one is a zero (a count) or a
    # hole (latency), never a line drawn across it
    starts = [b[0] for bs in tl.counts.values() for b in bs]
    grid = range(min(starts), max(starts) + BUCKET_NS, BUCKET_NS)
    xs = [_s(x, t0) for x in grid]
    for ty in ("send", "ack", "nack", "unknown", "recv"):
        if not tl.counts.get(ty):
            continue
        n = {b[0]: b[1] for b in tl.counts[ty]}
        fig.add_trace(go.Scatter(x=xs, y=[n.get(x, 0) for x in grid], name=ty + "s", mode="lines",
                                 line={"color": COLORS[ty], "width": 1.2, "shape": "hv"}), row=1, col=1)
    if tl.latency:
        at = {x[0]: x for x in tl.latency}
        for k, name, dash in ((1, "p50", "solid"), (2, "p99", "dot"), (3, "max", "dash")):
            fig.add_trace(go.Scatter(x=xs, y=[at[x][k] if x in at else None for x in grid], name=f"latency {name}",
                                     mode="lines", connectgaps=False, line={"color": "#444", "width": 1, "dash": dash}),
                          row=2, col=1)
        fig.update_yaxes(type="log", dtick=1, row=2, col=1)
    for kind, symbol, color in (("disconnect", "x", "#d62728"), ("reconnect", "circle-open", "#2ca02c")):
        ev = [e for e in tl.events if e["type"] == kind]
        if ev:
            fig.add_trace(go.Scatter(x=[_s(e["t_ns"], t0) for e in ev], y=[0] * len(ev), mode="markers",
                                     name=f"client {kind}", marker={"symbol": symbol, "size": 9, "color": color},
                                     text=[f"{e['client']} {e['node'] or ''} {e['detail'] or ''}" for e in ev]),
                          row=1, col=1)
    _shade_faults(fig, v, t0)
    for e in tl.events:
        if e["type"] == "ready":
            fig.add_vline(x=_s(e["t_ns"], t0), line={"color": "#2ca02c", "dash": "dash", "width": 1.5},
                          annotation_text="whole again", annotation_position="bottom right", row="all", col=1)
    gap = tl.longest_gap("ack")
    if gap is not None and gap[1] - gap[0] >= BUCKET_NS:
        fig.add_vrect(x0=_s(gap[0], t0), x1=_s(gap[1], t0), fillcolor="#ff7f0e", opacity=0.18, line_width=0,
                      annotation_text=f"longest ack gap {(gap[1] - gap[0]) / 1e6:,.0f} ms",
                      annotation_position="bottom left", row=2, col=1)
    fig.update_xaxes(title_text="seconds since the first send", row=2, col=1)
    fig.update_layout(height=520, margin={"l": 50, "r": 20, "t": 40, "b": 40}, legend={"orientation": "h", "y": -0.15},
                      template="plotly_white")
    return fig


def _passed_at(stream: list[tuple[int, int, int]], value: int) -> Optional[int]:
    """The read position where a stream first read a value at or past `value`."""
    for seq, _, hi in stream:
        if hi is not None and hi >= value:
            return seq
    return stream[-1][0] if stream else None


def positions_figure(v: Verdict, tl: RunTimeline) -> Optional[go.Figure]:
    if not tl.positions:
        return None
    fig = go.Figure()
    for (consumer, producer), pts in sorted(tl.positions.items(), key=lambda kv: [str(x) for x in kv[0]]):
        xs = [p[0] for p in pts]
        name = f"{consumer} reading {producer}"
        fig.add_trace(go.Scatter(x=xs, y=[p[2] for p in pts], mode="lines", line={"width": 0.5, "color": "#1f77b4"},
                                 name=name + " (max)", legendgroup=name, showlegend=False))
        fig.add_trace(go.Scatter(x=xs, y=[p[1] for p in pts], mode="lines", line={"width": 0.5, "color": "#1f77b4"},
                                 fill="tonexty", name=name, legendgroup=name))
    by_class: dict[str, list[dict]] = {}
    for j in tl.jumps:
        by_class.setdefault(j["class"], []).append(j)
    for cls, js in sorted(by_class.items()):
        total = v.get(cls.lower(), 0)
        shown = f", the first {len(js):,} of {total:,}" if total > len(js) else ""
        fig.add_trace(go.Scatter(x=[j["seq"] for j in js], y=[j["to_value"] for j in js], mode="markers",
                                 name=f"{cls} ({JUMP_NAMES[cls].lower()}{shown})",
                                 marker={"color": JUMP_COLORS[cls], "size": 6},
                                 text=[f"{j['from_value']} -> {j['to_value']}" for j in js]))
    if tl.lost:
        streams = {p: pts for (_, p), pts in tl.positions.items()}
        xs = [_passed_at(streams.get(r["producer"], []), r["value"]) for r in tl.lost]
        shown = f" (the first {len(tl.lost):,} of {v['acked_missing']:,})" if v["acked_missing"] > len(tl.lost) else ""
        fig.add_trace(go.Scatter(x=xs, y=[r["value"] for r in tl.lost], mode="markers", name="acked, lost" + shown,
                                 marker={"symbol": "x", "color": "#d62728", "size": 8}))
    fig.update_layout(height=380, template="plotly_white", margin={"l": 60, "r": 20, "t": 30, "b": 40},
                      xaxis_title="read position (the consumer's row number)", yaxis_title="value",
                      title={"text": "value against read position", "font": {"size": 13}})
    return fig


def _lost_table(v: Verdict, tl: RunTimeline) -> str:
    if not tl.lost:
        return ""
    rows = [[_e(r["producer"]), _fmt(r["value"]), _e(r["acked_at"]), _e(r["acked_by"]),
             _fmt(r["first_ack_ns"] / 1e6), _e(r["read_there"])] for r in tl.lost[:TABLE_ROWS]]
    more = f" (the first {TABLE_ROWS} of {v['acked_missing']:,}; lost.csv has them all)" \
        if v["acked_missing"] > TABLE_ROWS else ""
    return (f"<h4>Acked, never read{more}</h4>"
            + _table(["producer", "value", "acked at", "acked by", "first ack (ms)", "read there"], rows, left=1))


def _divergence_table(v: Verdict, tl: RunTimeline) -> str:
    """The first rows of divergence.csv: where the replicas read one by one disagree."""
    if not tl.diverged:
        return ""
    rows = [[_e(r["kind"]), _e(r["partition"]), _e(r["offset"]), _e(r["producer"]), _e(r["value"]),
             _e(r["nodes"]), _e(r["missing_on"])] for r in tl.diverged[:TABLE_ROWS]]
    total = (v.get("replicas_diverged") or 0) + (v.get("acked_on_no_replica") or 0)
    more = f" (the first {TABLE_ROWS} of {total:,}; divergence.csv has them all)" if total > TABLE_ROWS else ""
    return (f"<h4>Replicas read one by one: where they disagree{more}</h4>"
            + _table(["kind", "partition", "offset", "producer", "value", "held by", "missing on"], rows, left=6))


def _jump_table(v: Verdict, tl: RunTimeline) -> str:
    if not tl.jumps:
        return ""
    total = sum(v.get(k, 0) for k in ("jf", "jb", "djf", "djb"))
    rows = [[_e(j["consumer"]), _e(j["producer"]), _e(j["class"]), _fmt(j["seq"]),
             _e(f"{j['to_value']} {JUMP_NAMES[j['class']]} {j['size']} ({j['from_value']} -> {j['to_value']})")]
            for j in tl.jumps[:TABLE_ROWS]]
    more = f" (the first {TABLE_ROWS} of {total:,}; jumps.csv has them all)" if total > TABLE_ROWS else ""
    return (f"<h4>Jumps{more}</h4>"
            + _table(["consumer", "producer", "class", "position", "line"], rows, left=2))


def _shade_faults(fig: go.Figure, v: Verdict, t0: int) -> None:
    for f in v.get("faults") or []:
        action = (f.get("detail") or "fault").split()
        fig.add_vrect(x0=_s(f["t_ms"] * 1e6, t0), x1=_s(f["until_ms"] * 1e6, t0), fillcolor="#d62728",
                      opacity=0.12, line_width=0, annotation_text=f"{' '.join(action[:2])} → {f.get('node') or '?'}",
                      annotation_position="top left", row="all", col=1)


def group_figure(v: Verdict, tl: RunTimeline, group: str) -> Optional[go.Figure]:
    """A consumer group's deliveries per member and 100 ms, its rebalances (assign and
    revoke rows), the faults shaded, and its lag: acks so far − messages processed so far."""
    t0 = tl.t0
    series = {c: b for (g, c), b in sorted(tl.group_recv.items()) if g == group}
    if t0 is None or not series:
        return None
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08, row_heights=[0.6, 0.4],
                        subplot_titles=(f"{group}: messages processed per 100 ms, per member",
                                        f"{group}: lag (acked, not yet processed)"))
    for client, bs in series.items():
        fig.add_trace(go.Scatter(x=[_s(b, t0) for b, _ in bs], y=[n for _, n in bs], name=client, mode="lines",
                                 line={"width": 1.2, "shape": "hv"}), row=1, col=1)
    for kind, symbol in (("assign", "triangle-up"), ("revoke", "triangle-down")):
        ev = [e for e in tl.events if e["type"] == kind and e.get("group") == group]
        if ev:
            fig.add_trace(go.Scatter(x=[_s(e["t_ns"], t0) for e in ev], y=[0] * len(ev), mode="markers", name=kind,
                                     marker={"symbol": symbol, "size": 9},
                                     text=[f"{e['client']} partition {e.get('partition')}" for e in ev]), row=1, col=1)
    acks = {b[0]: b[1] for b in tl.counts.get("ack", [])}
    done = dict(tl.group_done.get(group, []))
    grid = sorted(set(acks) | set(done))
    lag, a, d = [], 0, 0
    for b in grid:
        a, d = a + acks.get(b, 0), d + done.get(b, 0)
        lag.append(max(a - d, 0))
    fig.add_trace(go.Scatter(x=[_s(b, t0) for b in grid], y=lag, name="lag", mode="lines",
                             line={"color": "#444", "width": 1.2, "shape": "hv"}), row=2, col=1)
    _shade_faults(fig, v, t0)
    fig.update_xaxes(title_text="seconds since the first send", row=2, col=1)
    fig.update_layout(height=460, margin={"l": 50, "r": 20, "t": 40, "b": 40}, legend={"orientation": "h", "y": -0.2},
                      template="plotly_white")
    return fig


def _groups_html(v: Verdict, tl: RunTimeline) -> str:
    """Per consumer group: its figures, its plot, and the first of its skips (skips.csv)."""
    out = []
    for g, x in (v.get("consumer_groups") or {}).items():
        facts = (f"processed {x['group_recv_rows']:,}; skipped {x['group_skips']:,}; processed again "
                 f"{x['group_duplicates']:,} (stored twice {x['group_dup_stored']:,}, to another member "
                 f"{x['group_dup_handover']:,}, to the same {x['group_dup_same']:,}); nonmonotonic "
                 f"{x['group_nonmonotonic']:,}; commits {x['group_commits']:,} ({x['group_commit_failures']:,} failed, "
                 f"{x['group_commit_backwards']:,} backwards); read {x.get('read_status') or 'not recorded'}")
        fig = group_figure(v, tl, g)
        rows = [[_e(r["producer"]), _fmt(r["value"]), _e(r["stored_at"]), _e(r["committed_past"])]
                for r in tl.skips if r["group"] == g][:TABLE_ROWS]
        more = f" (the first {TABLE_ROWS} of {x['group_skips']:,}; skips.csv has them all)" \
            if x["group_skips"] > TABLE_ROWS else ""
        table = (f"<h4>Skipped by {_e(g)}{more}</h4>"
                 + _table(["producer", "value", "stored at", "first commit past it"], rows, left=1)) if rows else ""
        drawn = _fig(fig, "group-" + v["run"] + "-" + g) if fig is not None else ""
        out.append(f"<h3>Consumer group {_e(g)}</h3><p>{_e(facts)}</p>{drawn}{table}")
    return "".join(out)


def _evidence_html(v: Verdict) -> str:
    """What the harness saw the faults do, the cluster before the read, the required
    mechanisms, and why the run is not a pass (history format 1.9)."""
    items = [f"fault window {e['window']}: {e['detail']}" for e in v.get("effects") or []]
    if v.get("whole_detail"):
        items.append(f"before the read: {v['whole_detail']}")
    items += [f"required {m['name']}: {'occurred' if m['occurred'] else 'DID NOT OCCUR'} ({m['evidence']})"
              for m in v.get("mechanisms") or []]
    if v["result"] != "pass":
        items += [f"why {v['result']}: {w}" for w in v.get("result_why") or []]
    return "<ul class='evidence'>" + "".join(f"<li>{_e(x)}</li>" for x in items) + "</ul>" if items else ""


def run_section(v: Verdict, meta: dict, tl: RunTimeline) -> str:
    figs = []
    t = timeline_figure(v, tl)
    if t is not None:
        figs.append(_fig(t, f"timeline-{v['run']}"))
    p = positions_figure(v, tl)
    if p is not None:
        figs.append(_fig(p, f"positions-{v['run']}"))
    parts = parts_figure(v)
    if parts is not None:
        figs.append(_fig(parts, f"parts-{v['run']}"))
    outs = ", ".join(_ms(o) for o in v.get("fault_outages_ms") or []) or "no fault window"
    facts = (f"sent {v['send_count']:,}, acked {v['pos_ack_count']:,}, nacked {v['neg_ack_count']:,}, "
             f"unknown {v.get('unknown_count', 0):,}, read {v['received']:,}; acked missing "
             f"{v['acked_missing']:,}, duplicated {v['msgs_with_dups']:,}, out of order {v['jb']:,}; "
             f"outage per fault: {outs}; read {v.get('read_status') or 'not recorded'}")
    return (f"<section id='{_e(v['run'])}'><h2>{_e(v['run'])} <span class='badge {v['result']}'>"
            f"{_e(v['result'].upper())}</span></h2><p>{_e(facts)}</p>{_evidence_html(v)}{''.join(figs)}"
            f"{topics_table(v)}{_lost_table(v, tl)}{_divergence_table(v, tl)}{_jump_table(v, tl)}"
            f"{_groups_html(v, tl)}</section>")


# -- the session summary ----------------------------------------------------------------------

def outage_figure(verdicts: list[Verdict]) -> Optional[go.Figure]:
    vals = [o for v in verdicts for o in v.get("fault_outages_ms") or [] if o is not None]
    if not vals:
        return None
    fig = make_subplots(rows=1, cols=2, subplot_titles=("outage per fault window (ms)", "CDF"))
    fig.add_trace(go.Histogram(x=vals, nbinsx=min(40, max(5, len(vals))), marker_color="#d62728", name="windows"),
                  row=1, col=1)
    xs = sorted(vals)
    fig.add_trace(go.Scatter(x=xs, y=[(i + 1) / len(xs) for i in range(len(xs))], mode="lines+markers",
                             line={"shape": "hv", "color": "#444"}, name="CDF"), row=1, col=2)
    fig.update_yaxes(range=[0, 1.05], row=1, col=2)  # a share of windows, whatever their number
    fig.update_layout(height=320, template="plotly_white", showlegend=False,
                      margin={"l": 50, "r": 20, "t": 40, "b": 40})
    return fig


def summary_section(summary: dict, verdicts: list[Verdict]) -> str:
    rows = []
    for name, d in (summary.get("verdicts") or {}).items():
        lo, hi = d["wilson95"]
        rows.append([_e(name), f"{d['runs']} of {d['of']}", _pct(lo, hi)])
    checks = _table(["runs with", "count", "95% Wilson interval"], rows, left=1)
    totals = _table(list((summary.get("totals") or {}).keys()),
                    [[_fmt(x) for x in (summary.get("totals") or {}).values()]])
    unended = sum(1 for v in verdicts for o in v.get("fault_outages_ms") or [] if o is None)
    out = outage_figure(verdicts)
    dist = _fig(out, "outages") if out is not None else "<p class='note'>No fault window ended an outage.</p>"
    note = f"<p class='note'>{unended} window(s) whose outage never ended are not in the histogram.</p>" \
        if unended else ""
    res = summary.get("result", "unknown")
    return (f"<h2>Session summary <span class='badge {res}'>{_e(res.upper())}</span></h2>{checks}"
            f"<h3>Totals</h3>{totals}<h3>Outages</h3>{dist}{note}")


def session_page(scenario: dict, verdicts: list[Verdict], metas: dict, summary: dict,
                 timelines: dict[str, RunTimeline], session_dir: Path, command: Optional[str] = None) -> str:
    drawn = drawn_runs(verdicts)
    body = [f"<h1>brokerchaos: {_e(scenario.get('name'))}</h1>",
            header(scenario, metas, session_dir, command),
            summary_section(summary, verdicts),
            "<h2>Runs</h2>", run_tables(verdicts, metas, set(drawn))]
    if len(drawn) < len(verdicts):
        body.append(f"<p class='note'>{len(drawn)} of {len(verdicts)} runs are drawn below: every run that did "
                    f"not pass, then the first that did. The CSVs have every run.</p>")
    for v in verdicts:
        if v["run"] in drawn:
            body.append(run_section(v, metas.get(v["run"], {}), timelines.get(v["run"]) or RunTimeline()))
    return page(f"brokerchaos {scenario.get('name')}", "".join(body))


def write_session(spark, df, analysis, out: Path, metas: dict, summary: dict) -> Path:
    """report.html for the session in `out`, from its history `df` and its analysis."""
    from ..analysis import timeline

    out = Path(out)
    scenario = _scenario(out, metas)
    drawn = drawn_runs(analysis.verdicts)
    if len(drawn) < len(analysis.verdicts):
        df = df.where(df["run"].isin(drawn))
    tls = timeline.collect(spark, df, [v for v in analysis.verdicts if v["run"] in set(drawn)], analysis.jumps,
                           analysis.losses, analysis.meta.get("send_ns_runs"), getattr(analysis, "skips", None),
                           getattr(analysis, "divergence", None))
    command = (out / "command.txt").read_text().strip() if (out / "command.txt").exists() else None
    path = out / "report.html"
    path.write_text(session_page(scenario, analysis.verdicts, metas, summary, tls, out, command))
    return path


def _scenario(out: Path, metas: dict) -> dict:
    try:
        return json.loads((out / "scenario.json").read_text())
    except (OSError, ValueError):
        # histories analysed on their own: what the run sidecars say
        for m in metas.values():
            if m.get("scenario"):
                return m["scenario"]
        return {"name": out.name}



# -- a campaign -------------------------------------------------------------------------------

# (label, summary key) for the cells of the campaign's table and heat map: the policy's checks
