"""A run's JSON report as one self-contained HTML page (inline CSS and SVG charts, no script,
nothing fetched at view time): what ``--html-report FILE`` and ``compactor report --html``
write. Pure: a report dictionary in, a string out."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from compactor.human import human_bytes, human_time

#: Colours of the charts' series (colour-blind-safe, Okabe-Ito).
_COLOURS = {
    "before": "#999999", "after": "#0072B2", "superseded": "#0072B2",
    "tombstone_expired": "#E69F00", "null_key": "#009E73", "aborted": "#D55E00",
    "marker_expired": "#CC79A7", "retention_ms": "#0072B2", "retention_bytes": "#E69F00",
    "log_start_offset": "#009E73", "records_erased": "#D55E00",
    "superseded_by_erased": "#E69F00", "ratio": "#0072B2", "threshold": "#D55E00",
}
_STAGE_COLOURS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#F0E442")

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem;
       color: #222; background: #fff; }
h1 { font-size: 1.5rem; margin: 0 0 .3rem; } h2 { font-size: 1.15rem; margin: 2rem 0 .5rem; }
.meta { color: #555; margin-bottom: 1rem; }
.cards { display: flex; flex-wrap: wrap; gap: .8rem; margin: 1rem 0; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: .6rem .9rem; min-width: 9rem; }
.card b { display: block; font-size: 1.25rem; }
.status-ok { color: #1a7f37; } .status-partial, .status-failed { color: #b42318; }
table { border-collapse: collapse; margin: .5rem 0; }
th, td { border-bottom: 1px solid #e5e5e5; padding: .25rem .6rem; text-align: right;
         vertical-align: top; }
th { background: #f6f6f6; } td.l, th.l { text-align: left; }
td.why { text-align: left; color: #555; max-width: 34rem; font-size: 12px; }
.problem { color: #b42318; font-weight: 600; }
.legend span { display: inline-block; margin-right: 1rem; }
.legend i { display: inline-block; width: .8rem; height: .8rem; margin-right: .3rem;
            vertical-align: -1px; }
svg text { font: 11px system-ui, sans-serif; fill: #333; }
details { margin: .4rem 0; } summary { cursor: pointer; color: #0b5cad; }
"""


def escape(value: Any) -> str:
    """A value as HTML text (the erasure proof's page uses it too)."""
    return html.escape(str(value), quote=True)


_e = escape  # the short name of this page's many f-strings


def _num(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _legend(keys: Sequence[str]) -> str:
    return '<div class="legend">' + "".join(
        f'<span><i style="background:{_COLOURS.get(k, "#777")}"></i>{_e(k)}</span>'
        for k in keys) + "</div>"


def _bars(rows: Sequence[tuple[str, Sequence[tuple[str, float]]]], *, fmt: Any = _num,
          stacked: bool = False, marker: Mapping[str, float] | None = None,
          scale: float | None = None) -> str:
    """Horizontal bar chart as inline SVG: one row per label, its series side by side (or
    stacked); ``marker`` draws a vertical tick per label (a threshold)."""
    label_w, chart_w, value_w = 200, 460, 120
    per_row = 14 if stacked else 12 * max((len(s) for _, s in rows), default=1)
    row_h = per_row + 8
    largest = scale or max((sum(v for _, v in s) if stacked else max((v for _, v in s),
                                                                      default=0))
                            for _, s in rows) if rows else 0
    largest = largest or 1
    height = row_h * len(rows) + 6
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + chart_w + value_w}" '
             f'height="{height}" role="img">']
    for r, (label, series) in enumerate(rows):
        y = 4 + r * row_h
        parts.append(f'<text x="{label_w - 6}" y="{y + per_row / 2 + 4}" '
                     f'text-anchor="end">{_e(label)}</text>')
        x = float(label_w)
        for i, (key, value) in enumerate(series):
            w = chart_w * value / largest
            colour = _COLOURS.get(key, "#777")
            if stacked:
                parts.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{per_row}" '
                             f'fill="{colour}"><title>{_e(key)}: {_e(fmt(value))}</title></rect>')
                x += w
            else:
                parts.append(f'<rect x="{label_w}" y="{y + i * 12}" width="{w:.1f}" height="10" '
                             f'fill="{colour}"><title>{_e(key)}: {_e(fmt(value))}</title></rect>')
        total = (fmt(sum(v for _, v in series)) if stacked
                 else " / ".join(fmt(v) for _, v in series))
        parts.append(f'<text x="{label_w + chart_w + 6}" y="{y + per_row / 2 + 4}">'
                     f'{_e(total)}</text>')
        if marker and label in marker:
            mx = label_w + chart_w * marker[label] / largest
            parts.append(f'<line x1="{mx:.1f}" x2="{mx:.1f}" y1="{y - 2}" y2="{y + per_row + 2}" '
                         f'stroke="{_COLOURS["threshold"]}" stroke-width="2"/>')
    parts.append("</svg>")
    return "".join(parts)


