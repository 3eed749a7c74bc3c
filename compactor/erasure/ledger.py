"""The erasure request ledger: the ``erasure_requests`` table of the state dir
(:mod:`compactor.state.tables`; its schema in ``schemas/delta.py``). Requests filed, retried
and cancelled; the runs' reads of them (a checked summary pass, then for a run of many the
pass of :class:`RunLedger` after its scan); their outcomes held on the driver recorded, a row
each by MERGE, a row a kind by a rewrite of the table (a run whose outcomes the executors
computed MERGEs them through delta-spark: :mod:`compactor.spark.ledger`); and the queries
behind ``erase status``, ``list`` and ``report``. Every read checks the rows it returns
(:func:`check_batch`); every commit holds the state dir's writer lock and carries the run's
metadata, so the table's Delta history is the audit trail: who asked when, which run applied,
which run verified.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from compactor.erasure.outcomes import KIND_COLUMNS, ROW_COLUMNS
from compactor.erasure.rules import (
    ALL_TOPICS,
    CHECKED_COLUMNS,
    STATUSES,
    ErasureRequest,
    HexSha256,
    first_problem_row,
    hex_sha256,
    row_problem,
)
from compactor.erasure.sketch import DigestFilter, hex_digest_words
from compactor.erasure.status import DONE, VERIFIED, RequestStatus, failure_words
from compactor.errors import ConfigError, LedgerError
from compactor.schemas.delta import ERASURE_REQUESTS, ERASURE_REQUESTS_TABLE
from compactor.state.runs import load_runs
from compactor.state.tables import (
    Where,
    can_rewrite,
    check_ledger,
    commit_properties,
    count_rows,
    ensure_table,
    history,
    is_table,
    ledger_errors,
    mapped_errors,
    open_table,
    read_all,
    record_batches,
    require_ledger,
    rewrite_rows,
    rows_table,
    table_path,
    table_version,
    with_values,
)
from compactor.threads import map_ahead

if TYPE_CHECKING:
    from deltalake import DeltaTable

@ledger_errors("add erasure requests to the ledger", writes=True)
def add_requests(state_dir: str, requests: Sequence[ErasureRequest],
                 meta: Mapping[str, str] | None = None
                 ) -> tuple[list[str], list[dict[str, Any]]]:
    """Insert requests whose id is new (one commit; ids already present are left as they
    are: a request is never edited). Returns (added ids, the requests that already existed:
    their id, status, reason and when they were filed)."""
    require_ledger(state_dir)  # only `erase init` creates a ledger
    table = ensure_table(state_dir, ERASURE_REQUESTS_TABLE, ERASURE_REQUESTS)
    wanted = {r.request_id for r in requests}
    existing = {row["request_id"]: row for row in
                read_all(table, ["request_id", "status", "reason", "requested_at_ms"]).to_pylist()
                if row["request_id"] in wanted}
    new = [r for r in requests if r.request_id not in existing]
    if new:
        source = rows_table([_request_row(r) for r in new], ERASURE_REQUESTS)
        (table.merge(source=source, predicate="t.request_id = s.request_id",
                     source_alias="s", target_alias="t", commit_properties=commit_properties(meta))
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


def check_batch(state_dir: str, batch: pa.RecordBatch, hasher: HexSha256 = hex_sha256
                ) -> None:
    """:func:`check_rows` of a batch of request rows (with
    :data:`compactor.erasure.rules.CHECKED_COLUMNS`), column-wise
    (:func:`compactor.erasure.rules.first_problem_row`, its integrity digests by
    ``hasher``).

    Raises:
        LedgerError: the first row that is not one the tool wrote, naming its request.
    """
    i = first_problem_row(batch, hasher)
    if i is not None:
        row = {name: batch.column(name)[i].as_py() for name in batch.schema.names}
        check_rows(state_dir, [row])


@ledger_errors("read the erasure request ledger")
def load_requests(state_dir: str) -> list[dict[str, Any]]:
    """Every request row (empty when the ledger does not exist yet), each checked
    (:func:`check_rows`)."""
    path = table_path(state_dir, ERASURE_REQUESTS_TABLE)
    if not is_table(path):
        return []
    rows = read_all(open_table(path)).to_pylist()
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
    table = ensure_table(state_dir, ERASURE_REQUESTS_TABLE, ERASURE_REQUESTS)
    listed = ", ".join(f"'{s}'" for s in sorted(allowed))
    meta = {"action": action, "request_ids": ",".join(ids), "at_ms": str(now_ms),
            **({"reason": reason} if reason else {})}
    updates = {"status": "s.status"}
    # a retry applies and verifies again from the start, everywhere
    if status == RequestStatus.PENDING:
        updates.update(failure="NULL", places="'{}'")
    metrics = (table.merge(source=source, predicate="t.request_id = s.request_id",
                           source_alias="s", target_alias="t",
                           commit_properties=commit_properties(meta))
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
    table = ensure_table(state_dir, ERASURE_REQUESTS_TABLE, ERASURE_REQUESTS)
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
    metrics = (table.merge(source=rows_table(updates, schema), source_alias="s",
                           target_alias="t",
                           predicate=f"{target_key} = s.{key} "
                                     "AND t.status = s.expected_status",
                           commit_properties=commit_properties(meta), **options)
               .when_matched_update(updates={c: f"s.{c}" for c in columns})
               .execute())
    return int(metrics.get("num_target_rows_updated", 0))


#: :func:`merge_kinds` rewrites the requests table on the driver, one batch at a time
#: (:func:`compactor.state.tables.rewrite_rows`: its memory is flat in the table's rows, its
#: time is not): a larger table's outcomes are merged by id by delta-spark, whose work the
#: executors share
KIND_MERGE_ROWS = 2_000_000
#: the request columns with a value a row (ids and hex digests), which :func:`merge_kinds`
#: writes plain: no dictionary, no compression, which would make them no smaller
UNIQUE_COLUMNS = ("request_id", "subject_sha256", "integrity")


def _rows(table: DeltaTable) -> int:
    """A table's rows, from its files' statistics (delta-rs writes them for every file)."""
    import pyarrow.compute as pc

    actions = pa.table(table.get_add_actions(flatten=True))
    return int(pc.sum(actions.column("num_records")).as_py() or 0)


@ledger_errors("record erasure outcomes in the ledger", writes=True)
def merge_kinds(state_dir: str, own: Sequence[Mapping[str, Any]],
                kinds: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]],
                columns: Sequence[str], meta: Mapping[str, str], *, read_at: int) -> int | None:
    """Record a run's outcomes held by kind, one commit whose metadata is ``meta``: ``own``,
    the outcomes of its individual requests, each by request id; ``kinds``, each kind
    (``topic``, ``status``, ``places``) with the outcome every other request of that kind
    gets. Each ``update`` sets ``columns`` where the request is still in the status it was
    computed from, as :func:`merge_outcomes` of every request's outcome does (a MERGE by id),
    while the source holds a row a kind (a million pending requests nothing matched are one
    row). The table is rewritten a batch at a time (:func:`rewrite_rows`), a kind's values
    one dictionary entry for all its rows.

    Only while the requests table is still at ``read_at``, the version the run read: a kind
    names requests by what they are, so a request filed since (pending, of the same topic)
    would be one of them without the run having looked for it. Returns ``None`` when the
    table moved, holds more than :data:`KIND_MERGE_ROWS` rows, or has a protocol this rewrite
    does not write (:func:`can_rewrite`): the caller then merges every request's outcome by
    id. Else the rows updated."""
    import pyarrow.compute as pc

    table = ensure_table(state_dir, ERASURE_REQUESTS_TABLE, ERASURE_REQUESTS)
    if (table.version() != read_at or _rows(table) > KIND_MERGE_ROWS
            or not can_rewrite(table)):
        return None
    updates = [o for o in own if o["outcome"] == "update"]
    by_id = {str(o["request_id"]): i for i, o in enumerate(updates)}
    # the individual requests by id: every one of them, whatever its outcome (a blocked
    # request must not take its kind's update)
    individual = pa.array(sorted({str(o["request_id"]) for o in own}), pa.string())
    of_kind: dict[tuple[Any, ...], int] = {}
    for kind, outcome in kinds:
        if outcome["outcome"] == "update" and outcome["expected_status"] == kind["status"]:
            of_kind[(kind["topic"], kind["status"], kind["places"])] = len(updates)
            updates.append(outcome)
    values = {c: [o.get(c) for o in updates] for c in columns}

    def change(batch: pa.RecordBatch) -> tuple[pa.RecordBatch, int] | None:
        which = _kind_rows(batch, of_kind)
        ids = batch.column("request_id")
        mine = np.flatnonzero(pc.is_in(ids, individual).to_numpy(zero_copy_only=False))
        which[mine] = -1
        if by_id:
            status = batch.column("status").take(pa.array(mine)).to_pylist()
            for row, rid, now in zip(mine, ids.take(pa.array(mine)).to_pylist(), status):
                at = by_id.get(rid)
                if at is not None and updates[at]["expected_status"] == now:
                    which[row] = at
        changed = int((which >= 0).sum())
        if not changed:
            return None
        return pa.RecordBatch.from_arrays(
            [with_values(batch.column(c), values[c], which) if c in values
             else batch.column(c) for c in batch.schema.names], schema=batch.schema), changed

    return rewrite_rows(table_path(state_dir, ERASURE_REQUESTS_TABLE), table, change, meta,
                        dictionary=[*KIND_COLUMNS, *columns], unique=UNIQUE_COLUMNS)


def _kind_rows(batch: pa.RecordBatch, of_kind: Mapping[tuple[Any, ...], int]) -> Any:
    """Each row's kind in ``of_kind`` (its index there), ``-1`` for none (:func:`_kinds_of`)."""
    inverse, kinds = _kinds_of(batch)
    return np.asarray([of_kind.get(k, -1) for k in kinds], dtype=np.int64)[inverse]


