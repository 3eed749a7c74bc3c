"""The Delta tables under ``--state-dir``: the erasure request ledger and the run history
(schemas in ``schemas/delta.py``), written by two libraries:

- ``deltalake`` (delta-rs) on the driver of every command: all of ``erase request``,
  ``retry``, ``cancel``, ``status``, ``list``, ``report``, ``history``, ``optimize`` and of
  the commands whose work needed no Spark (``retain``); every command's run rows; an
  erasure's requests, streamed (:func:`pending_summary`, :class:`RunLedger`), and the
  MERGE of its outcomes when the driver holds them, itself or by kind. It creates the
  tables and adds new columns. Never in Spark workers (delta-rs panics in a forked child).
- ``delta-spark`` in the erasure commands' own session (``erase apply`` and ``verify``): a
  run of many requests that are not few kinds reads them as a DataFrame, gives each its
  outcome on the executors and MERGEs them (:mod:`compactor.spark.ledger`, which builds on
  this module; nothing here imports Spark).

Every commit by either holds the state dir's writer lock (:func:`compactor.log.storage.
state_dir_lock`), so no commit of the tool's processes replaces another. Both libraries read
and write the same tables: protocol 1/2 (reader 1, writer 2: no table feature either lacks),
timestamps as UTC milliseconds in ``int64`` columns.

Every change is one Delta commit, so the table's history is the audit trail of the ledger:
who asked when, which run applied, which run verified (every commit carries our metadata as
``userMetadata`` JSON, delta-rs commits also as commitInfo fields: :func:`history` reads
both).
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import json
import re
import sys
import urllib.parse
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import numpy as np
import pyarrow as pa

from compactor.erasure.outcomes import KIND_COLUMNS, ROW_COLUMNS
from compactor.erasure.rules import (
    ALL_TOPICS,
    CHECKED_COLUMNS,
    STATUSES,
    ErasureRequest,
    first_problem_row,
    row_problem,
)
from compactor.erasure.sketch import DigestFilter, hex_digest_words
from compactor.erasure.status import DONE, VERIFIED, RequestStatus, failure_words
from compactor.errors import CompactorError, ConfigError, LedgerError, first_line
from compactor.log import storage
from compactor.schemas.delta import ERASURE_REQUESTS, ERASURE_REQUESTS_TABLE, RUNS, RUNS_TABLE

if TYPE_CHECKING:
    from deltalake import CommitProperties, DeltaTable

P = ParamSpec("P")
R = TypeVar("R")


DAMAGED_REMEDY = ("the ledger's Delta table is damaged: restore the state dir (or the named "
                  "table) from a backup, or return the table to its last good version with "
                  "delta-spark's RESTORE; nothing was written to the ledger")
#: an Arrow function the read needs is missing for the files' types (delta-rs's MERGE writes
#: ``string_view`` columns, which pyarrow could not filter: :func:`_record_batches`): the
#: table passed its check, and restoring it would throw away a healthy ledger
UNREADABLE_REMEDY = ("the ledger's files passed their check, but this installation's Arrow "
                     "cannot read them this way: do not restore the ledger; report this as a "
                     "bug with the message (and the deltalake and pyarrow versions); nothing "
                     "was written to the ledger")


def ledger_errors(action: str, *, writes: bool = False
                   ) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Check the state dir's tables first (:func:`check_ledger`), then turn delta-rs,
    delta-spark and Arrow errors of a ledger function into :class:`LedgerError` naming the
    state dir (the function's first argument) and what was being done. ``writes``: the
    function commits, so it runs holding the state dir's writer lock."""

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def inner(*args: P.args, **kwargs: P.kwargs) -> R:
            if args:
                check_ledger(str(args[0]))
            with mapped_errors(action, str(args[0]) if args else None):
                if writes:
                    check_state_dir(str(args[0]))  # before the lock file is made there
                    with storage.state_dir_lock(str(args[0])):
                        return fn(*args, **kwargs)
                return fn(*args, **kwargs)

        return inner

    return wrap


@contextlib.contextmanager
def mapped_errors(action: str, state_dir: str | None) -> Iterator[None]:
    """Turn delta-rs, delta-spark and Arrow errors of the body into :class:`LedgerError`
    naming ``state_dir`` and what was being done (:func:`ledger_errors` for a function; this
    for a generator, whose rows are read after the function returned)."""
    from deltalake.exceptions import CommitFailedError, DeltaError

    try:
        yield
    except CompactorError:
        raise
    except Exception as err:
        # a string column that is not UTF-8 (a rotted or foreign Parquet file) fails
        # as Python decodes it: the table is damaged, not the tool
        if not isinstance(err, (DeltaError, pa.ArrowException, OSError,
                                UnicodeDecodeError)) and not _is_spark_error(err):
            raise
        remedy = (None if isinstance(err, CommitFailedError) else
                  UNREADABLE_REMEDY if isinstance(err, pa.ArrowNotImplementedError) else
                  DAMAGED_REMEDY)
        raise LedgerError(f"cannot {action}: {type(err).__name__}: {first_line(err)}",
                          path=state_dir, remedy=remedy) from err


def _is_spark_error(err: BaseException) -> bool:
    """An error of a Spark query or of its JVM (pyspark is imported only where one ran)."""
    errors = sys.modules.get("pyspark.errors")
    py4j = sys.modules.get("py4j.protocol")
    return bool((errors is not None and isinstance(err, errors.PySparkException))
                or (py4j is not None and isinstance(err, py4j.Py4JError)))


# ---------------------------------------------------------------------------------------------
# The tables' health, read from the files themselves before delta-rs does


_COMMIT = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(\.\d+\.\d+)?\.parquet$")
_PARQUET_MAGIC = b"PAR1"


def check_ledger(state_dir: str) -> None:
    """Every table under ``state_dir`` is whole, checked file by file the way the Delta
    protocol lays it out (PROTOCOL.md "Delta Log Entries"), before delta-rs reads or writes it:
    a ``_delta_log`` with contiguous commit versions from the last checkpoint on, every commit
    file a non-empty sequence of JSON actions, and every data file those commits add present,
    of the recorded size and framed as Parquet. A table whose ``_delta_log`` is gone while its
    data files remain is orphaned. Whatever fails, nothing is written over it.

    Raises:
        LedgerError: naming the file and what to do.
    """
    if not storage.is_dir(state_dir):
        return
    for name in (ERASURE_REQUESTS_TABLE, RUNS_TABLE):
        table = table_path(state_dir, name)
        if storage.is_dir(table):
            _check_table(table)


def _damaged(message: str, path: str) -> LedgerError:
    return LedgerError(message, path=path, remedy=DAMAGED_REMEDY)


