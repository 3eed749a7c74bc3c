"""The ``runs`` table of the state dir: one row per partition line of every command's report
(compact, retain, erase), appended by delta-rs in one commit a run, and read back by
``compactor history``, the metrics and the erasure report."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from compactor.schemas.delta import RUNS, RUNS_TABLE
from compactor.state.tables import (
    ensure_table,
    is_table,
    ledger_errors,
    open_table,
    read_all,
    rows_table,
    table_path,
)


@ledger_errors("append to the runs table", writes=True)
def append_runs(state_dir: str, rows: Iterable[Mapping[str, Any]]) -> None:
    """Append run rows (one commit) with delta-rs, in every command: a Spark command's
    session took 0.7-0.9 s for the same commit (2 s as its first delta-spark write), where
    delta-rs takes 0.01 s (docs/benchmarks-history.md, the erasure changes of 29-30 Nov)."""
    rows = list(rows)
    if not rows:
        return
    from deltalake import write_deltalake

    table = ensure_table(state_dir, RUNS_TABLE, RUNS)  # created (or given new columns) here
    write_deltalake(table, rows_table(rows, RUNS), mode="append")


def record_runs(state_dir: str, *, run_id: str, command: str, log_dir: str, now_ms: int,
                started_at_ms: int, finished_at_ms: int, seconds: float | None,
                partitions: Iterable[Mapping[str, Any]],
                requests_changed: Sequence[Mapping[str, Any]] | None = None) -> None:
    """Append one ``runs`` row per partition line of a JSON report (compact, retain, erase);
    an erase run's ``requests_changed`` (the requests whose status moved while it ran) on each
    of its rows."""
    changed = _json_list(requests_changed) if requests_changed else None

    rows = []
    for line in partitions:
        deleted = line.get("deleted_segments")
        rows.append({
            "run_id": run_id, "command": command, "log_dir": log_dir, "topic": line["topic"],
            "partition": line["partition"], "started_at_ms": started_at_ms,
            "finished_at_ms": finished_at_ms, "now_ms": now_ms, "status": line["status"],
            "records_in": line.get("records_in", line.get("records_scanned")),
            "records_out": line.get("records_out"), "bytes_in": line.get("bytes_in"),
            "bytes_out": line.get("bytes_out"),
            "segments_before": line.get("segments_before", line.get("segments")),
            "segments_after": line.get("segments_after", line.get("segments")),
            "segments_rewritten": line.get("segments_rewritten"),
            "segments_deleted": len(deleted) if deleted is not None else None,
            "records_erased": line.get("records_erased"),
            "seconds": line.get("seconds", seconds),
            "report_json": _json(line),
            "bytes_reclaimed": _reclaimed(line),
            "requests_changed": changed,
        })
    append_runs(state_dir, rows)


def _reclaimed(line: Mapping[str, Any]) -> int | None:
    """The disk space a partition's step freed: bytes in - bytes out of a rewrite, the
    deleted segments' bytes of retention."""
    if line.get("bytes_in") is not None and line.get("bytes_out") is not None:
        return int(line["bytes_in"]) - int(line["bytes_out"])
    deleted = line.get("deleted_by_reason")
    if isinstance(deleted, Mapping):
        return sum(int(v.get("bytes") or 0) for v in deleted.values())
    return None


def new_run_id(command: str, now_ms: int) -> str:
    import uuid

    return f"{command}-{now_ms}-{uuid.uuid4().hex[:8]}"


def record_report(state_dir: str, report: Mapping[str, Any], started_at_ms: int,
                  finished_at_ms: int, run_id: str | None = None) -> str:
    """Append the partitions of a ``compact`` or ``retain`` JSON report to ``runs`` (under
    ``run_id``: ``compactor run`` gives both of its steps one); returns the run id."""
    command = report["command"]
    run_id = run_id or new_run_id(command, report["now_ms"])
    seconds = sum(report.get("stages_s", {}).values()) or None
    record_runs(state_dir, run_id=run_id, command=command, log_dir=report["log_dir"],
                now_ms=report["now_ms"], started_at_ms=started_at_ms,
                finished_at_ms=finished_at_ms, seconds=seconds, partitions=report["partitions"])
    return run_id


def _json(line: Mapping[str, Any]) -> str:
    return json.dumps(line, sort_keys=True, separators=(",", ":"))


def _json_list(rows: Sequence[Mapping[str, Any]]) -> str:
    return json.dumps([dict(r) for r in rows], sort_keys=True, separators=(",", ":"))


@ledger_errors("read the runs table")
def load_runs(state_dir: str, run_ids: Iterable[str] | None = None) -> list[dict[str, Any]]:

    path = table_path(state_dir, RUNS_TABLE)
    if not is_table(path):
        return []
    rows = read_all(open_table(path)).to_pylist()
    if run_ids is not None:
        wanted = set(run_ids)
        rows = [r for r in rows if r["run_id"] in wanted]
    return sorted(rows, key=lambda r: (r["started_at_ms"], r["topic"], r["partition"]))


@ledger_errors("read the runs table")
def run_topics(state_dir: str) -> frozenset[str]:
    """Every topic a run recorded in the state dir saw (its partition lines), read column by
    column; empty without a runs table."""
    import pyarrow.compute as pc

    path = table_path(state_dir, RUNS_TABLE)
    if not is_table(path):
        return frozenset()
    topics: set[str] = set()
    for batch in open_table(path).to_pyarrow_dataset().to_batches(columns=["topic"],
                                                             use_threads=False):
        topics.update(pc.unique(batch.column(0)).to_pylist())
    return frozenset(topics)
