"""Every bad input raises a specific error from one tree, naming file, position and offset."""

from __future__ import annotations

import struct

import crc32c
import pytest

from compactor.codec.checkpoints import parse_leader_epoch_checkpoint, parse_offset_checkpoint
from compactor.codec.compression import Codec
from compactor.codec.indexes import decode_offset_index, decode_time_index, decode_txn_index
from compactor.codec.legacy import encode_message
from compactor.codec.records import NewRecord, NewRecordBatch, encode_batch
from compactor.codec.segment import decode_segment, iter_batches
from compactor.codec.snapshot import ProducerSnapshotEntry, decode_snapshot, encode_snapshot
from compactor.errors import (
    CompactorError,
    CorruptCheckpointError,
    CorruptIndexError,
    CorruptSegmentError,
    CrcMismatchError,
    LogDirError,
    TruncatedSegmentError,
    UnsupportedFormatError,
)
from compactor.log.layout import load_partition, open_log_dir

PATH = "/logs/t-0/00000000000000000000.log"


def batch(base: int, n: int = 3, codec: Codec = Codec.NONE) -> bytes:
    return encode_batch(NewRecordBatch(base_offset=base, compression=codec, records=[
        NewRecord(offset_delta=i, timestamp=1_700_000_000_000 + i, key=b"k%d" % i,
                  value=b"v" * 20) for i in range(n)]))


GOOD = batch(0) + batch(3)
SECOND = len(batch(0))


def expect(exc: type[CompactorError], data: bytes, position: int, base_offset: int | None,
           match: str = "") -> CompactorError:
    with pytest.raises(exc, match=match) as info:
        decode_segment(data, path=PATH)
    err = info.value
    assert (err.path, err.position, err.base_offset) == (PATH, position, base_offset)
    assert PATH in str(err) and f"byte position {position}" in str(err)
    assert "remedy" in str(err)
    return err


def test_truncated_batch() -> None:
    expect(TruncatedSegmentError, GOOD[:-5], SECOND, 3, "truncated batch")


def test_bad_crc() -> None:
    data = bytearray(GOOD)
    data[SECOND + 70] ^= 0xFF
    expect(CrcMismatchError, bytes(data), SECOND, 3, "CRC-32C mismatch")


def test_length_past_end_of_file() -> None:
    data = bytearray(GOOD)
    struct.pack_into(">i", data, SECOND + 8, 10_000)
    expect(TruncatedSegmentError, bytes(data), SECOND, 3, "only")


@pytest.mark.parametrize("size", [-1, -2**31, 0, 13])
def test_negative_or_too_small_length(size: int) -> None:
    data = bytearray(GOOD)
    struct.pack_into(">i", data, SECOND + 8, size)
    expect(CorruptSegmentError, bytes(data), SECOND, 3, f"size {size}")


def test_unknown_magic() -> None:
    data = bytearray(GOOD)
    data[SECOND + 16] = 7
    expect(UnsupportedFormatError, bytes(data), SECOND, 3, "unknown magic 7")


def test_unknown_codec() -> None:
    data = bytearray(batch(0))
    struct.pack_into(">h", data, 21, 6)  # codec id 6 does not exist
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    expect(UnsupportedFormatError, bytes(data), 0, 0, "unknown compression codec id 6")


@pytest.mark.parametrize("garbage", [b"\x00", b"\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a"])
def test_trailing_garbage(garbage: bytes) -> None:
    expect(TruncatedSegmentError, GOOD + garbage, len(GOOD), None if len(garbage) < 8 else
           struct.unpack(">q", garbage[:8])[0], "trailing")


def test_zero_filled_tail_of_preallocated_segment() -> None:
    expect(CorruptSegmentError, GOOD + bytes(64), len(GOOD), 0, "preallocated")


def test_records_that_do_not_match_the_header() -> None:
    data = bytearray(batch(0))
    struct.pack_into(">i", data, 57, 5)  # claims 5 records, holds 3
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    expect(CorruptSegmentError, bytes(data), 0, 0, "declares 5 records but holds 3|record 3")


def test_garbage_inside_a_compressed_batch() -> None:
    data = bytearray(batch(0, codec=Codec.ZSTD))
    data[70:80] = b"\xff" * 10
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    expect(CorruptSegmentError, bytes(data), 0, 0, "cannot be decoded")