def _check_table(table: str) -> None:
    names = storage.list_dir(table)
    log = storage.join(table, "_delta_log")
    data = [n for n in names if n.endswith(".parquet")]
    if "_delta_log" not in names or not storage.is_dir(log):
        if data:
            raise _damaged(f"the table has {len(data)} data file(s) but no _delta_log: it is "
                           f"orphaned (its history is gone)", table)
        return
    entries = storage.list_dir(log)
    commits = sorted(int(m.group(1)) for n in entries if (m := _COMMIT.match(n)))
    checkpoints = sorted(int(m.group(1)) for n in entries if (m := _CHECKPOINT.match(n)))
    if not commits and not checkpoints:
        if data:
            raise _damaged("the table's _delta_log holds no commit but data files remain: it "
                           "is orphaned", log)
        return
    start = checkpoints[-1] + 1 if checkpoints else 0
    wanted = list(range(start, max([*commits, start - 1]) + 1))
    missing = sorted(set(wanted) - set(commits))
    if missing:
        raise _damaged(f"commit version {missing[0]} is missing from the table's log (versions "
                       f"{start} to {wanted[-1]} must all be there)", log)
    added: dict[str, int] = {}
    for version in wanted:
        path = storage.join(log, f"{version:020d}.json")
        raw = storage.read_bytes(path)
        if not raw.strip():
            raise _damaged("the commit file is empty (a write that never finished)", path)
        for number, line in enumerate(raw.decode("utf-8", "replace").splitlines(), 1):
            if not line.strip():
                continue
            try:
                action = json.loads(line)
                if not isinstance(action, dict):
                    raise ValueError("not a JSON object")
            except ValueError as err:
                raise _damaged(f"line {number} of the commit file is not a Delta action "
                               f"({err})", path) from err
            if isinstance(action.get("add"), dict):
                added[str(action["add"].get("path"))] = int(action["add"].get("size") or -1)
            elif isinstance(action.get("remove"), dict):
                added.pop(str(action["remove"].get("path")), None)
    for rel, size in sorted(added.items()):
        _check_data_file(storage.join(table, urllib.parse.unquote(rel)), size)


#: data files found whole by this process, by (path, size, mtime): a Delta data file never
#: changes once committed, so each is decoded once per process, not at every ledger call
_checked: set[tuple[str, int, int]] = set()


def _check_data_file(path: str, size: int) -> None:
    """A data file a commit adds: present, ``size`` bytes, Parquet's magic at both ends, a
    footer that fits, and every row group decodable -- read here, on this thread, batch by
    batch (a ledger of a million requests is not held in memory at once), so that a damaged
    file is named before delta-rs or Arrow's thread pool meets it. Once per file and process
    (:data:`_checked`)."""
    import pyarrow.parquet as pq

    if not storage.exists(path):
        raise _damaged("a data file the table's log adds is missing", path)
    found = storage.stat(path)
    if (path, found.size, found.mtime_ms) in _checked:
        return
    actual = found.size
    if size >= 0 and actual != size:
        raise _damaged(f"the data file is {actual} bytes, the table's log says {size}", path)
    head = storage.read_bytes(path, 0, min(4, actual))
    tail = storage.read_bytes(path, max(0, actual - 8), actual)
    footer = int.from_bytes(tail[:4], "little") if actual >= 12 else -1
    if (head != _PARQUET_MAGIC or tail[-4:] != _PARQUET_MAGIC
            or not 0 <= footer <= actual - 12):
        raise _damaged("the data file is not intact Parquet (its magic or footer is wrong)",
                       path)
    try:
        source = (pa.BufferReader(storage.read_bytes(path)) if storage.is_url(path)
                  else pa.memory_map(path))
        for _ in pq.ParquetFile(source).iter_batches(batch_size=65_536, use_threads=False):
            pass
    except (pa.ArrowException, OSError, ValueError) as err:
        raise _damaged(f"the data file cannot be decoded: {first_line(err)}", path) from err
    _checked.add((path, found.size, found.mtime_ms))


# What marks a directory as a Kafka log dir (LogManager writes these at its root).
_LOG_DIR_MARKERS = ("meta.properties", "recovery-point-offset-checkpoint",
                    "replication-offset-checkpoint", "log-start-offset-checkpoint",
                    "cleaner-offset-checkpoint", "__cluster_metadata-0")


def check_state_dir(state_dir: str, log_dir: str | None = None) -> None:
    """The state dir must not be inside a Kafka log dir (a broker refuses to start when its
    log dir holds directories that are not partitions), nor contain the given one. Without
    ``log_dir`` too: neither the state dir nor any directory above it may look like a log dir
    (``meta.properties``, a root checkpoint, the metadata log).

    Raises:
        ConfigError: it does.
    """
    state = storage.real_path(state_dir)
    remedy = "keep the ledger outside the Kafka log dir, e.g. /var/lib/kafka-compactor"
    if log_dir is not None:
        if storage.contains(state_dir, log_dir) or storage.contains(log_dir, state_dir):
            raise ConfigError(f"--state-dir {state_dir} overlaps the log dir {log_dir}",
                              path=state_dir, remedy=remedy)
    here = state
    while True:
        marker = next((m for m in _LOG_DIR_MARKERS if storage.exists(storage.join(here, m))),
                      None)
        if marker is not None:
            raise ConfigError(
                f"--state-dir {state_dir} is {'' if here == state else 'inside '}a Kafka log dir "
                f"({storage.join(here, marker)} exists)", path=state_dir, remedy=remedy)
        parent = storage.dirname(here)
        if parent == here:
            return
        here = parent


@ledger_errors("create the ledger", writes=True)
def init(state_dir: str) -> bool:
    """Create the ledger's tables (``erase init``); returns whether they were new.

    Raises:
        ConfigError: the state dir is or lies inside a Kafka log dir.
    """
    check_state_dir(state_dir)
    new = not _is_table(table_path(state_dir, ERASURE_REQUESTS_TABLE))
    _table(state_dir, ERASURE_REQUESTS_TABLE, ERASURE_REQUESTS)
    _table(state_dir, RUNS_TABLE, RUNS)
    return new


def require_ledger(state_dir: str) -> None:
    """Commands that read the ledger need one (a mistyped ``--state-dir`` must not look like
    an empty, healthy ledger).

    Raises:
        ConfigError: no ``erasure_requests`` table under ``state_dir``.
    """
    check_ledger(state_dir)  # a damaged or orphaned table is that, not "no ledger"
    if not _is_table(table_path(state_dir, ERASURE_REQUESTS_TABLE)):
        raise ConfigError("no erasure ledger here (no erasure_requests Delta table)",
                          path=state_dir,
                          remedy="check --state-dir; `compactor erase init --state-dir DIR` "
                                 "creates the ledger (once, before the first request)")


def _read(table: Any, columns: Sequence[str] | None = None) -> pa.Table:
    """A Delta table's rows, scanned on the calling thread. ``DeltaTable.to_pyarrow_table``
    scans with Arrow's thread pool, whose native threads can still be running when the
    interpreter exits: the process then dies with "terminate called without an active
    exception" (SIGABRT, exit 134) after the command printed success (35 of 40 runs of
    ``erase request`` on an existing id did here)."""
    return table.to_pyarrow_dataset().to_table(
        columns=list(columns) if columns is not None else None, use_threads=False)


def table_path(state_dir: str, name: str) -> str:
    return storage.join(state_dir, name)


