"""The compaction round as a chain of DataFrame transforms (Kafka's ``Cleaner.doClean``,
distributed).

    segment tasks --scan_headers--> batch headers --plan_rounds--> one plan per partition
        (and, asked to, the batch decisions of the rounds the offset map writes: the same
        rows as batch headers --decide_batches--> batch decisions)
    batch decisions --scan_keys--> keyed record rows
    keyed rows --superseded_records--> offsets superseded by a later record of their key
    (batch decisions, superseded) --rewrite_groups--> commit messages (one per output segment)
    batch headers --rewrite_whole_partitions--> commit messages (partitions of one group)
    bins of small partitions --clean_in_one_pass--> plans and commit messages (one task a bin;
        a round whose key table passes the budget: its batch decisions, for scan_keys)

The sequential, per-partition rules (producer state, transactions, batch retention) run per
partition inside ``applyInArrow``; the offset map is a shuffle on ``(partition, key digest)``
into buckets, each grouped by key, so its size is bounded by the cluster, not by a buffer. Only
keyed records of data batches travel through it (digest and offset, never a value), and only
for partitions cleaned in several groups; null keys, markers, aborted data and expired
tombstones are decided by the writer from the batch decisions. A partition cleaned in one group
needs neither the offset map nor decision rows: ``rewrite_whole_partitions`` decides its
batches and writes it in one task, and one whose segments all fit one group is cleaned in one
pass (``clean_in_one_pass``: one task scans, plans and writes it, so a round of small
partitions is one Spark job). Every Python stage exchanges Arrow tables; no pandas DataFrame is
built on either side. The grouped stages key on a group slot (``with_slots``) so that every
group is a task of its own.
Transforms never collect, count or cache: the job (``jobs/compact.py``) decides actions.
"""

from __future__ import annotations

import contextlib
import gc
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import Broadcast
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema

from compactor.cleaner.planning import ONE_TASK_KEYS, TASK_KEYS_ZERO
from compactor.cleaner.policy import (
    BatchDecision,
    BatchHeader,
    BatchRetention,
    CleaningPlan,
    PartitionInput,
)
from compactor.cleaner.rewrite import PURE, Engine, SubjectDigests
from compactor.cleaner.scan import (
    BatchFlags,
    KeyedRows,
    batch_flags,
    combine_group,
    concat_rows,
    key_offsets,
    keyed_records,
    segment_headers,
    subject_digests,
    superseded_mask,
)
from compactor.cleaner.verify import index_problems, offset_problems, txn_problems
from compactor.codec.indexes import AbortedTxn
from compactor.config import TopicConfig
from compactor.erasure.outcomes import KIND_COLUMNS, kind_outcome, of_rows
from compactor.erasure.rules import HEADER, KEY, partition_check_batches
from compactor.erasure.sketch import DigestFilter
from compactor.errors import CompactorError, RemoteTierError
from compactor.log import storage
from compactor.log.layout import index_files
from compactor.model import CommitMessage, SegmentInfo
from compactor.native import engine as record_engine
from compactor.remote import tier
from compactor.schemas.spark import (
    BATCH_HEADER,
    COMMIT_MESSAGE,
    DECISION,
    ERASURE_SCAN,
    KEY_BUCKET,
    KEY_OFFSET,
    ONE_PASS,
    OUTCOME_KIND,
    PLAN,
    PLANNED,
    REQUEST_OUTCOME,
    SUPERSEDED,
)
from compactor.spark import rows
from compactor.spark.writer import write_erased_segment, write_group, write_groups

Transform = Callable[[DataFrame], DataFrame]

HEADER_FIELDS = [f.name for f in BATCH_HEADER.fields if f.name not in ("tp_id", "error")]
_HEADER_ARROW = to_arrow_schema(BATCH_HEADER)
_ERASURE_ARROW = to_arrow_schema(ERASURE_SCAN)
_KEY_OFFSET_ARROW = to_arrow_schema(KEY_OFFSET)
_OUTCOME_ARROW = to_arrow_schema(REQUEST_OUTCOME)
_KIND_ARROW = to_arrow_schema(OUTCOME_KIND)
_COMMIT_ARROW = to_arrow_schema(COMMIT_MESSAGE)
_KEY_BUCKET_ARROW = to_arrow_schema(KEY_BUCKET)
_DECISION_ARROW = to_arrow_schema(DECISION)
_PLANNED_ARROW = to_arrow_schema(PLANNED)
_ONE_PASS_ARROW = to_arrow_schema(ONE_PASS)
_SUPERSEDED_ARROW = to_arrow_schema(SUPERSEDED)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused for one unit of an executor's work (a
    segment, a group, a partition). That work makes objects by the ten thousand (batch
    headers, decisions, fates, output batches) and no reference cycles, so reference counting
    frees them all, while the collector's passes over them and over every loaded module's
    objects cost a task alone about 15%: one lz4 partition of ``bench/kafka_cleaner.py``'s
    1 M-key log in a Spark Python worker, header scan 0.21 s with the collector and 0.14 s
    without, writer 1.27 / 1.10 s. (With two tasks at once the benchmark's round gained 0-8%,
    within its noise: ``docs/benchmarks.md``.) Cycles made meanwhile are collected after it.
    Nested pauses leave the outer one in charge."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


# ---------------------------------------------------------------------------------------------
# Scan of batch headers


