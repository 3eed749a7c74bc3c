"""The Delta tables under ``--state-dir``: what every command's state is kept in, whichever
command it is. The state dir holds two tables (schemas in ``schemas/delta.py``): the erasure
requests (:mod:`compactor.erasure.ledger` owns their rows) and the runs of every command
(:mod:`compactor.state.runs`). Here is what they share: their health, checked file by file
before delta-rs reads them (:func:`check_ledger`); their creation and the columns later
versions add (:func:`init`, :func:`ensure_table`); errors mapped to ``LEDGER_ERROR`` naming
the state dir (:func:`ledger_errors`, which also takes the state dir's writer lock,
:func:`compactor.log.storage.state_dir_lock`, around every commit); reads batch by batch on
the calling thread (:func:`record_batches`); a rewrite of a table's rows batch by batch in one
commit (:func:`rewrite_rows`); each commit's metadata (:func:`commit_properties`); the commit
history (:func:`history`); and ``compactor optimize`` (:func:`optimize`).

Written by two libraries: ``deltalake`` (delta-rs) on the driver of every command, never in a
Spark worker (delta-rs panics in a forked child); ``delta-spark`` in an erasure's own session
when a run of many requests gives each its outcome on the executors
(:mod:`compactor.spark.ledger`; nothing here imports Spark). Both write the protocol both
read and write (reader 1, writer 2, no table features), times as UTC milliseconds in
``int64`` columns. Every change is one Delta commit, so a table's history is its audit trail
(every commit carries our metadata as ``userMetadata`` JSON, delta-rs commits also as
commitInfo fields: :func:`history` reads both).
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import sys
import urllib.parse
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import pyarrow as pa

from compactor.errors import CompactorError, ConfigError, LedgerError, first_line
from compactor.log import storage
from compactor.schemas.delta import ERASURE_REQUESTS, ERASURE_REQUESTS_TABLE, RUNS, RUNS_TABLE
from compactor.threads import check_each

if TYPE_CHECKING:
    from deltalake import CommitProperties, DeltaTable

P = ParamSpec("P")
R = TypeVar("R")


DAMAGED_REMEDY = ("the ledger's Delta table is damaged: restore the state dir (or the named "
                  "table) from a backup, or return the table to its last good version with "
                  "delta-spark's RESTORE; nothing was written to the ledger")
#: an Arrow function the read needs is missing for the files' types (delta-rs's MERGE writes
#: ``string_view`` columns, which pyarrow could not filter: :func:`record_batches`): the
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
    _check_data_files([(storage.join(table, urllib.parse.unquote(rel)), size)
                       for rel, size in sorted(added.items())])


def _check_data_files(files: Sequence[tuple[str, int]]) -> None:
    """:func:`_check_data_file` of each (path, size), files on as many threads as the
    machine has cores (:func:`compactor.threads.check_each`; Arrow's decoding releases the
    GIL; each file is decoded on the thread that checks it, never by Arrow's pool): the 1 M
    request ledger's four files in 0.17 s, not 0.26 (measured 30 Nov). The first damaged file
    in ``files``' order is the one named."""
    check_each(lambda file: _check_data_file(*file), files)


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
        parquet = pq.ParquetFile(source)
        # a column at a time: the driver holds one column's batch, not a batch of every
        # column (the 1 M-request ledger's check: +205-290 -> +110-170 MiB resident, in the
        # same time; measured 30 Nov, VmHWM)
        for column in parquet.schema_arrow.names:
            for _ in parquet.iter_batches(batch_size=65_536, columns=[column],
                                          use_threads=False):
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
    new = not is_table(table_path(state_dir, ERASURE_REQUESTS_TABLE))
    ensure_table(state_dir, ERASURE_REQUESTS_TABLE, ERASURE_REQUESTS)
    ensure_table(state_dir, RUNS_TABLE, RUNS)
    return new


def require_ledger(state_dir: str) -> None:
    """Commands that read the ledger need one (a mistyped ``--state-dir`` must not look like
    an empty, healthy ledger).

    Raises:
        ConfigError: no ``erasure_requests`` table under ``state_dir``.
    """
    check_ledger(state_dir)  # a damaged or orphaned table is that, not "no ledger"
    if not is_table(table_path(state_dir, ERASURE_REQUESTS_TABLE)):
        raise ConfigError("no erasure ledger here (no erasure_requests Delta table)",
                          path=state_dir,
                          remedy="check --state-dir; `compactor erase init --state-dir DIR` "
                                 "creates the ledger (once, before the first request)")


def read_all(table: Any, columns: Sequence[str] | None = None) -> pa.Table:
    """A Delta table's rows, scanned on the calling thread. ``DeltaTable.to_pyarrow_table``
    scans with Arrow's thread pool, whose native threads can still be running when the
    interpreter exits: the process then dies with "terminate called without an active
    exception" (SIGABRT, exit 134) after the command printed success (35 of 40 runs of
    ``erase request`` on an existing id did here)."""
    return table.to_pyarrow_dataset().to_table(
        columns=list(columns) if columns is not None else None, use_threads=False)


def table_path(state_dir: str, name: str) -> str:
    return storage.join(state_dir, name)


def is_table(path: str) -> bool:
    from deltalake import DeltaTable

    return bool(DeltaTable.is_deltatable(path, storage_options=storage.delta_options(path)))


def open_table(path: str) -> DeltaTable:
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


def ensure_table(state_dir: str, name: str, schema: pa.Schema) -> DeltaTable:
    from deltalake import DeltaTable

    path = table_path(state_dir, name)
    keep = AUDIT_PROPERTIES if name == ERASURE_REQUESTS_TABLE else {}
    if is_table(path):
        table = open_table(path)
        have = {f.name for f in table.schema().fields}
        missing = [f for f in schema if f.name not in have]
        if missing:  # a ledger written by an earlier version: add the new columns (nullable)
            from deltalake.schema import Field

            table.alter.add_columns([Field.from_arrow(f) for f in missing])
            table = open_table(path)
        if any(table.metadata().configuration.get(k) != v for k, v in keep.items()):
            table.alter.set_table_properties(dict(keep))  # a ledger of an earlier version
            table = open_table(path)
        return table
    storage.make_dirs(state_dir)
    return DeltaTable.create(path, schema=schema, mode="ignore", name=name,
                             configuration=dict(keep) or None,
                             storage_options=storage.delta_options(path))


def require_state_tables(state_dir: str) -> None:
    """Raises ConfigError when ``state_dir`` holds neither the ledger nor the runs table (a
    mistyped path is not an empty state dir)."""
    if not any(is_table(table_path(state_dir, n)) for n in (ERASURE_REQUESTS_TABLE,
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
        if not is_table(path):
            continue
        if name == ERASURE_REQUESTS_TABLE and not dry_run:
            ensure_table(state_dir, name, ERASURE_REQUESTS)  # the audit properties, on old ledgers
        table = open_table(path)
        files_before = len(table.file_uris())
        compacted: dict[str, Any] = {}
        if not dry_run:
            compacted = table.optimize.compact(commit_properties=commit_properties(
                {"action": "optimize"}))
            table = open_table(path)
        vacuumed = table.vacuum(retention_hours=retention_hours, dry_run=dry_run,
                                enforce_retention_duration=False)
        if not dry_run:
            table.create_checkpoint()
        out.append({"table": name, "version": open_table(path).version(),
                    "files_before": files_before, "files_after": len(open_table(path).file_uris()),
                    "files_compacted": compacted.get("numFilesRemoved", 0),
                    "files_vacuumed": len(vacuumed)})
    return out


def rows_table(rows: Sequence[Mapping[str, Any]], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in rows],
                                schema=schema)


def commit_properties(meta: Mapping[str, str] | None) -> CommitProperties | None:
    """A delta-rs commit's metadata: its fields in commitInfo, and the same as
    ``userMetadata`` JSON, as a delta-spark commit carries it: the analyst's
    ``DESCRIBE HISTORY`` shows every commit's metadata, whichever library wrote it."""
    from deltalake import CommitProperties

    if not meta:
        return None
    return CommitProperties(custom_metadata={**meta, "userMetadata": json.dumps(dict(meta))})



#: rows whose ``column`` is one of the values: the only filter a ledger read takes
Where = tuple[str, Collection[str]]


def record_batches(table: DeltaTable, columns: Sequence[str],
                   where: Where | None = None, *,
                   dictionary: Collection[str] = ()) -> Iterator[pa.RecordBatch]:
    """A table's rows as Arrow record batches of at most 64 Ki rows (the driver never holds
    them all), file by file on the calling thread (:func:`read_all`), those ``where`` names
    only. The string columns ``dictionary`` names come as Arrow dictionaries, read from
    the files' own dictionary pages: a value many rows share (a kind's places, whose JSON
    is the widest column once requests were applied) is then one string, not one a row.

    Each file is read by ``pyarrow.parquet`` on Arrow's own filesystem where the table is on a
    local disk (:func:`_files_of`), not through ``pyarrow.dataset`` on delta-rs's: with the
    dataset's I/O threads and its per-row strings, the 1 M-request ledger's summary pass
    grew the driver's resident memory by 490-700 MiB, 80-160 MiB this way with its kinds
    as dictionaries, in the same time (measured 30 Nov, ``VmHWM``).

    Every batch is cast to the table's types (:func:`_conformed`: a file written before a
    column was added gets it null), and the filter runs on the cast batches: delta-rs (1.6)
    writes the files of its MERGE with ``string_view`` columns, which Arrow's filters could
    not compare with a ``string`` value ("no kernel matching input types (string,
    string_view)"; one ``erase cancel`` of a request filed with others made every later run
    fail; delta-io/delta-rs#4579 is the same for its DELETE). No file is skipped by its
    statistics: a MERGE leaves each file with many statuses, so pruning rarely skipped one
    anyway."""
    import pyarrow.parquet as pq

    wanted = list(columns)
    read = wanted if where is None or where[0] in wanted else [*wanted, where[0]]
    dataset = table.to_pyarrow_dataset()  # delta-rs checks here that it can read the table
    schema = pa.schema([_read_as(dataset.schema.field(c), dictionary) for c in read])
    on, values = (None, None) if where is None else (
        where[0], pa.array(sorted(where[1]), pa.string()))
    fs = _files_of(storage.check_location(table.table_uri), dataset)
    for fragment in dataset.get_fragments():
        with fs.open_input_file(fragment.path) as source:
            parquet = pq.ParquetFile(source, pre_buffer=False, read_dictionary=[
                c for c in schema.names
                if pa.types.is_dictionary(schema.field(c).type)
                and c in fragment.physical_schema.names])
            present = [c for c in read if c in parquet.schema_arrow.names]
            for batch in parquet.iter_batches(batch_size=64 * 1024, columns=present,
                                              use_threads=False):
                batch = _conformed(batch, schema)
                if on is not None and values is not None:
                    batch = batch.filter(is_one_of(batch.column(on), values))
                    if not batch.num_rows:
                        continue
                yield batch if read is wanted else batch.select(wanted)


def is_one_of(column: pa.Array, values: pa.Array) -> pa.Array:
    """Whether each value of a string ``column`` (plain or an Arrow dictionary, as
    :func:`record_batches` reads it) is one of ``values`` (strings); a null is not. A
    dictionary's entries are compared once each, not its rows."""
    import pyarrow.compute as pc

    if pa.types.is_dictionary(column.type):
        entries = pc.is_in(column.dictionary, value_set=values.cast(column.type.value_type))
        return pc.fill_null(pc.take(entries, column.indices), False)
    return pc.fill_null(pc.is_in(column, value_set=values.cast(column.type)), False)


def _read_as(field: pa.Field, dictionary: Collection[str]) -> pa.Field:
    """``field`` as :func:`record_batches` reads it: a string column ``dictionary`` names as
    an Arrow dictionary of its strings."""
    if field.name in dictionary and pa.types.is_string(field.type):
        return pa.field(field.name, pa.dictionary(pa.int32(), pa.string()), field.nullable)
    return field


def count_rows(table: DeltaTable, where: Where) -> int:
    """How many rows ``where`` names (:func:`record_batches`), reading that column only, as
    a dictionary where it is a string column (a status a row is a code a row)."""
    return sum(b.num_rows for b in record_batches(table, [where[0]], where,
                                                  dictionary=[where[0]]))


@ledger_errors("read a ledger table's history")
def history(state_dir: str, name: str) -> list[dict[str, Any]]:
    """The Delta commit history of a table, oldest first: version, timestamp, operation and
    the metadata our commits carry (``action``, ``run_id``, ``request_ids``; a retry's or
    cancel's ``reason`` and ``at_ms``)."""
    path = table_path(state_dir, name)
    if not is_table(path):
        return []
    out = []
    for entry in open_table(path).history():
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
    return open_table(path).version() if is_table(path) else None


# ---------------------------------------------------------------------------------------------
# A rewrite of a table's rows in place, a batch at a time

#: the rows :func:`rewrite_rows` reads and changes at a time: a reader of 64 Ki rows held
#: 55-80 MiB of Arrow's memory a thread (the 1 M-row ledger's rewrite grew the driver by
#: 390-430 MiB at its peak, 250-270 MiB this way, in the same time; measured 30 Nov, VmHWM)
REWRITE_BATCH_ROWS = 16 * 1024
#: the rows of the row groups it writes: every read of the ledger reads a batch a row group,
#: and the summary's pass took 0.08 s longer over groups of 16 Ki rows (measured 30 Nov)
REWRITE_GROUP_ROWS = 64 * 1024
#: the protocol :func:`rewrite_rows` writes: the one both libraries create the tables with
#: (reader 1, writer 2, no table features). A table a newer writer upgraded (deletion vectors,
#: column mapping, constraints) is not rewritten by hand: its caller takes the library's way
REWRITE_PROTOCOL = (1, 2)

#: a batch's new rows and how many it changed, or ``None`` when it changes none
RowChange = Callable[[pa.RecordBatch], "tuple[pa.RecordBatch, int] | None"]


def can_rewrite(table: DeltaTable) -> bool:
    """Whether :func:`rewrite_rows` may write ``table``'s files: its protocol is
    :data:`REWRITE_PROTOCOL` with no table features and no partition columns."""
    protocol = table.protocol()
    return ((protocol.min_reader_version, protocol.min_writer_version) == REWRITE_PROTOCOL
            and not protocol.reader_features and not protocol.writer_features
            and not table.metadata().partition_columns)


def rewrite_rows(path: str, table: DeltaTable, change: RowChange, meta: Mapping[str, str], *,
                 dictionary: Collection[str], unique: Collection[str] = ()) -> int:
    """Rewrite the data files of ``table`` at ``path`` (as opened: the version read) through
    ``change``, one batch of at most :data:`REWRITE_BATCH_ROWS` rows at a time, and commit
    every file it changed, replaced, in one delta-rs transaction carrying ``meta`` (an
    ``append`` that adds the new files and removes the old: Delta's own form of a rewrite, as
    a MERGE commits it).
    Returns the rows changed; none changed commits nothing.

    ``change`` gets each batch with every column of the table's schema (a file written before
    a column was added gets it null) and those of its string columns ``dictionary`` names read
    as Arrow dictionaries; it returns the batch with the same schema and the rows it changed,
    or ``None``. A value shared by many rows (a run's coverage JSON, its places) then stays one
    dictionary entry from Parquet page to Parquet page, where delta-rs's MERGE materialises it
    per row (1 KB times a million rows: 1.6 s of a 1 M-row verify's 3.6 s MERGE, measured).
    Files are rewritten on as many threads as the machine has cores (Arrow's decoding and
    encoding release the GIL), each holding one batch. The columns ``unique`` names (a value
    a row, such as hex digests) are written plain, neither dictionary-encoded nor compressed:
    neither makes them smaller (snappy's pages of hex digits are 1.06x), and on the 1 M-row
    ledger they were half of the writer's time (0.49 -> 0.23 s for its 154 MB, 163 MB after).

    The caller checks :func:`can_rewrite` and holds the state dir's writer lock
    (:func:`ledger_errors` with ``writes=True``). Each new file's statistics are its row count
    and null counts, exact (delta-rs derives its fragments' guarantees from them), with no
    bounds: readers skip no file by value, and every one reads the new files correctly."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    schema = pa.schema([_read_as(pa.field(f.name, f.type), dictionary)
                        for f in pa.schema(table.schema())])
    dataset = table.to_pyarrow_dataset()
    sizes = {a["path"]: a["size_bytes"] for a in
             pa.table(table.get_add_actions(flatten=True)).select(["path", "size_bytes"])
             .to_pylist()}
    fragments = list(dataset.get_fragments())
    fs = _files_of(path, dataset)
    plain = frozenset(unique)
    with ThreadPoolExecutor(max(1, min(len(fragments), os.cpu_count() or 1))) as pool:
        done = list(pool.map(lambda f: _rewrite_file(fs, f, schema, change, sizes.get(f.path),
                                                     plain), fragments))
    actions = [a for file_actions, _ in done for a in file_actions]
    if actions:
        table.create_write_transaction(actions, mode="append", schema=table.schema(),
                                       commit_properties=commit_properties(meta))
    return sum(changed for _, changed in done)


def _files_of(path: str, dataset: Any) -> Any:
    """The Arrow filesystem :func:`rewrite_rows` reads and writes the files of the table at
    ``path`` through, rooted there: on a local disk Arrow's own (files streamed, the rewrite's
    memory one batch a thread), on an object store delta-rs's (the dataset's, with the
    table's storage options)."""
    from pyarrow import fs

    if storage.is_url(path):
        return dataset.filesystem
    return fs.SubTreeFileSystem(path, fs.LocalFileSystem())


def _rewrite_file(fs: Any, fragment: Any, schema: pa.Schema, change: RowChange,
                  size: int | None, unique: frozenset[str]) -> tuple[list[Any], int]:
    """One data file of :func:`rewrite_rows` through ``change``, written anew beside it: the
    actions that replace it and the rows changed (none: the new file is deleted, the old
    kept)."""
    import time
    import uuid

    import pyarrow.parquet as pq
    from deltalake.transaction import AddAction, RemoveAction

    name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    rows, changed, nulls = 0, 0, dict.fromkeys(schema.names, 0)
    read_as = [f.name for f in schema if pa.types.is_dictionary(f.type)]
    with fs.open_input_file(fragment.path) as source, fs.open_output_stream(name) as sink:
        parquet = pq.ParquetFile(source, read_dictionary=[
            c for c in read_as if c in fragment.physical_schema.names])
        with pq.ParquetWriter(sink, schema, store_schema=False,
                              compression={c: "none" if c in unique else "snappy"
                                           for c in schema.names},
                              use_dictionary=[c for c in schema.names if c not in unique]
                              ) as out:
            group: list[pa.RecordBatch] = []
            for batch in parquet.iter_batches(batch_size=REWRITE_BATCH_ROWS):
                batch = _conformed(batch, schema)
                new = change(batch)
                if new is not None:
                    batch, count = new
                    changed += count
                for column, array in zip(schema.names, batch.columns):
                    nulls[column] += array.null_count
                rows += batch.num_rows
                group.append(batch)
                if sum(b.num_rows for b in group) >= REWRITE_GROUP_ROWS:
                    _write_group(out, group)
                    group = []
            if group:
                _write_group(out, group)
    if not changed:
        fs.delete_file(name)
        return [], 0
    now_ms = int(time.time() * 1000)
    stats = json.dumps({"numRecords": rows, "nullCount": nulls})
    return [AddAction(name, fs.get_file_info(name).size, {}, now_ms, True, stats),
            RemoveAction(fragment.path, True, now_ms, size, {})], changed


def _write_group(out: Any, batches: list[pa.RecordBatch]) -> None:
    """``batches`` written as one row group, their dictionaries unified first: Parquet's
    writer falls back to plain values for the rest of a column chunk when a batch brings a
    dictionary other than the one before (a kind's JSON a row again, 1 KB a million times)."""
    out.write_table(pa.Table.from_batches(batches).unify_dictionaries(), REWRITE_GROUP_ROWS)


def _conformed(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """A file's batch as ``schema`` has it: the columns a later version added (absent from
    an older file) null, and each column in the schema's type (delta-rs writes
    ``string_view``)."""
    have = set(batch.schema.names)
    return pa.RecordBatch.from_arrays(
        [batch.column(f.name).cast(f.type) if f.name in have
         else pa.nulls(batch.num_rows, f.type) for f in schema], schema=schema)


def with_values(column: pa.Array, values: Sequence[Any], which: Any) -> pa.Array:
    """``column`` with row ``i`` set to ``values[which[i]]`` wherever ``which[i] >= 0``
    (``which``: a numpy integer array, a row each), the other rows as they are. A dictionary
    column stays one: a value joins its dictionary once, whatever the rows, and a value it
    holds already is not added again. A dictionary with an entry twice is one Parquet's
    writer does not write: it falls back to a value a row for the rest of the column chunk
    (a kind's place JSON, or ``applied``, once a row, where several kinds took the same)."""
    import numpy as np
    import pyarrow.compute as pc

    keep = which < 0
    if keep.all():
        return column
    if pa.types.is_dictionary(column.type):
        at = {v: i for i, v in reversed(list(enumerate(column.dictionary.to_pylist())))}
        added: list[Any] = []
        codes = np.empty(len(values) + 1, dtype=np.int64)
        for k, v in enumerate(values):
            entry = "" if v is None else v  # a null row's index points anywhere valid
            if entry not in at:
                at[entry] = len(column.dictionary) + len(added)
                added.append(entry)
            codes[k] = at[entry]
        codes[-1] = 0
        entries = pa.concat_arrays([column.dictionary,
                                    pa.array(added, column.type.value_type)])
        null_value = np.array([v is None for v in values] + [False])
        indices = np.where(keep, pc.fill_null(column.indices, 0).to_numpy(
            zero_copy_only=False), codes[which]).astype(np.int32)
        valid = np.where(keep, column.is_valid().to_numpy(zero_copy_only=False),
                         ~null_value[which])
        return pa.DictionaryArray.from_arrays(pa.array(indices, mask=~valid), entries)
    given = pa.array(values, column.type).take(pa.array(np.where(keep, 0, which)))
    return pc.if_else(pa.array(keep), column, given)