def _is_table(path: str) -> bool:
    from deltalake import DeltaTable

    return bool(DeltaTable.is_deltatable(path, storage_options=storage.delta_options(path)))


def _open(path: str) -> DeltaTable:
    """The Delta table at ``path``; on an object store with the endpoint and credentials the
    log dir's commands use (:func:`compactor.log.storage.delta_options`)."""
    from deltalake import DeltaTable

    return DeltaTable(path, storage_options=storage.delta_options(path))


#: The requests table's commits are its audit trail (who retried or cancelled what, when and
#: why; which run applied and verified): Delta's log cleanup, which delta-rs runs at each
#: checkpoint for commits older than ``delta.logRetentionDuration`` (30 days by default),
#: would drop them from ``history()``, so the ledger turns it off (delta-spark honours the
#: same property). Data files are still vacuumed (:func:`optimize`).
AUDIT_PROPERTIES = {"delta.enableExpiredLogCleanup": "false"}


def _table(state_dir: str, name: str, schema: pa.Schema) -> DeltaTable:
    from deltalake import DeltaTable

    path = table_path(state_dir, name)
    keep = AUDIT_PROPERTIES if name == ERASURE_REQUESTS_TABLE else {}
    if _is_table(path):
        table = _open(path)
        have = {f.name for f in table.schema().fields}
        missing = [f for f in schema if f.name not in have]
        if missing:  # a ledger written by an earlier version: add the new columns (nullable)
            from deltalake.schema import Field

            table.alter.add_columns([Field.from_arrow(f) for f in missing])
            table = _open(path)
        if any(table.metadata().configuration.get(k) != v for k, v in keep.items()):
            table.alter.set_table_properties(dict(keep))  # a ledger of an earlier version
            table = _open(path)
        return table
    storage.make_dirs(state_dir)
    return DeltaTable.create(path, schema=schema, mode="ignore", name=name,
                             configuration=dict(keep) or None,
                             storage_options=storage.delta_options(path))


def require_state_tables(state_dir: str) -> None:
    """Raises ConfigError when ``state_dir`` holds neither the ledger nor the runs table (a
    mistyped path is not an empty state dir)."""
    if not any(_is_table(table_path(state_dir, n)) for n in (ERASURE_REQUESTS_TABLE,
                                                                RUNS_TABLE)):
        raise ConfigError("no ledger and no runs table here", path=state_dir,
                          remedy="check --state-dir")


@ledger_errors("optimize the state dir's tables", writes=True)
def optimize(state_dir: str, *, retention_hours: int, dry_run: bool) -> list[dict[str, Any]]:
    """``compactor optimize``: per table of ``state_dir``, compact its small files into few
    (every run appends one), then vacuum the files no version younger than
    ``retention_hours`` references (time travel to an older version needs them), and write a
    checkpoint. The requests table's commit log stays whole (:data:`AUDIT_PROPERTIES`).
    ``dry_run`` lists what vacuum would delete and changes nothing."""
    out = []
    for name in (ERASURE_REQUESTS_TABLE, RUNS_TABLE):
        path = table_path(state_dir, name)
        if not _is_table(path):
            continue
        if name == ERASURE_REQUESTS_TABLE and not dry_run:
            _table(state_dir, name, ERASURE_REQUESTS)  # the audit properties, on old ledgers
        table = _open(path)
        files_before = len(table.file_uris())
        compacted: dict[str, Any] = {}
        if not dry_run:
            compacted = table.optimize.compact(commit_properties=_commit(
                {"action": "optimize"}))
            table = _open(path)
        vacuumed = table.vacuum(retention_hours=retention_hours, dry_run=dry_run,
                                enforce_retention_duration=False)
        if not dry_run:
            table.create_checkpoint()
        out.append({"table": name, "version": _open(path).version(),
                    "files_before": files_before, "files_after": len(_open(path).file_uris()),
                    "files_compacted": compacted.get("numFilesRemoved", 0),
                    "files_vacuumed": len(vacuumed)})
    return out


def _rows_table(rows: Sequence[Mapping[str, Any]], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in rows],
                                schema=schema)


def _commit(meta: Mapping[str, str] | None) -> CommitProperties | None:
    """A delta-rs commit's metadata: its fields in commitInfo, and the same as
    ``userMetadata`` JSON, as a delta-spark commit carries it: the analyst's
    ``DESCRIBE HISTORY`` shows every commit's metadata, whichever library wrote it."""
    from deltalake import CommitProperties

    if not meta:
        return None
    return CommitProperties(custom_metadata={**meta, "userMetadata": json.dumps(dict(meta))})


@ledger_errors("add erasure requests to the ledger", writes=True)
def add_requests(state_dir: str, requests: Sequence[ErasureRequest],
                 meta: Mapping[str, str] | None = None
                 ) -> tuple[list[str], list[dict[str, Any]]]:
    """Insert requests whose id is new (one commit; ids already present are left as they
    are: a request is never edited). Returns (added ids, the requests that already existed:
    their id, status, reason and when they were filed)."""
    require_ledger(state_dir)  # only `erase init` creates a ledger
    table = _table(state_dir, ERASURE_REQUESTS_TABLE, ERASURE_REQUESTS)
    wanted = {r.request_id for r in requests}
    existing = {row["request_id"]: row for row in
                _read(table, ["request_id", "status", "reason", "requested_at_ms"]).to_pylist()
                if row["request_id"] in wanted}
    new = [r for r in requests if r.request_id not in existing]
    if new:
        source = _rows_table([_request_row(r) for r in new], ERASURE_REQUESTS)
        (table.merge(source=source, predicate="t.request_id = s.request_id",
                     source_alias="s", target_alias="t", commit_properties=_commit(meta))
         .when_not_matched_insert_all().execute())
    return [r.request_id for r in new], [existing[r.request_id] for r in requests
                                         if r.request_id in existing]


def _request_row(r: ErasureRequest) -> dict[str, Any]:
    return {"request_id": r.request_id, "topic": r.topic, "selector": r.selector,
            "header_name": r.header_name, "subject_sha256": r.subject_sha256,
            "reason": r.reason, "requested_at_ms": r.requested_at_ms,
            "deadline_ms": r.deadline_ms, "status": r.status,
            "leave_tombstone": r.leave_tombstone, "integrity": r.integrity}


def check_rows(state_dir: str, rows: Iterable[Mapping[str, Any]]) -> None:
    """Every request row must be one the tool wrote (:func:`compactor.erasure.rules.row_problem`):
    a row whose subject digest was changed would make an apply erase nothing and a verify
    prove the wrong subject clean.

    Raises:
        LedgerError: the first row that is not, naming its request.
    """
    for row in rows:
        problem = row_problem(row)
        if problem is not None:
            raise LedgerError(
                f"erasure request {row.get('request_id')!r}: {problem}",
                path=table_path(state_dir, ERASURE_REQUESTS_TABLE),
                remedy="nothing was read into a run or written; restore the table to its last "
                       "good version (`DESCRIBE HISTORY`, then delta-spark's RESTORE) or from a "
                       "backup")


