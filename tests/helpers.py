"""Helpers shared by the compaction tests: reading partitions back, comparing batches, and
the invariants every cleaned log satisfies (what Kafka's ``LogCleanerTest`` asserts)."""

from __future__ import annotations

import ctypes
import hashlib
import json
import mmap
import os
import struct
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import crc32c
import pytest
from aiokafka.record.memory_records import MemoryRecords as AioMemoryRecords
from kafka.record.memory_records import MemoryRecords as KpMemoryRecords

from compactor.codec.indexes import decode_txn_index
from compactor.codec.records import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    PARTITION_LEADER_EPOCH_OFFSET,
    RecordBatch,
)
from compactor.codec.segment import iter_batches
from compactor.log import storage
from compactor.log.layout import segment_logs
from compactor.tools.ops.inspect import Problem, inspect_path

# Segment files the suite's commands wrote into ``small_log`` copies (tests/conftest.py), for
# Kafka's DumpLogSegments at the end of the run (tests/kafka/test_dumped_by_kafka.py).
WRITTEN_SEGMENT_FILES: list[Path] = []


def cached_pages(path: str | Path) -> int:
    """How many of the file's pages are in the page cache, as the kernel reports it
    (``mincore(2)`` on a private mapping of the file: mapping it reads nothing)."""
    size = os.path.getsize(path)
    if size == 0:
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
    with open(path, "rb") as handle:
        view = mmap.mmap(handle.fileno(), size, access=mmap.ACCESS_COPY)
    try:
        start = ctypes.c_char.from_buffer(view)
        resident = (ctypes.c_ubyte * -(-size // mmap.PAGESIZE))()
        failed = libc.mincore(ctypes.addressof(start), size, resident)
        del start  # the mapping closes only once no buffer of it is exported
        if failed:
            raise OSError(ctypes.get_errno(), f"mincore {path}")
        return sum(page & 1 for page in resident)
    finally:
        view.close()


def inspect_problems(path: Path) -> list[Problem]:
    """Every problem ``compactor inspect --verify`` finds under ``path``."""
    return [i for i in inspect_path(str(path), dump=False, records=False, verify=True)
            for i in ([i] if isinstance(i, Problem) else i.problems)]


REPORT_SCHEMA = json.loads((Path(__file__).resolve().parents[1] / "schemas"
                            / "report.schema.json").read_text())


def check_report(report: Mapping) -> Mapping:
    """``report`` against the published JSON Schema (``schemas/report.schema.json``); every
    report a test parses through these helpers is checked."""
    import jsonschema

    if report.get("type") == "report":
        jsonschema.validate(report, REPORT_SCHEMA,
                            cls=jsonschema.Draft202012Validator)
    return report


def report_line(capsys: pytest.CaptureFixture[str]) -> dict:
    """The one JSON report (or error) line a command printed (a report checked against the
    published schema)."""
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]
    (report,) = [line for line in lines if line.get("type") in ("report", "error")]
    check_report(report)
    return report


def segment_bytes(partition_dir: Path) -> dict[int, bytes]:
    """``{base offset: .log bytes}`` of a partition directory."""
    names = storage.list_dir(str(partition_dir))
    return {base: (partition_dir / name).read_bytes() for base, name in segment_logs(names)}


def partition_files(partition_dir: Path) -> dict[str, bytes]:
    """``{name: bytes}`` of every file of a partition directory that belongs to a segment
    (``.log``, indexes, producer snapshots; not the ``.cleaned``, ``.swap`` and ``.deleted``
    files of a swap): what "exactly the old or the new bytes" compares."""
    return {p.name: p.read_bytes() for p in sorted(partition_dir.iterdir())
            if p.is_file() and p.name[:20].isdigit()
            and not p.name.endswith((".cleaned", ".swap", ".deleted"))}


def txn_entries(partition_dir: Path) -> dict[int, list]:
    out = {}
    for base, _ in segment_logs(storage.list_dir(str(partition_dir))):
        path = partition_dir / f"{base:020d}.txnindex"
        out[base] = decode_txn_index(path.read_bytes(), base) if path.exists() else []
    return out


def tree_digest(root: Path) -> dict[str, str]:
    """Digest of every file under ``root`` (names relative), for "nothing changed" checks."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != ".lock"}


def batch_view(batch: RecordBatch) -> tuple:
    """Everything of a batch but its compressed bytes: header fields and decoded records."""
    return (
        batch.base_offset, batch.last_offset, batch.magic, batch.attributes,
        batch.partition_leader_epoch, batch.producer_id, batch.producer_epoch,
        batch.base_sequence, batch.records_count, batch.max_timestamp,
        batch.delete_horizon_ms,
        tuple((r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch.records()),
    )


def segment_view(data: bytes) -> list[tuple]:
    return [batch_view(b) for b in iter_batches(data)]


def records_of(logs: Mapping[int, bytes]) -> dict[int, object]:
    """``{offset: Record}`` over all segments."""
    out = {}
    for data in logs.values():
        for batch in iter_batches(data):
            for r in batch.records():
                out[r.offset] = r
    return out


def aborted_offsets(logs: Mapping[int, bytes]) -> set[int]:
    """Offsets of data records in aborted transactions, found by replaying markers (an
    independent re-derivation, not the engine's txn index bookkeeping)."""
    from compactor.codec.records import ControlType

    pending: dict[int, list[int]] = {}
    aborted: set[int] = set()
    for base in sorted(logs):
        for batch in iter_batches(logs[base]):
            if batch.is_control:
                control = batch.control_record()
                offsets = pending.pop(batch.producer_id, [])
                if control is not None and control.type == ControlType.ABORT:
                    aborted.update(offsets)
            elif batch.is_transactional:
                pending.setdefault(batch.producer_id, []).extend(
                    r.offset for r in batch.records())
    return aborted


def check_invariants(before: Mapping[int, bytes], after: Mapping[int, bytes], *,
                     first_dirty: int, end_offset: int, now_ms: int,
                     legacy_retain: Mapping[int, bool]) -> None:
    """Assert the round's invariants (untouched tail, base offsets only disappear, ...) for one
    round with an unlimited map."""
    # 1. untouched tail, base offsets only disappear
    assert set(after) <= set(before)
    for base, data in before.items():
        if base >= end_offset:
            assert after[base] == data, f"segment {base} above the round changed"
    # 2. every output record is an input record; offsets strictly increase
    old = records_of(before)
    seen = []
    for base in sorted(after):
        for batch in iter_batches(after[base]):
            for r in batch.records():
                assert old[r.offset] == r, f"record {r.offset} was altered"
                seen.append(r.offset)
    assert seen == sorted(set(seen)), "offsets do not strictly increase"
    # 3. presence of each data record below the end offset
    aborted = aborted_offsets(before)
    latest: dict[bytes, int] = {}
    meta: dict[int, tuple] = {}
    for base in sorted(before):
        for batch in iter_batches(before[base]):
            for r in batch.records():
                meta[r.offset] = (batch, base)
                if (not batch.is_control and r.key is not None and r.offset not in aborted
                        and first_dirty <= r.offset < end_offset):
                    latest[r.key] = max(latest.get(r.key, -1), r.offset)
    present = set(seen)
    for offset, r in old.items():
        batch, base = meta[offset]
        if offset >= end_offset or batch.is_control:
            continue
        if batch.magic >= 2:
            horizon = batch.delete_horizon_ms
            retain = horizon is None or now_ms < horizon
        else:
            retain = legacy_retain[base]
        expected = (offset not in aborted and r.key is not None
                    and latest.get(r.key, -1) <= offset and (r.value is not None or retain))
        assert (offset in present) == expected, (
            f"record {offset} (key {r.key!r}) present={offset in present}, expected={expected}")
    # 4. v2 batches keep their header identity
    old_batches = {b.base_offset: b for data in before.values() for b in iter_batches(data)}
    for data in after.values():
        for b in iter_batches(data):
            src = old_batches.get(b.base_offset)
            if src is None or src.magic < 2 or b.base_offset >= end_offset:
                continue
            if b.records_count == 0 and b.producer_id == -1 and not b.is_control:
                continue  # a placeholder header ending a group (README: differences)
            assert (b.last_offset, b.producer_id, b.producer_epoch, b.base_sequence,
                    b.partition_leader_epoch, b.compression, b.timestamp_type,
                    b.is_transactional, b.is_control) == (
                src.last_offset, src.producer_id, src.producer_epoch, src.base_sequence,
                src.partition_leader_epoch, src.compression, src.timestamp_type,
                src.is_transactional, src.is_control)
            if any(r.value is None for r in b.records()) and not b.is_control:
                assert b.delete_horizon_ms is not None, f"batch {b.base_offset} lacks a horizon"


def reference_round(log_dir: Path, configs: Mapping[str, str], now_ms: int) -> dict:
    """``{partition dir name: (PartitionInput, .log bytes by base, ReferenceRound)}``."""
    from compactor.config import resolve_topic_config
    from compactor.log.layout import open_log_dir, read_offset_checkpoint
    from compactor.maintenance.compact import load_partition_input
    from compactor.maintenance.options import MaintenanceOptions
    from tests.reference import compact_partition

    opts = MaintenanceOptions(log_dir=str(log_dir), now_ms=now_ms, assume_kafka_defaults=True,
                              config_all=dict(configs))
    checkpoints = {name: read_offset_checkpoint(str(log_dir), name) for name in (
        "cleaner-offset-checkpoint", "log-start-offset-checkpoint",
        "replication-offset-checkpoint")}
    out = {}
    for tp in open_log_dir(str(log_dir)).partitions:
        cfg = resolve_topic_config(tp.topic, configs)
        inp = load_partition_input(str(log_dir), tp, cfg, opts, checkpoints)
        logs = segment_bytes(log_dir / tp.dir_name)
        out[tp.dir_name] = (inp, logs, compact_partition(inp, logs))
    return out


@contextmanager
def lock_held_by_other_process(log_dir: Path) -> Iterator[int]:
    """Another Python process holds the log dir's broker lock for the duration (its pid)."""
    code = ("import sys\nfrom compactor.log import storage\n"
            "with storage.log_dir_lock(sys.argv[1]):\n print('LOCKED', flush=True)\n"
            " sys.stdin.read()\n")
    holder = subprocess.Popen([sys.executable, "-c", code, str(log_dir)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "LOCKED"
        yield holder.pid
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)


def read_with_independent_parsers(data: bytes) -> int:
    """Records of a segment as aiokafka's and kafka-python's readers count them (CRCs checked;
    both must agree)."""
    count = 0
    aio = AioMemoryRecords(data)
    while aio.has_next():
        batch = aio.next_batch()
        if batch.magic == 2:
            assert batch.validate_crc()
        count += sum(1 for _ in batch)
    kp = KpMemoryRecords(data)
    kp_count = 0
    while kp.has_next():
        batch = kp.next_batch()
        if batch.magic == 2:
            assert batch.validate_crc()
        kp_count += sum(1 for _ in batch)
    assert kp_count == count
    return count


def topic_lines(partitions: list[dict]) -> list[dict]:
    """A report's partition lines without the KRaft metadata log's, which must be there (when
    the log dir holds one) as ``skipped`` with reason ``metadata_log``."""
    meta = [p for p in partitions if p.get("reason") == "metadata_log"]
    assert all(p["topic"] == "__cluster_metadata" and p["status"] == "skipped" for p in meta)
    return [p for p in partitions if p.get("reason") != "metadata_log"]


def cli_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    """Run the ``compactor`` command in-process: its exit code and its last JSON line."""
    from compactor.cli import main

    code = main([*args])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()
             if line.startswith("{")]
    if lines:
        check_report(lines[-1])
    return code, lines[-1] if lines else {}


# ---------------------------------------------------------------------------------------------
# Batches patched where producer-side builders cannot reach


def with_partition_leader_epoch(entry: bytes, epoch: int) -> bytes:
    """A copy of a v2 batch with its partition leader epoch replaced (not covered by the
    CRC)."""
    at = PARTITION_LEADER_EPOCH_OFFSET
    return entry[:at] + struct.pack(">i", epoch) + entry[at + 4:]


def with_attributes(entry: bytes, attributes: int) -> bytes:
    """A copy of a v2 batch with new attributes and a recomputed CRC (bits producer-side
    builders cannot set: control, delete horizon)."""
    patched = bytearray(entry)
    struct.pack_into(">h", patched, ATTRIBUTES_OFFSET, attributes)
    struct.pack_into(">I", patched, CRC_OFFSET,
                     crc32c.crc32c(bytes(patched[ATTRIBUTES_OFFSET:])))
    return bytes(patched)


def varint_size(value: int) -> int:
    """Bytes of ``value`` as a zigzag varint (``ByteUtils.sizeOfVarlong``), counted here
    independently of the codec's encoder."""
    unsigned = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    size = 1
    while unsigned >= 0x80:
        unsigned >>= 7
        size += 1
    return size


def init_ledger(state_dir: object) -> None:
    """``compactor erase init``: a state dir takes erasure requests once its ledger exists."""
    from compactor.state import tables as state_tables

    state_tables.init(str(state_dir))
