"""The report of an ``erase apply`` or ``erase verify`` (the JSON ``erase_report`` of
``schemas/report.schema.json``), typed as compaction's and retention's are: its lines (one
per directory read), the requests it changed or left, their counts by outcome, what moved
under it and its status, with the human summary and the exit code."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from compactor.erasure.status import RequestStatus
from compactor.maintenance.report import ErasureOutcome, RunStatus

#: ``requests_by_outcome``'s count of the requests whose status moved while the run ran
CHANGED_DURING_RUN = "changed_during_run"


@dataclass(kw_only=True)
class ErasureReport:
    """What one ``erase apply`` (``command`` ``erase_apply``) or ``erase verify`` did in one log
    dir. ``partitions``: one line per directory (``ErasureOutcome`` status); ``requests``: the
    first of the requests the run changed or left, with ``requests_by_outcome`` counting them
    all; ``changed_during_run``: the requests a cancel or retry moved while it ran;
    ``ledger_error``: an apply whose rewrites stand but that the ledger could not record."""

    command: str
    run_id: str
    log_dir: str
    now_ms: int
    dry_run: bool | None = None  # apply only
    partitions: list[dict[str, Any]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    requests_by_outcome: dict[str, int] | None = None
    changed_during_run: dict[str, Any] | None = None
    ledger_error: dict[str, Any] | None = None
    #: ``erase apply --remote``: the remote replacements an earlier run left interrupted,
    #: settled first (``finished`` or ``undone``, or the error that keeps one for later)
    remote_resolved: list[dict[str, Any]] | None = None
    status: RunStatus = RunStatus.OK

    @property
    def exit_code(self) -> int:
        """The shared rule of its status (:class:`RunStatus`)."""
        return self.status.exit_code

    @property
    def locked(self) -> bool:
        return any(p["status"] == ErasureOutcome.LOCKED for p in self.partitions)

    def to_dict(self) -> dict[str, Any]:
        """The JSON report."""
        out: dict[str, Any] = {
            "type": "report", "command": self.command, "run_id": self.run_id,
            "log_dir": self.log_dir, "now_ms": self.now_ms, "partitions": self.partitions,
            "requests": self.requests}
        if self.dry_run is not None:
            out["dry_run"] = self.dry_run
        for key in ("requests_by_outcome", "changed_during_run", "ledger_error",
                    "remote_resolved"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        out["status"] = self.status
        return out

    def record_moved(self, counts: Mapping[str, int], moved: Sequence[Mapping[str, Any]]) -> None:
        """Make the report say what the ledger's MERGE changed: the requests whose status moved
        under the run (``counts`` by the status the run computed for them, the first of them
        in ``moved``) leave that status's count and are listed, with their status now and
        what the run did to them anyway."""
        if not counts:
            return
        by_outcome = self.requests_by_outcome if self.requests_by_outcome is not None else {}
        for status, n in counts.items():
            by_outcome[status] = by_outcome.get(status, 0) - n
            if by_outcome[status] <= 0:
                del by_outcome[status]
        by_outcome[CHANGED_DURING_RUN] = sum(counts.values())
        self.requests_by_outcome = by_outcome
        now = {m["request_id"]: m for m in moved}
        for entry in self.requests:
            m = now.get(entry["request_id"])
            if m is not None:
                entry.update(status=m["status"], changed_during_run=(
                    f"{m['status']} while this run ran: the run's outcome ({m['computed']}) was "
                    f"not recorded" + (f"; {m['records_erased']} of its records were erased "
                                       f"anyway" if self.command == "erase_apply"
                                       and m["records_erased"] else "")))
        self.changed_during_run = {"count": sum(counts.values()),
                                   "requests": [dict(m) for m in moved]}

    def summary(self) -> str:
        """The human summary (a dry run's in conditional words: it changed nothing)."""
        dry = bool(self.dry_run)
        lines = [f"{p['dir']}: {p['status']}"
                 + (f", {p['records_erased']} records erased in {p['segments_rewritten']} "
                    f"segments" if p.get("records_erased") else "")
                 + (f", {p['records_matched']} records would be erased in "
                    f"{p['segments_rewritten']} segments" if dry and p.get("records_matched")
                    else "")
                 + (f", {p['records_scanned']} records scanned" if "residual_matches" in p
                    else "")
                 + (f": {p['error'].get('message')}" if p.get("error") else "")
                 for p in self.partitions]
        lines += [request_line(r, dry=dry) for r in self.requests]
        if self.ledger_error:
            e = self.ledger_error
            lines.append(f"LEDGER NOT UPDATED: {e['message']} ({e.get('path')}); remedy: "
                         f"{e['remedy']}")
        lines.append(f"{self.command} ({self.run_id}): "
                     + (f"dry run, nothing changed; the run would end {self.status}" if dry
                        else str(self.status)))
        return "\n".join(lines)


def request_line(r: Mapping[str, Any], *, dry: bool = False) -> str:
    """One request of a report, for a person: what the run did to it, or why it failed."""
    head = f"request {r['request_id']}: {r.get('status')}"
    if r.get("reason"):
        return f"{head}: {r['reason']}"
    if r.get("blocked_by"):
        return f"{head}: blocked by {_words(r['blocked_by'])}"
    if r.get("no_replica_here"):
        return f"{head}: no replica of its topics in this log dir"
    if r.get("unverified_because"):
        return f"{head}: not verified here: {_words(r['unverified_because'])}"
    parts = []
    if "records_erased" in r:
        parts.append(f"{r['records_erased']} records {'would be ' if dry else ''}erased in "
                     f"{r.get('segments_rewritten', 0)} segments of "
                     f"{r.get('partitions_rewritten', 0)} partitions")
    if r.get("superseded_by_erased"):
        parts.append(f"{r['superseded_by_erased']} older values of its keys with them")
    if "verified_records_scanned" in r:
        parts.append(f"{r['verified_records_scanned']} records in "
                     f"{r.get('verified_segments_scanned', 0)} segments scanned clean")
    if r.get("missing_replicas") and isinstance(r["missing_replicas"], str):
        parts.append(r["missing_replicas"])
    elif r.get("missing_replica_count"):
        parts.append(f"{r['missing_replica_count']} replicas elsewhere not yet scanned")
    if r.get("remote_tier") == "not_covered":
        parts.append(f"the remote tier of {_words(r.get('tiered_topics', []))} not scanned")
    return head + (": " + ", ".join(parts) if parts else "")


def _words(value: Any) -> str:
    """A report value (a list, a map, a string) as plain words, never a Python repr."""
    if isinstance(value, Mapping):
        return "; ".join(f"{k.replace('_', ' ')}: {_words(v)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(_words(v) for v in value)
    return str(value)


def dry_run_words(requests: list[dict[str, Any]]) -> None:
    """A dry run's request entries say what an apply would record, in conditional words."""
    for r in requests:
        r["status"] = RequestStatus(r["status"]).dry_run
