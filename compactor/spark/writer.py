"""Executor side of a round: rewrite one group of source segments into one ``.cleaned`` segment
with its indexes, durably, and describe it in a picklable commit message. Nothing here renames
or deletes a live file: the driver commits (``compactor/log/swap.py``).
"""

from __future__ import annotations

import bisect
import functools
import time
from array import array
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np

from compactor.cleaner.planning import over_task_keys
from compactor.cleaner.policy import BatchDecision, BatchRetention, PartitionInput
from compactor.cleaner.rebatch import SegmentBuilder, filter_batch
from compactor.cleaner.rewrite import PURE, Engine, Fallback, GroupRewrite, fallback_group
from compactor.codec.indexes import AbortedTxn, decode_txn_index
from compactor.codec.records import RecordBatch
from compactor.codec.segment import chunk_ranges, iter_batches
from compactor.config import TopicConfig
from compactor.errors import CompactorError, CorruptSegmentError, UnsupportedFormatError
from compactor.log import storage
from compactor.log.layout import cleaned_path, remove_cleaned, segment_path
from compactor.log.names import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX
from compactor.model import CommitMessage, SegmentInfo


def write_group(
    inp: PartitionInput,
    source_bases: Sequence[int],
    decisions: Mapping[tuple[int, int], BatchDecision],
    superseded: Collection[int],
    *,
    first_dirty: int,
    engine: Engine,
    within: np.ndarray | None = None,
) -> CommitMessage:
    """Rewrite the source segments ``source_bases`` into one ``.cleaned`` segment.

    Args:
        decisions: by ``(segment base, batch position)``, every batch of the group.
        superseded: offsets of the group's records that the offset map supersedes across
            groups; the ones superseded within the group and every other reason a record
            goes for are decided here (:func:`compactor.cleaner.rebatch.iter_drops`).
        first_dirty: the round's first dirty offset (where the offset map starts).
        engine: what decides and re-encodes the records (:func:`compactor.native.engine`;
            every engine writes the same bytes). A group the native one hands back is
            written by the pure path; the message's ``writer`` says which path wrote it.
        within: the offsets of the group's records a later record of their key in the
            group supersedes, when the offset map's scan found them
            (:data:`compactor.schemas.spark.SUPERSEDED`): the native path then reads no key
            and holds no key table (``None``: it finds them by key). Either path must find
            exactly these.

    Returns:
        The commit message; on a corrupt or inconsistent input it carries ``error`` and no
        ``.cleaned`` file is left behind.
    """
    started = time.perf_counter()
    group_base = source_bases[0]
    try:
        message = _write(inp, tuple(source_bases), decisions, superseded, first_dirty, engine,
                         within)
    except CompactorError as err:
        remove_cleaned(inp.path, group_base)
        return CommitMessage(group_base=group_base, source_bases=tuple(source_bases),
                             error=err.to_dict(), seconds=time.perf_counter() - started)
    _release_sources(inp, source_bases)
    return replace(message, seconds=time.perf_counter() - started)


def _release_sources(inp: PartitionInput, source_bases: Iterable[int]) -> None:
    """Once a group's ``.cleaned`` segment is written, its source logs are not read again
    in the round (the driver re-checks the output, the swap deletes the sources): their
    cached pages are dropped (:func:`compactor.log.storage.release_cache`) so that the next
    group's writes reuse them rather than pages the kernel finds afresh, and a round does
    not fill the page cache with logs it has done with."""
    paths = {s.base_offset: s.log_path for s in inp.segments}
    for base in source_bases:
        storage.release_cache(paths[base])


@dataclass(slots=True)
class _Tally:
    """Counts of a rewrite, for its commit message."""

    bytes_in: int = 0
    batches_in: int = 0
    records_in: int = 0
    records_out: int = 0
    dropped: Counter[str] = field(default_factory=Counter)


@dataclass(slots=True)
class _Decided:
    """The backward pass's result: every batch's layout and fate, by source segment."""

    layouts: dict[int, tuple[array[int], array[int]]] = field(default_factory=dict)
    chunks: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # byte ranges
    fates: dict[int, list[Any]] = field(default_factory=dict)  # by the rewrite's own kind
    last_batch: RecordBatch | None = None