def test_legacy_message_crc_and_fields() -> None:
    good = encode_message(offset=9, magic=1, key=b"k", value=b"v", timestamp=5)
    bad = bytearray(good)
    bad[-1] ^= 0x01
    expect(CrcMismatchError, GOOD + bytes(bad), len(GOOD), 9, "CRC-32 mismatch")
    zstd_wrapper = encode_message(offset=9, magic=1, key=None, value=b"x", timestamp=5,
                                  attributes=int(Codec.ZSTD))
    expect(UnsupportedFormatError, zstd_wrapper, 0, 9, "zstd")


def test_crc_skip_is_explicit() -> None:
    data = bytearray(GOOD)
    data[SECOND + 70] ^= 0xFF
    assert len(list(iter_batches(bytes(data), verify_crc=False))) == 2


# --- indexes ------------------------------------------------------------------------------

def test_index_length_not_multiple() -> None:
    with pytest.raises(CorruptIndexError, match="multiple of 8") as info:
        decode_offset_index(b"\x00" * 12, 0, path="x.index")
    assert info.value.path == "x.index"


def test_index_entries_must_increase() -> None:
    data = struct.pack(">iiii", 10, 100, 5, 200)
    with pytest.raises(CorruptIndexError, match="does not follow") as info:
        decode_offset_index(data, 1000, path="x.index")
    assert info.value.position == 8 and info.value.base_offset == 1000


def test_time_index_going_back() -> None:
    data = struct.pack(">qiqi", 50, 1, 40, 2)
    with pytest.raises(CorruptIndexError, match="goes back") as info:
        decode_time_index(data, 0, path="x.timeindex")
    assert info.value.position == 12


def test_txn_index_bad_entries() -> None:
    with pytest.raises(CorruptIndexError, match="multiple of 34"):
        decode_txn_index(b"\x00" * 35, 0)
    entry = struct.pack(">hqqqq", 0, 1, 50, 40, 51)
    with pytest.raises(CorruptIndexError, match="after last offset"):
        decode_txn_index(entry, 0)


def test_preallocated_zero_slots_only_allowed_when_asked() -> None:
    data = struct.pack(">ii", 10, 100) + bytes(16)
    with pytest.raises(CorruptIndexError):
        decode_offset_index(data, 0)
    assert len(decode_offset_index(data, 0, allow_preallocated=True)) == 1


# --- checkpoints --------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "match", "position"), [
    ("1\n0\n", "unsupported checkpoint version 1", 0),
    ("0\n2\nt 0 5\n", "entry count says 2 but 1", 2),
    ("0\n1\nt 0\n", "has 2 fields", 4),
    ("x\n0\n", "not an integer", 0),
    ("0\n", "version line and an entry count", 2),
])
def test_offset_checkpoint_errors(text: str, match: str, position: int) -> None:
    with pytest.raises(CorruptCheckpointError, match=match) as info:
        parse_offset_checkpoint(text, path="cp")
    assert (info.value.path, info.value.position) == ("cp", position)


def test_leader_epoch_checkpoint_must_increase() -> None:
    with pytest.raises(CorruptCheckpointError, match="does not follow"):
        parse_leader_epoch_checkpoint("0\n2\n5 100\n4 200\n")


def test_snapshot_errors() -> None:
    good = encode_snapshot([ProducerSnapshotEntry(
        producer_id=1, epoch=0, last_sequence=4, last_offset=10, offset_delta=4, timestamp=5,
        coordinator_epoch=0, current_txn_first_offset=-1)])
    assert len(decode_snapshot(good)) == 1
    with pytest.raises(CorruptCheckpointError, match="version"):
        decode_snapshot(b"\x00\x02" + good[2:])
    with pytest.raises(CorruptCheckpointError, match="CRC"):
        decode_snapshot(good[:-1] + bytes([good[-1] ^ 1]))
    with pytest.raises(CorruptCheckpointError, match="shorter"):
        decode_snapshot(good[:5])


# --- directories --------------------------------------------------------------------------

def test_missing_log_dir(tmp_path) -> None:
    with pytest.raises(LogDirError, match="does not exist") as info:
        open_log_dir(str(tmp_path / "nope"))
    assert info.value.path == str(tmp_path / "nope")


def test_unreadable_directory(tmp_path) -> None:
    # Root ignores permission bits, so make the directory unreadable by making it a file.
    pdir = tmp_path / "t-0"
    pdir.write_bytes(b"not a directory")
    with pytest.raises(LogDirError, match="cannot list directory") as info:
        load_partition(str(pdir))
    assert info.value.path == str(pdir)