def _kinds_of(batch: pa.RecordBatch) -> tuple[Any, list[tuple[Any, ...]]]:
    """The distinct kinds of ``batch``'s rows (their :data:`KIND_COLUMNS`, read as
    dictionaries) and each row's index among them: the columns compared by their codes'
    few distinct combinations, not row by row."""
    import pyarrow.compute as pc

    codes, entries = [], []
    for name in KIND_COLUMNS:
        column = batch.column(name)
        if not pa.types.is_dictionary(column.type):
            column = pc.dictionary_encode(column)
        codes.append(pc.fill_null(column.indices, len(column.dictionary))
                     .to_numpy(zero_copy_only=False).astype(np.int64))
        entries.append([*column.dictionary.to_pylist(), None])
    combined = codes[0]
    for code, entry in zip(codes[1:], entries[1:]):
        combined = combined * len(entry) + code
    distinct, inverse = np.unique(combined, return_inverse=True)
    kinds = []
    for value in distinct.tolist():
        parts = []
        for entry in reversed(entries):
            value, at = divmod(value, len(entry))
            parts.append(entry[at])
        kinds.append(tuple(reversed(parts)))
    return inverse, kinds


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
    #: else what the same pass kept of them: the first word of every digest and what the
    #: outcomes by kind need (:class:`Tallied`), so a scan that found none of their subjects
    #: reads the table no more before it records (:func:`requests_with_digests`)
    tallied: Tallied | None = None


