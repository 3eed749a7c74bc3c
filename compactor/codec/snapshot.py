"""Producer state snapshots ``<offset>.snapshot`` (Kafka's ``ProducerStateManager``,
``ProducerSnapshot.json``).

Grammar (big-endian)::

    Snapshot => Version:int16(=1) Crc:uint32 Count:int32 Entry{Count}
    Crc      => CRC-32C of every byte after the Crc field
    Entry    => ProducerId:int64 Epoch:int16 LastSequence:int32 LastOffset:int64
                OffsetDelta:int32 Timestamp:int64 CoordinatorEpoch:int32
                CurrentTxnFirstOffset:int64 (-1 = no open transaction)      46 bytes
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

import crc32c

from compactor.errors import CorruptCheckpointError

SNAPSHOT_VERSION = 1
_HEAD = struct.Struct(">hIi")
_ENTRY = struct.Struct(">qhiqiqiq")


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerSnapshotEntry:
    """One producer's state at the snapshot offset."""

    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int


def decode_snapshot(data: bytes, *, path: str | None = None) -> list[ProducerSnapshotEntry]:
    """Decode a producer snapshot, checking version, CRC and that every byte is an entry."""
    if len(data) < _HEAD.size:
        raise CorruptCheckpointError(
            f"producer snapshot is {len(data)} bytes, shorter than its {_HEAD.size}-byte header",
            path=path,
            position=0,
        )
    version, crc, count = _HEAD.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise CorruptCheckpointError(
            f"producer snapshot has version {version}, expected {SNAPSHOT_VERSION}",
            path=path,
            position=0,
        )
    computed = crc32c.crc32c(data[6:])
    if computed != crc:
        raise CorruptCheckpointError(
            f"producer snapshot CRC-32C mismatch: stored {crc:#010x}, computed {computed:#010x}",
            path=path,
            position=2,
        )
    expected = _HEAD.size + count * _ENTRY.size
    if count < 0 or expected != len(data):
        raise CorruptCheckpointError(
            f"producer snapshot declares {count} entries ({expected} bytes) but is "
            f"{len(data)} bytes",
            path=path,
            position=6,
        )
    return [
        ProducerSnapshotEntry(
            producer_id=f[0],
            epoch=f[1],
            last_sequence=f[2],
            last_offset=f[3],
            offset_delta=f[4],
            timestamp=f[5],
            coordinator_epoch=f[6],
            current_txn_first_offset=f[7],
        )
        for f in (_ENTRY.unpack_from(data, _HEAD.size + i * _ENTRY.size) for i in range(count))
    ]


def encode_snapshot(entries: Sequence[ProducerSnapshotEntry]) -> bytes:
    """Encode a producer snapshot (used by the generator and tests)."""
    body = struct.pack(">i", len(entries)) + b"".join(
        _ENTRY.pack(
            e.producer_id,
            e.epoch,
            e.last_sequence,
            e.last_offset,
            e.offset_delta,
            e.timestamp,
            e.coordinator_epoch,
            e.current_txn_first_offset,
        )
        for e in entries
    )
    return struct.pack(">hI", SNAPSHOT_VERSION, crc32c.crc32c(body)) + body
