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

_CSS = """
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
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


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


def _compaction(report: Mapping[str, Any]) -> str:
    lines = report["partitions"]
    out = ["<h2>Compaction</h2><table><tr><th class=l>partition</th><th class=l>status</th>"
           "<th>records in</th><th>records out</th><th>bytes in</th><th>bytes out</th>"
           "<th>segments</th><th>dirty ratio</th><th>threshold</th>"
           "<th class=l>why</th></tr>"]
    for p in lines:
        if p["status"] != "cleaned":  # nothing was rewritten: no output figures to show
            p = {k: v for k, v in p.items() if k not in _OUTPUT_FIGURES}
        threshold = ((p.get("config") or {}).get("min.cleanable.dirty.ratio") or {}).get("value")
        ratio = p.get("dirty_ratio")
        segs = (f"{p.get('segments_before')} → {p['segments_after']}"
                if p.get("segments_after") is not None else _num(p.get("segments_before")))
        out.append(
            f"<tr><td class=l>{_e(_tp(p))}</td><td class=l>{_e(p['status'])}</td>"
            f"<td>{_num(p.get('records_in'))}</td><td>{_num(p.get('records_out'))}</td>"
            f"<td>{human_bytes(p.get('bytes_in'))}</td><td>{human_bytes(p.get('bytes_out'))}</td>"
            f"<td>{segs}</td><td>{'-' if ratio is None else f'{ratio:.2f}'}</td>"
            f"<td>{'-' if threshold is None else _e(threshold)}</td>"
            f"<td class=why>{_why(p)}</td></tr>")
    out.append("</table>")
    cleaned = [p for p in lines if p.get("bytes_out") is not None and p.get("records_in")]
    if cleaned:
        out.append("<h3>Bytes before and after</h3>" + _legend(["before", "after"]) + _bars(
            [(_tp(p), [("before", p["bytes_in"]), ("after", p["bytes_out"])]) for p in cleaned],
            fmt=human_bytes))
        reasons = sorted({r for p in cleaned for r, n in (p.get("dropped") or {}).items() if n})
        if reasons:
            out.append("<h3>Records dropped, by reason</h3>" + _legend(reasons) + _bars(
                [(_tp(p), [(r, (p.get("dropped") or {}).get(r, 0)) for r in reasons])
                 for p in cleaned], stacked=True))
    rated = [p for p in lines if p.get("dirty_ratio") is not None]
    if rated:
        marks = {_tp(p): float(p["config"]["min.cleanable.dirty.ratio"]["value"])
                 for p in rated if (p.get("config") or {}).get("min.cleanable.dirty.ratio")}
        out.append("<h3>Dirty ratio against min.cleanable.dirty.ratio</h3>"
                   + _legend(["ratio", "threshold"]) + _bars(
                       [(_tp(p), [("ratio", p["dirty_ratio"])]) for p in rated],
                       fmt=lambda v: f"{v:.2f}", marker=marks, scale=1.0))
    return "".join(out)


def _retention(report: Mapping[str, Any]) -> str:
    lines = report["partitions"]
    out = ["<h2>Retention</h2><table><tr><th class=l>partition</th><th class=l>status</th>"
           "<th>segments before</th><th>segments after</th><th>log start offset</th>"
           "<th class=l>deleted by reason</th><th class=l>why</th></tr>"]
    for p in lines:
        by = p.get("deleted_by_reason") or {}
        deleted = ", ".join(f"{r}: {v['segments']} ({human_bytes(v['bytes'])})"
                            for r, v in by.items() if v["segments"])
        start = (f"{p['log_start_offset']} → {p['new_log_start_offset']}"
                 if p.get("new_log_start_offset") is not None else "-")
        out.append(f"<tr><td class=l>{_e(_tp(p))}</td><td class=l>{_e(p['status'])}</td>"
                   f"<td>{_num(p.get('segments_before'))}</td>"
                   f"<td>{_num(p.get('segments_after'))}</td><td>{start}</td>"
                   f"<td class=l>{_e(deleted or '-')}</td><td class=why>{_why(p)}</td></tr>")
    out.append("</table>")
    deleting = [p for p in lines if any(v["segments"] for v in
                                        (p.get("deleted_by_reason") or {}).values())]
    if deleting:
        reasons = ["retention_ms", "retention_bytes", "log_start_offset"]
        out.append("<h3>Segments deleted, by reason</h3>" + _legend(reasons) + _bars(
            [(_tp(p), [(r, p["deleted_by_reason"][r]["segments"]) for r in reasons])
             for p in deleting], stacked=True))
    return "".join(out)


def _erasure(report: Mapping[str, Any]) -> str:
    lines = report["partitions"]
    out = ["<h2>Erasure</h2><table><tr><th class=l>copy</th><th class=l>status</th>"
           "<th>segments scanned</th><th>records scanned</th><th>records erased</th>"
           "<th>residual matches</th><th class=l>why</th></tr>"]
    for p in lines:
        out.append(f"<tr><td class=l>{_e(p.get('dir', _tp(p)))}</td>"
                   f"<td class=l>{_e(p['status'])}</td>"
                   f"<td>{_num(p.get('segments_scanned'))}</td>"
                   f"<td>{_num(p.get('records_scanned'))}</td>"
                   f"<td>{_num(p.get('records_erased'))}</td>"
                   f"<td>{_num(p.get('residual_matches'))}</td>"
                   f"<td class=why>{_why(p)}</td></tr>")
    out.append("</table><h3>Requests</h3><table><tr><th class=l>request</th>"
               "<th class=l>status</th></tr>")
    for r in report.get("requests", []):
        out.append(f"<tr><td class=l>{_e(r['request_id'])}</td>"
                   f"<td class=l>{_e(r['status'])}</td></tr>")
    out.append("</table>")
    erased = [p for p in lines if p.get("records_erased")]
    if erased:
        out.append("<h3>Records erased</h3>" + _bars(
            [(p.get("dir", _tp(p)), [("records_erased", p["records_erased"])]) for p in erased]))
    return "".join(out)


def _cards(report: Mapping[str, Any], lines: Sequence[Mapping[str, Any]]) -> str:
    counts: dict[str, int] = {}
    for p in lines:
        counts[p["status"]] = counts.get(p["status"], 0) + 1
    measured = [p for p in lines if p.get("bytes_out") is not None and p.get("bytes_in")]
    cards = [("partitions", f"{len(lines)}"),
             ("by status", ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))]
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
    parts = ([report["compaction"], report["retention"]] if command == "run" else [report])
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
    status = report.get("status", "ok")
    heading = title or f"kafka-compactor {command}"
    run_id = f" · run {_e(report['run_id'])}" if report.get("run_id") else ""
    return (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
        f"<title>{_e(heading)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{_e(heading)} <span class=status-{_e(status)}>{_e(status)}</span></h1>"
        f'<div class="meta">log dir {_e(report["log_dir"])} · clock '
        f"{_e(human_time(report['now_ms']))}{run_id}</div>"
        + _cards(report, lines) + "".join(sections) + "</body></html>\n")
