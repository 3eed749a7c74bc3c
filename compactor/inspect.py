"""``compactor inspect``: dump and verify segments, partitions and log dirs, in the spirit of
``kafka-dump-log``. Read-only.

Verification (``verify=True``) collects every problem it finds instead of stopping at the first:

* each batch frames, its CRC matches and its records decode to the declared count;
* batch offsets increase within a segment and stay within ``[segment base, next segment base)``;
* every ``.index`` entry points at a batch start, offsets and positions increase, the batch at
  the position starts at or before the entry's offset and the batch before it ends below it;
* every ``.timeindex`` entry is monotone, names an offset of the segment and a timestamp that
  the segment holds;
* every ``.txnindex`` entry names an ABORT marker of the same producer at its last offset, and
  every ABORT marker whose transaction still has data in the partition has an entry;
* leftovers of an interrupted swap, unreadable checkpoints and producer snapshots are reported.
"""

from __future__ import annotations

import functools

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from compactor import storage
from compactor.codec.checkpoints import ROOT_CHECKPOINTS
from compactor.codec.compression import codec_name
from compactor.codec.indexes import (
    AbortedTxn,
    decode_offset_index,
    decode_time_index,
    decode_txn_index,
)
from compactor.codec.kraft import CONTROL_SCHEMAS, decode_control_value, decode_metadata_record
from compactor.codec.records import ControlType, Record, RecordBatch, parse_control_record
from compactor.codec.segment import iter_batches
from compactor.codec.snapshot import decode_snapshot
from compactor.errors import (
    CompactorError,
    CorruptIndexError,
    CorruptMetadataError,
    LogDirError,
    format_location,
)
from compactor.logdir import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SNAPSHOT_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    file_offset,
    is_partition_dir,
    leftover_names,
    open_log_dir,
    read_leader_epochs,
    read_offset_checkpoint,
    segment_logs,
)
from compactor.metadata import METADATA_DIR_NAME, parse_snapshot_name
from compactor.model import segment_file_prefix


@dataclass(frozen=True, slots=True, kw_only=True)
class Problem:
    """One defect found by ``--verify``."""

    code: str
    message: str
    path: str | None = None
    position: int | None = None
    base_offset: int | None = None

    @classmethod
    def from_error(cls, err: CompactorError) -> Problem:
        return cls(code=err.code, message=err.message, path=err.path, position=err.position,
                   base_offset=err.base_offset)

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "path": self.path,
                "position": self.position, "base_offset": self.base_offset}

    def __str__(self) -> str:
        where = format_location(self.path, self.position, self.base_offset)
        return f"[{self.code}] {self.message}" + (f" {where}" if where else "")


@dataclass(slots=True, kw_only=True)
class SegmentReport:
    """What inspect found in one segment; ``batches`` only when dumping."""

    path: str
    base_offset: int
    size_bytes: int
    batch_count: int = 0
    record_count: int = 0
    first_offset: int | None = None
    next_offset: int | None = None
    max_timestamp: int = -1
    batches: list[dict[str, Any]] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "segment",
            "path": self.path,
            "base_offset": self.base_offset,
            "size_bytes": self.size_bytes,
            "batch_count": self.batch_count,
            "record_count": self.record_count,
            "first_offset": self.first_offset,
            "next_offset": self.next_offset,
            "max_timestamp": self.max_timestamp,
            "batches": self.batches,
            "problems": [p.to_dict() for p in self.problems],
        }


@dataclass(frozen=True, slots=True)
class _BatchSpan:
    """What index verification needs of a batch (the batch's bytes are not kept)."""

    position: int
    base_offset: int
    last_offset: int


@dataclass(slots=True, kw_only=True)
class _TxnTracker:
    """Partition-wide transaction state for the txn-index check."""

    first_data_offset: dict[int, int] = field(default_factory=dict)