def check_segment(path: str, base: int, next_base: int | None,
                  headers: Sequence[BatchHeader]) -> None:
    """The checks of ``inspect --verify`` on a segment's offsets and indexes
    (:mod:`compactor.cleaner.verify`), on the executor that read it: a partition that fails them is
    never rewritten.

    Raises:
        CompactorError: the first problem found.
    """
    problems = offset_problems(path, base, next_base, headers)
    problems += index_problems(path, base, headers, is_active=next_base is None,
                               **index_files(path))
    if problems:
        raise problems[0]


def checked_headers(path: str, base: int, next_base: int | None, *,
                    engine: Engine = PURE) -> list[BatchHeader]:
    """A segment's batch headers, CRCs verified, after the checks of :func:`check_segment`
    (read in bulk by ``engine`` where it can).

    Raises:
        CompactorError: the first problem found.
    """
    with storage.mapped(path) as data:
        headers = engine.segment_headers(data, path, base)
        if headers is None:
            headers = segment_headers(data, path, base)
    check_segment(path, base, next_base, headers)
    return headers


def _header_batch(tp_id: int, segment_base: int, path: str, next_base: int | None,
                  writer: str) -> pa.RecordBatch:
    try:
        with _collector_paused():
            headers = checked_headers(path, segment_base, next_base,
                                      engine=record_engine(writer))
    except CompactorError as err:
        row: dict[str, list[Any]] = {name: [None] for name in _HEADER_ARROW.names}
        row.update(tp_id=[tp_id], segment_base=[segment_base], error=[json.dumps(err.to_dict())])
        return pa.RecordBatch.from_pydict(row, schema=_HEADER_ARROW)
    n = len(headers)
    cols: dict[str, list[Any]] = {"tp_id": [tp_id] * n, "error": [None] * n}
    for name in HEADER_FIELDS:
        cols[name] = [getattr(h, name) for h in headers]
    return pa.RecordBatch.from_pydict(cols, schema=_HEADER_ARROW)