@dataclass(frozen=True, slots=True)
class Tallied:
    """What :func:`pending_summary` keeps of a run's many requests: the first 8 bytes of
    each one's digest (as little-endian uint64, sorted, 8 MB for a million) and the
    :class:`_Tally` without hits (every kind's count, the first rows by id)."""

    first_words: np.ndarray
    tally: _Tally


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
    table = open_table(table_path(state_dir, ERASURE_REQUESTS_TABLE))
    return count_rows(table, ("status", statuses)) > 0


@ledger_errors("read the erasure request ledger")
def pending_summary(state_dir: str, statuses: frozenset[str], *,
                    not_applied_at: str | None = None,
                    hasher_for: Callable[[int], HexSha256 | None] | None = None,
                    max_kinds: int = 0) -> PendingSummary:
    """The requests in ``statuses`` (and, with ``not_applied_at``, not yet applied at that
    place), each checked (:func:`check_batch`, its integrity digests by what ``hasher_for``
    gives for a check of that many rows, else ``hashlib``) and summarized batch by batch,
    column-wise: the driver's memory does not grow with their number (but for
    :attr:`PendingSummary.tallied`'s 8 bytes a request), nor does it hold a row as a dict.
    More than :data:`ROWS_ON_DRIVER` requests are tallied by kind, up to twice
    ``max_kinds`` kinds (none with ``0``)."""
    import pyarrow.compute as pc

    table = open_table(table_path(state_dir, ERASURE_REQUESTS_TABLE))
    wanted = ("status", statuses)
    # sized for every row in the statuses (those applied here already too: a filter made
    # larger only has fewer false positives), counted from the status column first
    in_statuses = count_rows(table, wanted)
    hasher = (hasher_for(in_statuses) if hasher_for else None) or hex_sha256
    digests = DigestFilter.empty(in_statuses).building()
    count = 0
    topics: set[str] = set()
    headers: set[str] = set()
    # every row a run will read is checked here first (the run reads this same version)
    # the places (JSON, the widest column once requests were applied) to tell which are
    # applied here, and with the rows of a small run or the kinds of a big one
    few = in_statuses <= ROWS_ON_DRIVER
    tally = _Tally(2 * max_kinds) if not few and max_kinds > 0 else None
    kept = ([c for c in RUN_COLUMNS if c != "digest"] if few else
            ["places"] if not_applied_at or tally is not None else [])
    rows: list[dict[str, Any]] | None = [] if few else None
    first_words: list[np.ndarray] = []

    def summarized(batch: pa.RecordBatch
                   ) -> tuple[pa.RecordBatch, np.ndarray, list[Any], list[Any]]:
        # a batch's own work, on a thread of map_ahead's: Arrow's compute, the integrity
        # kernel (nogil) and numpy release the GIL, so two cores share the pass
        check_batch(state_dir, batch, hasher)
        if not_applied_at:
            batch = batch.filter(_not_applied(batch.column("places"), not_applied_at))
        words = hex_digest_words(batch.column("subject_sha256"))
        digests.add(words)
        return (batch, words, pc.unique(batch.column("topic")).to_pylist(),
                pc.unique(batch.column("header_name")).to_pylist())

    read = record_batches(table, sorted({*CHECKED_COLUMNS, *kept}), wanted,
                          dictionary=KIND_COLUMNS)
    for batch, words, named, names in map_ahead(summarized, read):
        count += batch.num_rows
        topics.update(named)
        headers.update(h for h in names if h)
        if rows is not None:
            rows.extend({**r, "digest": bytes.fromhex(sha)} for r, sha in zip(
                batch.select(kept).to_pylist(), batch.column("subject_sha256").to_pylist(),
                strict=True))
        elif tally is not None:
            first_words.append(words[:, 0].copy())
            tally.add(batch)
    # sorted, duplicates kept (numpy's hash-based unique took 0.64 s on a million; the sort
    # 0.06)
    tallied = (Tallied(np.sort(np.concatenate(first_words)) if first_words else
                       np.zeros(0, "<u8"), tally) if tally is not None else None)
    return PendingSummary(version=table.version(), count=count, topics=frozenset(topics),
                          header_names=frozenset(headers), digests=digests.done(), rows=rows,
                          tallied=tallied)


