"""``compactor history``: the runs table of a state dir, one line per run (like Delta's
``DESCRIBE HISTORY``), newest first."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from compactor.errors import ConfigError
from compactor.maintenance.report import RunStatus
from compactor.schemas.delta import RUNS_TABLE
from compactor.state import runs as run_history
from compactor.state import tables as state_tables

_SUMMED = ("records_in", "records_out", "bytes_in", "bytes_out", "segments_deleted",
           "records_erased", "bytes_reclaimed")


def summarize(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The ``runs`` rows (one per partition, step and run) grouped by run, newest first:
    command (``run`` for a run's compaction and retention together), log dir, start and end,
    partitions (each once), lines per step, statuses and the summed figures (``None`` where
    no partition of the run has the figure)."""
    runs: dict[str, dict[str, Any]] = {}
    seen: dict[str, set[tuple[str, int]]] = {}
    for row in rows:
        run = runs.setdefault(row["run_id"], {
            "run_id": row["run_id"], "command": row["command"], "log_dir": row["log_dir"],
            "started_at_ms": row["started_at_ms"], "finished_at_ms": row["finished_at_ms"],
            "now_ms": row["now_ms"], "partitions": 0, "steps": {}, "by_status": {},
            **{k: None for k in _SUMMED}})
        seen.setdefault(row["run_id"], set()).add((row["topic"], row["partition"]))
        run["steps"][row["command"]] = run["steps"].get(row["command"], 0) + 1
        if len(run["steps"]) > 1:
            run["command"] = "run"
        run["by_status"][row["status"]] = run["by_status"].get(row["status"], 0) + 1
        for key in _SUMMED:
            if row.get(key) is not None:
                run[key] = (run[key] or 0) + row[key]
    for run_id, run in runs.items():
        run["partitions"] = len(seen[run_id])
    return sorted(runs.values(), key=lambda r: (r["started_at_ms"], r["run_id"]), reverse=True)


def history(state_dir: str, *, limit: int | None = None) -> list[dict[str, Any]]:
    """The runs recorded under ``state_dir``, newest first (at most ``limit``).

    Raises:
        ConfigError: no runs table there (a mistyped ``--state-dir`` is not an empty history).
    """
    if state_tables.table_version(state_dir, RUNS_TABLE) is None:
        raise ConfigError("no runs recorded here (no runs Delta table)", path=state_dir,
                          remedy="check --state-dir; commands given --state-dir record their "
                                 "runs there")
    runs = summarize(run_history.load_runs(state_dir))
    return runs[:limit] if limit is not None else runs


#: what ``compactor report --kind`` chooses among (the runs table's ``command``): the
#: maintenance runs by default; an erasure run only when asked
KINDS = {"maintenance": ("run", "compact", "retain"), "run": ("run",), "compact": ("compact",),
         "retain": ("retain",), "erase_apply": ("erase_apply",),
         "erase_verify": ("erase_verify",), "any": ()}


def run_report(state_dir: str, run_id: str | None = None, *,
               kind: str = "maintenance") -> dict[str, Any]:
    """One recorded run (the newest of ``kind`` when ``run_id`` is ``None``) as a report again (type
    ``recorded_report``): its partition lines as recorded, the head rebuilt from the rows
    (without what the rows do not keep: the cluster section, foreign entries, run-level stage
    times, erasure requests).

    Raises:
        ConfigError: no runs table there, or no run with that id (the message lists the
            newest ids).
    """
    runs = history(state_dir)
    if not runs:
        raise ConfigError("no runs recorded here yet", path=state_dir,
                          remedy="run a command with --state-dir first")
    if kind not in KINDS:
        raise ConfigError(f"--kind {kind!r} is not a kind of run",
                          remedy=f"give one of {', '.join(KINDS)}")
    if run_id is None:
        commands = KINDS[kind]
        chosen = next((r for r in runs if not commands or r["command"] in commands), None)
        if chosen is None:
            raise ConfigError(f"no {kind} run recorded here (newest: {runs[0]['command']} "
                              f"{runs[0]['run_id']})", path=state_dir,
                              remedy=f"give --kind (one of {', '.join(KINDS)}) or --run-id")
        return _recorded(state_dir, chosen)
    chosen = next((r for r in runs if r["run_id"] == run_id), None)
    if chosen is None:
        newest = ", ".join(r["run_id"] for r in runs[:5])
        raise ConfigError(f"no run {run_id!r} recorded here (newest: {newest})",
                          path=state_dir, remedy="see `compactor history --state-dir DIR`")
    return _recorded(state_dir, chosen)


def _recorded(state_dir: str, chosen: Mapping[str, Any]) -> dict[str, Any]:
    rows = run_history.load_runs(state_dir, [chosen["run_id"]])
    problems = sum(chosen["by_status"].get(s, 0) for s in ("corrupt", "refused", "failed",
                                                                 "locked"))
    head = {"log_dir": chosen["log_dir"], "now_ms": chosen["now_ms"],
            "run_id": chosen["run_id"], "status": RunStatus.of(partial=bool(problems))}
    steps = {command: [json.loads(r["report_json"]) for r in rows if r["command"] == command]
             for command in chosen["steps"]}
    if chosen["command"] == "run":  # a run's two steps, as its report has them
        return {"type": "recorded_report", "command": "run", **head,
                **{key: {"command": command, **head, "partitions": steps.get(command, [])}
                   for key, command in (("compaction", "compact"), ("retention", "retain"))}}
    return {"type": "recorded_report", "command": chosen["command"], **head,
            "partitions": steps[chosen["command"]]}
