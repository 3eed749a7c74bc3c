"""``compactor inspect`` speaks ``kafka-dump-log``: batch and record lines carry its field
names with the values an independent reader (kafka-python) finds in the same bytes; index,
time index, txn index and producer snapshot files dump as its lines, read back from the raw
bytes here; ``--json`` gives one object per batch; one corrupt batch is one problem, with the
index problems that follow from it counted under it, not listed."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.memory_records import MemoryRecords

from compactor.cli import main
from compactor.codec.snapshot import ProducerSnapshotEntry, encode_snapshot
from compactor.errors import EXIT_FAILURE, EXIT_OK
from compactor.tools.ops.generator import GeneratorConfig, generate

CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


@pytest.fixture(scope="module")
def txn_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dump") / "logs"
    generate(str(out), GeneratorConfig(topics=("t",), partitions=1, records_per_partition=600,
                                       distinct_keys=50, segment_bytes=16 * 1024,
                                       transactional_ratio=0.4, abort_ratio=0.5))
    return out


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str]]:
    code = main(["inspect", *args])
    return code, capsys.readouterr().out.splitlines()


def _fields(line: str) -> dict[str, str]:
    return dict(re.findall(r"(\w+): (\S+)", line))


def test_batch_and_record_lines_match_an_independent_reader(
        txn_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seg = sorted((txn_log / "t-0").glob("*.log"))[0]
    code, lines = _run(capsys, str(seg), "--records")
    assert code == EXIT_OK
    assert lines[:2] == [f"Dumping {seg}", "Log starting offset: 0"]
    batch_lines = [line for line in lines if line.startswith("baseOffset: ")]
    record_lines = [line for line in lines if line.startswith("| offset: ")]
    records = MemoryRecords(seg.read_bytes())
    position, expected_records, markers = 0, [], 0
    for line in batch_lines:
        batch = records.next_batch()
        assert isinstance(batch, DefaultRecordBatch)
        f = _fields(line)
        assert f == {**f, "baseOffset": str(batch.base_offset),
                     "lastOffset": str(batch.last_offset),
                     "count": str(batch.records_count),
                     "baseSequence": str(batch.base_sequence),
                     "lastSequence": str(batch.last_sequence),
                     "producerId": str(batch.producer_id),
                     "producerEpoch": str(batch.producer_epoch),
                     "partitionLeaderEpoch": str(batch.leader_epoch),
                     "isTransactional": str(batch.is_transactional).lower(),
                     "isControl": str(batch.is_control_batch).lower(),
                     "deleteHorizonMs": "OptionalLong.empty", "position": str(position),
                     "CreateTime": str(batch.max_timestamp), "size": str(batch.size_in_bytes),
                     "magic": "2", "compresscodec": CODECS[batch.compression_type],
                     "crc": str(batch.crc), "isvalid": "true"}
        position += batch.size_in_bytes
        for i, r in enumerate(batch):
            expected_records.append((batch, i, r))
        markers += batch.is_control_batch
    assert not records.has_next()
    assert len(record_lines) == len(expected_records)
    for line, (batch, i, r) in zip(record_lines, expected_records):
        f = _fields(line)
        sequence = -1 if batch.base_sequence == -1 else batch.base_sequence + i
        assert (f["offset"], f["CreateTime"], f["keySize"], f["valueSize"], f["sequence"]) == (
            str(r.offset), str(r.timestamp), str(-1 if r.key is None else len(r.key)),
            str(-1 if r.value is None else len(r.value)), str(sequence))
        assert f"headerKeys: [{','.join(k for k, _ in r.headers)}]" in line
        if batch.is_control_batch:
            kind = {0: "ABORT", 1: "COMMIT"}[struct.unpack(">hh", r.key)[1]]
            epoch = struct.unpack(">hi", r.value)[1]
            assert line.endswith(f"endTxnMarker: {kind} coordinatorEpoch: {epoch}")
        elif r.key is not None:  # a tombstone has no payload, as in kafka-dump-log
            assert f" key: {r.key.decode()}" + (" payload: " if r.value is not None else "") \
                in line + " "
            assert line.endswith(f" key: {r.key.decode()}") == (r.value is None)
    assert markers > 0  # the data has transactions: markers were checked

    # --json: one object per batch, then the segment's summary
    code, lines = _run(capsys, str(seg), "--json")
    objects = [json.loads(line) for line in lines]
    assert [o["type"] for o in objects] == ["batch"] * len(batch_lines) + ["segment", "summary"]


def test_index_txn_index_and_snapshot_files_dump_as_kafka_dump_log(
        txn_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pdir = txn_log / "t-0"
    seg_index = sorted(pdir.glob("*.index"))[0]
    base = int(seg_index.name.split(".")[0])
    raw = seg_index.read_bytes()
    expected = [f"offset: {base + rel} position: {pos}"
                for rel, pos in struct.iter_unpack(">ii", raw)]
    code, lines = _run(capsys, str(seg_index))
    assert code == EXIT_OK and lines == [f"Dumping {seg_index}", *expected] and expected
    time_index = seg_index.with_suffix(".timeindex")
    expected = [f"timestamp: {ts} offset: {base + rel}"
                for ts, rel in struct.iter_unpack(">qi", time_index.read_bytes())]
    assert _run(capsys, str(time_index)) == (EXIT_OK, [f"Dumping {time_index}", *expected])
    txn = next(p for p in sorted(pdir.glob("*.txnindex")) if p.stat().st_size)
    expected = [f"version: {v} producerId: {pid} firstOffset: {first} lastOffset: {last} "
                f"lastStableOffset: {lso}"
                for v, pid, first, last, lso in struct.iter_unpack(">hqqqq", txn.read_bytes())]
    assert _run(capsys, str(txn)) == (EXIT_OK, [f"Dumping {txn}", *expected])

    snapshot = tmp_path / "00000000000000000042.snapshot"
    snapshot.write_bytes(encode_snapshot([
        ProducerSnapshotEntry(producer_id=7, epoch=2, last_sequence=9, last_offset=40,
                              offset_delta=3, timestamp=1_000, coordinator_epoch=5,
                              current_txn_first_offset=38),
        ProducerSnapshotEntry(producer_id=8, epoch=0, last_sequence=-1, last_offset=-1,
                              offset_delta=0, timestamp=2_000, coordinator_epoch=-1,
                              current_txn_first_offset=-1)]))
    assert _run(capsys, str(snapshot)) == (EXIT_OK, [
        f"Dumping {snapshot}",
        "producerId: 7 producerEpoch: 2 coordinatorEpoch: 5 currentTxnFirstOffset: "
        "OptionalLong[38] lastTimestamp: 1000 firstSequence: 6 lastSequence: 9 lastOffset: 40 "
        "offsetDelta: 3 timestamp: 1000",
        "producerId: 8 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: "
        "OptionalLong.empty lastTimestamp: 2000"])


def test_one_flipped_byte_is_one_problem_with_its_knock_on_index_problems_counted(
        txn_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    logs = tmp_path / "logs"
    shutil.copytree(txn_log, logs)
    seg = sorted((logs / "t-0").glob("*.log"))[0]
    data = bytearray(seg.read_bytes())
    entries = list(struct.iter_unpack(">ii", seg.with_suffix(".index").read_bytes()))
    assert len(entries) >= 2  # index entries past the flipped byte exist
    flip = entries[0][1] - 5  # inside the batch before the first indexed one
    data[flip] ^= 0xFF
    seg.write_bytes(bytes(data))
    code, lines = _run(capsys, str(logs), "--verify", "--json")
    assert code == EXIT_FAILURE
    problems = [p for o in map(json.loads, lines) if o["type"] == "segment"
                for p in o["problems"]]
    assert len(problems) == 1, problems
    (problem,) = problems
    assert problem["code"] in ("CRC_MISMATCH", "CORRUPT_SEGMENT")
    assert problem["path"] == str(seg) and problem["knock_on"] >= len(entries)