def check_batch(state_dir: str, batch: pa.RecordBatch) -> None:
    """:func:`check_rows` of a batch of request rows (with
    :data:`compactor.erasure.rules.CHECKED_COLUMNS`), column-wise
    (:func:`compactor.erasure.rules.first_problem_row`).

    Raises:
        LedgerError: the first row that is not one the tool wrote, naming its request.
    """
    i = first_problem_row(batch)
    if i is not None:
        row = {name: batch.column(name)[i].as_py() for name in batch.schema.names}
        check_rows(state_dir, [row])


#: rows whose ``column`` is one of the values: the only filter a ledger read takes
Where = tuple[str, Collection[str]]


def _record_batches(table: DeltaTable, columns: Sequence[str],
                    where: Where | None = None) -> Iterator[pa.RecordBatch]:
    """A table's rows as Arrow record batches (the driver never holds them all), on the
    calling thread (:func:`_read`), those ``where`` names only.

    The filter runs on the scanned batches, never pushed into the Parquet scan: delta-rs
    (1.6) writes the files of its MERGE with ``string_view`` columns, and Arrow's scan then
    compares their statistics with the filter's ``string`` value and fails ("no kernel
    matching input types (string, string_view)") as soon as a file holds two statuses: one
    ``erase cancel`` of a request filed with others made every later run fail
    (delta-io/delta-rs#4579 is the same for its DELETE). The scan casts every column to the
    table's type, where the filter works; pruning by statistics rarely skipped a ledger
    file anyway (a MERGE leaves each with many statuses)."""
    import pyarrow.compute as pc

    wanted = list(columns)
    read = wanted if where is None or where[0] in wanted else [*wanted, where[0]]
    for batch in table.to_pyarrow_dataset().to_batches(
            columns=read, use_threads=False, batch_size=64 * 1024, batch_readahead=0,
            fragment_readahead=0):
        if where is not None:
            column, values = where
            kind = batch.schema.field(column).type
            batch = batch.filter(pc.is_in(batch.column(column),
                                          pa.array(sorted(values), kind)))
            if not batch.num_rows:
                continue
        yield batch if read is wanted else batch.select(wanted)


def _count(table: DeltaTable, where: Where) -> int:
    """How many rows ``where`` names (:func:`_record_batches`), reading that column only."""
    return sum(b.num_rows for b in _record_batches(table, [where[0]], where))


@ledger_errors("read the erasure request ledger")
def load_requests(state_dir: str) -> list[dict[str, Any]]:
    """Every request row (empty when the ledger does not exist yet), each checked
    (:func:`check_rows`)."""
    path = table_path(state_dir, ERASURE_REQUESTS_TABLE)
    if not _is_table(path):
        return []
    rows = _read(_open(path)).to_pylist()
    check_rows(state_dir, rows)
    return sorted(rows, key=lambda r: (r["requested_at_ms"], r["request_id"]))


@ledger_errors("change erasure requests' status in the ledger", writes=True)
def change_status(state_dir: str, request_ids: Sequence[str], *, action: str,
                  allowed: frozenset[str], status: str, reason: str | None,
                  now_ms: int) -> list[str]:
    """``erase retry`` and ``erase cancel``: move each request of ``request_ids`` whose status
    is in ``allowed`` to ``status``, in one commit whose metadata (``action``, ``request_ids``,
    ``reason``, ``at_ms``) is the audit trail's entry (:func:`history`, :func:`audit`). The
    merge matches only rows still in an allowed status, so a concurrent apply or verify is
    never overwritten. Returns the ids changed.

    Raises:
        ConfigError: an unknown id, or one whose status does not allow ``action`` (nothing
            is changed then).
    """
    require_ledger(state_dir)
    rows = {r["request_id"]: r for r in load_requests(state_dir)}
    unknown = [i for i in request_ids if i not in rows]
    if unknown:
        raise ConfigError(f"no erasure request {', '.join(map(repr, unknown))} in the ledger "
                          f"(see `compactor erase list`)", path=state_dir)
    wrong = [f"{i} is {rows[i]['status']}" for i in request_ids
             if rows[i]["status"] not in allowed]
    if wrong:
        raise ConfigError(f"cannot {action}: {'; '.join(wrong)} (only "
                          f"{', '.join(sorted(allowed))} requests can be)", path=state_dir,
                          remedy="see `compactor erase list`; nothing was changed")
    ids = list(dict.fromkeys(request_ids))
    source = pa.table({"request_id": pa.array(ids, pa.string()),
                       "status": pa.array([status] * len(ids), pa.string())})
    table = _table(state_dir, ERASURE_REQUESTS_TABLE, ERASURE_REQUESTS)
    listed = ", ".join(f"'{s}'" for s in sorted(allowed))
    meta = {"action": action, "request_ids": ",".join(ids), "at_ms": str(now_ms),
            **({"reason": reason} if reason else {})}
    updates = {"status": "s.status"}
    # a retry applies and verifies again from the start, everywhere
    if status == RequestStatus.PENDING:
        updates.update(failure="NULL", places="'{}'")
    metrics = (table.merge(source=source, predicate="t.request_id = s.request_id",
                           source_alias="s", target_alias="t", commit_properties=_commit(meta))
               .when_matched_update(updates=updates, predicate=f"t.status IN ({listed})")
               .execute())
    if metrics.get("num_target_rows_updated", len(ids)) != len(ids):
        changed = {r["request_id"] for r in load_requests(state_dir)
                   if r["request_id"] in ids and r["status"] == status}
        raise ConfigError(f"{action}: {', '.join(i for i in ids if i not in changed)} changed "
                          f"status while this ran (an apply or verify at the same time); see "
                          f"`compactor erase list` and run it again", path=state_dir)
    return ids


@ledger_errors("record erasure outcomes in the ledger", writes=True)
def merge_outcomes(state_dir: str, rows: Sequence[Mapping[str, Any]], columns: Sequence[str],
                   meta: Mapping[str, str]) -> int:
    """MERGE the ``update`` rows of a run's outcomes held on the driver
    (:func:`compactor.erasure.outcomes.of_rows`) into the requests table with delta-rs, one
    commit whose metadata is ``meta``: each sets ``columns`` of its request where the request
    is still in the status it was computed from (``expected_status``: a retry or cancel
    committed meanwhile is not overwritten), as delta-spark's MERGE of a run of many does
    (:func:`compactor.spark.delta.merge_outcomes`; both tested to leave the same table).
    Returns the rows updated."""
    table = _table(state_dir, ERASURE_REQUESTS_TABLE, ERASURE_REQUESTS)
    return _merge_updates(table, [r for r in rows if r["outcome"] == "update"], "request_id",
                          "t.request_id", columns, meta)