def _timeline(stages: Mapping[str, float]) -> str:
    """The run's stages one after another on a time axis (seconds)."""
    total = sum(stages.values()) or 1.0
    width, left = 660, 10
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width + 2 * left}" height="64" '
             'role="img">']
    x = float(left)
    for i, (name, seconds) in enumerate(stages.items()):
        w = width * seconds / total
        colour = _STAGE_COLOURS[i % len(_STAGE_COLOURS)]
        parts.append(f'<rect x="{x:.1f}" y="6" width="{max(w, 1):.1f}" height="22" '
                     f'fill="{colour}"><title>{_e(name)}: {seconds:.2f} s</title></rect>')
        if w > 60:
            parts.append(f'<text x="{x + 4:.1f}" y="21" style="fill:#fff">{_e(name)}</text>')
        x += w
    parts.append(f'<text x="{left}" y="46">0 s</text><text x="{left + width}" y="46" '
                 f'text-anchor="end">{total:.1f} s</text></svg>')
    legend = " · ".join(f"{_e(k)} {v:.1f} s" for k, v in stages.items())
    return "".join(parts) + f"<div>{legend}</div>"


def _tp(p: Mapping[str, Any]) -> str:
    return f"{p['topic']}-{p['partition']}"


def _why(p: Mapping[str, Any]) -> str:
    if p.get("error"):
        err = p["error"]
        where = ", ".join(f"{k.replace('_', ' ')} {err[k]}" for k in ("position", "base_offset")
                          if err.get(k) is not None)
        return (f'<span class="problem">{_e(err.get("code"))}</span>: {_e(err.get("message"))}'
                f' ({_e(err.get("path"))}{", " + _e(where) if where else ""})'
                + (f"; remedy: {_e(err['remedy'])}" if err.get("remedy") else ""))
    return _e(p.get("explanation") or p.get("reason") or "")


_OUTPUT_FIGURES = ("records_in", "records_out", "bytes_in", "bytes_out", "segments_after")
#: Rows of these statuses (nothing done, nothing wrong) are collapsed under each table.
_QUIET = frozenset({"skipped", "kept", "unchanged", "clean"})
#: Rows of these statuses, or with an error, are listed first under "Needs attention".
_PROBLEMS = frozenset({"corrupt", "refused", "failed", "locked", "blocked", "residual",
                       "residual_copy"})
#: A table longer than this is collapsed (the rollup and the attention list stay open).
OPEN_ROWS = 50
#: Per-partition charts show this many partitions, the largest.
CHART_ROWS = 25


def _needs_attention(p: Mapping[str, Any]) -> bool:
    return p["status"] in _PROBLEMS or bool(p.get("error"))


def _table(head: str, rows: Sequence[Mapping[str, Any]], row: Any, what: str) -> str:
    """A per-partition table: the rows that did something (open while short), and the quiet
    ones (skipped, kept, unchanged) collapsed below it."""
    busy = [p for p in rows if p["status"] not in _QUIET]
    quiet = [p for p in rows if p["status"] in _QUIET]
    out = []
    if busy:
        table = f"<table>{head}{''.join(row(p) for p in busy)}</table>"
        out.append(table if len(busy) <= OPEN_ROWS else
                   f"<details><summary>{len(busy):,} {what} lines</summary>{table}</details>")
    if quiet:
        counts = ", ".join(f"{n:,} {s}" for s, n in sorted(_count(quiet).items()))
        out.append(f"<details><summary>{len(quiet):,} {what}s with nothing to do "
                   f"({_e(counts)})</summary><table>{head}"
                   f"{''.join(row(p) for p in quiet)}</table></details>")
    return "".join(out)