@dataclass(slots=True)
class _Kept:
    """What a :class:`RunLedger` (frozen: the version and rows its run reads) gains as its
    run goes: what the pass after the scan kept (``None`` before it)."""

    tally: _Tally | None = None


@dataclass(frozen=True, slots=True)
class RunLedger:
    """A run's requests too many to hold on the driver (:attr:`PendingSummary.rows` is
    ``None``): those in ``statuses`` (not yet applied at ``not_applied_at``) at the table
    ``version`` its summary read and checked, read again by delta-rs batch by batch after the
    scan, one pass for what the run needs of them (:func:`requests_with_digests`, which keeps
    what :func:`outcome_rows` needs in ``read``): the driver holds what the pass keeps,
    never every row."""

    state_dir: str
    statuses: frozenset[str]
    version: int
    not_applied_at: str | None = None
    #: what the summary kept of them (:attr:`PendingSummary.tallied`), when it did
    tallied: Tallied | None = field(default=None, compare=False, repr=False)
    #: what the pass of :func:`requests_with_digests` kept for :func:`outcome_rows`
    kept: _Kept = field(default_factory=_Kept, compare=False, repr=False)


def _run_batches(run: RunLedger, columns: Sequence[str]) -> Iterator[pa.RecordBatch]:
    """The batches of ``run``'s requests with ``columns`` (the rows :func:`pending_summary`
    checked at this version: not checked again)."""
    table = open_table(table_path(run.state_dir, ERASURE_REQUESTS_TABLE))
    table.load_as_version(run.version)
    read = sorted({*columns, *(("places",) if run.not_applied_at else ())})
    for batch in record_batches(table, read, ("status", run.statuses),
                                dictionary=KIND_COLUMNS):
        if run.not_applied_at:
            batch = batch.filter(_not_applied(batch.column("places"), run.not_applied_at))
        if batch.num_rows:
            yield batch.select(list(columns))