def _merge_updates(table: DeltaTable, updates: Sequence[Mapping[str, Any]], key: str,
                   target_key: str, columns: Sequence[str], meta: Mapping[str, str],
                   **options: Any) -> int:
    """One delta-rs MERGE of ``update`` outcomes: each source row's ``key`` names the rows
    whose ``target_key`` (SQL over the target ``t``) equals it, and sets their ``columns``
    where they are still in its ``expected_status``. Returns the rows updated."""
    schema = pa.schema([pa.field(key, pa.string())]
                       + [ERASURE_REQUESTS.field(c) for c in columns if c != key]
                       + [pa.field("expected_status", pa.string())])
    metrics = (table.merge(source=_rows_table(updates, schema), source_alias="s",
                           target_alias="t",
                           predicate=f"{target_key} = s.{key} "
                                     "AND t.status = s.expected_status",
                           commit_properties=_commit(meta), **options)
               .when_matched_update(updates={c: f"s.{c}" for c in columns})
               .execute())
    return int(metrics.get("num_target_rows_updated", 0))


def kind_key(topic: str, status: str, places: str | None) -> str:
    """The key by which :func:`merge_kinds` finds the requests of a kind: the same string as
    :data:`_KIND_KEY` makes of a row of the table (the topic length-prefixed, the status has
    no ``/``, a null ``places`` apart from any JSON)."""
    return f"K{len(topic)}:{topic}/{status}/{'N' if places is None else 'V' + places}"


#: :func:`kind_key` of a target row, in the SQL of delta-rs's MERGE (DataFusion)
_KIND_KEY = ("concat('K', character_length(t.topic), ':', t.topic, '/', t.status, '/', "
             "CASE WHEN t.places IS NULL THEN 'N' ELSE concat('V', t.places) END)")


#: :func:`merge_kinds` rewrites the requests table in the driver's process, whose memory grows
#: with the table (delta-rs 1.6: a 1 M-row table 0.72 GiB at its peak, 3 M 1.25 GiB, measured
#: with :data:`_MERGE_SPILL`): a larger table's outcomes are merged by id by delta-spark,
#: whose work runs on the executors
KIND_MERGE_ROWS = 2_000_000
#: the memory DataFusion's MERGE holds before it spills to disk (1.07 -> 0.72 GiB at the peak
#: of a 1 M-row table's MERGE, with row groups of 64 Ki rows; 0.96 -> 1.1 s)
_MERGE_SPILL = 256 * 2**20


def _rows(table: DeltaTable) -> int:
    """A table's rows, from its files' statistics (delta-rs writes them for every file)."""
    import pyarrow.compute as pc

    actions = pa.table(table.get_add_actions(flatten=True))
    return int(pc.sum(actions.column("num_records")).as_py() or 0)


@ledger_errors("record erasure outcomes in the ledger", writes=True)
def merge_kinds(state_dir: str, own: Sequence[Mapping[str, Any]],
                kinds: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]],
                columns: Sequence[str], meta: Mapping[str, str], *, read_at: int) -> int | None:
    """MERGE a run's outcomes held by kind with delta-rs, one commit whose metadata is
    ``meta``: ``own``, the outcomes of its individual requests, each by request id; ``kinds``,
    each kind (``topic``, ``status``, ``places``) with the outcome every other request of
    that kind gets. Each ``update`` sets ``columns`` where the request is still in the status
    it was computed from, as :func:`merge_outcomes` of every request's outcome does, while the
    source holds a row a kind (a million pending requests nothing matched are one row).

    Only while the requests table is still at ``read_at``, the version the run read: a kind
    names requests by what they are, so a request filed since (pending, of the same topic)
    would be one of them without the run having looked for it. Returns ``None`` when the
    table moved, or holds more than :data:`KIND_MERGE_ROWS` rows (the caller then merges
    every request's outcome by id), else the rows updated."""
    from deltalake import WriterProperties

    table = _table(state_dir, ERASURE_REQUESTS_TABLE, ERASURE_REQUESTS)
    if table.version() != read_at or _rows(table) > KIND_MERGE_ROWS:
        return None
    keyed = [{**o, "merge_key": f"I{o['request_id']}"} for o in own if o["outcome"] == "update"]
    keyed += [{**o, "merge_key": kind_key(k["topic"], k["status"], k["places"])}
              for k, o in kinds if o["outcome"] == "update"]
    # the individual requests by id, hex-encoded in the SQL (an id is free text); every one
    # of them, whatever its outcome: a blocked request must not take its kind's update
    ids = sorted({str(o["request_id"]) for o in own})
    key = (f"CASE WHEN encode(t.request_id, 'hex') IN "
           f"({', '.join(repr(i.encode().hex()) for i in ids)}) "
           f"THEN concat('I', t.request_id) ELSE {_KIND_KEY} END" if ids else _KIND_KEY)
    return _merge_updates(table, keyed, "merge_key", key, columns, meta,
                          max_spill_size=_MERGE_SPILL,
                          writer_properties=WriterProperties(max_row_group_size=64 * 1024))


@ledger_errors("read the erasure request ledger")
def moved_requests(state_dir: str, rows: Sequence[Mapping[str, Any]], limit: int
                   ) -> tuple[dict[str, int], list[dict[str, object]]]:
    """The ``update`` rows of a run's outcomes held on the driver whose request is no longer
    in the status they were computed from (an ``erase cancel`` or ``retry`` committed while
    the run ran): what :func:`merge_outcomes` now would leave alone, as
    :func:`compactor.spark.delta.moved_requests` finds them for a run of many. Call it holding
    the state dir's writer lock (:func:`compactor.spark.ledger.moved_requests` reads nothing
    when the table did not move)."""
    updates = {r["request_id"]: r for r in rows if r["outcome"] == "update"}
    now = {r["request_id"]: r["status"]
           for batch in _request_batches(state_dir, ("request_id", "status"),
                                         ("request_id", updates))
           for r in batch.to_pylist()}
    moved = sorted((r for rid, r in updates.items()
                    if rid in now and now[rid] != r["expected_status"]),
                   key=lambda r: r["request_id"])
    counts: dict[str, int] = {}
    for r in moved:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    return counts, [{"request_id": r["request_id"], "status": now[r["request_id"]],
                     "computed": r["status"], "records_erased": r.get("records_erased")}
                    for r in moved[:limit]]


@ledger_errors("append to the runs table", writes=True)
def append_runs(state_dir: str, rows: Iterable[Mapping[str, Any]]) -> None:
    """Append run rows (one commit) with delta-rs, in every command: a Spark command's
    session took 0.7-0.9 s for the same commit (2 s as its first delta-spark write), where
    delta-rs takes 0.01 s (docs/benchmarks-history.md, the erasure changes of 29-30 Nov)."""
    rows = list(rows)
    if not rows:
        return
    from deltalake import write_deltalake

    table = _table(state_dir, RUNS_TABLE, RUNS)  # created (or given new columns) here
    write_deltalake(table, _rows_table(rows, RUNS), mode="append")


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
    if not _is_table(path):
        return []
    rows = _read(_open(path)).to_pylist()
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
    if not _is_table(path):
        return frozenset()
    topics: set[str] = set()
    for batch in _open(path).to_pyarrow_dataset().to_batches(columns=["topic"],
                                                             use_threads=False):
        topics.update(pc.unique(batch.column(0)).to_pylist())
    return frozenset(topics)