def _count(lines: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for p in lines:
        counts[p["status"]] = counts.get(p["status"], 0) + 1
    return counts


def _largest(rows: Sequence[Mapping[str, Any]], key: Any, what: str) -> tuple[list[Any], str]:
    """The :data:`CHART_ROWS` largest rows by ``key``, and the note saying so when some were
    left out."""
    top = sorted(rows, key=key, reverse=True)[:CHART_ROWS]
    note = (f" <span class=meta>(the {len(top)} largest of {len(rows):,} {what})</span>"
            if len(rows) > len(top) else "")
    return top, note


def _compaction(report: Mapping[str, Any]) -> str:
    lines = report["partitions"]
    head = ("<tr><th class=l>partition</th><th class=l>status</th>"
            "<th>records in</th><th>records out</th><th>bytes in</th><th>bytes out</th>"
            "<th>segments</th><th>dirty ratio</th><th>threshold</th>"
            "<th class=l>why</th></tr>")

    def row(p: Mapping[str, Any]) -> str:
        if p["status"] != "cleaned":  # nothing was rewritten: no output figures to show
            p = {k: v for k, v in p.items() if k not in _OUTPUT_FIGURES}
        threshold = ((p.get("config") or {}).get("min.cleanable.dirty.ratio") or {}).get("value")
        ratio = p.get("dirty_ratio")
        segs = (f"{p.get('segments_before')} → {p['segments_after']}"
                if p.get("segments_after") is not None else _num(p.get("segments_before")))
        return (f"<tr><td class=l>{_e(_tp(p))}</td><td class=l>{_e(p['status'])}</td>"
                f"<td>{_num(p.get('records_in'))}</td><td>{_num(p.get('records_out'))}</td>"
                f"<td>{human_bytes(p.get('bytes_in'))}</td>"
                f"<td>{human_bytes(p.get('bytes_out'))}</td>"
                f"<td>{segs}</td><td>{'-' if ratio is None else f'{ratio:.2f}'}</td>"
                f"<td>{'-' if threshold is None else _e(threshold)}</td>"
                f"<td class=why>{_why(p)}</td></tr>")

    out = ["<h2>Compaction</h2>", _table(head, lines, row, "partition")]
    cleaned = [p for p in lines if p.get("bytes_out") is not None and p.get("records_in")]
    if cleaned:
        top, note = _largest(cleaned, lambda p: p["bytes_in"], "cleaned")
        out.append(f"<h3>Bytes before and after{note}</h3>" + _legend(["before", "after"])
                   + _bars([(_tp(p), [("before", p["bytes_in"]), ("after", p["bytes_out"])])
                            for p in top], fmt=human_bytes))
        reasons = sorted({r for p in cleaned for r, n in (p.get("dropped") or {}).items() if n})
        if reasons:
            out.append(f"<h3>Records dropped, by reason{note}</h3>" + _legend(reasons) + _bars(
                [(_tp(p), [(r, (p.get("dropped") or {}).get(r, 0)) for r in reasons])
                 for p in top], stacked=True))
    rated = [p for p in lines if p.get("dirty_ratio") is not None]
    if rated:
        top, note = _largest(rated, lambda p: p["dirty_ratio"], "rated")
        marks = {_tp(p): float(p["config"]["min.cleanable.dirty.ratio"]["value"])
                 for p in top if (p.get("config") or {}).get("min.cleanable.dirty.ratio")}
        out.append(f"<h3>Dirty ratio against min.cleanable.dirty.ratio{note}</h3>"
                   + _legend(["ratio", "threshold"]) + _bars(
                       [(_tp(p), [("ratio", p["dirty_ratio"])]) for p in top],
                       fmt=lambda v: f"{v:.2f}", marker=marks, scale=1.0))
    return "".join(out)


def _retention(report: Mapping[str, Any]) -> str:
    lines = report["partitions"]
    head = ("<tr><th class=l>partition</th><th class=l>status</th>"
            "<th>segments before</th><th>segments after</th><th>log start offset</th>"
            "<th class=l>deleted by reason</th><th class=l>why</th></tr>")

    def row(p: Mapping[str, Any]) -> str:
        by = p.get("deleted_by_reason") or {}
        deleted = ", ".join(f"{r}: {v['segments']} ({human_bytes(v['bytes'])})"
                            for r, v in by.items() if v["segments"])
        start = (f"{p['log_start_offset']} → {p['new_log_start_offset']}"
                 if p.get("new_log_start_offset") is not None else "-")
        return (f"<tr><td class=l>{_e(_tp(p))}</td><td class=l>{_e(p['status'])}</td>"
                f"<td>{_num(p.get('segments_before'))}</td>"
                f"<td>{_num(p.get('segments_after'))}</td><td>{start}</td>"
                f"<td class=l>{_e(deleted or '-')}</td><td class=why>{_why(p)}</td></tr>")

    out = ["<h2>Retention</h2>", _table(head, lines, row, "partition")]
    deleting = [p for p in lines if any(v["segments"] for v in
                                        (p.get("deleted_by_reason") or {}).values())]
    if deleting:
        reasons = ["retention_ms", "retention_bytes", "log_start_offset"]
        top, note = _largest(deleting, lambda p: sum(
            v["segments"] for v in p["deleted_by_reason"].values()), "deleting")
        out.append(f"<h3>Segments deleted, by reason{note}</h3>" + _legend(reasons) + _bars(
            [(_tp(p), [(r, p["deleted_by_reason"][r]["segments"]) for r in reasons])
             for p in top], stacked=True))
    return "".join(out)


def _erasure(report: Mapping[str, Any]) -> str:
    lines = report["partitions"]
    head = ("<tr><th class=l>copy</th><th class=l>status</th>"
            "<th>segments scanned</th><th>records scanned</th><th>records erased</th>"
            "<th>residual matches</th><th class=l>why</th></tr>")

    def row(p: Mapping[str, Any]) -> str:
        return (f"<tr><td class=l>{_e(p.get('dir', _tp(p)))}</td>"
                f"<td class=l>{_e(p['status'])}</td>"
                f"<td>{_num(p.get('segments_scanned'))}</td>"
                f"<td>{_num(p.get('records_scanned'))}</td>"
                f"<td>{_num(p.get('records_erased'))}</td>"
                f"<td>{_num(p.get('residual_matches'))}</td>"
                f"<td class=why>{_why(p)}</td></tr>")

    out = ["<h2>Erasure</h2>", _table(head, lines, row, "copy"),
           "<h3>Requests</h3><table><tr><th class=l>request</th><th class=l>status</th></tr>"]
    for r in report.get("requests", []):
        out.append(f"<tr><td class=l>{_e(r['request_id'])}</td>"
                   f"<td class=l>{_e(r['status'])}</td></tr>")
    out.append("</table>")
    erased = [p for p in lines if p.get("records_erased")]
    if erased:
        top, note = _largest(erased, lambda p: p["records_erased"], "copies")
        out.append(f"<h3>Records erased{note}</h3>" + _bars(
            [(p.get("dir", _tp(p)), [("records_erased", p["records_erased"])]) for p in top]))
    return "".join(out)


def _key(p: Mapping[str, Any]) -> tuple[str, Any]:
    """One partition (or, in an erasure, one copy on disk) however many parts name it."""
    return (p["topic"], p.get("dir") or p["partition"])


def _attention(parts: Sequence[Mapping[str, Any]]) -> str:
    """Every line of every part that failed, was refused or holds an error: first."""
    rows = [(part["command"], p) for part in parts for p in part.get("partitions", [])
            if _needs_attention(p)]
    if not rows:
        return ""
    out = [f"<h2 class=problem>Needs attention: {len(rows):,}</h2><table><tr>"
           "<th class=l>partition</th><th class=l>step</th><th class=l>status</th>"
           "<th class=l>why</th></tr>"]
    for command, p in rows:
        out.append(f"<tr><td class=l>{_e(p.get('dir', _tp(p)))}</td><td class=l>"
                   f"{_e(command)}</td><td class='l problem'>{_e(p['status'])}</td>"
                   f"<td class=why>{_why(p)}</td></tr>")
    return "".join(out) + "</table>"


def _topics(parts: Sequence[Mapping[str, Any]]) -> str:
    """The rollup: one row per topic (partitions counted once, outcomes per step, bytes in
    and out, segments deleted, records erased), the topics needing attention first, then
    the largest."""
    topics: dict[str, dict[str, Any]] = {}
    for part in parts:
        for p in part.get("partitions", []):
            t = topics.setdefault(p["topic"], {"keys": set(), "outcomes": {}, "attention": 0,
                                               "bytes_in": 0, "bytes_out": 0, "deleted": 0,
                                               "deleted_bytes": 0, "erased": 0})
            t["keys"].add(_key(p))
            step = t["outcomes"].setdefault(part["command"], {})
            step[p["status"]] = step.get(p["status"], 0) + 1
            t["attention"] += _needs_attention(p)
            if p.get("bytes_out") is not None and p.get("bytes_in"):
                t["bytes_in"] += p["bytes_in"]
                t["bytes_out"] += p["bytes_out"]
            for v in (p.get("deleted_by_reason") or {}).values():
                t["deleted"] += v["segments"]
                t["deleted_bytes"] += v["bytes"]
            t["erased"] += p.get("records_erased") or 0
    if len(topics) < 2:
        return ""
    order = sorted(topics.items(), key=lambda kv: (-kv[1]["attention"], -kv[1]["bytes_in"],
                                                   -kv[1]["deleted_bytes"], kv[0]))
    out = ["<h2>By topic</h2><table><tr><th class=l>topic</th><th>partitions</th>"
           "<th class=l>outcomes</th><th>bytes in → out</th><th>segments deleted</th>"
           "<th>records erased</th></tr>"]
    for name, t in order:
        outcomes = "; ".join(f"{command}: " + ", ".join(f"{n:,} {s}" for s, n in
                                                         sorted(counts.items()))
                             for command, counts in t["outcomes"].items())
        flow = (f"{human_bytes(t['bytes_in'])} → {human_bytes(t['bytes_out'])}"
                if t["bytes_in"] else "-")
        deleted = (f"{t['deleted']:,} ({human_bytes(t['deleted_bytes'])})"
                   if t["deleted"] else "-")
        mark = " class='l problem'" if t["attention"] else " class=l"
        out.append(f"<tr><td{mark}>{_e(name)}</td><td>{len(t['keys']):,}</td>"
                   f"<td class=l>{_e(outcomes)}</td><td>{flow}</td><td>{deleted}</td>"
                   f"<td>{_num(t['erased']) if t['erased'] else '-'}</td></tr>")
    return "".join(out) + "</table>"


def _cards(parts: Sequence[Mapping[str, Any]], lines: Sequence[Mapping[str, Any]]) -> str:
    measured = [p for p in lines if p.get("bytes_out") is not None and p.get("bytes_in")]
    attention = sum(_needs_attention(p) for p in lines)
    cards = [("partitions", f"{len({_key(p) for p in lines}):,}")]
    for part in parts:  # a run's steps each count their own outcomes
        counts = _count(part.get("partitions", []))
        cards.append((f"{part['command']}" if len(parts) > 1 else "by status",
                      ", ".join(f"{n:,} {s}" for s, n in sorted(counts.items()))))
    if attention:
        cards.insert(0, ("needs attention", f"{attention:,}"))
    if measured:
        cards += [("bytes", f"{human_bytes(sum(p['bytes_in'] for p in measured))} → "
                            f"{human_bytes(sum(p['bytes_out'] for p in measured))}"),
                  ("records", f"{sum(p.get('records_in') or 0 for p in measured):,} → "
                              f"{sum(p.get('records_out') or 0 for p in measured):,}")]
    deleted = sum(len(p.get("deleted_segments") or []) for p in lines)
    if deleted:
        cards.append(("segments deleted", f"{deleted:,}"))
    erased = sum(p.get("records_erased") or 0 for p in lines)
    if erased:
        cards.append(("records erased", f"{erased:,}"))
    return '<div class="cards">' + "".join(
        f'<div class="card">{_e(k)}<b>{_e(v)}</b></div>' for k, v in cards) + "</div>"


def render(report: Mapping[str, Any], *, title: str | None = None) -> str:
    """The page of one JSON report (compact, plan, retain, run, erase apply or verify)."""
    command = report["command"]
    sections: list[str] = []
    lines: list[Mapping[str, Any]] = []
    # a run whose compaction did not run (no selected topic compacts with known configs) has
    # no compaction part
    parts = ([p for p in (report["compaction"], report["retention"]) if p is not None]
             if command == "run" else [report])
    stages: dict[str, float] = {}
    for part in parts:
        lines += part.get("partitions", [])
        for k, v in (part.get("stages_s") or {}).items():
            stages[k] = stages.get(k, 0.0) + v
        if part["command"] in ("compact", "plan"):
            sections.append(_compaction(part))
        elif part["command"] == "retain":
            sections.append(_retention(part))
        else:
            sections.append(_erasure(part))
    if stages:
        sections.append("<h2>Stage timeline</h2>" + _timeline(stages))
    # what needs attention, then the topics' rollup, then the per-partition detail
    sections[:0] = [_attention(parts), _topics(parts)]
    if report.get("unconfigured"):  # nothing was decided: say why before anything else
        sections.insert(0, "<h2 class=problem>Configs not known: nothing was changed</h2>"
                           f"<p>{_e(report['unconfigured'])}</p>")
    status = report.get("status", "ok")
    heading = title or f"kafka-compactor {command}"
    run_id = f" · run {_e(report['run_id'])}" if report.get("run_id") else ""
    return (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
        f"<title>{_e(heading)}</title><style>{CSS}</style></head><body>"
        f"<h1>{_e(heading)} <span class=status-{_e(status)}>{_e(status)}</span></h1>"
        f'<div class="meta">log dir {_e(report["log_dir"])} · clock '
        f"{_e(human_time(report['now_ms']))}{run_id}</div>"
        + _cards(parts, lines) + "".join(sections) + "</body></html>\n")