def _of(column: pa.Array, values: pa.Array) -> pa.Array:
    """Whether each value of a string ``column`` is one of ``values`` (a string array made
    once for every batch of a pass, cast to the column's type)."""
    import pyarrow.compute as pc

    return pc.is_in(column, value_set=values.cast(column.type))


class _DigestSet:
    """A run's candidate digests (32 bytes each), for telling which rows of a pass hold one:
    each batch's hex digests decoded to words at once (:func:`hex_digest_words`), their first
    words looked up among the candidates' sorted first words, and only the rows that share
    one compared whole; where ``pyarrow.compute.is_in`` hashed every 64-character string of
    the million (0.13-0.17 s of the pass after a 1 M-request scan)."""

    def __init__(self, digests: Collection[bytes]) -> None:
        self._whole = frozenset(bytes(d) for d in digests)
        words = [np.frombuffer(d, dtype="<u8", count=1)[0] for d in self._whole]
        self._first = np.unique(np.asarray(words, dtype="<u8"))

    def may_hold(self, first_words: np.ndarray) -> bool:
        """Whether a digest's first word is among ``first_words`` (sorted, duplicates
        allowed), which a digest not among them certainly is not."""
        if not len(first_words) or not len(self._first):
            return False
        at = np.minimum(np.searchsorted(first_words, self._first), len(first_words) - 1)
        return bool(np.any(first_words[at] == self._first))

    def holds(self, column: pa.Array) -> pa.Array:
        """Whether each value of ``column`` (the rows' ``subject_sha256``, checked hex) is one
        of the digests."""
        held = np.zeros(len(column), dtype=bool)
        if not self._whole or not len(column):
            return pa.array(held)
        words = hex_digest_words(column)
        maybe = np.flatnonzero(np.isin(words[:, 0], self._first))
        for i in maybe.tolist():
            held[i] = words[i].tobytes() in self._whole
        return pa.array(held)


#: the first requests by id :func:`requests_with_digests` keeps for :func:`outcome_rows` (a
#: run's report shows as many: ``maintenance.erase.REPORT_REQUESTS``)
FIRST_KEPT = 1000