def batch_to_dict(batch: RecordBatch, records: list[Record] | None = None, *,
                  metadata: bool = False) -> dict[str, Any]:
    """A batch's header fields (and, when given, its decoded records) for dumps; with
    ``metadata``, each record's payload decoded as a KRaft metadata (or control) record, as
    ``kafka-dump-log --cluster-metadata-decoder`` prints it."""
    out: dict[str, Any] = {
        "base_offset": batch.base_offset,
        "last_offset": batch.last_offset,
        "count": batch.records_count,
        "position": batch.position,
        "size": batch.size_in_bytes,
        "magic": batch.magic,
        "codec": codec_name(batch.compression),
        "crc": batch.crc,
        "partition_leader_epoch": batch.partition_leader_epoch,
        "producer_id": batch.producer_id,
        "producer_epoch": batch.producer_epoch,
        "base_sequence": batch.base_sequence,
        "is_transactional": batch.is_transactional,
        "is_control": batch.is_control,
        "delete_horizon_ms": batch.delete_horizon_ms,
        "timestamp_type": batch.timestamp_type.name,
        "base_timestamp": batch.base_timestamp,
        "max_timestamp": batch.max_timestamp,
    }
    if batch.is_control:
        control = batch.control_record()
        out["control_type"] = control.type.name if control else None
    if records is not None:
        out["records"] = [
            {
                "offset": r.offset,
                "timestamp": r.timestamp,
                "key": _show(r.key),
                "value_size": None if r.value is None else len(r.value),
                "headers": [[k, _show(v)] for k, v in r.headers],
                **({"payload": _payload(batch, r)} if metadata else {}),
            }
            for r in records
        ]
    return out


def _payload(batch: RecordBatch, record: Record) -> dict[str, Any]:
    """A metadata log record's decoded value; a record that does not decode is reported as
    such here (``--verify`` turns it into a problem)."""
    try:
        if batch.is_control:
            control = parse_control_record(record.key, record.value)
            decoded = decode_control_value(int(control.type), record.value)
        else:
            decoded = decode_metadata_record(record.value)  # type: ignore[arg-type]
    except CompactorError as err:
        return {"error": err.message}
    return {"type": decoded.name, "version": decoded.version, "data": dict(decoded.fields)}


def _verify_metadata(batch: RecordBatch, records: list[Record], report: SegmentReport) -> None:
    for r in records:
        payload = _payload(batch, r)
        if "error" in payload and not (batch.is_control and not _kraft_control(r)):
            report.problems.append(Problem(
                code=CorruptMetadataError.code, path=report.path, position=batch.position,
                base_offset=batch.base_offset,
                message=f"metadata record at offset {r.offset}: {payload['error']}"))


def _kraft_control(record: Record) -> bool:
    try:
        return int(parse_control_record(record.key, record.value).type) in CONTROL_SCHEMAS
    except CompactorError:
        return True


def _show(data: bytes | None, limit: int = 64) -> str | None:
    if data is None:
        return None
    text = data[:limit].decode("utf-8", errors="backslashreplace")
    return text + ("..." if len(data) > limit else "")


def inspect_segment(
    log_path: str,
    *,
    dump: bool = True,
    records: bool = False,
    verify: bool = False,
    is_active: bool = True,
    next_segment_base: int | None = None,
    txn: _TxnTracker | None = None,
) -> SegmentReport:
    """Read one ``.log`` file (and, with ``verify``, its indexes), or a KRaft snapshot
    (``.checkpoint``: batches from offset 0, no indexes). Records of the metadata log and its
    snapshots are decoded as metadata records."""
    name = storage.basename(log_path)
    snapshot = parse_snapshot_name(name) is not None
    metadata = snapshot or storage.basename(storage.dirname(log_path)) == METADATA_DIR_NAME
    base = 0 if snapshot else file_offset(name)
    if base is None:
        raise LogDirError("segment file name does not start with a base offset", path=log_path)
    data = storage.read_bytes(log_path)
    report = SegmentReport(path=log_path, base_offset=base, size_bytes=len(data))
    txn = txn if txn is not None else _TxnTracker()
    spans: list[_BatchSpan] = []
    aborts: dict[int, int] = {}  # ABORT marker offset -> producer id
    aborts_with_data: dict[int, int] = {}
    try:
        for batch in iter_batches(data, path=log_path):
            report.batch_count += 1
            report.record_count += batch.records_count
            report.max_timestamp = max(report.max_timestamp, batch.max_timestamp)
            if report.first_offset is None:
                report.first_offset = batch.base_offset
            decoded = None
            if records or verify:
                decoded = _decode_records(batch, report, keep=records or metadata)
            if verify and metadata and decoded is not None:
                _verify_metadata(batch, decoded, report)
                decoded = decoded if records else None
            if verify:
                _verify_offsets(batch, spans[-1] if spans else None, report, base,
                                next_segment_base)
                _track_txn(batch, txn, aborts, aborts_with_data, report)
            spans.append(_BatchSpan(batch.position, batch.base_offset, batch.last_offset))
            if dump:
                report.batches.append(batch_to_dict(batch, decoded, metadata=metadata))
            report.next_offset = batch.next_offset
    except CompactorError as err:
        report.problems.append(Problem.from_error(err.with_location(path=log_path)))
    if verify and not snapshot:
        _verify_indexes(log_path, base, spans, report, is_active, aborts, aborts_with_data)
    return report


