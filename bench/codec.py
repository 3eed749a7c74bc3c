"""Codec benchmark: scan a generated >= 100 MB segment with our reader and, as the in-run
baseline, with kafka-python's pure-Python reader; print records/s, MB/s and the ratio.

Usage: python bench/codec.py [--mb 100] [--value-bytes 100] [--codecs none,zstd]

Each scan decodes every record and touches its key and value the way the compaction scan does
(xxh3-128 of the key, tombstone test). Stages printed for our reader: framing with CRC-32C
check, then the full scan. Then the writer's cost per retained record: the first 2,000
batches rebuilt with every other record, by ``rebuild_batch`` (what a compaction round does) and, as
the baseline, by the general encoder through one write-model ``NewRecord`` per record (the output
must be byte-identical).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time

import numpy as np
import xxhash
from kafka.record import MemoryRecords as KpMemoryRecords

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from compactor.cleaner.policy import BatchDecision, BatchRetention  # noqa: E402
from compactor.cleaner.rebatch import filter_batch  # noqa: E402
from compactor.codec.compression import Codec, compress, decompress  # noqa: E402
from compactor.codec.records import (  # noqa: E402
    RECORDS_OFFSET,
    NewRecord,
    NewRecordBatch,
    RecordBatch,
    TimestampType,
    encode_batch,
    rebuild_batch,
)
from compactor.codec.segment import iter_batches  # noqa: E402


def build_segment(path: str, *, target_mb: int, value_bytes: int, codec: Codec,
                  batch_records: int = 100) -> int:
    pool = os.urandom(value_bytes * 4) + bytes(value_bytes * 4)  # half random, half zeros
    offset, written, records = 0, 0, 0
    ts = 1_767_225_600_000
    with open(path, "wb") as out:
        while written < target_mb * 1_000_000:
            recs = []
            for i in range(batch_records):
                start = (offset + i) * 7 % (len(pool) - value_bytes)
                recs.append(NewRecord(offset_delta=i, timestamp=ts + i,
                                      key=b"key-%08d" % ((offset + i) * 7919 % 1_000_000),
                                      value=pool[start:start + value_bytes]))
            data = encode_batch(NewRecordBatch(base_offset=offset, records=recs,
                                               compression=codec))
            out.write(data)
            written += len(data)
            offset += batch_records
            records += batch_records
            ts += batch_records
    return records


def scan_ours(data: bytes) -> tuple[int, float, float]:
    start = time.perf_counter()
    batches = list(iter_batches(data))
    framed = time.perf_counter() - start
    digest = xxhash.xxh3_128_intdigest
    n = tombstones = 0
    start = time.perf_counter()
    for batch in iter_batches(data):
        for record in batch.iter_compiled():
            key = record.key
            if key is not None:
                digest(key)
            if record.value is None:
                tombstones += 1
            n += 1
    del batches
    return n, framed, time.perf_counter() - start


def scan_kafka_python(data: bytes) -> tuple[int, float]:
    digest = xxhash.xxh3_128_intdigest
    n = 0
    start = time.perf_counter()
    records = KpMemoryRecords(data)
    while (batch := records.next_batch()) is not None:
        for record in batch:
            if record.key is not None:
                digest(record.key)
            n += 1
    return n, time.perf_counter() - start


REBUILD_BATCHES = 2_000
#: The records section of a v2 batch starts after its 61-byte header (``V2_HEADER``).


def clean_vs_floor(data: bytes) -> tuple[float, float, float, int]:
    """Seconds to clean every batch dropping every other record (framing with CRC, decode,
    re-encode, recompress), with the pure path (``filter_batch``) and with the native one
    (``filter_fast``), and seconds of the floor any cleaner pays for the same batches with
    the same libraries: decompress the records section and compress it again (for
    uncompressed batches: framing with CRC only). Returns the three and the bytes."""
    from compactor.native import fast

    decision = BatchDecision(retention=BatchRetention.DELETE_EMPTY, aborted=False,
                             discard_records=False, retain_deletes=True, marker_horizon=False)
    batches = list(iter_batches(data, verify_crc=False))
    drops = [frozenset(r.offset for r in b.compiled_records()[1::2]) for b in batches]
    start = time.perf_counter()
    for batch in iter_batches(data):  # framing + CRC, as the writer's walk
        pass
    for batch, dropped in zip(batches, drops):
        filter_batch(batch, decision, dropped, now_ms=0, delete_retention_ms=0)
    clean_s = time.perf_counter() - start
    fates = [fast.BatchFate(np.array([1 if r.offset in dropped else 0
                                      for r in b.compiled_records()], np.int8), len(dropped),
                            tombstones=0)
             for b, dropped in zip(batches, drops)]
    fast.filter_fast(batches[0], decision, fates[0], now_ms=0, delete_retention_ms=0)  # JIT
    start = time.perf_counter()
    for batch in iter_batches(data):
        pass
    for batch, fate in zip(batches, fates):
        fast.filter_fast(batch, decision, fate, now_ms=0, delete_retention_ms=0)
    native_s = time.perf_counter() - start
    start = time.perf_counter()
    for batch in iter_batches(data):
        if batch.compression:
            compress(batch.compression, decompress(batch.compression, batch.raw[RECORDS_OFFSET:]))
    floor_s = time.perf_counter() - start
    return clean_s, native_s, floor_s, len(data)


def rebuild_both_ways(data: bytes) -> tuple[int, float, float]:
    """Retained records, seconds with ``rebuild_batch``, seconds with the write model."""
    work = [(b, b.compiled_records()[::2])
            for b, _ in zip(iter_batches(data, verify_crc=False), range(REBUILD_BATCHES))]
    work = [(b, kept) for b, kept in work if kept]
    t0 = time.perf_counter()
    fast = [rebuild_batch(b, kept, delete_horizon_ms=None) for b, kept in work]
    t1 = time.perf_counter()
    general = [encode_batch(_write_model(b, kept)) for b, kept in work]
    t2 = time.perf_counter()
    if fast != general:
        raise SystemExit("rebuild_batch and the general encoder disagree")
    return sum(len(kept) for _, kept in work), t1 - t0, t2 - t1


def _write_model(b: RecordBatch, kept: list) -> NewRecordBatch:
    log_append = b.timestamp_type == TimestampType.LOG_APPEND_TIME
    return NewRecordBatch(
        base_offset=b.base_offset,
        records=[NewRecord(offset_delta=r.offset - b.base_offset, timestamp=r.timestamp,
                           key=r.key, value=r.value, headers=tuple(r.headers)) for r in kept],
        compression=b.compression, timestamp_type=b.timestamp_type,
        is_transactional=b.is_transactional, is_control=b.is_control,
        partition_leader_epoch=b.partition_leader_epoch, producer_id=b.producer_id,
        producer_epoch=b.producer_epoch, base_sequence=b.base_sequence,
        last_offset_delta=b.last_offset_delta,
        max_timestamp=b.max_timestamp if log_append else None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--codecs", default="none,zstd")
    args = parser.parse_args(argv)
    print(f"# codec benchmark: {args.mb} MB segments, {args.value_bytes}-byte values, "
          f"python {sys.version.split()[0]}, {os.cpu_count()} cores, single thread")
    print(f"{'codec':6} {'reader':13} {'records':>10} {'seconds':>8} {'records/s':>12} "
          f"{'MB/s':>8} {'ratio':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.codecs.split(","):
            codec = Codec[name.strip().upper()]
            path = os.path.join(tmp, f"{codec.name.lower()}.log")
            t0 = time.perf_counter()
            expected = build_segment(path, target_mb=args.mb, value_bytes=args.value_bytes,
                                     codec=codec)
            build_s = time.perf_counter() - t0
            with open(path, "rb") as handle:
                data = handle.read()
            mb = len(data) / 1e6
            n_ours, framed, ours_s = scan_ours(data)
            n_kp, kp_s = scan_kafka_python(data)
            if n_ours != expected or n_kp != expected:
                raise SystemExit(f"record count mismatch: built {expected}, ours {n_ours}, "
                                 f"kafka-python {n_kp}")
            ratio = kp_s / ours_s
            print(f"{codec.name.lower():6} {'ours':13} {n_ours:>10} {ours_s:>8.2f} "
                  f"{n_ours / ours_s:>12,.0f} {mb / ours_s:>8.1f} {ratio:>5.1f}x")
            print(f"{codec.name.lower():6} {'kafka-python':13} {n_kp:>10} {kp_s:>8.2f} "
                  f"{n_kp / kp_s:>12,.0f} {mb / kp_s:>8.1f} {1:>5.1f}x")
            print(f"{'':6} stages (ours): framing+CRC {framed:.2f}s ({mb / framed:,.0f} MB/s), "
                  f"full scan {ours_s:.2f}s; segment {mb:.1f} MB on disk, built in "
                  f"{build_s:.1f}s")
            clean_s, native_s, floor_s, size = clean_vs_floor(data)
            floor_what = ("decompress + recompress" if codec != Codec.NONE
                          else "framing with CRC")
            print(f"{'':6} cleaning, one core: native {size / native_s / 1e6:,.0f} MB/s, pure "
                  f"{size / clean_s / 1e6:,.0f} MB/s; floor ({floor_what}, same libraries): "
                  f"{size / floor_s / 1e6:,.0f} MB/s; cleaning / floor time: native "
                  f"{native_s / floor_s:.2f}x, pure {clean_s / floor_s:.2f}x (target: <= 1.5x "
                  f"compressed, <= 4x uncompressed)")
            kept, fast_s, general_s = rebuild_both_ways(data)
            print(f"{'':6} rebuild, every other record kept: {kept} records, "
                  f"rebuild_batch {fast_s / kept * 1e6:.2f} us/record, write model + "
                  f"general encoder {general_s / kept * 1e6:.2f} us/record "
                  f"({general_s / fast_s:.1f}x)")
            del data
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"# peak memory (max RSS): {peak_mb:,.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