@ledger_errors("read a ledger table's history")
def history(state_dir: str, name: str) -> list[dict[str, Any]]:
    """The Delta commit history of a table, oldest first: version, timestamp, operation and
    the metadata our commits carry (``action``, ``run_id``, ``request_ids``; a retry's or
    cancel's ``reason`` and ``at_ms``)."""
    path = table_path(state_dir, name)
    if not _is_table(path):
        return []
    out = []
    for entry in _open(path).history():
        fields = dict(entry)
        if isinstance(entry.get("userMetadata"), str):  # a delta-spark commit's metadata
            try:
                fields.update(json.loads(entry["userMetadata"]))
            except ValueError:
                pass  # someone else's free text
        meta = {k: v for k, v in fields.items()
                if k in ("action", "run_id", "request_ids", "reason", "at_ms")}
        out.append({"version": entry.get("version"), "timestamp_ms": entry.get("timestamp"),
                    "operation": entry.get("operation"), **meta})
    return sorted(out, key=lambda e: e["version"])


@ledger_errors("read a ledger table's version")
def table_version(state_dir: str, name: str) -> int | None:

    path = table_path(state_dir, name)
    return _open(path).version() if _is_table(path) else None


# ---------------------------------------------------------------------------------------------
# The requests as the erasure commands see them: streamed by the driver, a pass at a time, or
# read in Spark


@dataclass(frozen=True, slots=True)
class PendingSummary:
    """What an apply or verify needs on the driver before it scans the log: how many requests
    there are, the topics and header names they name (few, whatever the number of
    subjects) and the table version read."""

    version: int
    count: int
    topics: frozenset[str]
    header_names: frozenset[str]
    #: the Bloom filter of their subjects' digests (the scan sends to the join only the
    #: records it may hold), built in the same pass
    digests: DigestFilter
    #: the rows themselves (:data:`RUN_COLUMNS`, the digest as 32 bytes), read in the same
    #: pass when there are at most :data:`ROWS_ON_DRIVER`: the run matches them and computes
    #: their outcomes on the driver, and no Spark job reads the table again
    rows: list[dict[str, Any]] | None = None


#: a run of at most this many requests holds their rows on the driver
#: (:attr:`PendingSummary.rows`); more are read again a pass at a time (:class:`RunLedger`)
ROWS_ON_DRIVER = 20_000
#: the request columns a run holds on the driver: what the match compares and carries to the
#: apply (:func:`compactor.erasure.rules.request_matches`) and what the outcomes read
#: (:data:`compactor.erasure.outcomes.ROW_COLUMNS`)
RUN_COLUMNS = ("request_id", "topic", "status", "places", "digest", "selector", "header_name",
               "leave_tombstone", "tombstones_left")


@ledger_errors("read the erasure request ledger")
def has_requests(state_dir: str, statuses: frozenset[str]) -> bool:
    """Whether a request is in ``statuses``: counted from the files' statistics and the
    status column alone, so a run with nothing to do answers at once (the run itself checks
    the rows it reads, :func:`pending_summary`)."""
    table = _open(table_path(state_dir, ERASURE_REQUESTS_TABLE))
    return _count(table, ("status", statuses)) > 0


@ledger_errors("read the erasure request ledger")
def pending_summary(state_dir: str, statuses: frozenset[str], *,
                    not_applied_at: str | None = None) -> PendingSummary:
    """The requests in ``statuses`` (and, with ``not_applied_at``, not yet applied at that
    place), each checked (:func:`check_batch`) and summarized batch by batch, column-wise:
    the driver's memory does not grow with their number, nor does it hold a row as a dict."""
    import pyarrow.compute as pc

    table = _open(table_path(state_dir, ERASURE_REQUESTS_TABLE))
    wanted = ("status", statuses)
    # sized for every row in the statuses (those applied here already too: a filter made
    # larger only has fewer false positives), counted from the status column first
    in_statuses = _count(table, wanted)
    digests = DigestFilter.empty(in_statuses).building()
    count = 0
    topics: set[str] = set()
    headers: set[str] = set()
    # every row a run will read is checked here first (the run reads this same version)
    # the places (JSON, the widest column once requests were applied) only to tell which are
    # applied here, or with the rows of a small run: a big verify never decodes them here
    few = in_statuses <= ROWS_ON_DRIVER
    kept = ([c for c in RUN_COLUMNS if c != "digest"] if few else
            ["places"] if not_applied_at else [])
    rows: list[dict[str, Any]] | None = [] if few else None
    for batch in _record_batches(table, sorted({*CHECKED_COLUMNS, *kept}), wanted):
        check_batch(state_dir, batch)
        if not_applied_at:
            batch = batch.filter(_not_applied(batch.column("places"), not_applied_at))
        count += batch.num_rows
        topics.update(pc.unique(batch.column("topic")).to_pylist())
        headers.update(h for h in pc.unique(batch.column("header_name")).to_pylist() if h)
        digests.add(hex_digest_words(batch.column("subject_sha256")))
        if rows is not None:
            rows.extend({**r, "digest": bytes.fromhex(sha)} for r, sha in zip(
                batch.select(kept).to_pylist(), batch.column("subject_sha256").to_pylist(),
                strict=True))
    return PendingSummary(version=table.version(), count=count, topics=frozenset(topics),
                          header_names=frozenset(headers), digests=digests.done(), rows=rows)


@dataclass(frozen=True, slots=True)
class RunLedger:
    """A run's requests too many to hold on the driver (:attr:`PendingSummary.rows` is
    ``None``): those in ``statuses`` (not yet applied at ``not_applied_at``) at the table
    ``version`` its summary read and checked, read again by delta-rs batch by batch, one
    pass for each thing the run needs of them (:func:`requests_with_digests`,
    :func:`outcome_rows`): the driver holds what a pass keeps, never every row."""

    state_dir: str
    statuses: frozenset[str]
    version: int
    not_applied_at: str | None = None


def _run_batches(run: RunLedger, columns: Sequence[str]) -> Iterator[pa.RecordBatch]:
    """The batches of ``run``'s requests with ``columns`` (the rows :func:`pending_summary`
    checked at this version: not checked again)."""
    table = _open(table_path(run.state_dir, ERASURE_REQUESTS_TABLE))
    table.load_as_version(run.version)
    read = sorted({*columns, *(("places",) if run.not_applied_at else ())})
    for batch in _record_batches(table, read, ("status", run.statuses)):
        if run.not_applied_at:
            batch = batch.filter(_not_applied(batch.column("places"), run.not_applied_at))
        if batch.num_rows:
            yield batch.select(list(columns))


def _of(column: pa.Array, values: Collection[str]) -> pa.Array:
    """Whether each value of a string ``column`` is one of ``values``."""
    import pyarrow.compute as pc

    return pc.is_in(column, value_set=pa.array(sorted(values), column.type))