def _write(inp: PartitionInput, source_bases: tuple[int, ...],
           decisions: Mapping[tuple[int, int], BatchDecision], superseded: Collection[int],
           first_dirty: int, engine: Engine, within: np.ndarray | None) -> CommitMessage:
    """Two passes over the group. Newest batch first, every record's fate is decided with
    the keys seen later in the group (:func:`_decide`); only what goes is kept. Then oldest
    first, the batches are filtered and streamed into the ``.cleaned`` log
    (:func:`_write_decided`), so neither a source segment nor the output is held in memory
    whole."""
    by_base = {s.base_offset: s for s in inp.segments}
    rewrite = engine.group(superseded, first_dirty, within)
    try:
        decided = _decide(by_base, source_bases, decisions, rewrite)
    except Fallback:  # before anything is written (compactor/native/fast.py says when)
        rewrite = fallback_group(superseded, first_dirty)
        decided = _decide(by_base, source_bases, decisions, rewrite)
    if rewrite.from_map() != len(superseded):
        raise CorruptSegmentError(
            f"counts do not balance: the offset map superseded {len(superseded)} records of "
            f"the group but {rewrite.from_map()} were found",
            path=by_base[source_bases[0]].log_path,
            remedy="the segment changed during the run; rerun once nothing else writes to it",
        )
    if within is not None and rewrite.later() != len(within):
        raise CorruptSegmentError(
            f"counts do not balance: the offset map's scan found {len(within)} records of the "
            f"group superseded within it but {rewrite.later()} were found",
            path=by_base[source_bases[0]].log_path,
            remedy="the segment changed during the run; rerun once nothing else writes to it",
        )
    rewrite.decided()
    return _write_decided(inp, source_bases, decisions, decided, rewrite, rewrite.reasons())


