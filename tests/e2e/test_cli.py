"""End-to-end: the installed ``compactor`` command on generated log dirs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from aiokafka.record import MemoryRecords as AioMemoryRecords
from kafka.record import MemoryRecords as KpMemoryRecords

from compactor.codec.records import NewRecord, NewRecordBatch, encode_batch
from compactor.errors import EXIT_FAILURE, EXIT_LOCKED
from compactor.tools.ops.generator import GeneratorConfig, generate
from tests.helpers import lock_held_by_other_process, tree_digest

COMPACTOR = str(Path(sys.executable).with_name("compactor"))
RESOURCES = Path(__file__).parent / "resources"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([COMPACTOR, *args], capture_output=True, text=True, timeout=300)


def test_generate_then_verify_clean(tmp_path: Path) -> None:
    out = tmp_path / "logs"
    gen = run("generate", str(out), "--partitions", "1", "--records", "3000",
              "--legacy-records", "20", "--open-transaction", "--seed", "5", "--json")
    assert gen.returncode == 0, gen.stderr
    summary = json.loads(gen.stdout)
    assert summary["partitions"][0]["records"] == 3000
    res = run("inspect", str(out), "--verify", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    lines = [json.loads(line) for line in res.stdout.splitlines()]
    assert lines[-1]["type"] == "summary" and lines[-1]["problems"] == 0
    topic_records = sum(line["record_count"] for line in lines if line["type"] == "segment"
                        and "__cluster_metadata-0" not in line["path"])
    assert topic_records == sum(p["records"] for p in summary["partitions"]) + sum(
        p["aborted_txns"] + p["committed_txns"] for p in summary["partitions"])
    # the metadata log and its snapshot are inspected too, with every record decoded
    meta = [line for line in lines if line["type"] == "segment"
            and "__cluster_metadata-0" in line["path"]]
    assert sorted(Path(m["path"]).suffix for m in meta) == [".checkpoint", ".log"]


def test_inspect_dumps_records_of_one_segment(small_log: Path) -> None:
    seg = sorted((small_log / "orders-v2-0").glob("*.log"))[1]
    res = run("inspect", str(seg), "--records")
    assert res.returncode == 0, res.stderr
    assert "baseOffset:" in res.stdout and "| offset:" in res.stdout
    assert "compresscodec:" in res.stdout and "dumped: 1 segments" in res.stdout


def test_inspect_decodes_the_metadata_log_and_verify_flags_a_bad_record(
        small_log: Path) -> None:
    meta = small_log / "__cluster_metadata-0"
    res = run("inspect", str(meta), "--records", "--json")
    assert res.returncode == 0, res.stderr
    payloads = [r["payload"] for line in map(json.loads, res.stdout.splitlines())
                if line["type"] == "batch" for r in line["records"]]
    kinds = {p["type"] for p in payloads}
    assert {"SnapshotHeaderRecord", "SnapshotFooterRecord", "LeaderChangeMessage",
            "FeatureLevelRecord", "RegisterBrokerRecord", "TopicRecord",
            "PartitionRecord"} <= kinds
    topics = {p["data"]["Name"]: p["data"]["TopicId"] for p in payloads
              if p["type"] == "TopicRecord"}
    ids = {d.name.rsplit("-", 1)[0]: (d / "partition.metadata").read_text().split()[-1]
           for d in small_log.glob("*-0") if d != meta}
    assert topics == ids  # the ids the broker's partition dirs hold
    text = run("inspect", str(next(meta.glob("*.checkpoint"))), "--records")
    assert 'payload: {"type":"TopicRecord","version":0,"data":{"Name":' in text.stdout
    # a record of an unknown type in a batch whose CRC is right: verify names it
    log = meta / "00000000000000000000.log"
    extra = encode_batch(NewRecordBatch(base_offset=1000, records=[
        NewRecord(offset_delta=0, timestamp=1, key=None, value=b"\x01\x63\x00\x00")]))
    position = log.stat().st_size
    log.write_bytes(log.read_bytes() + extra)
    res = run("inspect", str(meta), "--verify", "--json")
    assert res.returncode == EXIT_FAILURE
    problems = [p for line in map(json.loads, res.stdout.splitlines()) if line["type"] ==
                "segment" for p in line["problems"] if p["code"] == "CORRUPT_METADATA"]
    assert [(p["path"], p["position"], p["base_offset"]) for p in problems] == [
        (str(log), position, 1000)]
    assert "unknown metadata record type 99" in problems[0]["message"]


def test_generated_segments_parse_with_both_independent_parsers(tmp_path: Path) -> None:
    out = tmp_path / "logs"
    summary = generate(str(out), GeneratorConfig(topics=("t",), partitions=1,
                                                 records_per_partition=2000, seed=11))
    count = 0
    for seg in sorted((out / "t-0").glob("*.log")):
        data = seg.read_bytes()
        for cls in (AioMemoryRecords, KpMemoryRecords):
            mr, n = cls(data), 0
            while (batch := mr.next_batch()) is not None:
                assert batch.validate_crc()
                n += sum(1 for _ in batch)
            if cls is KpMemoryRecords:
                count += n
    part = summary.partitions[0]
    assert count == part.records + part.aborted_txns + part.committed_txns


def corrupt_middle_batch(small_log: Path) -> tuple[Path, int, int]:
    """Flip a byte inside the second batch of a segment; return file, position, base offset."""
    from compactor.codec.segment import iter_batches
    seg = sorted((small_log / "user-profiles-1").glob("*.log"))[2]
    batches = list(iter_batches(seg.read_bytes()))
    target = batches[1]
    data = bytearray(seg.read_bytes())
    data[target.position + target.size_in_bytes - 1] ^= 0x5A
    seg.write_bytes(bytes(data))
    return seg, target.position, target.base_offset


def test_verify_names_file_position_and_offset_and_changes_nothing(small_log: Path) -> None:
    seg, position, base_offset = corrupt_middle_batch(small_log)
    before = tree_digest(small_log)
    res = run("inspect", str(small_log), "--verify")
    assert res.returncode == EXIT_FAILURE
    assert str(seg) in res.stderr
    assert f"byte position {position}" in res.stderr
    assert f"base offset {base_offset}" in res.stderr
    assert "CRC_MISMATCH" in res.stdout and "FAILED" in res.stdout
    assert tree_digest(small_log) == before


def test_verify_reports_a_broken_index(small_log: Path) -> None:
    index = sorted((small_log / "orders-v2-1").glob("*.index"))[0]
    data = bytearray(index.read_bytes())
    assert len(data) >= 8
    data[4:8] = (int.from_bytes(data[4:8], "big") + 1).to_bytes(4, "big")
    index.write_bytes(bytes(data))
    res = run("inspect", str(small_log / "orders-v2-1"), "--verify", "--json")
    assert res.returncode == EXIT_FAILURE
    problems = [json.loads(line) for line in res.stdout.splitlines()]
    codes = {p["code"] for line in problems if line["type"] == "segment"
             for p in line["problems"]}
    assert "CORRUPT_INDEX" in codes


def test_verify_reports_a_truncated_segment_and_goes_on(small_log: Path) -> None:
    pdir = small_log / "orders-v2-0"
    segments = sorted(pdir.glob("*.log"))
    first = segments[0]
    first.write_bytes(first.read_bytes()[:-7])  # a partial write at the tail
    res = run("inspect", str(small_log), "--verify", "--json")
    assert res.returncode == EXIT_FAILURE, res.stderr
    lines = [json.loads(line) for line in res.stdout.splitlines()]
    reports = [line for line in lines if line["type"] == "segment"]
    assert len(reports) == sum(len(list(p.glob("*.log"))) + len(list(p.glob("*.checkpoint")))
                               for p in small_log.iterdir() if p.is_dir())
    broken = [r for r in reports if r["problems"]]
    assert [r["path"] for r in broken] == [str(first)]
    assert broken[0]["problems"][0]["code"] == "TRUNCATED_SEGMENT"


def test_verify_checks_the_txn_index_against_abort_markers(small_log: Path) -> None:
    pdir = small_log / "user-profiles-0"
    txn_indexes = sorted(pdir.glob("*.txnindex"))
    assert txn_indexes, "the generator writes aborted transactions"
    txn_indexes[0].unlink()
    res = run("inspect", str(pdir), "--verify")
    assert res.returncode == EXIT_FAILURE
    assert "has aborted data from offset" in res.stdout and "no transaction index entry" in \
        res.stdout


def test_recover_resolves_an_interrupted_swap(small_log: Path) -> None:
    pdir = small_log / "orders-v2-0"
    first = sorted(pdir.glob("*.log"))[0]
    shutil.copy(first, str(first) + ".cleaned")
    res = run("inspect", str(pdir), "--verify")
    assert res.returncode == EXIT_FAILURE and "SWAP_LEFTOVER" in res.stdout
    dry = run("recover", str(small_log), "--dry-run", "--json")
    assert dry.returncode == 0 and Path(str(first) + ".cleaned").exists()
    res = run("recover", str(small_log), "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.splitlines()[0])["deleted"] == [first.name + ".cleaned"]
    assert run("inspect", str(small_log), "--verify").returncode == 0


@pytest.mark.slow
def test_a_kafka_style_java_lock_blocks_every_writer(small_log: Path) -> None:
    java = shutil.which("java")
    if java is None:
        pytest.fail("java is required (Java 17, as for Spark)")
    holder = subprocess.Popen([java, str(RESOURCES / "LockHolder.java"), str(small_log)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "LOCKED"
        (small_log / "orders-v2-0" / "00000000000000000000.log.cleaned").write_bytes(b"")
        before = tree_digest(small_log)
        res = run("recover", str(small_log))
        assert res.returncode == EXIT_LOCKED
        assert "LOG_DIR_LOCKED" in res.stderr and str(small_log / ".lock") in res.stderr
        assert f"locked by process {holder.pid} (" in res.stderr and "LockHolder" in res.stderr
        assert tree_digest(small_log) == before
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    assert run("recover", str(small_log)).returncode == 0
    assert not (small_log / "orders-v2-0" / "00000000000000000000.log.cleaned").exists()


def test_a_second_compactor_process_is_refused(small_log: Path) -> None:
    with lock_held_by_other_process(small_log):
        assert run("recover", str(small_log)).returncode == EXIT_LOCKED
    assert (small_log / ".lock").exists()  # never unlinked, as Kafka never unlinks it
    assert run("recover", str(small_log)).returncode == 0  # released: free to take


def test_bad_arguments_and_missing_dir(tmp_path: Path) -> None:
    res = run("inspect", str(tmp_path / "missing"))
    assert res.returncode == 3 and "LOG_DIR_ERROR" in res.stderr
    res = run("generate", str(tmp_path / "x"), "--codecs", "brotli")
    assert res.returncode == 3 and "unknown codec 'brotli'" in res.stderr
    assert run("nonsense").returncode == 2
    assert os.path.exists(COMPACTOR)


def test_run_starts_spark_only_when_a_topic_compacts(small_log: Path, tmp_path: Path) -> None:
    # with JAVA_HOME pointing nowhere Spark cannot start in these processes
    env = {**os.environ, "JAVA_HOME": str(tmp_path / "no-java")}
    now = ["--now-ms", str(4_000_000_000_000), "--allow-future-now", "--json"]
    digest = tree_digest(small_log)
    compact = subprocess.run([COMPACTOR, "run", "--assume-kafka-defaults", str(small_log), *now,
                              "--config", "cleanup.policy=compact"],
                             capture_output=True, text=True, timeout=300, env=env)
    # the control: compaction needs Spark, which cannot start (a clear error, nothing changed)
    assert compact.returncode == EXIT_FAILURE
    assert json.loads(compact.stdout.splitlines()[-1])["code"] == "SPARK_UNAVAILABLE"
    assert "Traceback" not in compact.stderr
    assert tree_digest(small_log) == digest
    delete = subprocess.run([COMPACTOR, "run", "--assume-kafka-defaults", str(small_log), *now,
                             "--config", "cleanup.policy=delete",
                             "--config", "retention.ms=86400000"],
                            capture_output=True, text=True, timeout=300, env=env)
    assert delete.returncode == 0, delete.stderr
    report = json.loads(delete.stdout.splitlines()[0])
    assert report["compaction"] is None
    assert report["retention"]["segments_deleted"] > 0


# ---------------------------------------------------------------------------------------------
# Hardening: clean exits and isolation of the commands that need no Spark work


def test_generate_refuses_a_non_empty_target_and_writes_nothing(small_log: Path) -> None:
    target = small_log / "orders-v2-0"
    before = tree_digest(small_log)
    result = run("generate", str(target), "--partitions", "1", "--records", "10")
    assert result.returncode == 3, result.stderr
    assert "not an empty directory" in result.stderr and str(target) in result.stderr
    assert "Traceback" not in result.stderr
    assert tree_digest(small_log) == before


def test_an_unreachable_spark_master_is_spark_unavailable_within_a_bounded_wait(
        small_log: Path) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    before = tree_digest(small_log)
    result = run("compact", "--assume-kafka-defaults", str(small_log), "--master", f"spark://127.0.0.1:{port}",
                 "--config", "cleanup.policy=compact", "--json")
    assert result.returncode == EXIT_FAILURE
    (line,) = [json.loads(x) for x in result.stdout.splitlines() if x.startswith("{")]
    assert line["code"] == "SPARK_UNAVAILABLE" and "within 10 s" in line["message"]
    assert "Traceback" not in result.stderr
    assert tree_digest(small_log) == before


def test_recover_isolates_a_partition_whose_leftover_cannot_be_read(small_log: Path) -> None:
    bad = small_log / "orders-v2-0"
    garbage = bad / "00000000000000000005.log.swap"
    garbage.write_bytes(b"\x00" * 7)
    good = small_log / "user-profiles-1"
    cleaned = good / "00000000000000000000.log.cleaned"
    cleaned.write_bytes(b"half-written")
    before = tree_digest(bad)
    result = run("recover", str(small_log), "--json")
    assert result.returncode == 6, result.stderr
    lines = [json.loads(x) for x in result.stdout.splitlines()]
    failed = [x for x in lines if x.get("status") == "failed"]
    assert [x["partition_dir"] for x in failed] == [str(bad)]
    assert failed[0]["error"]["code"] == "SWAP_RECOVERY"
    assert failed[0]["error"]["path"] == str(garbage)
    assert tree_digest(bad) == before
    assert not cleaned.exists()  # the other partition was recovered in the same run
    assert "Traceback" not in result.stderr


def test_a_damaged_ledger_is_a_ledger_error_not_a_traceback(tmp_path: Path) -> None:
    state = tmp_path / "state"
    assert run("erase", "init", "--state-dir", str(state)).returncode == 0
    log = state / "erasure_requests" / "_delta_log"
    (log / "00000000000000000001.json").write_text("not json\n")
    result = run("erase", "list", "--state-dir", str(state), "--json")
    assert result.returncode == EXIT_FAILURE
    assert "[LEDGER_ERROR]" in result.stderr and "Traceback" not in result.stderr
    assert "\n   0: " not in result.stderr  # delta-rs's native backtrace is cut off


@contextmanager
def cpu_load(processes: int) -> Iterator[None]:
    """``processes`` busy loops for the block (on 2 cores, a load of ``processes`` + 1), each
    killed at its end."""
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(processes)]
    try:
        yield
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()


READ_THEN_EXIT = """
import sys
from deltalake import DeltaTable
from compactor.cli.args import exit_process
DeltaTable(sys.argv[1]).to_pyarrow_table()  # Arrow's scanner threads, as a reader's
exit_process(0)
"""


@pytest.mark.slow  # a hundred command processes under load: 38 s
def test_ledger_commands_never_end_in_a_native_abort(tmp_path: Path) -> None:
    """Issue 30.7: delta-rs's and Arrow's native threads still alive at interpreter exit
    aborted finished commands (exit 134, "terminate called without an active exception"),
    rarely on an idle machine and often under load. Measured here on 2 cores at load 7: a
    plain process reading the ledger with ``DeltaTable.to_pyarrow_table()`` and returning
    aborted in 5 of 40 runs; every command now leaves through ``exit_process`` (no teardown
    to race), and neither the ledger commands nor that reader abort under the same load."""
    state = str(tmp_path / "state")
    assert run("erase", "init", "--state-dir", state).returncode == 0
    request = ["erase", "request", "--state-dir", state, "--topic", "t", "--key", "k",
               "--reason", "r", "--request-id", "r1"]
    assert run(*request).returncode == 0
    commands = [request, ["erase", "status", "--state-dir", state],
                ["erase", "list", "--state-dir", state]]
    with cpu_load(6):
        for command in commands * 3:
            result = run(*command)
            assert result.returncode == 0, (command, result.returncode, result.stderr)
            assert "terminate called" not in result.stderr
        for _ in range(10):
            result = subprocess.run([sys.executable, "-c", READ_THEN_EXIT,
                                     state + "/erasure_requests"],
                                    capture_output=True, text=True, timeout=120)
            assert (result.returncode, result.stderr) == (0, ""), result.stderr[-500:]