@ledger_errors("read the erasure request ledger")
def requests_with_digests(run: RunLedger, digests: Collection[bytes]) -> list[dict[str, Any]]:
    """The rows (:data:`RUN_COLUMNS`, the digest as 32 bytes) of ``run``'s requests whose
    subject digest is one of ``digests`` (the scan's candidates: what the match on the
    driver compares them with), in one pass."""
    if not digests:
        return []
    kept = [c for c in RUN_COLUMNS if c != "digest"]
    out: list[dict[str, Any]] = []
    for batch in _run_batches(run, [*kept, "subject_sha256"]):
        hit = batch.filter(_of(batch.column("subject_sha256"), {d.hex() for d in digests}))
        out.extend({**r, "digest": bytes.fromhex(sha)} for r, sha in zip(
            hit.select(kept).to_pylist(), hit.column("subject_sha256").to_pylist(),
            strict=True))
    return out


@dataclass(frozen=True, slots=True)
class OutcomeRows:
    """What a run's outcomes by kind need of its requests (:func:`outcome_rows`)."""

    #: the rows (:data:`compactor.erasure.outcomes.ROW_COLUMNS`) of the individual requests
    own: list[dict[str, Any]]
    #: every other kind (:data:`compactor.erasure.outcomes.KIND_COLUMNS`) with its ``count``
    kinds: list[dict[str, Any]]
    #: the first rows by request id (``ROW_COLUMNS``), of every request
    first: list[dict[str, Any]]


@ledger_errors("read the erasure request ledger")
def outcome_rows(run: RunLedger, individual: Collection[str], limit: int,
                 max_kinds: int) -> OutcomeRows | None:
    """In one pass over ``run``'s requests: the rows of those in ``individual``, how many of
    the others are of each kind, and the first ``limit`` by id; ``None`` as soon as the
    kinds are more than ``max_kinds`` (the run then gives each request its outcome in
    Spark)."""
    import pyarrow.compute as pc

    own: list[dict[str, Any]] = []
    counts: dict[tuple[Any, ...], int] = {}
    first: list[dict[str, Any]] = []
    for batch in _run_batches(run, ROW_COLUMNS):
        mine = _of(batch.column("request_id"), individual)
        own.extend(batch.filter(mine).to_pylist())
        rest = pa.Table.from_batches([batch.filter(pc.invert(mine))])
        for k in rest.group_by(list(KIND_COLUMNS)).aggregate([([], "count_all")]).to_pylist():
            kind = tuple(k[c] for c in KIND_COLUMNS)
            counts[kind] = counts.get(kind, 0) + k["count_all"]
        if len(counts) > max_kinds:
            return None
        if limit > 0:
            at = pc.select_k_unstable(batch, k=min(limit, batch.num_rows),
                                      sort_keys=[("request_id", "ascending")])
            first = heapq.nsmallest(limit, [*first, *batch.take(at).to_pylist()],
                                    key=lambda r: r["request_id"])
    return OutcomeRows(own, [{**dict(zip(KIND_COLUMNS, k, strict=True)), "count": n}
                             for k, n in counts.items()], first)


def _not_applied(places: pa.Array, key: str) -> pa.Array:
    """Whether each row's ``places`` (JSON) has no apply at the place ``key``: only the rows
    whose JSON names the place are parsed."""
    import pyarrow.compute as pc

    text = pc.fill_null(places, "")
    named = pc.match_substring(text, json.dumps(key)).to_numpy(zero_copy_only=False)
    keep = np.ones(len(places), dtype=bool)
    rows = np.flatnonzero(named)
    for i, value in zip(rows, pc.filter(text, named).to_pylist(), strict=True):
        keep[i] = "applied_run_id" not in json.loads(value or "{}").get(key, {})
    return pa.array(keep)


@ledger_errors("read the erasure request ledger")
def statuses_by_run(state_dir: str, run_ids: Iterable[str], column: str) -> dict[str, int]:
    """How many requests whose ``column`` (``run_id``, ``verify_run_id``) is one of
    ``run_ids`` are in each status, counted batch by batch."""

    wanted = sorted(set(run_ids))
    out: dict[str, int] = {}
    if not wanted:
        return out
    table = _open(table_path(state_dir, ERASURE_REQUESTS_TABLE))
    for batch in _record_batches(table, ["status"], (column, wanted)):
        for status in batch.column(0).to_pylist():
            out[status] = out.get(status, 0) + 1
    return out


# ---------------------------------------------------------------------------------------------
# Queries behind `erase status` and `erase report`


#: ``erase status`` and ``erase list`` show at most this many requests of a kind (the earliest
#: requested first) and count them all: a million requests must not become a million lines
SHOWN_REQUESTS = 1000


class _Earliest:
    """The first ``limit`` items by (requested_at_ms, request_id) of a stream, and how many
    there were: memory bounded by twice ``limit``, whatever the stream's length."""

    def __init__(self, limit: int = SHOWN_REQUESTS) -> None:
        self.limit, self.count = limit, 0
        self._kept: list[tuple[int, str, dict[str, Any]]] = []

    def add(self, requested_at_ms: int, request_id: str, item: dict[str, Any]) -> None:
        self.count += 1
        self._kept.append((requested_at_ms, request_id, item))
        if len(self._kept) >= 2 * self.limit:
            self._trim()

    def _trim(self) -> None:
        self._kept.sort(key=lambda e: (e[0], e[1]))
        del self._kept[self.limit:]

    def items(self) -> list[dict[str, Any]]:
        self._trim()
        return [e[2] for e in self._kept]


def _request_batches(state_dir: str, columns: Iterable[str], where: Where | None = None, *,
                     version: int | None = None) -> Iterator[pa.RecordBatch]:
    """The request rows (``columns`` and what their check reads; those ``where`` names)
    batch by batch, each checked (:func:`check_batch`); at ``version`` when given."""
    require_ledger(state_dir)
    table = _open(table_path(state_dir, ERASURE_REQUESTS_TABLE))
    if version is not None:
        table.load_as_version(version)
    for batch in _record_batches(table, sorted({*columns, *CHECKED_COLUMNS}), where):
        check_batch(state_dir, batch)
        yield batch