def _decode_records(
    batch: RecordBatch, report: SegmentReport, *, keep: bool
) -> list[Record] | None:
    """Decode every record once: kept for a dump, or only checked (the compiled reader's
    records are dropped as they come). A defect becomes a problem of the report."""
    try:
        if keep:
            return batch.records()
        for _ in batch.iter_compiled():
            pass
    except CompactorError as err:
        report.problems.append(Problem.from_error(err.with_location(path=report.path)))
    return None


def _verify_offsets(
    batch: RecordBatch,
    previous: _BatchSpan | None,
    report: SegmentReport,
    base: int,
    next_segment_base: int | None,
) -> None:
    """Offsets increase and stay in ``[base, next_segment_base)``; with every segment checked
    this way, segments cannot overlap either."""

    def problem(message: str) -> None:
        report.problems.append(Problem(code="BAD_OFFSETS", message=message, path=report.path,
                                       position=batch.position, base_offset=batch.base_offset))

    if previous is None and batch.base_offset < base:
        problem(f"first batch starts below the segment base offset {base}")
    if previous is not None and batch.base_offset <= previous.last_offset:
        problem(f"batch does not follow the previous batch's last offset {previous.last_offset}")
    if next_segment_base is not None and batch.last_offset >= next_segment_base:
        problem(f"batch runs into the next segment, which starts at {next_segment_base}")


def _track_txn(
    batch: RecordBatch,
    txn: _TxnTracker,
    aborts: dict[int, int],
    aborts_with_data: dict[int, int],
    report: SegmentReport,
) -> None:
    if not batch.is_transactional:
        return
    if not batch.is_control:
        txn.first_data_offset.setdefault(batch.producer_id, batch.base_offset)
        return
    try:
        control = batch.control_record()
    except CompactorError as err:
        report.problems.append(Problem.from_error(err.with_location(path=report.path)))
        return
    if control is None:  # an emptied marker: carries no type
        return
    first = txn.first_data_offset.pop(batch.producer_id, None)
    if control.type == ControlType.ABORT:
        aborts[batch.base_offset] = batch.producer_id
        if first is not None:
            aborts_with_data[batch.base_offset] = first


def _verify_indexes(
    log_path: str,
    base: int,
    batches: list[_BatchSpan],
    report: SegmentReport,
    is_active: bool,
    aborts: dict[int, int],
    aborts_with_data: dict[int, int],
) -> None:
    prefix = log_path[: -len(LOG_SUFFIX)]
    starts = {b.position: i for i, b in enumerate(batches)}
    last_offset = batches[-1].last_offset if batches else base - 1

    def problem(path: str, message: str, position: int | None = None) -> None:
        report.problems.append(Problem(code=CorruptIndexError.code, message=message, path=path,
                                       position=position, base_offset=base))

    def read(path: str, decode: Callable[..., list[Any]], **kwargs: Any) -> list[Any]:
        if not storage.exists(path):
            return []
        try:
            return decode(storage.read_bytes(path), base, path=path, **kwargs)
        except CompactorError as err:
            report.problems.append(Problem.from_error(err))
            return []

    index_path = prefix + INDEX_SUFFIX
    for slot, entry in enumerate(read(index_path, decode_offset_index,
                                  allow_preallocated=is_active)):
        at = slot * 8
        i = starts.get(entry.position)
        if i is None:
            problem(index_path, f"entry ({entry.offset}, position {entry.position}) does not "
                    "point at a batch start", at)
        elif batches[i].base_offset > entry.offset:
            problem(index_path, f"entry offset {entry.offset} is below the base offset "
                    f"{batches[i].base_offset} of the batch it points at", at)
        elif i > 0 and batches[i - 1].last_offset >= entry.offset:
            problem(index_path, f"entry offset {entry.offset} is not above the previous "
                    f"batch's last offset {batches[i - 1].last_offset}", at)
        elif entry.offset > last_offset:
            problem(index_path, f"entry offset {entry.offset} is past the segment's last "
                    f"offset {last_offset}", at)

    time_path = prefix + TIME_INDEX_SUFFIX
    for slot, t in enumerate(read(time_path, decode_time_index, allow_preallocated=is_active)):
        if not base <= t.offset <= max(last_offset, base):
            problem(time_path, f"entry offset {t.offset} is outside the segment "
                    f"[{base}, {last_offset}]", slot * 12)
        elif t.timestamp > report.max_timestamp:
            problem(time_path, f"entry timestamp {t.timestamp} exceeds the segment's max "
                    f"timestamp {report.max_timestamp}", slot * 12)

    txn_path = prefix + TXN_INDEX_SUFFIX
    txn_entries: list[AbortedTxn] = read(txn_path, decode_txn_index)
    indexed = {}
    for slot, entry in enumerate(txn_entries):
        indexed[entry.last_offset] = entry
        if aborts.get(entry.last_offset) != entry.producer_id:
            problem(txn_path, f"entry for producer {entry.producer_id} names offset "
                    f"{entry.last_offset}, which is not an ABORT marker of that producer",
                    slot * 34)
    for offset, first in aborts_with_data.items():
        entry = indexed.get(offset)
        if entry is None:
            problem(txn_path, f"ABORT marker at offset {offset} (producer "
                    f"{aborts[offset]}) has aborted data from offset {first} but no "
                    "transaction index entry")
        elif entry.first_offset > first:
            problem(txn_path, f"entry for the ABORT marker at {offset} starts at "
                    f"{entry.first_offset}, after the transaction's first data offset {first}")