class _FirstById:
    """The first ``limit`` rows by request id of the batches added, kept as Arrow (the rows
    become Python dicts once, in :meth:`rows`, not a thousand a batch)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._kept: pa.Table | None = None

    def add(self, batch: pa.RecordBatch) -> None:
        import pyarrow.compute as pc

        if self.limit <= 0 or not batch.num_rows:
            return
        by_id = [("request_id", "ascending")]
        # the batch's own first rows, then those among the kept ones: a take of a thousand
        # rows from one batch, not from the two concatenated
        table = pa.Table.from_batches([_decoded(batch.take(pc.select_k_unstable(
            batch, k=min(self.limit, batch.num_rows), sort_keys=by_id)))])
        if self._kept is not None:
            table = pa.concat_tables([self._kept, table.cast(self._kept.schema)])
            table = table.take(pc.select_k_unstable(table, k=min(self.limit, table.num_rows),
                                                    sort_keys=by_id))
        self._kept = table

    def rows(self) -> list[dict[str, Any]]:
        """The rows kept, by request id."""
        if self._kept is None:
            return []
        return sorted(self._kept.to_pylist(), key=lambda r: r["request_id"])


@dataclass(slots=True)
class _Tally:
    """What :func:`outcome_rows` needs, kept by the pass of :func:`requests_with_digests`:
    every kind's count (the requests with a candidate's digest too), those requests' rows,
    the first :data:`FIRST_KEPT` rows by id; ``counts`` ``None`` once past ``max_kinds``."""

    max_kinds: int
    counts: dict[tuple[Any, ...], int] | None = field(default_factory=dict)
    hits: list[dict[str, Any]] = field(default_factory=list)
    first: _FirstById = field(default_factory=lambda: _FirstById(FIRST_KEPT))

    def add(self, batch: pa.RecordBatch, hits: pa.RecordBatch | None = None) -> None:
        """Count ``batch``'s rows and keep the first by id; ``hits``, its rows with a
        candidate's digest (none known yet: :func:`pending_summary`)."""
        if hits is not None:
            self.hits.extend(hits.select(list(ROW_COLUMNS)).to_pylist())
        if self.counts is not None:
            _count_kinds(self.counts, batch)
            if len(self.counts) > self.max_kinds + len(self.hits):
                self.counts = None
        self.first.add(batch.select(list(ROW_COLUMNS)))

    def with_hits(self, hits: list[dict[str, Any]], max_kinds: int) -> _Tally:
        """This tally of every row (:func:`pending_summary`'s), with the rows of the
        candidates' requests found after the scan, its kinds bounded by ``max_kinds`` as
        :meth:`add` bounds them."""
        counts = (self.counts if self.counts is not None
                  and len(self.counts) <= max_kinds + len(hits) else None)
        return _Tally(max_kinds, None if counts is None else dict(counts), hits, self.first)