def scan_headers(writer: str) -> Transform:
    """Segment tasks (``SEGMENT_TASK``) -> one ``BATCH_HEADER`` row per batch, CRCs checked;
    a segment that cannot be read gives one row with ``error`` set instead.

    Args:
        writer: the engine that frames the segments (:func:`compactor.native.engine`; the
            same headers either way, the native one in bulk).
    """

    def scan(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for tasks in batches:
            for tp_id, base, path, next_base in zip(
                    *(tasks.column(i).to_pylist() for i in range(4)), strict=True):
                yield _header_batch(tp_id, base, path, next_base, writer)

    return lambda tasks: tasks.mapInArrow(storage.portable(scan), BATCH_HEADER)


def headers_from_arrow(table: pa.Table) -> list[BatchHeader]:
    """The batch headers of a partition's rows, in file order (columns to Python values in
    one call each, not a conversion per field and row)."""
    table = table.sort_by([("segment_base", "ascending"), ("position", "ascending")])
    columns = [table.column(name).to_pylist() for name in HEADER_FIELDS]
    make = BatchHeader._make  # its fields in BATCH_HEADER's order (tests/unit/test_rows.py)
    with _collector_paused():
        return [make(values) for values in zip(*columns)]


def _table(rows: Sequence[tuple[Any, ...]], schema: pa.Schema) -> pa.Table:
    """Rows given as tuples in the schema's column order, as an Arrow table."""
    columns = list(zip(*rows)) if rows else [()] * len(schema)
    return pa.Table.from_arrays([pa.array(c, type=f.type) for c, f in zip(columns, schema)],
                                schema=schema)


# ---------------------------------------------------------------------------------------------
# Planning and batch decisions (per partition, sequential)


def plan_to_row(tp_id: int, plan: CleaningPlan) -> dict[str, Any]:
    """A plan as a ``PLAN`` row (without error)."""
    return rows.to_row(plan, PLAN, tp_id=tp_id, error=None)


def plan_from_row(row: Mapping[str, Any]) -> CleaningPlan:
    return rows.from_row(CleaningPlan, row)


def plan_rounds(inputs: Mapping[int, PartitionInput], *, decide: bool = False) -> Transform:
    """Batch headers (without error rows) -> ``PLANNED`` rows: one per partition with its
    plan and, with ``decide``, the ``DECISION`` rows of every partition whose round the
    distributed offset map writes (several groups, no partition-wide check failed): decided
    from the same headers in the same task, where a stage of :func:`decide_batches` would
    read and rebuild them again."""

    def plan(table: pa.Table) -> pa.Table:
        with _collector_paused():
            tp_id = table.column("tp_id")[0].as_py()
            inp = inputs[tp_id]
            headers = headers_from_arrow(table)
            result = inp.plan(headers)
            problems = txn_problems(inp.path, headers, inp.aborted_txns)
            row = plan_to_row(tp_id, result)
            row["error"] = json.dumps(problems[0].to_dict()) if problems else None
            decided = (decide and not problems and result.will_clean
                       and len(result.groups) > 1)
            rows = (_decision_rows(tp_id, result, inp.decide(result, headers)) if decided
                    else [])
            # the plan's row first: tp_id and its plan, no decision; then the decisions
            first = tuple(tp_id if name == "tp_id" else None for name in _DECISION_ARROW.names)
            return _table([(*first, row), *((*r, None) for r in rows)], _PLANNED_ARROW)

    return lambda headers: headers.groupBy("tp_id").applyInArrow(plan, PLANNED)


def _write_one_group(tp_id: int, inp: PartitionInput, plan: CleaningPlan,
                     headers: Sequence[BatchHeader], *, writer: str) -> dict[str, Any]:
    """Decide the batches of a round of one group and write the group: its ``COMMIT_MESSAGE``
    row (every key's latest record is in the group itself, so no record is superseded from
    outside it, see :func:`compactor.spark.stages.write_cleaned_segments`)."""
    (group,) = plan.groups
    decided = inp.decide(plan, headers)
    m = write_group(inp, group, {(h.segment_base, h.position): d for h, d in decided}, set(),
                    first_dirty=plan.first_dirty_offset, engine=record_engine(writer))
    return message_to_row(tp_id, m)


def _write_groups(tp_id: int, inp: PartitionInput, plan: CleaningPlan,
                  headers: Sequence[BatchHeader], *, writer: str, task_keys: int
                  ) -> dict[str, Any]:
    """Decide the batches of a round of several groups and write them all with one key table
    (:func:`compactor.spark.writer.write_groups`): the ``ONE_PASS`` columns of the result,
    ``messages`` (their ``COMMIT_MESSAGE`` rows), or, when the table passed ``task_keys``
    keys or was projected to (nothing is written; with 0 nothing is tried), none, the
    ``handed_on`` reason and the batches' ``decisions`` for the distributed offset map (its
    writers work from them, so the driver neither scans nor decides the partition again)."""
    decided = inp.decide(plan, headers)
    messages = write_groups(inp, plan.groups,
                            {(h.segment_base, h.position): d for h, d in decided},
                            first_dirty=plan.first_dirty_offset, engine=record_engine(writer),
                            max_keys=task_keys) if task_keys > 0 else TASK_KEYS_ZERO
    if isinstance(messages, str):
        rows = _table(_decision_rows(tp_id, plan, decided),
                      _DECISION_ARROW).to_struct_array().combine_chunks()
        return {"messages": [], "handed_on": messages, "decisions": pa.ListArray.from_arrays(
            pa.array([0, len(rows)], pa.int32()), rows,
            type=_ONE_PASS_ARROW.field("decisions").type)}
    return {"messages": [message_to_row(tp_id, m) for m in messages]}


def decide_batches(inputs: Mapping[int, PartitionInput],
                   plans: Mapping[int, CleaningPlan]) -> Transform:
    """Batch headers -> one ``DECISION`` row per batch of the round of every planned partition
    (partitions missing from ``plans`` are left out)."""

    def decide(table: pa.Table) -> pa.Table:
        with _collector_paused():
            tp_id = table.column("tp_id")[0].as_py()
            plan = plans[tp_id]
            decided = inputs[tp_id].decide(plan, headers_from_arrow(table))
            return _table(_decision_rows(tp_id, plan, decided), _DECISION_ARROW)

    planned = list(plans)
    return lambda headers: (headers.where(F.col("tp_id").isin(planned))
                            .groupBy("tp_id").applyInArrow(decide, DECISION))


def _decision_rows(tp_id: int, plan: CleaningPlan,
                   decided: Sequence[tuple[BatchHeader, BatchDecision]]
                   ) -> list[tuple[Any, ...]]:
    """The ``DECISION`` rows (tuples in its column order) of a planned partition's decided
    batches (``PartitionInput.decide``)."""
    group_of = {base: group[0] for group in plan.groups for base in group}
    return [(tp_id, group_of[h.segment_base], h.segment_base, h.position, h.base_offset,
             h.is_control, int(d.retention), d.aborted, d.discard_records,
             d.retain_deletes, d.marker_horizon,
             *((t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset)
               if (t := d.txn_entry) else (None, None, None, None)))
            for h, d in decided]


def _decisions_from_arrow(table: pa.Table) -> dict[tuple[int, int], BatchDecision]:
    """``DECISION`` rows as the writer's decisions by (segment base, batch position)."""
    names = ("segment_base", "position", "retention", "aborted", "discard_records",
             "retain_deletes", "marker_horizon", "txn_producer_id", "txn_first_offset",
             "txn_last_offset", "txn_last_stable_offset")
    out = {}
    # most batches share their decision: each distinct one is made once (a group has
    # hundreds of thousands of batches, and few kinds of decisions without a txn entry)
    shared: dict[tuple[Any, ...], BatchDecision] = {}
    for (base, position, retention, aborted, discard, retain_deletes, marker_horizon,
         producer_id, first, last, lso) in zip(*(table.column(n).to_pylist() for n in names)):
        kind = (retention, aborted, discard, retain_deletes, marker_horizon, producer_id,
                first, last, lso)
        decision = shared.get(kind)
        if decision is None:
            txn = (None if producer_id is None else
                   AbortedTxn(producer_id=producer_id, first_offset=first, last_offset=last,
                              last_stable_offset=lso))
            decision = shared[kind] = BatchDecision(
                retention=BatchRetention(retention), aborted=aborted, discard_records=discard,
                retain_deletes=retain_deletes, marker_horizon=marker_horizon, txn_entry=txn)
        out[(base, position)] = decision
    return out


# ---------------------------------------------------------------------------------------------
# Record rows, offset map, record verdicts


def scan_keys(inputs: Mapping[int, PartitionInput], plans: Mapping[int, CleaningPlan],
              slots: DataFrame, buckets: Sequence[int], *, writer: str = "native") -> Transform:
    """Batch decisions -> ``KEY_BUCKET`` rows: the keyed records of the round's data batches
    that are not discarded and not already superseded within their own group (one task per
    group, :func:`compactor.cleaner.scan.combine_group`), one row per bucket of the
    offset map they fall in (:func:`key_buckets`); a group whose records cannot be decoded
    gives one row with ``error`` set.

    Args:
        slots: ``GROUP_SLOT`` rows; groups without one are left out.
        buckets: the offset map's bucket values (:func:`superseded_records`), one a bucket.
        writer: the engine that reads the records (:func:`compactor.native.engine`).
    """
    bucket_values = np.asarray(buckets, dtype=np.int64)

    def scan(table: pa.Table) -> pa.Table:
        with _collector_paused():
            columns = {name: table.column(name).to_pylist() for name in
                       ("tp_id", "group_base", "segment_base", "position", "is_control", "aborted",
                        "discard_records")}
            tp_id, group_base = columns["tp_id"][0], columns["group_base"][0]
            inp = inputs[tp_id]
            paths = {s.base_offset: s.log_path for s in inp.segments}
            flags: dict[int, dict[int, BatchFlags]] = {}
            for base, position, is_control, aborted, discard in zip(
                    columns["segment_base"], columns["position"], columns["is_control"],
                    columns["aborted"], columns["discard_records"], strict=True):
                f = batch_flags(group_base, is_control=is_control, aborted=aborted,
                                discard_records=discard)
                if f is not None:
                    flags.setdefault(base, {})[position] = f
            try:
                parts = []
                for base in sorted(flags):
                    with storage.mapped(paths[base]) as data:
                        parts.append(keyed_records(data, paths[base], flags[base],
                                                   plans[tp_id].first_dirty_offset,
                                                   engine=record_engine(writer),
                                                   window=storage.window))
                rows = concat_rows(parts)
                local, order, counts = combine_group(rows, len(bucket_values),
                                                     record_engine(writer))
            except CompactorError as err:
                return pa.Table.from_pylist([{
                    "tp_id": tp_id, "group_base": group_base, "bucket": int(bucket_values[0]),
                    "offsets": b"", "key_hi": b"", "key_lo": b"", "in_map": b"", "within": b"",
                    "error": json.dumps(err.to_dict()),
                }], schema=_KEY_BUCKET_ARROW)
            return key_buckets(tp_id, group_base, rows, order, counts, bucket_values,
                               within=rows.offset[local])

    keyed = ~F.col("is_control") & ~F.col("discard_records")
    return lambda decisions: (decisions.where(keyed).transform(with_slots(slots))
                              .groupBy("slot").applyInArrow(storage.portable(scan), KEY_BUCKET))


def key_buckets(tp_id: int, group_base: int, rows: KeyedRows, order: np.ndarray,
                counts: np.ndarray, bucket_values: np.ndarray, *, within: np.ndarray
                ) -> pa.Table:
    """``KEY_BUCKET`` rows of one group's keyed rows: ``order``, the rows that travel grouped
    by bucket, and ``counts``, each bucket's number of them
    (:func:`compactor.cleaner.scan.combine_group`: a key's bucket is its digest's low half
    modulo the number of buckets, the same bucket in every group and partition, so a bucket
    holds every record of its keys); a bucket without records has no row. The offsets
    ``within`` (the group's records superseded within it) are cut into as many runs as there
    are rows, one a row. (Every such record has a later record of its key among the rows
    that travel, so there is a row whenever there are offsets.)"""
    ends = np.cumsum(counts)
    columns = {"offsets": rows.offset[order], "key_hi": rows.key_hi[order],
               "key_lo": rows.key_lo[order], "in_map": rows.in_map[order]}
    out: dict[str, list[Any]] = {name: [] for name in _KEY_BUCKET_ARROW.names}
    filled = np.flatnonzero(counts)
    if not len(filled) and len(within):  # cannot happen (see above); never lose them
        filled = np.zeros(1, np.int64)
    runs = np.array_split(within, max(1, len(filled)))
    for b, run in zip(filled, runs):
        start, end = int(ends[b] - counts[b]), int(ends[b])
        out["tp_id"].append(tp_id)
        out["group_base"].append(group_base)
        out["bucket"].append(int(bucket_values[b]))
        for name, column in columns.items():
            out[name].append(column[start:end].astype(column.dtype.newbyteorder("<")).tobytes())
        out["within"].append(pack_offsets(run))
        out["error"].append(None)
    return pa.Table.from_pydict(out, schema=_KEY_BUCKET_ARROW)


def superseded_records(buckets: int) -> Transform:
    """``KEY_BUCKET`` rows -> ``SUPERSEDED`` rows: the records with a later record of their
    key in the dirty section of another group (``Cleaner.shouldRetainRecord``), one row per
    group and bucket, with the offsets superseded within the group that the row carried.
    This is the distributed offset map: the rows are shuffled on their bucket, so each task
    holds every record of its keys, and the task groups them by (partition, key digest) in
    numpy (:func:`compactor.cleaner.scan.superseded_mask`, the rule of the group scans'
    map-side combine): no buffer bounds the number of keys. Error rows are left out: the
    writer meets the same defect and reports it.

    (Records travelled as rows of their own before, through a window over (partition, key
    digest): the JVM's conversions of 3.65 M rows in and out of Python and its sort were most
    of the round; see docs/benchmarks.md.)

    Args:
        buckets: how many buckets the rows' ``bucket`` values hash to one each
            (:func:`compactor.spark.stages.offset_map_buckets`); a task holds its bucket's
            records in memory: 25 bytes a record, about 100 at its peak (the columns joined,
            the sort's order and the columns gathered in it).
    """

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        with _collector_paused():
            table = pa.Table.from_batches(list(batches), schema=_KEY_BUCKET_ARROW)
            if table.num_rows == 0:
                return
            counts = np.asarray(pc.binary_length(table.column("offsets")), dtype=np.int64) // 8
            tp_ids = table.column("tp_id").to_numpy()
            offsets = _unpacked(table.column("offsets"), "<i8")
            mask = superseded_mask(np.repeat(tp_ids, counts),
                                   _unpacked(table.column("key_hi"), "<i8"),
                                   _unpacked(table.column("key_lo"), "<i8"), offsets,
                                   _unpacked(table.column("in_map"), "?"))
            ends = np.cumsum(counts)
            out: dict[str, list[Any]] = {name: [] for name in _SUPERSEDED_ARROW.names}
            out["within"] = table.column("within").to_pylist()
            for i, group_base in enumerate(table.column("group_base").to_pylist()):
                start, end = int(ends[i] - counts[i]), int(ends[i])
                out["tp_id"].append(int(tp_ids[i]))
                out["group_base"].append(group_base)
                out["offsets"].append(pack_offsets(offsets[start:end][mask[start:end]]))
            yield pa.RecordBatch.from_pydict(out, schema=_SUPERSEDED_ARROW)

    return lambda keyed: (keyed.where(F.col("error").isNull())
                          .repartition(buckets, "bucket")
                          .mapInArrow(storage.portable(run), SUPERSEDED))


def superseded_offsets(table: pa.Table) -> np.ndarray:
    """The offsets of ``SUPERSEDED`` rows (a group's, from every bucket of the map), each
    row's ascending."""
    return _offsets_of(table.column("offsets"))


def within_offsets(table: pa.Table) -> np.ndarray:
    """The offsets ``SUPERSEDED`` rows carry of a group's records superseded within it."""
    return _offsets_of(table.column("within"))


def _offsets_of(column: pa.ChunkedArray) -> np.ndarray:
    values = column.to_pylist()
    return np.concatenate([unpack_offsets(v) for v in values]) if values else _NO_OFFSETS


_NO_OFFSETS = np.zeros(0, np.int64)
_AS_LIST, _AS_BITMAP = b"\x00", b"\x01"


def pack_offsets(offsets: np.ndarray) -> bytes:
    """Distinct offsets as one binary value (``within`` of ``KEY_BUCKET``, both offset
    columns of ``SUPERSEDED``), its first byte saying which of two forms: 0, then the offsets
    (little-endian int64, in the order given: ascending where this module makes them); or 1,
    then the least offset and the span (little-endian int64 each) and a bit per offset of the
    span from the least (``np.packbits``, little bit order). Nothing: ``b""``.

    A group's records superseded within it are dense (six in ten records of a 1 M-key log):
    a bit each instead of 64 bits. The bitmap is taken only when it is at most a third of the
    list: unpacking one costs about 1 ms per 600 K bits, which the bytes it saves the two
    shuffles repay only then (offsets superseded across groups, spread over the map's
    buckets, are about 2% of their span on that log: a bitmap of them made the round slower).
    """
    if len(offsets) == 0:
        return b""
    first = int(offsets.min())
    span = int(offsets.max()) - first + 1
    if 3 * ((span + 7) // 8 + 16) > 8 * len(offsets):
        return _AS_LIST + offsets.astype("<i8").tobytes()
    bits = np.zeros(span, bool)
    bits[offsets - first] = True
    return (_AS_BITMAP + np.array([first, span], "<i8").tobytes()
            + np.packbits(bits, bitorder="little").tobytes())


def unpack_offsets(value: bytes) -> np.ndarray:
    """The offsets of a value :func:`pack_offsets` made (ascending when they were).

    Raises:
        ValueError: the value is not one it makes.
    """
    if not value:
        return _NO_OFFSETS
    kind, body = value[:1], memoryview(value)[1:]
    if kind == _AS_LIST and len(body) % 8 == 0:
        return np.frombuffer(body, "<i8").astype(np.int64)
    if kind == _AS_BITMAP and len(body) >= 16:
        first, span = np.frombuffer(body[:16], "<i8").tolist()
        if 0 < span and len(body) - 16 == (span + 7) // 8:
            bits = np.unpackbits(np.frombuffer(body[16:], np.uint8), count=span,
                                 bitorder="little")
            return np.flatnonzero(bits).astype(np.int64) + first
    raise ValueError(f"not a packed offsets value (kind {kind!r}, {len(body)} bytes)")


def _unpacked(column: pa.ChunkedArray, dtype: str) -> np.ndarray:
    """One numpy column of a binary column's packed values (``KEY_BUCKET``, ``SUPERSEDED``),
    its rows' values in order."""
    return np.frombuffer(b"".join(column.to_pylist()), dtype=dtype)


def with_slots(slots: DataFrame) -> Transform:
    """Add each row's group slot (``GROUP_SLOT``), the key of the grouped stages. (The slot
    is aliased afresh on each use, so two sides of a cogroup can both carry it.)"""
    return lambda df: df.join(
        F.broadcast(slots.select("tp_id", "group_base", F.col("slot").alias("slot"))),
        ["tp_id", "group_base"])


# ---------------------------------------------------------------------------------------------
# Rewrite (executors write .cleaned segments, return commit messages)


def rewrite_groups(inputs: Mapping[int, PartitionInput], plans: Mapping[int, CleaningPlan],
                   slots: DataFrame, *,
                   writer: str = "native") -> Callable[[DataFrame, DataFrame], DataFrame]:
    """(batch decisions, superseded records) -> one ``COMMIT_MESSAGE`` row per group,
    written by the executor that holds the group's rows (one task per ``GROUP_SLOT``)."""

    def rewrite(decisions: pa.Table, superseded: pa.Table) -> pa.Table:
        with _collector_paused():
            if decisions.num_rows == 0:
                return _COMMIT_ARROW.empty_table()
            tp_id = decisions.column("tp_id")[0].as_py()
            group_base = decisions.column("group_base")[0].as_py()
            plan = plans[tp_id]
            group = next(g for g in plan.groups if g[0] == group_base)
            m = write_group(inputs[tp_id], group, _decisions_from_arrow(decisions),
                            superseded_offsets(superseded),
                            first_dirty=plan.first_dirty_offset, engine=record_engine(writer),
                            within=within_offsets(superseded))
            return pa.Table.from_pylist([message_to_row(tp_id, m)], schema=_COMMIT_ARROW)

    slotted = with_slots(slots)
    return lambda decisions, superseded: (
        decisions.transform(slotted).groupBy("slot")
        .cogroup(superseded.transform(slotted).groupBy("slot"))
        .applyInArrow(storage.portable(rewrite), COMMIT_MESSAGE))


def rewrite_whole_partitions(inputs: Mapping[int, PartitionInput],
                             plans: Mapping[int, CleaningPlan], slots: DataFrame, *,
                             writer: str = "native") -> Transform:
    """Batch headers -> one ``COMMIT_MESSAGE`` row per partition of ``plans``, each a round of
    one group: the task that holds the partition's headers decides its batches and writes the
    group (:func:`_write_one_group`).

    Args:
        plans: plans of one group each.
        slots: ``GROUP_SLOT`` rows of those groups.
    """

    def rewrite(table: pa.Table) -> pa.Table:
        with _collector_paused():
            tp_id = table.column("tp_id")[0].as_py()
            row = _write_one_group(tp_id, inputs[tp_id], plans[tp_id], headers_from_arrow(table),
                                   writer=writer)
            return pa.Table.from_pylist([row], schema=_COMMIT_ARROW)

    whole = list(plans)
    return lambda headers: (
        headers.where(F.col("tp_id").isin(whole))
        .join(F.broadcast(slots.select("tp_id", "slot")), "tp_id").groupBy("slot")
        .applyInArrow(storage.portable(rewrite), COMMIT_MESSAGE))


def clean_in_one_pass(inputs: Mapping[int, PartitionInput], bins: Sequence[Sequence[int]], *,
                      write: bool, writer: str = "native",
                      task_keys: int = ONE_TASK_KEYS) -> Transform:
    """Bin numbers (``spark.range`` rows, ``id``) -> one ``ONE_PASS`` row per partition of the
    bin: the task scans the partition's batch headers segment by segment (the checks of
    :func:`check_segment`), plans its round and, when ``write``, decides its batches and
    writes its groups: one group alone, several with one key table carried from the newest
    to the oldest (:func:`compactor.spark.writer.write_groups`) unless that table comes to
    hold more than ``task_keys`` keys. A partition whose table does is planned and decided,
    nothing written: its row carries the batch decisions, and the distributed offset map
    writes it from them (:func:`compactor.spark.stages.clean_in_one_pass`). One
    that a check refuses gives its first error, and one without batches neither plan nor
    error.

    The whole round of a small partition is then one Python task in one Spark job: no header
    rows, plans or decisions travel and nothing is shuffled, which is most of a small round's
    time (:func:`compactor.spark.stages.clean_in_one_pass`).

    Args:
        bins: the partitions (tp ids) of each bin, the unit of a task.
    """

    def one(tp_id: int) -> dict[str, Any]:
        with _collector_paused():
            inp = inputs[tp_id]
            headers: list[BatchHeader] = []
            try:
                for s, nxt in zip(inp.segments, [*inp.segments[1:], None], strict=True):
                    headers += checked_headers(s.log_path, s.base_offset,
                                               None if nxt is None else nxt.base_offset,
                                               engine=record_engine(writer))
                problems = txn_problems(inp.path, headers, inp.aborted_txns)
                if problems:
                    raise problems[0]
            except CompactorError as err:
                return {"tp_id": tp_id, "error": json.dumps(err.to_dict())}
            if not headers:
                return {"tp_id": tp_id}
            plan = inp.plan(headers)
            out: dict[str, Any] = {"tp_id": tp_id, "plan": plan_to_row(tp_id, plan),
                                   "messages": []}
            if write and plan.will_clean:
                if len(plan.groups) == 1:
                    out["messages"] = [_write_one_group(tp_id, inp, plan, headers,
                                                        writer=writer)]
                else:
                    out.update(_write_groups(tp_id, inp, plan, headers, writer=writer,
                                             task_keys=task_keys))
            return out

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for ids in batches:
            for b in ids.column(0).to_pylist():
                for tp_id in bins[b]:
                    row = one(tp_id)
                    decisions = row.pop("decisions", None)
                    batch = pa.RecordBatch.from_pylist([row], schema=_ONE_PASS_ARROW)
                    if decisions is not None:  # built as Arrow columns, not Python rows
                        i = _ONE_PASS_ARROW.get_field_index("decisions")
                        batch = batch.set_column(i, _ONE_PASS_ARROW.field(i), decisions)
                    yield batch

    return lambda ids: ids.mapInArrow(storage.portable(run), ONE_PASS)


def message_to_row(tp_id: int, m: CommitMessage) -> dict[str, Any]:
    """A commit message as a ``COMMIT_MESSAGE`` row."""
    return rows.to_row(m, COMMIT_MESSAGE, tp_id=tp_id)


def message_from_row(r: object) -> CommitMessage:
    """A collected ``COMMIT_MESSAGE`` row as the commit message the driver acts on."""
    return rows.from_row(CommitMessage, r.asDict() if hasattr(r,
            "asDict") else r)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Erasure (jobs/erase.py): scan every segment for a subject's records, rewrite the ones that
# hold some


def scan_erasure(header_names: frozenset[str], sketch: Broadcast[DigestFilter],
                 writer: str = "native", *, with_headers: bool = False) -> Transform:
    """Segment tasks (``SEGMENT_TASK``) -> ``ERASURE_SCAN`` rows: one per digest a record can
    be matched by (:func:`compactor.cleaner.scan.subject_digests` with the ``writer``'s engine;
    the headers named in ``header_names`` only) that the requests' Bloom filter ``sketch`` may
    hold, one summary per segment (batches and records scanned, or the error) and, with
    ``with_headers`` (an apply's rewrite), one row per batch header its partition-wide checks
    read (:func:`compactor.erasure.rules.partition_check_batches`). Only the entries the
    filter keeps become Python objects."""

    def scan(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        engine, may_match = record_engine(writer), sketch.value.probe()
        for tasks in batches:
            for tp_id, base, path, next_base in zip(
                    *(tasks.column(i).to_pylist() for i in range(4)), strict=True):

                def read(path: str = path, base: int = base,
                         next_base: int | None = next_base) -> SubjectDigests:
                    with _collector_paused():
                        with storage.mapped(path) as data:
                            found = subject_digests(data, path, base, header_names, engine,
                                                    keep=may_match)
                        check_segment(path, base, next_base, found.headers)
                    return found
                yield from _scan_rows(tp_id, base, read, with_headers)

    return lambda tasks: tasks.mapInArrow(storage.portable(scan), ERASURE_SCAN)


def _scan_rows(tp_id: int, base: int, read: Callable[[], SubjectDigests],
               with_headers: bool = False) -> Iterator[pa.RecordBatch]:
    """The ``ERASURE_SCAN`` rows of one segment ``read`` digests: its summary, its batch
    headers when asked and the digests the filter kept, or one error row."""
    try:
        found = read()
    except CompactorError as err:
        yield pa.RecordBatch.from_pylist(
            [{"tp_id": tp_id, "segment_base": base, "kind": "segment",
              "error": json.dumps(err.to_dict())}], schema=_ERASURE_ARROW)
        return
    yield pa.RecordBatch.from_pylist(
        [{"tp_id": tp_id, "segment_base": base, "kind": "segment",
          "batches": found.batches, "records": found.records}], schema=_ERASURE_ARROW)
    if with_headers and found.headers:  # an apply's rewrite needs no second scan
        headers = partition_check_batches(found.headers)
        n = len(headers)
        cols: dict[str, list[Any]] = {name: [None] * n for name in _ERASURE_ARROW.names}
        cols.update(tp_id=[tp_id] * n, kind=["batch"] * n)
        for name in HEADER_FIELDS:
            cols[name] = [getattr(h, name) for h in headers]
        yield pa.RecordBatch.from_pydict(cols, schema=_ERASURE_ARROW)
    if len(found.offset):
        yield _erasure_rows(tp_id, base, found)


def scan_remote_erasure(helper: str, server_properties: str, log_dir: str,
                        header_names: frozenset[str], sketch: Broadcast[DigestFilter],
                        writer: str = "native") -> Transform:
    """Remote segment tasks (``REMOTE_SEGMENT_TASK``) -> ``ERASURE_SCAN`` rows, as
    :func:`scan_erasure` makes them of local segments: each task fetches its segments through
    the broker's RemoteStorageManager (:func:`compactor.remote.tier.fetch_segments`, one helper
    JVM a batch of tasks) into a temporary folder of the executor, scans them with the same
    digest scan and removes them. A segment that cannot be fetched or read is an error row."""

    def scan(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        engine, may_match = record_engine(writer), sketch.value.probe()
        for tasks in batches:
            rows = tasks.to_pylist()
            with storage.temporary_dir("remote-segments-") as folder:
                paths = {r["segment_id"]: storage.join(folder, f"{r['segment_id']}.log")
                         for r in rows}
                try:
                    failed = tier.fetch_segments(helper, server_properties, log_dir,
                                                 list(paths.items()))
                except CompactorError as err:
                    failed = {r["segment_id"]: json.dumps(err.to_dict()) for r in rows}
                for r in rows:

                    def read(r: dict[str, Any] = r) -> SubjectDigests:
                        base, path = r["start_offset"], paths[r["segment_id"]]
                        why = failed.get(r["segment_id"])
                        if why is not None:
                            raise RemoteTierError(
                                f"remote segment {r['segment_id']} could not be fetched "
                                f"through the RemoteStorageManager: {why}", base_offset=base)
                        with _collector_paused(), storage.mapped(path) as data:
                            found = subject_digests(data, path, base, header_names, engine,
                                                    keep=may_match)
                        problems = offset_problems(path, base, r["end_offset"] + 1,
                                                   found.headers)
                        if problems:
                            raise problems[0]
                        return found
                    yield from _scan_rows(r["tp_id"], r["start_offset"], read)

    return lambda tasks: tasks.mapInArrow(storage.portable(scan), ERASURE_SCAN)


def _erasure_rows(tp_id: int, base: int, found: SubjectDigests) -> pa.RecordBatch:
    """The ``ERASURE_SCAN`` rows of a segment's digests (those the filter kept)."""
    n = len(found.offset)
    header = found.header.tolist()
    key_null = found.key_null.tolist()
    return pa.RecordBatch.from_arrays([
        pa.array([tp_id] * n, pa.int32()), pa.array([base] * n, pa.int64()),
        pa.array([KEY if h < 0 else HEADER for h in header], pa.string()),
        pa.array(found.position, pa.int64()), pa.array(found.offset, pa.int64()),
        pa.array([None if h < 0 else found.names[h] for h in header], pa.string()),
        pa.array([row.tobytes() for row in found.digest], pa.binary()),
        pa.array([None if null else row.tobytes()
                  for row, null in zip(found.key_digest, key_null, strict=True)], pa.binary()),
        pa.array(found.bare, pa.bool_()),
        *(pa.nulls(n, f.type) for f in list(_ERASURE_ARROW)[9:])], schema=_ERASURE_ARROW)


def outcome_batch(outcomes: Iterable[Mapping[str, Any]]) -> pa.RecordBatch:
    """Outcomes (:func:`compactor.erasure.outcomes.of_rows`) as one ``REQUEST_OUTCOME``
    batch: the columns an outcome does not set are null."""
    names = REQUEST_OUTCOME.fieldNames()
    return pa.RecordBatch.from_pylist([{n: o.get(n) for n in names} for o in outcomes],
                                      schema=_OUTCOME_ARROW)


def request_outcomes(outcome: Callable[[Mapping[str, Any]], Mapping[str, Any]]) -> Transform:
    """Ledger request rows -> ``REQUEST_OUTCOME`` rows: ``outcome`` of each row, with the
    row's status as ``expected_status`` (:func:`compactor.erasure.outcomes.of_rows`)."""

    def apply(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield outcome_batch(of_rows(batch.to_pylist(), outcome))

    return lambda requests: requests.mapInArrow(apply, REQUEST_OUTCOME)


def kind_outcomes(outcome: Callable[[Mapping[str, Any]], Mapping[str, Any]]) -> Transform:
    """Kinds of request rows (``kind_topic``, ``kind_status``, ``kind_places``) ->
    ``OUTCOME_KIND`` rows: each kind with ``outcome`` of a row of that kind whose id is no
    request's (``None``), and its status as ``expected_status``."""
    names = OUTCOME_KIND.fieldNames()

    def apply(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            rows = []
            for kind in batch.to_pylist():
                shared = kind_outcome({c: kind[f"kind_{c}"] for c in KIND_COLUMNS}, outcome)
                out = {**kind, **shared}
                rows.append({n: out.get(n) for n in names})
            yield pa.RecordBatch.from_pylist(rows, schema=_KIND_ARROW)

    return lambda kinds: kinds.mapInArrow(apply, OUTCOME_KIND)


def scan_key_offsets(wanted: Mapping[int, frozenset[bytes]]) -> Transform:
    """Segment tasks (``SEGMENT_TASK``) -> ``KEY_OFFSET`` rows: every data record whose key
    digest is in its partition's ``wanted`` set (:func:`compactor.cleaner.scan.key_offsets`), or one
    error row for a segment that cannot be read."""

    def scan(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for tasks in batches:
            for tp_id, base, path in zip(*(tasks.column(i).to_pylist() for i in range(3)),
                                         strict=True):
                try:
                    with _collector_paused(), storage.mapped(path) as data:
                        found = key_offsets(data, path, wanted[tp_id])
                except CompactorError as err:
                    rows = [{"tp_id": tp_id, "segment_base": base,
                             "error": json.dumps(err.to_dict())}]
                else:
                    rows = [{"tp_id": tp_id, "segment_base": base, "position": pos,
                             "offset": off, "key_digest": digest} for pos, off, digest in found]
                yield pa.RecordBatch.from_pylist(rows, schema=_KEY_OFFSET_ARROW)

    return lambda tasks: tasks.mapInArrow(storage.portable(scan), KEY_OFFSET)


def rewrite_erased(segments: Mapping[tuple[int, int], tuple[str, SegmentInfo, TopicConfig]],
                   *, writer: str = "native") -> Transform:
    """``ERASURE_TASK`` rows -> one ``COMMIT_MESSAGE`` row per segment, written by the executor
    (:func:`compactor.spark.writer.write_erased_segment`).

    Args:
        segments: (tp id, segment base) -> (partition dir, segment, topic config).
        writer: the engine that frames the segments (:func:`compactor.native.engine`).
    """

    def rewrite(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        engine = record_engine(writer)
        for tasks in batches:
            for row in tasks.to_pylist():
                pdir, seg, cfg = segments[(row["tp_id"], row["segment_base"])]
                erased = {int(p): offsets for p, offsets in json.loads(row["erased_json"]).items()}
                tombstones = {int(p): offsets
                              for p, offsets in json.loads(row["tombstone_json"]).items()}
                with _collector_paused():
                    m = write_erased_segment(pdir, seg, erased,
                                             set(json.loads(row["retain_empty_json"])),
                                             cfg, tombstones=tombstones, engine=engine)
                yield pa.RecordBatch.from_pylist([message_to_row(row["tp_id"], m)],
                                                 schema=_COMMIT_ARROW)

    return lambda tasks: tasks.mapInArrow(storage.portable(rewrite), COMMIT_MESSAGE)
