"""Executor side of a round: rewrite one group of source segments into one ``.cleaned`` segment
with its indexes, durably, and describe it in a picklable commit message. Nothing here renames
or deletes a live file: the driver commits (``compactor/commit.py``).
"""

from __future__ import annotations

import time
import zlib
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from compactor import storage
from compactor.codec.records import RecordBatch
from compactor.codec.segment import iter_batches
from compactor.errors import CompactorError, CorruptSegmentError, UnsupportedFormatError
from compactor.logdir import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    segment_path,
)
from compactor.codec.indexes import AbortedTxn, decode_txn_index
from compactor.config import TopicConfig
from compactor.model import SegmentInfo
from compactor.policy import BatchDecision, BatchRetention, PartitionInput
from compactor.rebatch import (
    SegmentFiles,
    assemble_segment,
    filter_batch,
    iter_drops,
)

CLEANED_FILE_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitMessage:
    """What an executor reports for one group (see ``schemas.spark.COMMIT_MESSAGE``).

    Attributes:
        source_bases: base offsets of the group's source segments, ascending.
        cleaned_suffixes: which files were written as ``<base><suffix>.cleaned``.
        log_checksum: CRC-32 of the cleaned ``.log`` bytes (checked again before the swap).
        dropped: records dropped, by reason.
        error: the failure, as ``CompactorError.to_dict()``; nothing was left behind.
    """

    group_base: int
    source_bases: tuple[int, ...]
    tp_id: int = -1
    cleaned_suffixes: tuple[str, ...] = ()
    log_checksum: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    batches_in: int = 0
    batches_out: int = 0
    records_in: int = 0
    records_out: int = 0
    dropped: Mapping[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    error: dict | None = None


def cleaned_path(partition_dir: str, base_offset: int, suffix: str) -> str:
    return segment_path(partition_dir, base_offset, suffix + CLEANED_SUFFIX)


def write_group(
    inp: PartitionInput,
    source_bases: Sequence[int],
    decisions: Mapping[tuple[int, int], BatchDecision],
    superseded: Collection[int],
    *,
    first_dirty: int,
    fsync: bool = True,
) -> CommitMessage:
    """Rewrite the source segments ``source_bases`` into one ``.cleaned`` segment.

    Args:
        decisions: by ``(segment base, batch position)``, every batch of the group.
        superseded: offsets of the group's records that the offset map supersedes across
            segments; the ones superseded within their own segment and every other reason a
            record goes for are decided here (:func:`compactor.rebatch.iter_drops`).
        first_dirty: the round's first dirty offset (where the offset map starts).

    Returns:
        The commit message; on a corrupt or inconsistent input it carries ``error`` and no
        ``.cleaned`` file is left behind.
    """
    started = time.perf_counter()
    group_base = source_bases[0]
    try:
        message = _write(inp, tuple(source_bases), decisions, superseded, first_dirty, fsync)
    except CompactorError as err:
        for suffix in CLEANED_FILE_SUFFIXES:
            storage.remove(cleaned_path(inp.path, group_base, suffix), missing_ok=True)
        return CommitMessage(group_base=group_base, source_bases=tuple(source_bases),
                             error=err.to_dict(), seconds=time.perf_counter() - started)
    return replace(message, seconds=time.perf_counter() - started)


def _write(inp: PartitionInput, source_bases: tuple[int, ...],
           decisions: Mapping[tuple[int, int], BatchDecision], superseded: Collection[int],
           first_dirty: int, fsync: bool) -> CommitMessage:
    """One pass over the group, newest batch first: every batch is decoded once, its drops
    decided with the keys seen later in the group, and its output built from the same
    records; the outputs are put back in offset order at the end."""
    by_base = {s.base_offset: s for s in inp.segments}
    cfg = inp.config
    outputs: list[bytes] = []  # newest first until the end
    txn_entries = []
    bytes_in = batches_in = records_in = records_out = 0
    dropped: Counter[str] = Counter()
    from_map = 0
    last_batch: RecordBatch | None = None
    later: set[bytes] = set()
    for base in reversed(source_bases):
        seg = by_base[base]
        data = storage.read_bytes(seg.log_path)
        bytes_in += len(data)
        batches = list(iter_batches(data, path=seg.log_path))
        batch_decisions = []
        for batch in batches:
            decision = decisions.get((base, batch.position))
            if decision is None:
                raise CorruptSegmentError(
                    "batch was not seen by the planning scan (the segment changed during the run)",
                    path=seg.log_path, position=batch.position, base_offset=batch.base_offset,
                    remedy="make sure no broker or other tool writes to the log dir, then rerun",
                )
            batch_decisions.append(decision)
        if last_batch is None and batches:
            last_batch = batches[-1]
        try:
            for index, records, goes in iter_drops(batches, batch_decisions, superseded,
                                                   first_dirty, later):
                batch, decision = batches[index], batch_decisions[index]
                result = filter_batch(batch, decision, frozenset(goes.offsets),
                                      now_ms=inp.now_ms,
                                      delete_retention_ms=cfg.delete_retention_ms,
                                      records=records)
                if result.records_in - result.records_out != len(goes.offsets):
                    raise CorruptSegmentError(
                        f"{len(goes.offsets)} records of the batch were decided to go but "
                        f"{result.records_in - result.records_out} went",
                        position=batch.position, base_offset=batch.base_offset,
                        remedy="report this as a bug; the live segments are untouched")
                batches_in += 1
                dropped.update(goes.reasons)
                from_map += goes.from_map
                records_in += result.records_in
                records_out += result.records_out
                if result.data is not None:
                    outputs.append(result.data)
                    if decision.txn_entry is not None:
                        txn_entries.append(decision.txn_entry)
        except CompactorError as err:
            raise err.with_location(path=seg.log_path) from None
    outputs.reverse()
    txn_entries.reverse()
    if from_map != len(superseded):
        raise CorruptSegmentError(
            f"counts do not balance: the offset map superseded {len(superseded)} records of "
            f"the group but {from_map} were found (records in {records_in}, "
            f"retained {records_out})",
            path=by_base[source_bases[0]].log_path,
            remedy="the segment changed during the run; rerun once nothing else writes to it",
        )
    return _write_cleaned(
        inp.path, source_bases, by_base[source_bases[0]].log_path, outputs, txn_entries,
        last_batch, cfg, mtime_ms=by_base[source_bases[-1]].mtime_ms, fsync=fsync,
        bytes_in=bytes_in, batches_in=batches_in, records_in=records_in,
        records_out=records_out, dropped={reason: n for reason, n in dropped.items() if n})


def write_erased_segment(
    partition_dir: str,
    segment: SegmentInfo,
    erased: Mapping[int, Collection[int]],
    retain_empty: Collection[int],
    config: TopicConfig,
    *,
    fsync: bool = True,
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
    """
    started = time.perf_counter()
    base = segment.base_offset
    try:
        message = _write_erased(partition_dir, segment, erased, retain_empty, config, fsync)
    except CompactorError as err:
        for suffix in CLEANED_FILE_SUFFIXES:
            storage.remove(cleaned_path(partition_dir, base, suffix), missing_ok=True)
        return CommitMessage(group_base=base, source_bases=(base,), error=err.to_dict(),
                             seconds=time.perf_counter() - started)
    return replace(message, seconds=time.perf_counter() - started)


def _write_erased(partition_dir: str, segment: SegmentInfo, erased: Mapping[int, Collection[int]],
                  retain_empty: Collection[int], config: TopicConfig,
                  fsync: bool) -> CommitMessage:
    base = segment.base_offset
    data = storage.read_bytes(segment.log_path)
    outputs: list[bytes] = []
    batches_in = records_in = records_out = found = 0
    last_batch: RecordBatch | None = None
    for batch in iter_batches(data, path=segment.log_path):
        batches_in += 1
        last_batch = batch
        goes = erased.get(batch.position)
        if not goes:
            outputs.append(batch.raw)
            n = batch.records_count if batch.magic >= 2 else len(batch.records())
            records_in += n
            records_out += n
            continue
        retention = (BatchRetention.RETAIN_EMPTY if batch.position in retain_empty
                     else BatchRetention.DELETE_EMPTY)
        decision = BatchDecision(retention=retention, aborted=False, discard_records=False,
                                 retain_deletes=True, marker_horizon=False, txn_entry=None)
        try:
            result = filter_batch(batch, decision, frozenset(goes), now_ms=0,
                                  delete_retention_ms=0, set_delete_horizon=False)
        except CompactorError as err:
            raise err.with_location(path=segment.log_path) from None
        records_in += result.records_in
        records_out += result.records_out
        found += result.records_in - result.records_out
        if result.data is not None:
            outputs.append(result.data)
    expected = sum(len(v) for v in erased.values())
    if found != expected:
        raise CorruptSegmentError(
            f"counts do not balance: the scan matched {expected} records to erase but "
            f"{found} were found", path=segment.log_path,
            remedy="the segment changed during the run; rerun once nothing else writes to it")
    txn_path = segment_path(partition_dir, base, TXN_INDEX_SUFFIX)
    txn_entries = (decode_txn_index(storage.read_bytes(txn_path), base, path=txn_path)
                   if segment.has_txn_index else [])
    return _write_cleaned(
        partition_dir, (base,), segment.log_path, outputs, txn_entries, last_batch, config,
        mtime_ms=segment.mtime_ms, fsync=fsync, bytes_in=len(data), batches_in=batches_in,
        records_in=records_in, records_out=records_out,
        dropped={"erased": found} if found else {})


def _write_cleaned(partition_dir: str, source_bases: tuple[int, ...], log_path: str,
                   outputs: Sequence[bytes], txn_entries: Sequence[AbortedTxn],
                   last_batch: RecordBatch | None, config: TopicConfig, *, mtime_ms: int,
                   fsync: bool, bytes_in: int, batches_in: int, records_in: int,
                   records_out: int, dropped: Mapping[str, int]) -> CommitMessage:
    """Assemble the output batches into a segment with its indexes, write its ``.cleaned``
    files durably with ``mtime_ms`` (a ``.txnindex`` only when it has entries), and describe
    them in a commit message."""
    base = source_bases[0]
    files = _assemble(log_path, base, outputs, txn_entries, last_batch, len(source_bases),
                      config)
    written = [(LOG_SUFFIX, files.log), (INDEX_SUFFIX, files.index),
               (TIME_INDEX_SUFFIX, files.time_index)]
    if files.txn_index:
        written.append((TXN_INDEX_SUFFIX, files.txn_index))
    for suffix, data in written:
        storage.write_durable(cleaned_path(partition_dir, base, suffix), data,
                              mtime_ms=mtime_ms, fsync=fsync)
    return CommitMessage(
        group_base=base, source_bases=source_bases,
        cleaned_suffixes=tuple(s for s, _ in written), log_checksum=zlib.crc32(files.log),
        bytes_in=bytes_in, bytes_out=len(files.log), batches_in=batches_in,
        batches_out=files.batches, records_in=records_in, records_out=records_out,
        dropped=dropped,
    )


def _assemble(path: str, base: int, outputs: Sequence[bytes], txn_entries: Sequence[AbortedTxn],
              last_batch: RecordBatch | None, source_segments: int,
              config: TopicConfig) -> SegmentFiles:
    """:func:`compactor.rebatch.assemble_segment`, with its limits as a clear error."""
    try:
        return assemble_segment(
            base, outputs, txn_entries, last_source_batch=last_batch,
            source_segments=source_segments, index_interval_bytes=config.index_interval_bytes,
            segment_index_bytes=config.segment_index_bytes,
        )
    except ValueError as err:
        # offsets more than 2^31 - 1 above the base (a legacy segment Kafka would split on
        # cleaning, §4.19), or more index entries than segment.index.bytes holds
        raise UnsupportedFormatError(
            f"the cleaned segment cannot be indexed: {err}", path=path, base_offset=base,
            remedy="the partition was left untouched; Kafka splits such a segment when it "
                   "cleans it, this tool does not: raise segment.index.bytes if the index is "
                   "full, or let a broker clean this partition") from err