def _decoded(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with its dictionary columns as plain strings."""
    return pa.RecordBatch.from_arrays(
        [c.dictionary_decode() if pa.types.is_dictionary(c.type) else c for c in batch.columns],
        names=batch.schema.names)


def _count_kinds(counts: dict[tuple[Any, ...], int], batch: pa.RecordBatch) -> None:
    """Add the rows of ``batch`` (its :data:`KIND_COLUMNS` read as dictionaries) to
    ``counts``, by kind: their dictionaries' codes counted, not their strings hashed."""
    inverse, kinds = _kinds_of(batch)
    for kind, n in zip(kinds, np.bincount(inverse, minlength=len(kinds)).tolist(), strict=True):
        counts[kind] = counts.get(kind, 0) + n


@ledger_errors("read the erasure request ledger")
def requests_with_digests(run: RunLedger, digests: Collection[bytes], max_kinds: int
                          ) -> list[dict[str, Any]]:
    """The rows (:data:`RUN_COLUMNS`, the digest as 32 bytes) of ``run``'s requests whose
    subject digest is one of ``digests`` (the scan's candidates: what the match on the
    driver compares them with), in one pass, which also keeps in ``run.kept`` what
    :func:`outcome_rows` needs (no kinds past ``max_kinds``): the run's last pass over the
    ledger before it records its outcomes."""
    kept = [c for c in RUN_COLUMNS if c != "digest"]
    out: list[dict[str, Any]] = []
    wanted = _DigestSet(digests)
    tallied = run.tallied
    if tallied is not None and not wanted.may_hold(tallied.first_words):
        # no candidate shares even the first 8 bytes of a request's digest: nothing to read
        run.kept.tally = tallied.tally.with_hits([], max_kinds)
        return out
    # counted here, unless the summary counted them: then only the candidates' rows are kept
    tally = _Tally(max_kinds) if tallied is None else None
    hits: list[dict[str, Any]] = []

    def found(batch: pa.RecordBatch) -> tuple[pa.RecordBatch, pa.RecordBatch]:
        return batch, batch.filter(wanted.holds(batch.column("subject_sha256")))

    for batch, hit in map_ahead(found, _run_batches(run, [*kept, "subject_sha256"])):
        if tally is not None:
            tally.add(batch, hit)
        else:
            hits.extend(hit.select(list(ROW_COLUMNS)).to_pylist())
        out.extend({**r, "digest": bytes.fromhex(sha)} for r, sha in zip(
            hit.select(kept).to_pylist(), hit.column("subject_sha256").to_pylist(),
            strict=True))
    run.kept.tally = tally if tallied is None else tallied.tally.with_hits(hits, max_kinds)
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
    """The rows of ``run``'s requests in ``individual``, how many of the others are of each
    kind, and the first ``limit`` by id; ``None`` when the kinds are more than ``max_kinds``
    (the run then gives each request its outcome in Spark). From what the pass of
    :func:`requests_with_digests` kept, when the individual requests are among those it
    found (a request is individual because the scan found its subject), else in a pass of
    its own."""
    tally = run.kept.tally
    if (tally is not None and tally.counts is not None and limit <= FIRST_KEPT
            and tally.max_kinds >= max_kinds):
        own = [r for r in tally.hits if r["request_id"] in individual]
        if len({r["request_id"] for r in own}) == len(set(individual)):
            counts = dict(tally.counts)
            for r in own:
                counts[tuple(r[c] for c in KIND_COLUMNS)] -= 1
            counts = {k: n for k, n in counts.items() if n}
            return (OutcomeRows(own, _kinds(counts), tally.first.rows()[:limit])
                    if len(counts) <= max_kinds else None)
    import pyarrow.compute as pc

    ids = pa.array(sorted(individual), pa.string())
    own = []
    counts = {}
    first = _FirstById(limit)
    for batch in _run_batches(run, ROW_COLUMNS):
        mine = _of(batch.column("request_id"), ids)
        own.extend(batch.filter(mine).to_pylist())
        _count_kinds(counts, batch.filter(pc.invert(mine)))
        if len(counts) > max_kinds:
            return None
        first.add(batch)
    return OutcomeRows(own, _kinds(counts), first.rows())


def _kinds(counts: Mapping[tuple[Any, ...], int]) -> list[dict[str, Any]]:
    return [{**dict(zip(KIND_COLUMNS, k, strict=True)), "count": n} for k, n in counts.items()]


def _not_applied(places: pa.Array, key: str) -> pa.Array:
    """Whether each row's ``places`` (JSON; plain, or an Arrow dictionary whose entries are
    then parsed once each) has no apply at the place ``key``: only the JSON that names the
    place is parsed."""
    import pyarrow.compute as pc

    if pa.types.is_dictionary(places.type):
        entries = _not_applied(places.dictionary, key)
        return pc.fill_null(pc.take(entries, places.indices), True)
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
    table = open_table(table_path(state_dir, ERASURE_REQUESTS_TABLE))
    for batch in record_batches(table, ["status"], (column, wanted)):
        for status in batch.column(0).to_pylist():
            out[status] = out.get(status, 0) + 1
    return out


# ---------------------------------------------------------------------------------------------
# Queries behind `erase status` and `erase report`


#: ``erase status`` and ``erase list`` show at most this many requests of a kind (the earliest
#: requested first) and count them all: a million requests must not become a million lines
SHOWN_REQUESTS = 1000


class _Earliest:
    """The first ``limit`` rows by (requested_at_ms, request_id) of a stream of batches, as
    the items ``item`` makes of them, and how many rows there were: memory bounded by twice
    ``limit``, whatever the stream's length. Only a batch's own first ``limit`` rows (Arrow's
    ``select_k_unstable``) become Python values: the first of all are among them."""

    def __init__(self, item: Callable[[dict[str, Any]], dict[str, Any]], limit: int) -> None:
        self.item, self.limit, self.count = item, limit, 0
        self._kept: list[tuple[int, str, dict[str, Any]]] = []

    def add(self, rows: pa.RecordBatch) -> None:
        import pyarrow.compute as pc

        self.count += rows.num_rows
        if not rows.num_rows or self.limit <= 0:
            return
        first = rows.take(pc.select_k_unstable(rows, k=min(self.limit, rows.num_rows),
                                               sort_keys=_BY_REQUEST_TIME))
        self._kept.extend((r["requested_at_ms"], r["request_id"], self.item(r))
                          for r in first.to_pylist())
        if len(self._kept) >= 2 * self.limit:
            self._trim()

    def _trim(self) -> None:
        self._kept.sort(key=lambda e: (e[0], e[1]))
        del self._kept[self.limit:]

    def items(self) -> list[dict[str, Any]]:
        self._trim()
        return [e[2] for e in self._kept]


#: the order :class:`_Earliest` keeps rows in
_BY_REQUEST_TIME = [("requested_at_ms", "ascending"), ("request_id", "ascending")]


def _request_batches(state_dir: str, columns: Iterable[str], where: Where | None = None, *,
                     version: int | None = None,
                     hasher_for: Callable[[int], HexSha256 | None] | None = None
                     ) -> Iterator[pa.RecordBatch]:
    """The request rows (``columns`` and what their check reads; those ``where`` names)
    batch by batch, each checked (:func:`check_batch`, on a thread a core:
    :func:`compactor.threads.map_ahead`; its integrity digests by what ``hasher_for`` gives
    for a check of the table's rows, else ``hashlib``); at ``version`` when given."""
    require_ledger(state_dir)
    table = open_table(table_path(state_dir, ERASURE_REQUESTS_TABLE))
    if version is not None:
        table.load_as_version(version)
    hasher = (hasher_for(_rows(table)) if hasher_for else None) or hex_sha256

    def checked(batch: pa.RecordBatch) -> pa.RecordBatch:
        check_batch(state_dir, batch, hasher)
        return batch

    yield from map_ahead(checked, record_batches(table, sorted({*columns, *CHECKED_COLUMNS}),
                                                 where))


@ledger_errors("read the erasure request ledger")
def status(state_dir: str, now_ms: int, *,
           hasher_for: Callable[[int], HexSha256 | None] | None = None) -> dict[str, Any]:
    """Counts by status, the overdue requests (deadline passed, not verified or cancelled),
    the failed ones and where the partially verified ones still have to be scanned: each
    list the first :data:`SHOWN_REQUESTS` by request time, with its count (``*_count``).
    The ledger is read batch by batch and column-wise, each batch checked as it is read
    (``hasher_for``: :func:`_request_batches`): at a million requests the driver holds the
    counts and those lists, never the rows, and a batch's rows become Python values only
    among its own first of a list (:class:`_Earliest`).

    Raises:
        ConfigError: there is no ledger at ``state_dir``.
    """
    import pyarrow.compute as pc

    counts = {s: 0 for s in STATUSES}

    def failure_of(r: dict[str, Any]) -> dict[str, Any]:
        failure = json.loads(r["failure"]) if r.get("failure") else None
        return {"request_id": r["request_id"], "topic": r["topic"], "failure": failure,
                "reason": failure_words(failure)}

    overdue = _Earliest(lambda r: {
        "request_id": r["request_id"], "topic": r["topic"], "status": r["status"],
        "deadline_ms": r["deadline_ms"], "overdue_ms": now_ms - r["deadline_ms"]},
        SHOWN_REQUESTS)
    failed = _Earliest(failure_of, SHOWN_REQUESTS)
    # where it still has to be scanned: the replicas the metadata names that no clean
    # verify covered yet
    partial = _Earliest(lambda r: {
        "request_id": r["request_id"], "topic": r["topic"],
        "places_verified": sorted(k for k, p in json.loads(r.get("places") or "{}").items()
                                  if p.get("verify_status") == "clean"),
        "missing_replicas": json.loads(r.get("missing_replicas") or "null")}, SHOWN_REQUESTS)
    done = pa.array(sorted(DONE), pa.large_string())
    version = table_version(state_dir, ERASURE_REQUESTS_TABLE)
    # the places (JSON, the widest column once requests are applied) only of the partially
    # verified requests, read in a second pass filtered to them: most ledgers have none
    for batch in _request_batches(state_dir, ("failure",), version=version,
                                  hasher_for=hasher_for):
        for entry in pc.value_counts(batch.column("status")).to_pylist():
            counts[entry["values"]] = counts.get(entry["values"], 0) + entry["counts"]
        status = pc.cast(batch.column("status"), pa.large_string())
        overdue.add(batch.filter(pc.and_(pc.invert(pc.is_in(status, done)),
                                         pc.less(batch.column("deadline_ms"), now_ms))))
        failed.add(batch.filter(pc.equal(status, RequestStatus.FAILED.value)))
    if counts.get(RequestStatus.PARTIALLY_VERIFIED.value):
        for batch in _request_batches(
                state_dir, ("places", "missing_replicas"),
                ("status", [RequestStatus.PARTIALLY_VERIFIED.value]), version=version,
                hasher_for=hasher_for):
            partial.add(batch)
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
