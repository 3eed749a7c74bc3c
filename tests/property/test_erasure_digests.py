"""The erasure scan's native path (:mod:`compactor.native.erasure`) against the pure one
(:func:`compactor.cleaner.scan.subject_digests` without an engine, ``hashlib`` over aiokafka's
decoded records): the same entries, column by column, for generated logs (every codec,
transactions and their markers, null keys, tombstones, headers with null values) and for
random batches (repeated and non-ASCII header names, many headers a record); where the kernel
hands a batch back, the pure path decodes it, and a corrupt batch raises the same error."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.cleaner.rewrite import SubjectDigests
from compactor.cleaner.scan import subject_digests
from compactor.codec.compression import Codec
from compactor.codec.records import NewRecord, NewRecordBatch, encode_batch
from compactor.erasure.sketch import DigestFilter
from compactor.errors import CompactorError
from compactor.native import engine
from compactor.native.erasure import segment_digests
from compactor.tools.ops.generator import GeneratorConfig, generate

NATIVE = engine("native")
COLUMNS = ("position", "offset", "header", "digest", "key_digest", "key_null", "bare")


def _same(native: SubjectDigests, pure: SubjectDigests) -> None:
    for column in COLUMNS:
        assert np.array_equal(getattr(native, column), getattr(pure, column)), column
    assert (native.names, native.batches, native.records) == (pure.names, pure.batches,
                                                              pure.records)
    assert native.headers == pure.headers


@pytest.mark.parametrize("names", [set(), {"trace-id"}, {"trace-id", "source", "absent"}])
def test_generated_logs_give_the_same_entries(tmp_path: Path, names: set[str]) -> None:
    generate(str(tmp_path / "logs"), GeneratorConfig(
        topics=("t",), partitions=1, records_per_partition=3000, distinct_keys=200,
        header_ratio=0.5, tombstone_ratio=0.2, null_key_ratio=0.05, segment_bytes=48 * 1024,
        seed=54))
    segments = sorted((tmp_path / "logs" / "t-0").glob("*.log"))
    assert len(segments) > 3
    for path in segments:
        data = path.read_bytes()
        base = int(path.stem)
        # the kernel read every batch of these logs itself (no segment handed back)
        native = segment_digests(data, str(path), base, tuple(sorted(names)))
        assert native is not None
        _same(native, subject_digests(data, str(path), base, names))
        _same_filtered(data, str(path), base, names)


def _same_filtered(data: bytes, path: str, base: int, names: set[str]) -> None:
    """The Bloom filter's cut, as the scan asks for it (a filter of every other digest the
    segment has, small enough to let strangers through), is the same on both paths (the
    kernel tests each digest as it makes it, the pure path a batch at once), and keeps every
    entry whose digest was added."""
    every = subject_digests(data, path, base, names)
    added = every.digest[::2]
    probe = DigestFilter.empty(max(1, len(added) // 4)).adding(list(map(bytes, added))).probe()
    native = subject_digests(data, path, base, names, NATIVE, keep=probe)
    _same(native, subject_digests(data, path, base, names, keep=probe))
    wanted = {d.tobytes() for d in added}
    assert sum(d.tobytes() in wanted for d in every.digest) == sum(
        d.tobytes() in wanted for d in native.digest)


def test_a_key_digest_is_sha256_of_the_key() -> None:
    data = encode_batch(NewRecordBatch(base_offset=7, records=[
        NewRecord(offset_delta=0, timestamp=1, key=b"subject", value=b"v", headers=(("h", b"x"),)),
        NewRecord(offset_delta=1, timestamp=2, key=None, value=None)]))
    found = subject_digests(data, "p", 7, {"h"}, NATIVE)
    assert found.digest[0].tobytes() == hashlib.sha256(b"subject").digest()
    assert found.digest[1].tobytes() == hashlib.sha256(b"x").digest()
    assert found.offset.tolist() == [7, 7] and found.header.tolist() == [-1, 0]
    assert found.records == 2  # the null-key tombstone has no entry


NAMES = st.sampled_from(["a", "b", "trace-id", "é", "aa"])
RECORD = st.tuples(st.none() | st.binary(max_size=40), st.none() | st.binary(max_size=20),
                   st.lists(st.tuples(NAMES, st.none() | st.binary(max_size=30)), max_size=6))


@settings(max_examples=150, deadline=None)
@given(st.lists(RECORD, min_size=1, max_size=30), st.sampled_from(list(Codec)),
       st.sets(NAMES, max_size=3), st.integers(0, 2**40))
def test_random_batches_give_the_same_entries(records: list, codec: Codec, names: set[str],
                                              base: int) -> None:
    data = encode_batch(NewRecordBatch(base_offset=base, compression=codec, records=[
        NewRecord(offset_delta=i, timestamp=1000 + i, key=k, value=v, headers=tuple(h))
        for i, (k, v, h) in enumerate(records)]))
    _same(subject_digests(data, "p", base, names, NATIVE), subject_digests(data, "p", base, names))
    _same_filtered(data, "p", base, names)


def test_a_corrupt_batch_raises_as_the_pure_path_does() -> None:
    data = bytearray(encode_batch(NewRecordBatch(base_offset=0, records=[
        NewRecord(offset_delta=0, timestamp=1, key=b"k", value=b"v"),
        NewRecord(offset_delta=1, timestamp=2, key=b"k2", value=b"v2")])))
    data[-3] ^= 0xFF  # inside the last record: the CRC no longer matches
    errors = []
    for eng in (NATIVE, None):
        with pytest.raises(CompactorError) as err:
            subject_digests(bytes(data), "seg.log", 0, set(), eng)
        errors.append((err.value.code, err.value.message))
    assert errors[0] == errors[1]
