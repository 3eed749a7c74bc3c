"""Record-level offsets (issue 28.7): inside a v2 batch every record's offset delta must grow
from record to record and stay within the header's ``lastOffsetDelta``. A batch breaking
that is corrupt for every reader: the segment decoder, ``inspect --verify`` and both writer
paths (native kernels and pure Python) refuse it with the same located error, and nothing
is written.

The batches are built here by an encoder of this file's own (the v2 wire format written
out by hand: ``DefaultRecordBatch`` / ``DefaultRecord``), not by the codec under test, which
refuses to write them."""

from __future__ import annotations

import gzip
import shutil
import struct
from pathlib import Path

import crc32c
import pytest

from compactor.codec.segment import decode_segment, iter_batches
from compactor.errors import CorruptSegmentError
from compactor.tools.ops.generator import DEFAULT_START_MS, GeneratorConfig, generate
from compactor.tools.ops.inspect import inspect_partition
from tests.helpers import reference_round
from tests.property.test_fast_path import same_error_on_both_paths

PATH = "/logs/t-0/00000000000000000000.log"


def _varint(value: int) -> bytes:
    raw = (value << 1) ^ (value >> 63)
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def raw_batch(base: int, deltas: list[int], last_delta: int, *, gzipped: bool = False) -> bytes:
    """A v2 batch whose records carry ``deltas`` and whose header says ``last_delta``."""
    body = b""
    for i, delta in enumerate(deltas):
        key, value = b"k%d" % i, b"v%d" % i
        record = (b"\x00" + _varint(i) + _varint(delta) + _varint(len(key)) + key
                  + _varint(len(value)) + value + _varint(0))
        body += _varint(len(record)) + record
    if gzipped:
        body = gzip.compress(body)
    ts = DEFAULT_START_MS
    after_crc = struct.pack(">hiqqqhii", 1 if gzipped else 0, last_delta, ts, ts + len(deltas),
                            -1, -1, -1, len(deltas)) + body
    crc = crc32c.crc32c(after_crc)
    header = struct.pack(">iBI", 0, 2, crc)  # partition leader epoch, magic, crc
    return struct.pack(">qi", base, len(header) + len(after_crc)) + header + after_crc


DEFECTS = {
    "two records with one offset": ([0, 1, 1, 2], 3),
    "offsets going backwards": ([0, 2, 1, 3], 3),
    "a record beyond lastOffsetDelta": ([0, 1, 2, 5], 3),
    "lastOffsetDelta below the last record's delta": ([0, 1, 2, 3], 2),
}


def test_the_independent_encoder_writes_what_the_decoder_accepts() -> None:
    for gzipped in (False, True):
        (batch,) = decode_segment(raw_batch(10, [0, 2, 5], 7, gzipped=gzipped), path=PATH)
        assert [r.offset for r in batch.records()] == [10, 12, 15]
        assert [r.offset for r in batch.compiled_records()] == [10, 12, 15]


@pytest.mark.parametrize("gzipped", [False, True], ids=["uncompressed", "gzip"])
@pytest.mark.parametrize("defect", DEFECTS)
def test_a_batch_with_odd_record_offsets_is_corrupt(defect: str, gzipped: bool) -> None:
    good = raw_batch(0, [0, 1, 2], 2)
    bad = raw_batch(3, *DEFECTS[defect], gzipped=gzipped)
    with pytest.raises(CorruptSegmentError, match="record offsets must increase") as info:
        decode_segment(good + bad, path=PATH)
    assert (info.value.path, info.value.position, info.value.base_offset) == (PATH, len(good), 3)
    (batch,) = iter_batches(bad)
    with pytest.raises(CorruptSegmentError, match="record offsets must increase"):
        batch.compiled_records()


def test_inspect_verify_reports_it(tmp_path: Path) -> None:
    part = tmp_path / "t-0"
    part.mkdir()
    (part / "00000000000000000000.log").write_bytes(
        raw_batch(0, [0, 1, 2], 2) + raw_batch(3, [0, 2, 1, 3], 3))
    problems = [p for item in inspect_partition(str(part), dump=False, verify=True)
                for p in getattr(item, "problems", [item])]
    assert any("record offsets must increase" in p.message and p.base_offset == 3
               for p in problems), problems


# ---------------------------------------------------------------------------------------------
# Both writer paths

NOW_MS = DEFAULT_START_MS + 3 * 86_400_000
CONFIGS = {"cleanup.policy": "compact", "segment.index.bytes": "48"}
GEN = GeneratorConfig(topics=("t",), partitions=1, records_per_partition=600, distinct_keys=40,
                      segment_bytes=8 * 1024, tombstone_ratio=0.1, seed=7)


def _patched(data: bytes, victim, defect: str) -> bytes:
    """``data`` with ``victim`` (an uncompressed batch of small deltas) given ``defect`` in
    place: same sizes, CRC recomputed."""
    out = bytearray(data)
    at = victim.position + 61
    positions, deltas = [], []
    for _ in range(victim.records_count):
        length, n = _read_varint(out, at)
        record = at + n
        _, n_ts = _read_varint(out, record + 1)
        delta_at = record + 1 + n_ts
        delta, n_delta = _read_varint(out, delta_at)
        assert n_delta == 1
        positions.append(delta_at)
        deltas.append(delta)
        at = record + length
    last = deltas[-1]
    if defect == "two records with one offset":
        deltas[1] = deltas[0]
    elif defect == "offsets going backwards":
        deltas[1], deltas[2] = deltas[2], deltas[1]
    elif defect == "a record beyond lastOffsetDelta":
        deltas[-1] = last + 1
    else:
        struct.pack_into(">i", out, victim.position + 23, last - 1)
    for pos, delta in zip(positions, deltas):
        out[pos:pos + 1] = _varint(delta)
    struct.pack_into(">I", out, victim.position + 17,
                     crc32c.crc32c(bytes(out[victim.position + 21:victim.end_position])))
    return bytes(out)


def _read_varint(buf: bytearray, pos: int) -> tuple[int, int]:
    raw = shift = n = 0
    while True:
        byte = buf[pos + n]
        raw |= (byte & 0x7F) << shift
        n += 1
        shift += 7
        if byte < 0x80:
            return (raw >> 1) ^ -(raw & 1), n


@pytest.mark.parametrize("defect", DEFECTS)
def test_both_writer_paths_refuse_it_with_the_same_located_error(tmp_path: Path,
                                                                  defect: str) -> None:
    native_dir, pure_dir = tmp_path / "native", tmp_path / "pure"
    generate(str(native_dir), GEN)
    rounds = reference_round(native_dir, CONFIGS, NOW_MS)
    name, (inp, logs, ref) = next((n, r) for n, r in rounds.items() if r[2].plan.will_clean)
    group = ref.plan.groups[0]
    seg = native_dir / name / f"{group[0]:020d}.log"
    data = seg.read_bytes()
    victim = next(b for b in list(iter_batches(data))[1:]
                  if b.records_count >= 3 and not b.is_control and not b.compression)
    seg.write_bytes(_patched(data, victim, defect))
    shutil.copytree(native_dir, pure_dir)
    error = same_error_on_both_paths(inp, logs, ref.plan, group, name, seg.name, native_dir,
                                     pure_dir)
    assert (error["position"], error["base_offset"]) == (victim.position, victim.base_offset)
