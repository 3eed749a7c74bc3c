"""``compactor inspect``: dump and verify segments, partitions and log dirs, in the spirit of
``kafka-dump-log``. Read-only.

Verification (``verify=True``) collects every problem it finds instead of stopping at the first:

* each batch frames, its CRC matches and its records decode to the declared count;
* the offset and index checks of :mod:`compactor.cleaner.verify`, the same that gate ``plan``,
  ``compact`` and ``erase apply``;
* leftovers of an interrupted swap, unreadable checkpoints and producer snapshots, orphan
  indexes, directories and files that do not belong in a log dir are reported.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from compactor import progress
from compactor.cleaner.policy import BatchHeader
from compactor.cleaner.scan import batch_header
from compactor.cleaner.verify import index_problems, offset_problems, txn_problems
from compactor.cluster.metadata import parse_snapshot_name
from compactor.codec.checkpoints import ROOT_CHECKPOINTS
from compactor.codec.compression import codec_name
from compactor.codec.indexes import decode_offset_index, decode_time_index, decode_txn_index
from compactor.codec.kraft import CONTROL_SCHEMAS, decode_control_value, decode_metadata_record
from compactor.codec.records import (
    INT32_MAX,
    Record,
    RecordBatch,
    add_sequence,
    parse_control_record,
)
from compactor.codec.segment import iter_batches
from compactor.codec.snapshot import decode_snapshot
from compactor.errors import (
    CompactorError,
    CorruptMetadataError,
    LinkedFileError,
    LogDirError,
    format_location,
)
from compactor.log import storage
from compactor.log.layout import (
    check_meta_properties,
    file_offset,
    index_files,
    is_partition_dir,
    is_partition_file,
    leftover_names,
    open_log_dir,
    read_leader_epochs,
    read_offset_checkpoint,
    segment_logs,
    segment_path,
)
from compactor.log.names import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    METADATA_DIR_NAME,
    SNAPSHOT_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
)
from compactor.model import segment_file_prefix


@dataclass(frozen=True, slots=True, kw_only=True)
class Problem:
    """One defect found by ``--verify``."""

    code: str
    message: str
    path: str | None = None
    position: int | None = None
    base_offset: int | None = None
    knock_on: int = 0  # index problems that follow from this one, not listed on their own

    @classmethod
    def from_error(cls, err: CompactorError, *, knock_on: int = 0) -> Problem:
        return cls(code=err.code, message=err.message, path=err.path, position=err.position,
                   base_offset=err.base_offset, knock_on=knock_on)

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "path": self.path,
                "position": self.position, "base_offset": self.base_offset,
                "knock_on": self.knock_on}

    def __str__(self) -> str:
        where = format_location(self.path, self.position, self.base_offset)
        return (f"[{self.code}] {self.message}" + (f" {where}" if where else "")
                + (f" (and {self.knock_on} index problem(s) that follow from it: their entries "
                   f"point past the unreadable bytes)" if self.knock_on else ""))


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
            "problems": [p.to_dict() for p in self.problems],
        }


@dataclass(slots=True, kw_only=True)
class _TxnTracker:
    """The transactional batches of a partition's segments, for the partition-wide
    txn-index check (:func:`compactor.cleaner.verify.txn_problems`)."""

    headers: list[BatchHeader] = field(default_factory=list)


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
        "last_sequence": batch.last_sequence,
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
        out["records"] = [_record_to_dict(batch, r, metadata=metadata) for r in records]
    return out


def _record_to_dict(batch: RecordBatch, r: Record, *, metadata: bool) -> dict[str, Any]:
    """One record's fields (``kafka-dump-log``'s, ``DumpLogSegments.printRecordMetadata``):
    sizes are -1 for null; ``sequence`` is the batch's base sequence plus the record's offset
    delta (-1 without a producer); ``value`` is the payload as UTF-8 text, in full."""
    out: dict[str, Any] = {
        "offset": r.offset,
        "timestamp": r.timestamp,
        "key": _show(r.key),
        "key_size": -1 if r.key is None else len(r.key),
        "value_size": None if r.value is None else len(r.value),
        "headers": [[k, _show(v)] for k, v in r.headers],
    }
    if batch.magic >= 2:
        out["sequence"] = add_sequence(batch.base_sequence, r.offset - batch.base_offset)
    if batch.is_control:
        try:
            control = parse_control_record(r.key, r.value)
        except CompactorError:
            control = None
        if control is not None and control.coordinator_epoch is not None:
            out["end_txn_marker"] = {"type": control.type.name,
                                     "coordinator_epoch": control.coordinator_epoch}
    if metadata:
        out["payload"] = _payload(batch, r)
    elif not batch.is_control:
        out["value"] = _show(r.value, limit=None)
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


#: Control characters as ``\\xNN``: a dump keeps one line per record (Kafka's StringDecoder
#: prints them raw).
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F)}


def _show(data: bytes | None, limit: int | None = 64) -> str | None:
    """Bytes as UTF-8 text (undecodable bytes and control characters as ``\\xNN``), cut at
    ``limit`` bytes."""
    if data is None:
        return None
    cut = data if limit is None else data[:limit]
    text = cut.decode("utf-8", errors="backslashreplace").translate(_CONTROLS)
    return text + ("..." if limit is not None and len(data) > limit else "")


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
    try:
        data = storage.read_bytes(log_path)
    except CompactorError as err:  # a dangling symlink, a permission: this segment's problem
        report = SegmentReport(path=log_path, base_offset=base, size_bytes=0)
        report.problems.append(Problem.from_error(err))
        return report
    report = SegmentReport(path=log_path, base_offset=base, size_bytes=len(data))
    headers: list[BatchHeader] = []
    corruption: CompactorError | None = None
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
                headers.append(batch_header(batch, base))
            if dump:
                report.batches.append(batch_to_dict(batch, decoded, metadata=metadata))
            report.next_offset = batch.next_offset
    except CompactorError as err:
        corruption = err.with_location(path=log_path)
    knock_on: list[CompactorError] = []
    found: list[CompactorError] = []
    if verify:
        found = offset_problems(log_path, base, next_segment_base, headers)
        if not snapshot:
            readable_end = (None if corruption is None else
                            corruption.position if corruption.position is not None else 0)
            try:
                found += index_problems(log_path, base, headers, is_active=is_active,
                                        readable_end=readable_end, knock_on=knock_on,
                                        **index_files(log_path))
            except CompactorError as err:  # an index that cannot be read at all
                found.append(err)
            if txn is not None:
                txn.headers += [h for h in headers if h.is_transactional]
    if corruption is not None:
        report.problems.append(Problem.from_error(corruption, knock_on=len(knock_on)))
    report.problems += [Problem.from_error(e) for e in found]
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


# ---------------------------------------------------------------------------------------------
# Partitions and log dirs


def inspect_partition(
    partition_dir: str, *, dump: bool = True, records: bool = False, verify: bool = False
) -> Iterator[SegmentReport | Problem]:
    """Yield a report per segment, then partition-level problems."""
    names = storage.list_dir(partition_dir)
    # a file of the partition that is a symbolic link: every command refuses the partition
    # (LINKED_FILE, compactor.log.layout.load_partition); one pointing nowhere is not read
    symlinks = {n: link.what for n, link in storage.links(partition_dir).items()
                if link.symlink and (is_partition_file(n) or n.endswith(LOG_SUFFIX))}
    if verify:
        for name, what in sorted(symlinks.items()):
            yield Problem(code=LinkedFileError.code, path=storage.join(partition_dir, name),
                          base_offset=file_offset(name),
                          message=f"{name} is a {what}: every command refuses the partition "
                                  "(a swap or deletion would replace only the link); move the "
                                  "file it points to in place of the link")
    names = [n for n in names if n not in symlinks
             or storage.exists(storage.join(partition_dir, n))]
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
    entries = []
    for base, _ in logs:
        path = segment_path(partition_dir, base, TXN_INDEX_SUFFIX)
        if storage.exists(path):
            with contextlib.suppress(CompactorError):  # reported with its segment
                entries += decode_txn_index(storage.read_bytes(path), base, path=path)
    for err in txn_problems(partition_dir, txn.headers, entries):
        yield Problem.from_error(err)
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


INDEX_KINDS = {INDEX_SUFFIX: "index", TIME_INDEX_SUFFIX: "timeindex",
               TXN_INDEX_SUFFIX: "txnindex", SNAPSHOT_SUFFIX: "snapshot"}


def _first_sequence(last_sequence: int, offset_delta: int) -> int:
    """``DefaultRecordBatch.decrementSequence`` (``BatchMetadata.firstSeq``)."""
    if last_sequence < offset_delta:
        return INT32_MAX - (offset_delta - last_sequence) + 1
    return last_sequence - offset_delta


def dump_index_file(path: str) -> dict[str, Any]:
    """The entries of an ``.index``, ``.timeindex``, ``.txnindex`` or producer ``.snapshot``
    file as ``kafka-dump-log`` reads them (offsets absolute; the zero slots a live broker
    preallocates are not entries).

    Raises:
        CorruptIndexError, CorruptCheckpointError: the file does not decode.
    """
    name = storage.basename(path)
    suffix = name[name.rfind("."):]
    kind = INDEX_KINDS[suffix]
    base = file_offset(name)
    if base is None:
        raise LogDirError("file name does not start with a base offset", path=path)
    data = storage.read_bytes(path)
    entries: list[dict[str, Any]]
    if kind == "index":
        entries = [{"offset": e.offset, "position": e.position} for e in
                   decode_offset_index(data, base, path=path, allow_preallocated=True)]
    elif kind == "timeindex":
        entries = [{"timestamp": e.timestamp, "offset": e.offset} for e in
                   decode_time_index(data, base, path=path, allow_preallocated=True)]
    elif kind == "txnindex":
        entries = [{"version": t.version, "producer_id": t.producer_id,
                    "first_offset": t.first_offset, "last_offset": t.last_offset,
                    "last_stable_offset": t.last_stable_offset}
                   for t in decode_txn_index(data, base, path=path)]
    else:
        entries = [{
            "producer_id": e.producer_id, "producer_epoch": e.epoch,
            "coordinator_epoch": e.coordinator_epoch,
            "current_txn_first_offset": (e.current_txn_first_offset
                                         if e.current_txn_first_offset >= 0 else None),
            "last_timestamp": e.timestamp,
            "batch": None if e.last_offset < 0 else {
                "first_sequence": _first_sequence(e.last_sequence, e.offset_delta),
                "last_sequence": e.last_sequence, "last_offset": e.last_offset,
                "offset_delta": e.offset_delta, "timestamp": e.timestamp},
        } for e in decode_snapshot(data, path=path)]
    return {"type": kind, "kind": kind, "path": path, "base_offset": base, "entries": entries}


def inspect_path(
    path: str, *, dump: bool = True, records: bool = False, verify: bool = False
) -> Iterator[SegmentReport | Problem]:
    """Inspect a segment file, a partition directory or a whole log dir."""
    if not storage.exists(path):
        raise LogDirError("path does not exist", path=path)
    if not storage.is_dir(path):
        if not path.endswith(LOG_SUFFIX) and parse_snapshot_name(storage.basename(path)) is None:
            raise LogDirError("not a .log segment, KRaft snapshot (.checkpoint), .index, "
                              ".timeindex, .txnindex, producer .snapshot, partition directory "
                              "or log dir", path=path)
        yield inspect_segment(path, dump=dump, records=records, verify=verify)
        return
    if is_partition_dir(path):
        yield from inspect_partition(path, dump=dump, records=records, verify=verify)
        return
    log_dir = open_log_dir(path)
    if verify:
        for entry in log_dir.foreign:
            code = {"directory": "FOREIGN_DIRECTORY", "file": "FOREIGN_FILE"}.get(
                entry.kind, "DANGLING_SYMLINK")
            yield Problem(code=code, path=storage.join(path, entry.name),
                          message=f"{entry.reason}; move it out of the log dir")
        for refused in log_dir.refused:
            yield Problem.from_error(refused.error)
    dirs = [c.name for c in log_dir.copies_of(lambda _: True)]
    dirs += [r.name for r in log_dir.refused]  # still data on disk: checked all the same
    if log_dir.metadata_log is not None:
        dirs.insert(0, storage.basename(log_dir.metadata_log))
    if verify:
        yield from _problems_of(functools.partial(check_meta_properties, path))
        for name in ROOT_CHECKPOINTS:
            yield from _problems_of(functools.partial(read_offset_checkpoint, path, name))
    with progress.step("inspect", total=len(dirs), unit="partitions") as step:
        for name in dirs:
            yield from _isolated(storage.join(path, name), dump=dump, records=records,
                                 verify=verify)
            step.advance()


def _isolated(partition_dir: str, **kwargs: Any) -> Iterator[SegmentReport | Problem]:
    """:func:`inspect_partition`, with a failure to read the directory or one of its files
    (a dangling symlink, a permission) reported as a problem of that directory alone."""
    try:
        yield from inspect_partition(partition_dir, **kwargs)
    except CompactorError as err:
        yield Problem.from_error(err.with_location(path=partition_dir))