# ---------------------------------------------------------------------------------------------
# Partitions and log dirs


def inspect_partition(
    partition_dir: str, *, dump: bool = True, records: bool = False, verify: bool = False
) -> Iterator[SegmentReport | Problem]:
    """Yield a report per segment, then partition-level problems."""
    names = storage.list_dir(partition_dir)
    logs = segment_logs(names)
    txn = _TxnTracker()
    for name in sorted(n for n in names if parse_snapshot_name(n) is not None):
        yield inspect_segment(storage.join(partition_dir, name), dump=dump, records=records,
                              verify=verify, is_active=False)
    for i, (_, name) in enumerate(logs):
        nxt = logs[i + 1][0] if i + 1 < len(logs) else None
        yield inspect_segment(storage.join(partition_dir, name), dump=dump, records=records,
                              verify=verify, is_active=nxt is None, next_segment_base=nxt,
                              txn=txn)
    if not verify:
        return
    for name in leftover_names(names):
        yield Problem(code="SWAP_LEFTOVER", path=storage.join(partition_dir, name),
                      message="leftover of an interrupted swap or deletion; run "
                              "`compactor recover` (or start a broker) to resolve it")
    for name in names:
        path = storage.join(partition_dir, name)
        if name.endswith(SNAPSHOT_SUFFIX) and file_offset(name) is not None:
            yield from _problems_of(lambda: decode_snapshot(storage.read_bytes(path), path=path))
        elif name.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)):
            off = file_offset(name)
            if off is not None and not storage.exists(
                    storage.join(partition_dir, segment_file_prefix(off) + LOG_SUFFIX)):
                yield Problem(code="ORPHAN_INDEX", path=path,
                              message="index file has no .log segment (Kafka deletes it on load)")
    yield from _problems_of(lambda: read_leader_epochs(partition_dir))


def _problems_of(action: Callable[[], object]) -> Iterator[Problem]:
    try:
        action()
    except CompactorError as err:
        yield Problem.from_error(err)


def inspect_path(
    path: str, *, dump: bool = True, records: bool = False, verify: bool = False
) -> Iterator[SegmentReport | Problem]:
    """Inspect a segment file, a partition directory or a whole log dir."""
    if not storage.exists(path):
        raise LogDirError("path does not exist", path=path)
    if not storage.is_dir(path):
        if not path.endswith(LOG_SUFFIX) and parse_snapshot_name(storage.basename(path)) is None:
            raise LogDirError("not a .log segment, KRaft snapshot (.checkpoint), partition "
                              "directory or log dir", path=path)
        yield inspect_segment(path, dump=dump, records=records, verify=verify)
        return
    if is_partition_dir(path):
        yield from inspect_partition(path, dump=dump, records=records, verify=verify)
        return
    log_dir = open_log_dir(path)
    if verify:
        copies = {c.name for c in log_dir.copies}
        for name in sorted(set(log_dir.ignored) - copies):
            yield Problem(code="FOREIGN_DIRECTORY", path=storage.join(path, name),
                          message="a directory that is neither a partition nor a replica copy: "
                                  "a Kafka broker cannot parse its name and takes the whole log "
                                  "dir offline (LogManager.loadLogs); move it out of the log dir")
    if log_dir.metadata_log is not None:
        yield from inspect_partition(log_dir.metadata_log, dump=dump, records=records,
                                     verify=verify)
    if verify:
        for name in ROOT_CHECKPOINTS:
            yield from _problems_of(functools.partial(read_offset_checkpoint, path, name))
    for copy in log_dir.copies_of(lambda _: True):
        yield from inspect_partition(storage.join(path, copy.name), dump=dump, records=records,
                                     verify=verify)