@ledger_errors("read the erasure request ledger")
def status(state_dir: str, now_ms: int) -> dict[str, Any]:
    """Counts by status, the overdue requests (deadline passed, not verified or cancelled),
    the failed ones and where the partially verified ones still have to be scanned: each
    list the first :data:`SHOWN_REQUESTS` by request time, with its count (``*_count``).
    The ledger is read batch by batch and column-wise: at a million requests the driver holds
    the counts and those lists, never the rows.

    Raises:
        ConfigError: there is no ledger at ``state_dir``.
    """
    import pyarrow.compute as pc

    counts = {s: 0 for s in STATUSES}
    overdue, failed, partial = _Earliest(), _Earliest(), _Earliest()
    done = pa.array(sorted(DONE), pa.large_string())
    version = table_version(state_dir, ERASURE_REQUESTS_TABLE)
    # the places (JSON, the widest column once requests are applied) only of the partially
    # verified requests, read in a second pass filtered to them: most ledgers have none
    for batch in _request_batches(state_dir, ("failure",), version=version):
        for entry in pc.value_counts(batch.column("status")).to_pylist():
            counts[entry["values"]] = counts.get(entry["values"], 0) + entry["counts"]
        status = pc.cast(batch.column("status"), pa.large_string())
        late = pc.and_(pc.invert(pc.is_in(status, done)),
                       pc.less(batch.column("deadline_ms"), now_ms))
        # only the few rows a list may show become Python values
        for r in batch.filter(late).to_pylist():
            overdue.add(r["requested_at_ms"], r["request_id"], {
                "request_id": r["request_id"], "topic": r["topic"], "status": r["status"],
                "deadline_ms": r["deadline_ms"], "overdue_ms": now_ms - r["deadline_ms"]})
        for r in batch.filter(pc.equal(status, RequestStatus.FAILED.value)).to_pylist():
            failure = json.loads(r["failure"]) if r.get("failure") else None
            failed.add(r["requested_at_ms"], r["request_id"], {
                "request_id": r["request_id"], "topic": r["topic"], "failure": failure,
                "reason": failure_words(failure)})
    if counts.get(RequestStatus.PARTIALLY_VERIFIED.value):
        for batch in _request_batches(
                state_dir, ("places", "missing_replicas"),
                ("status", [RequestStatus.PARTIALLY_VERIFIED.value]), version=version):
            for r in batch.to_pylist():
                # where it still has to be scanned: the replicas the metadata names that no
                # clean verify covered yet
                partial.add(r["requested_at_ms"], r["request_id"], {
                    "request_id": r["request_id"], "topic": r["topic"],
                    "places_verified": sorted(
                        k for k, p in json.loads(r.get("places") or "{}").items()
                        if p.get("verify_status") == "clean"),
                    "missing_replicas": json.loads(r.get("missing_replicas") or "null")})
    return {"type": "status", "state_dir": state_dir, "now_ms": now_ms,
            "requests": sum(counts.values()), "by_status": counts,
            "overdue": overdue.items(), "overdue_count": overdue.count,
            "failed": failed.items(), "failed_count": failed.count,
            "partially_verified": partial.items(), "partially_verified_count": partial.count,
            "shown_at_most": SHOWN_REQUESTS, "ledger_version": version}


@ledger_errors("read the erasure request ledger")
def audit(state_dir: str, request_id: str) -> dict[str, Any] | None:
    """The audit proof of one request: the ledger row (digest, never the subject), the runs
    that applied and verified it (per partition: segments and records scanned, records
    erased, segments rewritten), and the ledger commits that changed it. ``None`` when the
    request id is unknown."""

    row = next((r for batch in _request_batches(state_dir, ERASURE_REQUESTS.names,
                                                ("request_id", [request_id]))
                for r in batch.to_pylist()), None)
    if row is None:
        return None
    places = json.loads(row.get("places") or "{}")
    applies = {row["run_id"]} | {p.get("applied_run_id") for p in places.values()}
    verifies = {row["verify_run_id"]} | {p.get("verify_run_id") for p in places.values()}
    # runs that erased its records (or verified them) while its status moved under them (a
    # cancel during an apply): their outcome is not on its row, their runs rows name it
    moved = {}
    every_run = load_runs(state_dir)  # read once: the moves are found in it, then the runs
    for r in every_run:
        for entry in json.loads(r.get("requests_changed") or "[]"):
            if entry.get("request_id") == request_id:
                moved[r["run_id"]] = {"run_id": r["run_id"], "command": r["command"],
                                      "finished_at_ms": r["finished_at_ms"], **entry}
    run_ids = sorted(r for r in applies | verifies | set(moved) if r)
    wanted = set(run_ids)
    runs = [r for r in every_run if r["run_id"] in wanted]
    topic = row["topic"]
    runs = [r for r in runs if topic in (ALL_TOPICS, r["topic"])]
    commits = [c for c in history(state_dir, ERASURE_REQUESTS_TABLE)
               if request_id in (c.get("request_ids") or "").split(",")
               or c.get("run_id") in run_ids]
    verified = row["status"] in VERIFIED
    return {
        "type": "audit", "request": decoded(row),
        "apply_runs": [r for r in runs if r["run_id"] in applies],
        "verify_runs": [r for r in runs if r["run_id"] in verifies],
        "ledger_commits": commits,
        "changed_during_runs": [moved[k] for k in sorted(moved)],
        "proof": {
            "status": row["status"],
            "subject_sha256": row["subject_sha256"],
            "records_erased": row["records_erased"],
            "verified_by_rescan": verified,
            "segments_rescanned": row["verified_segments_scanned"],
            "records_rescanned": row["verified_records_scanned"],
            "residual_matches": 0 if verified else None,
            "met_deadline": verified and row["verified_at_ms"] <= row["deadline_ms"],
            "superseded_by_erased": row.get("superseded_by_erased"),
            "tombstones_left": json.loads(row.get("tombstones_left") or "[]"),
            "remote_tier": row.get("remote_tier") or "none",
            "coverage": json.loads(row.get("coverage") or "[]"),
            # one entry per log dir of a broker that applied or verified it; a request is
            # verified only when the metadata's every replica was scanned clean
            "places": places,
            "missing_replicas": json.loads(row.get("missing_replicas") or "null"),
        },
    }


def list_requests(state_dir: str) -> Iterator[dict[str, Any]]:
    """Every request with what an operator needs to find it (``erase list``), in the
    ledger's file order, batch by batch: the caller writes each as it comes, so a million
    requests stream through the driver.

    Raises:
        ConfigError: there is no ledger at ``state_dir``.
    """
    shown = ("request_id", "topic", "selector", "header_name", "status", "reason",
             "requested_at_ms", "deadline_ms", "applied_at_ms", "verified_at_ms",
             "leave_tombstone", "missing_replicas")
    check_ledger(state_dir)
    with mapped_errors("read the erasure request ledger", state_dir):
        yield from _listed(state_dir, shown)


def _listed(state_dir: str, shown: Sequence[str]) -> Iterator[dict[str, Any]]:
    for batch in _request_batches(state_dir, (*shown, "places")):
        for r in map(decoded, batch.to_pylist()):
            places = r.get("places") or {}
            yield {**{k: r.get(k) for k in shown},
                   # per place (one log dir of one broker): applied, and what its verify found
                   "places": {k: {"applied": "applied_run_id" in v,
                                  "verify_status": v.get("verify_status")}
                              for k, v in sorted(places.items())}}


#: The ledger's columns that hold JSON (Delta has no nested columns we can rely on across
#: delta-rs and delta-spark): decoded for reports, never shown as JSON inside a string.
JSON_COLUMNS = ("failure", "tombstones_left", "coverage", "places", "missing_replicas")


def decoded(row: Mapping[str, Any]) -> dict[str, Any]:
    """A request row with its JSON columns as values."""
    return {k: (json.loads(v) if k in JSON_COLUMNS and isinstance(v, str) else v)
            for k, v in row.items()}
