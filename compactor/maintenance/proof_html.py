"""The audit proof of one erasure request as one self-contained HTML page (inline CSS, no
script, nothing fetched at view time): what ``compactor erase report --html FILE`` writes for
an auditor. Pure: the proof dictionary of :func:`compactor.erasure.ledger.audit` in, a string
out. The subject appears nowhere: the ledger holds only its SHA-256 digest, and so does the
page.

Its sections: the request (digest, reason, dates) and its outcome against the deadline; every
place (broker and log dir) that applied or verified it, with times and what was scanned or
rewritten there; the replicas still to scan; the runs, partition by partition; and the
ledger's commits from Delta's history, which no command can rewrite."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from compactor.erasure.status import RequestStatus, deadline_words, failure_words
from compactor.human import human_time
from compactor.maintenance.html_report import CSS, escape

_DONE_WORDS: dict[str, str] = {
    RequestStatus.VERIFIED: "erased and verified by a rescan of every replica",
    RequestStatus.VERIFIED_LOCAL_ONLY: "erased and verified on every local copy; the remote "
                                       "tier of a tiered topic was not scanned",
    RequestStatus.CANCELLED: "cancelled",
}


def _when(ms: Any) -> str:
    return human_time(ms) if isinstance(ms, int) else "—"


def _rows(head: Sequence[str], rows: Sequence[Sequence[Any]], left: int = 1) -> str:
    if not rows:
        return "<p>none</p>"
    cells = "".join("<tr>" + "".join(
        f"<td{' class=l' if i < left else ''}>{escape(v)}</td>" for i, v in enumerate(r))
        + "</tr>" for r in rows)
    return ("<table><tr>" + "".join(f"<th{' class=l' if i < left else ''}>{escape(h)}</th>"
                                    for i, h in enumerate(head)) + f"</tr>{cells}</table>")


def _places(places: Mapping[str, Mapping[str, Any]]) -> str:
    rows = []
    for key, p in sorted(places.items()):
        rows.append([
            key if p.get("tier") else f"node {p.get('node_id')} · {p.get('log_dir') or key}",
            _when(p.get("applied_at_ms")), p.get("records_erased", "—"),
            p.get("segments_rewritten", "—"), p.get("verify_status") or "not yet",
            _when(p.get("verified_at_ms")), ", ".join(p.get("scanned") or []) or "—",
            "; ".join(f"{x['segment_id']} → {x['new_segment_id']} ({x['partition']} "
                      f"{x['start_offset']}–{x['end_offset']})"
                      for x in p.get("remote_segments", [])) or "—"])
    return _rows(["place (broker · log dir)", "applied", "records erased",
                  "segments rewritten", "rescan", "verified", "partitions scanned",
                  "remote segments replaced"], rows)


def _runs(title: str, runs: Sequence[Mapping[str, Any]]) -> str:
    rows = [[r["run_id"], f"{r['topic']}-{r['partition']}", r["log_dir"], r["status"],
             _when(r.get("started_at_ms")), _when(r.get("finished_at_ms")),
             r.get("segments_rewritten") if r.get("segments_rewritten") is not None else "—",
             r.get("records_erased") if r.get("records_erased") is not None else "—",
             r.get("records_in") if r.get("records_in") is not None else "—"]
            for r in sorted(runs, key=lambda r: (r["run_id"], r["topic"], r["partition"]))]
    return f"<h2>{escape(title)}</h2>" + _rows(
        ["run", "partition", "log dir", "status", "started", "finished", "segments rewritten",
         "records erased", "records read"], rows, left=4)


def render(audit: Mapping[str, Any], *, now_ms: int | None = None) -> str:
    """The page of one request's proof (:func:`compactor.erasure.ledger.audit`)."""
    req, proof = audit["request"], audit["proof"]
    status = str(req["status"])
    outcome = _DONE_WORDS.get(status)
    if status == RequestStatus.FAILED:
        outcome = "failed: " + failure_words(req.get("failure"))
    subject = (f"header {req.get('header_name')} whose value has SHA-256"
               if req.get("selector") == "header" else f"{req.get('selector')} with SHA-256")
    request_rows = [
        ["request id", req["request_id"]], ["topic", req["topic"]],
        ["subject", f"records whose {subject} {req['subject_sha256']} (the subject itself is "
                    "never stored)"],
        ["reason", req.get("reason") or "none recorded"],
        ["requested", _when(req.get("requested_at_ms"))],
        ["deadline", deadline_words(req, now_ms)],
        ["status", f"{status}" + (f": {outcome}" if outcome else "")],
    ]
    if req.get("leave_tombstone"):
        request_rows.append(["tombstone", "a bare tombstone of the key is left, as requested"])
    cards = [("records erased", proof.get("records_erased")),
             ("older values erased with them", proof.get("superseded_by_erased")),
             ("segments rescanned", proof.get("segments_rescanned")),
             ("records rescanned", proof.get("records_rescanned")),
             ("residual matches", proof.get("residual_matches")),
             ("remote tier", proof.get("remote_tier"))]
    missing = proof.get("missing_replicas")
    missing_html = ("<p>Where the replicas live is unknown (no metadata log): the request "
                    "cannot be verified beyond the places above.</p>" if missing is None else
                    _rows(["partition", "broker", "directory id"],
                          [[m.get("partition"), m.get("node_id"), m.get("directory_id") or "—"]
                           for m in missing]) if missing else
                    "<p>none: every replica the cluster's metadata names was scanned clean</p>"
                    if status in (RequestStatus.VERIFIED, RequestStatus.VERIFIED_LOCAL_ONLY)
                    else "<p>none recorded</p>")
    commits = _rows(["version", "time", "operation", "action", "run", "reason"],
                    [[c.get("version"), _when(c.get("timestamp_ms")), c.get("operation"),
                      c.get("action") or "—", c.get("run_id") or "—", c.get("reason") or "—"]
                     for c in audit.get("ledger_commits", [])], left=0)
    moved = audit.get("changed_during_runs") or []
    moved_html = ("<h2>Runs its status moved under</h2>" + _rows(
        ["run", "command", "finished", "status then"],
        [[m["run_id"], m["command"], _when(m.get("finished_at_ms")), m.get("status", "—")]
         for m in moved]) if moved else "")
    heading = f"Erasure proof · request {req['request_id']}"
    tone = "failed" if status == RequestStatus.FAILED else "ok" if outcome else "partial"
    return (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
        f"<title>{escape(heading)}</title><style>{CSS}</style></head><body>"
        f"<h1>{escape(heading)} <span class=status-{tone}>{escape(status)}</span></h1>"
        f"<div class=meta>kafka-compactor erase report · ledger "
        f"{escape(audit.get('state_dir') or '')}</div>"
        "<h2>Request</h2>" + _rows(["", ""], request_rows, left=2)
        + "<div class=cards>" + "".join(
            f"<div class=card><b>{escape('—' if v is None else v)}</b>{escape(k)}</div>"
            for k, v in cards) + "</div>"
        + "<h2>Places: every broker and log dir that applied or verified it</h2>"
        + _places(proof.get("places") or {})
        + "<h2>Replicas still to scan</h2>" + missing_html
        + _runs("Apply runs, per partition", audit.get("apply_runs") or [])
        + _runs("Verify runs (rescans), per partition", audit.get("verify_runs") or [])
        + moved_html
        + "<h2>Ledger commits (Delta history)</h2>" + commits
        + "</body></html>\n")