class _OverKeys(Exception):
    """The key table passed the task's key budget, or is projected to (:func:`write_groups`);
    ``reason`` says which (:func:`compactor.cleaner.planning.over_task_keys`)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(slots=True)
class _KeyBudget:
    """The key budget of a round :func:`write_groups` decides, checked after each chunk."""

    max_keys: int
    round_bytes: int  # the source segments of the round's groups
    decided_bytes: int = 0

    def after_chunk(self, rewrite: GroupRewrite, chunk_bytes: int) -> None:
        """Count a chunk decided.

        Raises:
            _OverKeys: the round stops here (:func:`compactor.cleaner.planning.over_task_keys`).
        """
        self.decided_bytes += chunk_bytes
        reason = over_task_keys(rewrite.keys(), rewrite.records(),
                                self.decided_bytes / max(1, self.round_bytes), self.max_keys)
        if reason is not None:
            raise _OverKeys(reason)


def write_groups(inp: PartitionInput, groups: Sequence[Sequence[int]],
                 decisions: Mapping[tuple[int, int], BatchDecision], *, first_dirty: int,
                 engine: Engine, max_keys: int | None = None) -> list[CommitMessage] | str:
    """Rewrite every group of a partition's round in one task, with one key table: the
    groups are decided newest first, each with the keys that entered the offset map in the
    groups after it (``Cleaner.buildOffsetMap`` over the whole dirty section, then
    ``Cleaner.cleanSegments`` group by group: Kafka's one-pass round, with exact keys), then
    written oldest first. What the distributed offset map supersedes across groups is found
    in the table instead, so nothing is shuffled. A group the native rewrite hands back
    (:class:`Fallback`) sends the whole round to the pure path, from its newest group again.

    Args:
        max_keys: the key budget: once the table holds more keys than this, or is projected
            to hold well more by the round's end (checked after each chunk decided, so it
            passes the budget by at most one chunk's keys:
            :func:`compactor.cleaner.planning.over_task_keys`), the round stops before
            anything is written.

    Returns:
        A commit message per group, or, when a group cannot be decided, only that group's
        message with its error (nothing is written). After a group that fails to write, no
        more are written: the partition is not swapped. When the key table passed
        ``max_keys``, or was projected to, nothing is written and the reason is returned
        (:data:`~compactor.cleaner.planning.OVER_TASK_KEYS`,
        :data:`~compactor.cleaner.planning.PROJECTED_OVER_TASK_KEYS`).
    """
    try:
        try:
            decided, rewrite = _decide_groups(inp, groups, decisions,
                                              engine.group((), first_dirty), max_keys)
        except Fallback:
            decided, rewrite = _decide_groups(inp, groups, decisions,
                                              fallback_group((), first_dirty), max_keys)
    except _OverKeys as over:
        return over.reason
    rewrite.decided()
    if isinstance(decided, CommitMessage):
        return [decided]
    messages = []
    for group in groups:
        started = time.perf_counter()
        done, dropped, seconds = decided.pop(group[0])
        try:
            message = _write_decided(inp, tuple(group), decisions, done, rewrite, dropped)
        except CompactorError as err:
            remove_cleaned(inp.path, group[0])
            message = CommitMessage(group_base=group[0], source_bases=tuple(group),
                                    error=err.to_dict())
        messages.append(replace(message, seconds=seconds + time.perf_counter() - started))
        if message.error:
            break
        _release_sources(inp, group)
    return messages


def _decide_groups(inp: PartitionInput, groups: Sequence[Sequence[int]],
                   decisions: Mapping[tuple[int, int], BatchDecision], rewrite: GroupRewrite,
                   max_keys: int | None
                   ) -> tuple[dict[int, tuple[_Decided, Counter[str], float]] | CommitMessage,
                              GroupRewrite]:
    """The backward pass of :func:`write_groups`: per group (by base) what it decided, the
    records it drops by reason and its seconds; or the message of the first group that
    cannot be decided.

    Raises:
        Fallback: the native rewrite hands the round back.
        _OverKeys: the key table passed ``max_keys`` or is projected to.
    """
    by_base = {s.base_offset: s for s in inp.segments}
    budget = None if max_keys is None else _KeyBudget(
        max_keys, sum(by_base[b].size_bytes for g in groups for b in g))
    decided: dict[int, tuple[_Decided, Counter[str], float]] = {}
    for group in reversed(groups):
        started = time.perf_counter()
        before = Counter(rewrite.reasons())  # a copy: the pure path's is live
        try:
            done = _decide(by_base, tuple(group), decisions, rewrite, budget)
        except CompactorError as err:
            return CommitMessage(group_base=group[0], source_bases=tuple(group),
                                 error=err.to_dict(),
                                 seconds=time.perf_counter() - started), rewrite
        decided[group[0]] = (done, rewrite.reasons() - before, time.perf_counter() - started)
    return decided, rewrite


def _write_decided(inp: PartitionInput, source_bases: tuple[int, ...],
                   decisions: Mapping[tuple[int, int], BatchDecision], decided: _Decided,
                   rewrite: GroupRewrite, dropped: Counter[str]) -> CommitMessage:
    """The forward pass of a decided group: its batches filtered oldest first and streamed
    into the ``.cleaned`` log."""
    by_base = {s.base_offset: s for s in inp.segments}
    tally = _Tally(dropped=dropped)
    config = inp.config

    def outputs() -> Iterator[Output]:
        for base in source_bases:
            seg = by_base[base]
            positions, base_offsets = decided.layouts.pop(base)
            fates = decided.fates.pop(base)
            changed = CorruptSegmentError(
                "the segment changed while it was being rewritten", path=seg.log_path,
                remedy="make sure no broker or other tool writes to the log dir, then rerun")
            count = 0
            with storage.mapped(seg.log_path) as data:
                tally.bytes_in += len(data)
                chunks = decided.chunks.pop(base)
                if len(data) != (chunks[-1][1] if chunks else 0):
                    raise changed
                for start, end in chunks:
                    k = bisect.bisect_left(positions, end, lo=count)
                    done = rewrite.filter_chunk(
                        storage.window(data, start, end), start, base, positions[count:k],
                        base_offsets[count:k], fates[count:k],
                        [decisions[(base, p)] for p in positions[count:k]],
                        now_ms=inp.now_ms, delete_retention_ms=config.delete_retention_ms)
                    if done is not None:  # the chunk in one call
                        runs, txn_entries, records_in, records_out = done
                        tally.batches_in += k - count
                        tally.records_in += records_in
                        tally.records_out += records_out
                        count = k
                        for run, sizes in runs:  # the entries come with their batches
                            yield run, sizes, None, txn_entries
                            txn_entries = []
                        continue
                    for batch in iter_batches(data, path=seg.log_path, start_position=start,
                                              end_position=end, verify_crc=False):
                        if (count == len(positions) or batch.position != positions[count]
                                or batch.base_offset != base_offsets[count]):
                            raise changed
                        fate = fates[count]
                        count += 1
                        decision = decisions[(base, batch.position)]
                        try:
                            result, went = rewrite.filter(
                                batch, decision, fate, now_ms=inp.now_ms,
                                delete_retention_ms=config.delete_retention_ms)
                        except CompactorError as err:
                            raise err.with_location(path=seg.log_path) from None
                        if result.records_in - result.records_out != went:
                            raise CorruptSegmentError(
                                f"{went} records of the batch were decided to go but "
                                f"{result.records_in - result.records_out} went",
                                path=seg.log_path, position=batch.position,
                                base_offset=batch.base_offset,
                                remedy="report this as a bug; the live segments are untouched")
                        tally.batches_in += 1
                        tally.records_in += result.records_in
                        tally.records_out += result.records_out
                        if result.data is not None:
                            yield result.data, None, None, _entries(decision.txn_entry)
            if count != len(positions):
                raise changed

    message = _write_cleaned(inp.path, source_bases, by_base[source_bases[0]].log_path,
                             outputs(), decided.last_batch, config,
                             mtime_ms=by_base[source_bases[-1]].mtime_ms,
                             tally=tally)
    return replace(message, writer=rewrite.path)


_CHUNK_BYTES = 16 * 1024 * 1024  # the backward walk decodes this much of a segment at a time


def _decide(by_base: Mapping[int, SegmentInfo], source_bases: tuple[int, ...],
            decisions: Mapping[tuple[int, int], BatchDecision], rewrite: GroupRewrite,
            budget: _KeyBudget | None = None) -> _Decided:
    """The backward pass: each segment's batches decoded (CRC checked) a chunk at a time,
    newest chunk first, and their records decided newest first by ``rewrite`` (a whole chunk
    in one call where it can).

    Raises:
        Fallback: the native rewrite hands the group to the pure path.
        _OverKeys: after a chunk, the ``budget`` stops the round.
    """
    decided = _Decided()
    planned: dict[int, list[int]] = {}  # the batch positions the planning scan found
    for segment_base, position in sorted(decisions):
        planned.setdefault(segment_base, []).append(position)
    for base in reversed(source_bases):
        path = by_base[base].log_path
        positions: list[array[int]] = []
        base_offsets: list[array[int]] = []
        fates: list[list[Any]] = []
        with storage.mapped(path) as data:
            # newest chunk first, each decoded whole (CRC checked) and walked newest batch
            # first: the walk holds one chunk, never the segment
            chunks = chunk_ranges(planned.get(base, []), len(data), _CHUNK_BYTES)
            decided.chunks[base] = chunks
            for start, end in reversed(chunks):
                try:
                    whole = rewrite.decide_chunk(storage.window(data, start, end), start,
                                                 base, decisions)
                    if whole is not None:
                        chunk_positions, chunk_bases, chunk_fates = whole
                        if decided.last_batch is None:
                            decided.last_batch = next(iter_batches(
                                data, path=path, start_position=chunk_positions[-1],
                                end_position=end))
                    else:
                        chunk_positions, chunk_bases, chunk_fates = _decide_chunk(
                            data, path, start, end, base, decisions, decided, rewrite)
                except CompactorError as err:
                    raise err.with_location(path=path) from None
                if budget is not None:
                    budget.after_chunk(rewrite, end - start)
                fates.append(chunk_fates)
                positions.append(array("q", chunk_positions))
                base_offsets.append(array("q", chunk_bases))
        decided.layouts[base] = (_joined(positions), _joined(base_offsets))
        decided.fates[base] = [f for chunk in reversed(fates) for f in chunk]
    return decided


def _decide_chunk(data: bytes, path: str, start: int, end: int, base: int,
                  decisions: Mapping[tuple[int, int], BatchDecision], decided: _Decided,
                  rewrite: GroupRewrite) -> tuple[list[int], list[int], list[Any]]:
    """One chunk of the backward pass batch by batch: its batches decoded (CRC checked) and
    decided newest first. Returns their positions, base offsets and fates in file order."""
    batches = list(iter_batches(data, path=path, start_position=start, end_position=end))
    if decided.last_batch is None and batches:
        decided.last_batch = batches[-1]
    newest_first = [(b, _decision(decisions, base, b.position, b.base_offset, path))
                    for b in reversed(batches)]
    fates = rewrite.decide(newest_first)
    fates.reverse()
    return [b.position for b in batches], [b.base_offset for b in batches], fates


def _joined(chunks: list[array[int]]) -> array[int]:
    """Arrays of the chunks, newest chunk first, as one array in file order."""
    out = array("q")
    for chunk in reversed(chunks):
        out.extend(chunk)
    return out


def _decision(decisions: Mapping[tuple[int, int], BatchDecision], segment_base: int,
              position: int, base_offset: int, path: str) -> BatchDecision:
    decision = decisions.get((segment_base, position))
    if decision is None:
        raise CorruptSegmentError(
            "batch was not seen by the planning scan (the segment changed during the run)",
            path=path, position=position, base_offset=base_offset,
            remedy="make sure no broker or other tool writes to the log dir, then rerun",
        )
    return decision


def write_erased_segment(
    partition_dir: str,
    segment: SegmentInfo,
    erased: Mapping[int, Collection[int]],
    retain_empty: Collection[int],
    config: TopicConfig,
    *,
    tombstones: Mapping[int, Collection[int]] | None = None,
    engine: Engine = PURE,
) -> CommitMessage:
    """Rewrite one segment without the erased records, as a ``.cleaned`` segment (executor
    side of ``erase apply``; the driver swaps it in like a one-segment compaction group).

    Batches without erased records are copied verbatim; the others are rebuilt with their
    base offset, ``lastOffsetDelta``, producer fields, leader epoch, codec and delete horizon
    (none is added). A batch that loses every record stays as an empty header only when its
    position is in ``retain_empty`` (it carries producer state or the log end offset). The
    ``.txnindex`` entries are carried over unchanged, the other indexes are rebuilt, the mtime
    kept.

    Args:
        erased: batch position -> offsets of its records to erase.
        tombstones: batch position -> offsets of records replaced by a bare tombstone (same
            offset, key and timestamp; no value, no headers): ``--leave-tombstone``.
        engine: what frames the segment (:meth:`Engine.segment_headers`: the native one
            frames it and checks its CRCs in bulk; the pure one, or a segment it declines,
            batch by batch). Both write the same bytes.
    """
    started = time.perf_counter()
    base = segment.base_offset
    try:
        message = _write_erased(partition_dir, segment, erased, retain_empty, config,
                                tombstones or {}, engine)
    except CompactorError as err:
        remove_cleaned(partition_dir, base)
        return CommitMessage(group_base=base, source_bases=(base,), error=err.to_dict(),
                             seconds=time.perf_counter() - started)
    storage.release_cache(segment.log_path)  # the swap deletes it (:func:`_release_sources`)
    return replace(message, seconds=time.perf_counter() - started)


def _write_erased(partition_dir: str, segment: SegmentInfo, erased: Mapping[int, Collection[int]],
                  retain_empty: Collection[int], config: TopicConfig,
                  tombstones: Mapping[int, Collection[int]], engine: Engine) -> CommitMessage:
    base = segment.base_offset
    tally = _Tally()

    def outputs() -> Iterator[Output]:
        with storage.mapped(segment.log_path) as data:
            tally.bytes_in = len(data)
            # v2 batches copied verbatim go out a run at a time (one write, one checksum
            # call): most of a segment an erasure touches is such runs
            run: list[int] = []  # the sizes of the run's batches
            span = [0, 0]  # the run's first byte and its length

            def flush() -> Iterator[Output]:
                if run:  # copied from where it lies (:class:`Copied`)
                    yield (Copied(storage.window(data, span[0], span[0] + span[1]),
                                  segment.log_path, span[0]), list(run), None, ())
                    run.clear()

            for position, size, count, batch in _erasure_entries(data, segment, engine):
                tally.batches_in += 1
                goes = erased.get(position)
                bare = tombstones.get(position)
                if not goes and not bare:
                    if batch is None or batch.magic >= 2:  # copied verbatim in its run
                        tally.records_in += count
                        tally.records_out += count
                        if run and position != span[0] + span[1]:
                            yield from flush()
                        if not run:
                            span[:] = [position, 0]
                        run.append(size)
                        span[1] += size
                        continue
                    n = len(batch.records())  # v0/v1: copied verbatim on its own
                    tally.records_in += n
                    tally.records_out += n
                    yield from flush()
                    yield batch.raw, None, batch, ()
                    continue
                yield from flush()
                if batch is None:
                    (batch,) = iter_batches(data, path=segment.log_path, start_position=position,
                                            end_position=position + size)
                retention = (BatchRetention.RETAIN_EMPTY if batch.position in retain_empty
                             else BatchRetention.DELETE_EMPTY)
                decision = BatchDecision(retention=retention, aborted=False, discard_records=False,
                                         retain_deletes=True, marker_horizon=False, txn_entry=None)
                try:
                    result = filter_batch(batch, decision, frozenset(goes or ()), now_ms=0,
                                          delete_retention_ms=0, set_delete_horizon=False,
                                          tombstones=frozenset(bare or ()))
                except CompactorError as err:
                    raise err.with_location(path=segment.log_path) from None
                tally.records_in += result.records_in
                tally.records_out += result.records_out
                tally.dropped["erased"] += result.records_in - result.records_out
                if result.data is not None:
                    yield result.data, None, None, ()
            yield from flush()

    txn_path = segment_path(partition_dir, base, TXN_INDEX_SUFFIX)
    txn_entries = (decode_txn_index(storage.read_bytes(txn_path), base, path=txn_path)
                   if segment.has_txn_index else [])
    # one source segment: the placeholder of a group's end (which needs the last source
    # batch) never applies
    message = _write_cleaned(partition_dir, (base,), segment.log_path, outputs(), None, config,
                             mtime_ms=segment.mtime_ms, tally=tally,
                             txn_entries=txn_entries)
    expected = sum(len(v) for v in erased.values())
    found = tally.dropped["erased"]
    if found != expected:
        raise CorruptSegmentError(
            f"counts do not balance: the scan matched {expected} records to erase but "
            f"{found} were found", path=segment.log_path,
            remedy="the segment changed during the run; rerun once nothing else writes to it")
    return message


def _erasure_entries(data: Any, segment: SegmentInfo, engine: Engine
                     ) -> Iterator[tuple[int, int, int, RecordBatch | None]]:
    """The entries of a segment an erasure rewrites, in file order: ``(position, size,
    records, batch)``. The engine frames the whole segment in bulk, CRCs checked
    (:meth:`Engine.segment_headers`: every batch v2 with a sound header; ``batch`` is then
    ``None``, decoded by the caller only where it erases), else each batch is read and
    checked here, the first bad one raising its located error (``records`` is ``0`` for a
    v0/v1 entry: the caller counts its records)."""
    framed = engine.segment_headers(data, segment.log_path, segment.base_offset)
    if framed is not None:
        for h in framed:
            yield h.position, h.size_in_bytes, h.records_count, None
        return
    for batch in iter_batches(data, path=segment.log_path):
        yield (batch.position, len(batch.raw), batch.records_count if batch.magic >= 2 else 0,
               batch)


class Copied(NamedTuple):
    """A run of batches an erasure keeps as they are, and where they lie: ``data`` (a view
    of the mapped source, no copy: :func:`storage.window`) is bytes ``start`` on of the file
    ``source``. The output takes them from there
    (:meth:`compactor.log.storage.Appender.append_copy`: on a local disk the kernel copies
    them between the two files' page caches), and the segment builder reads their headers
    and checksum from ``data``."""

    data: Any
    source: str
    start: int


#: what a rewrite hands :func:`_write_cleaned`, in output order: ``(bytes, sizes, source
#: batch, transaction index entries)``: one batch (``sizes`` ``None``; the source batch when
#: copied verbatim, else ``None``), or a run of batches end to end, bytes, a view of them or
#: a :class:`Copied` run (``sizes``: each one's)
Output = tuple[Any, Sequence[int] | None, RecordBatch | None, Sequence[AbortedTxn]]


def _entries(txn_entry: AbortedTxn | None) -> tuple[AbortedTxn, ...]:
    return () if txn_entry is None else (txn_entry,)


def _write_cleaned(partition_dir: str, source_bases: tuple[int, ...], log_path: str,
                   outputs: Iterable[Output],
                   last_batch: RecordBatch | None, config: TopicConfig, *, mtime_ms: int,
                   tally: _Tally, txn_entries: Sequence[AbortedTxn] = ()) -> CommitMessage:
    """Stream the output batches into the ``.cleaned`` log, then write its indexes (a
    ``.txnindex`` only when it has entries), all durably with ``mtime_ms``, and describe them
    in a commit message (``tally`` is complete once ``outputs`` is exhausted).

    Args:
        outputs: the output batches, one or a run at a time (:data:`Output`).
        txn_entries: index entries carried over ahead of the ones ``outputs`` brings.
    """
    base = source_bases[0]
    entries = list(txn_entries)
    with storage.open_durable(cleaned_path(partition_dir, base, LOG_SUFFIX),
                              mtime_ms=mtime_ms) as write:
        builder = SegmentBuilder(base, write)
        for data, sizes, copied_from, txns in outputs:
            if sizes is None:
                builder.append(data, copied_from)
            else:
                try:
                    if isinstance(data, Copied):
                        builder.append_run(data.data, sizes, write=functools.partial(
                            write.append_copy, source=data.source, start=data.start))
                    else:
                        builder.append_run(data, sizes)
                except ValueError as err:
                    raise CorruptSegmentError(
                        f"the native writer's output does not add up: {err}", path=log_path,
                        base_offset=base,
                        remedy="report this as a bug; the live segments are untouched"
                    ) from err
            entries += txns
        try:
            files = builder.finish(entries, last_source_batch=last_batch,
                                   source_segments=len(source_bases),
                                   index_interval_bytes=config.index_interval_bytes,
                                   segment_index_bytes=config.segment_index_bytes)
        except ValueError as err:
            # offsets more than 2^31 - 1 above the base (a legacy segment Kafka would split on
            # cleaning, ``LocalLog.splitOverflowedSegment``), or more index entries than
            # segment.index.bytes holds
            raise UnsupportedFormatError(
                f"the cleaned segment cannot be indexed: {err}", path=log_path, base_offset=base,
                remedy="the partition was left untouched; Kafka splits such a segment when it "
                       "cleans it, this tool does not: raise segment.index.bytes if the index "
                       "is full, or let a broker clean this partition") from err
    written = [LOG_SUFFIX]
    for suffix, data in ((INDEX_SUFFIX, files.index), (TIME_INDEX_SUFFIX, files.time_index),
                         (TXN_INDEX_SUFFIX, files.txn_index)):
        if data or suffix != TXN_INDEX_SUFFIX:
            storage.write_durable(cleaned_path(partition_dir, base, suffix), data,
                                  mtime_ms=mtime_ms)
            written.append(suffix)
    return CommitMessage(
        group_base=base, source_bases=source_bases, cleaned_suffixes=tuple(written),
        log_checksum=files.checksum, bytes_in=tally.bytes_in, bytes_out=files.size,
        batches_in=tally.batches_in, batches_out=files.batches, records_in=tally.records_in,
        records_out=tally.records_out,
        dropped={reason: n for reason, n in tally.dropped.items() if n},
        placeholders=int(files.placeholder),
    )
