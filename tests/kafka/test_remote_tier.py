"""A broker's remote tier (KIP-405), judged by a real Kafka 4.1.2 broker running Kafka's own
``LocalTieredStorage`` RemoteStorageManager (the ``kafka-storage`` test jar, on the broker's
``remote.log.storage.manager.class.path``) and the default topic-based RLMM.

A delete-policy topic with ``remote.storage.enable`` and a ``local.retention.ms`` of a second
keeps only its active segment on disk; everything before it is served from remote. The tool
reads the remote segments through the broker's own plugin (:mod:`compactor.remote.tier`), and
``erase verify`` reads them too: a subject found there fails the request with the remote
segment named; a subject nowhere is ``verified`` (before the remote tier was read, both were
``verified_local_only``). Remote segments are replaced by their erased copies through the
cluster's RLMM and the broker's RSM while the broker serves the topic: a replacement killed
after each of its steps leaves the old or the new segment served, whole, and the next run
finishes or undoes it; then ``erase apply --remote`` erases the subject from every remote
segment, and Kafka serves every other record at its offset, before and after a restart, the
old segments gone from the RSM's storage; the broker stopped, ``erase apply`` erases the local
copy and ``erase verify`` proves the subject gone from both tiers."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import TopicPartition
from kafka.record.memory_records import MemoryRecords

from compactor.cli import main as cli_main
from compactor.codec.segment import iter_batches
from compactor.config import TopicConfig
from compactor.errors import EXIT_REQUESTS_FAILED, RemoteTierError
from compactor.log.layout import read_topic_id
from compactor.maintenance.erase_remote import (
    JOURNAL,
    RemoteTarget,
    erase_remote_segments,
    resolve_interrupted,
)
from compactor.remote import tier
from compactor.spark import delta
from tests.helpers import check_report, init_ledger
from tests.kafka.broker import running, tiered_properties

pytestmark = [pytest.mark.kafka_broker, pytest.mark.slow]

TIERED = "tiered"
KEYS = [f"user-{i:03d}".encode() for i in range(20)]
SUBJECT, ABSENT = "user-007", "user-999"


async def _produce(bootstrap: str) -> None:
    """Bursts a segment each (segment.ms), a codec each, with headers, and a committed
    transaction in the middle."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(TIERED, 1, 1, topic_configs={
            "cleanup.policy": "delete", "remote.storage.enable": "true",
            "local.retention.ms": "1000", "segment.ms": "300", "file.delete.delay.ms": "100"})])
    finally:
        await admin.close()
    txn = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="tier-txn",
                           enable_idempotence=True)
    await txn.start()
    try:
        for burst, codec in enumerate([None, "gzip", "lz4", "zstd", None, "gzip"]):
            plain = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True,
                                     compression_type=codec, linger_ms=5)
            await plain.start()
            try:
                for key in KEYS:
                    await plain.send(TIERED, f"{key.decode()}@{burst}".encode(), key=key,
                                     headers=[("burst", str(burst).encode())])
                await plain.flush()
            finally:
                await plain.stop()
            if burst == 2:
                await txn.begin_transaction()
                await txn.send(TIERED, b"in-txn", key=SUBJECT.encode())
                await txn.commit_transaction()
            await asyncio.sleep(0.4)
    finally:
        await txn.stop()


async def _served(bootstrap: str, until: int) -> list[tuple[int, bytes | None, bytes | None]]:
    """What the broker serves below offset ``until`` (from its remote tier), read_committed."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                isolation_level="read_committed")
    await consumer.start()
    out: list[tuple[int, bytes | None, bytes | None]] = []
    try:
        tp = TopicPartition(TIERED, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not out or out[-1][0] < until - 1):
            for messages in (await consumer.getmany(timeout_ms=1000)).values():
                out += [(m.offset, m.key, m.value) for m in messages if m.offset < until]
    finally:
        await consumer.stop()
    return out


def _errors(lines: list[str]) -> list[str]:
    """The broker's ERROR lines, but those of a fetch made while a restarted broker's remote
    log metadata manager still loads (``RemoteLogReader``: "initialized: false", "Remote log
    metadata cache is not initialized"): Kafka's own start-up race, which the consumer
    retries, as it does on any tiered broker's restart."""
    def race(line: str, after: str) -> bool:
        return "RemoteLogReader" in line and ("initialized: false" in after
                                              or "is not initialized" in after)
    return [x for x, after in zip(lines, [*lines[1:], ""], strict=True)
            if "ERROR" in x and not race(x, after)]


def _records(data: bytes) -> list[tuple[int, bytes | None, bytes | None]]:
    """The data records of a segment, by kafka-python's own parser (control batches
    skipped)."""
    out = []
    records = MemoryRecords(data)
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc()
        if batch.is_control_batch:
            continue
        out += [(r.offset, r.key, r.value) for r in batch]
    return out


#: each step a replacement is killed after (the helper halts, as a kill -9), on its own
#: segment, and what the next run then does with it
FAULTS = {"copy_started": "undone", "copied": "undone", "copy_finished": "finished",
          "delete_started": "finished", "deleted": "finished"}


def _stored(remote: Path) -> set[str]:
    return {p.name for p in remote.rglob("*.log")}


def test_the_remote_tier_is_read_verified_and_erased_through_the_brokers_own_plugin(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    remote = tmp_path / "remote"
    remote.mkdir()
    state = tmp_path / "state"
    init_ledger(str(state))
    with running(tmp_path / "broker", extra=tiered_properties(remote)) as broker:
        asyncio.run(_produce(broker.bootstrap))
        partition = broker.log_dir / f"{TIERED}-0"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # until only the active segment is local
            if (len(list(partition.glob("*.log"))) == 1
                    and len(list(remote.rglob("*.log"))) >= 6):
                break
            time.sleep(0.5)
        (active,) = partition.glob("*.log")
        local_start = int(active.name[:20])
        assert local_start > 0
        served = asyncio.run(_served(broker.bootstrap, local_start))
        props, log_dir = str(broker.properties_file), str(broker.log_dir)
        assert [o for o, _, _ in served][:1] == [0]

        # the segments the broker's remote log metadata names: offsets 0 up to the local log
        topic_id = read_topic_id(str(partition))
        assert topic_id is not None
        helper = delta.folder("tier")
        listing = tier.list_segments(helper, props, log_dir,
                                     {f"{TIERED}-0": (topic_id, TIERED, 0)})
        assert listing.unknown == {}
        segments = listing.segments
        assert len(segments) >= len(FAULTS)
        assert {s.state for s in segments} == {tier.SERVED}
        assert segments[0].start_offset == 0
        assert all(a.end_offset + 1 == b.start_offset
                   for a, b in zip(segments, segments[1:], strict=False))
        assert segments[-1].end_offset + 1 == local_start
        # their bytes, through the plugin: the records the broker served from them
        fetched = tier.fetch_segments(helper, props, log_dir, [
            (s.segment_id, str(tmp_path / s.segment_id)) for s in segments])
        assert set(fetched.values()) == {None}
        records = [r for s in segments for r in _records((tmp_path / s.segment_id).read_bytes())]
        assert records == served
        subject = {o for o, k, _ in records if k == SUBJECT.encode()}
        assert len(subject) == 7  # six bursts and the transaction

        # a replacement killed after each step: old or new served, whole; the next run
        # finishes or undoes it by the cluster's remote log metadata
        gone: set[int] = set()
        for (step, expected), target in zip(FAULTS.items(), segments, strict=False):
            data = (tmp_path / target.segment_id).read_bytes()
            erased = {b.position: {r.offset for r in b.compiled_records() if r.offset in subject}
                      for b in iter_batches(data) if not b.is_control}
            erased = {p: o for p, o in erased.items() if o}
            mine = set().union(*erased.values())
            assert mine, step
            monkeypatch.setenv("KAFKA_COMPACTOR_TIER_HALT_AFTER", step)
            with pytest.raises(RemoteTierError):
                erase_remote_segments(helper, props, log_dir, broker.bootstrap,
                                      [RemoteTarget(target, erased, TopicConfig())],
                                      state_dir=str(state))
            monkeypatch.delenv("KAFKA_COMPACTOR_TIER_HALT_AFTER")
            now = asyncio.run(_served(broker.bootstrap, local_start))
            old = [r for r in served if r[0] not in gone]
            new = [r for r in old if r[0] not in mine]
            assert now == (new if expected == "finished" else old), step
            (resolved,) = resolve_interrupted(helper, props, log_dir, broker.bootstrap,
                                              str(state))
            assert (resolved.segment_id, resolved.outcome) == (target.segment_id, expected)
            assert os.listdir(state / JOURNAL) == []
            if expected == "finished":
                gone |= mine
            assert asyncio.run(_served(broker.bootstrap, local_start)) == [
                r for r in served if r[0] not in gone], step
            stored = _stored(remote)
            assert any(target.segment_id in n for n in stored) == (expected == "undone"), step
            assert any(resolved.new_segment_id in n for n in stored) == (
                expected == "finished"), step
        assert 0 < len(gone) < len(subject)

        # the broker stopped: the local copies erased, and a verify finds the subject in the
        # remote segments that still hold it (the undone replacements): failed, each named
        for key in (SUBJECT, ABSENT):
            assert cli_main(["erase", "request", "--state-dir", str(state), "--topic", TIERED,
                             "--key", key, "--json", "--reason", "art. 17"]) == 0
        broker.stop()
        assert cli_main(["erase", "apply", log_dir, "--state-dir", str(state),
                         "--server-properties", props, "--json"]) == 0
        capsys.readouterr()
        assert cli_main(["erase", "verify", log_dir, "--state-dir", str(state),
                         "--server-properties", props, "--json"]) == EXIT_REQUESTS_FAILED
        report = check_report(json.loads(capsys.readouterr().out.splitlines()[-1]))
        (line,) = [p for p in report["partitions"] if p["dir"] == f"remote:{TIERED}-0"]
        assert line["copy"] == "remote" and line["status"] == "residual", line
        assert line["segments_scanned"] == len(segments)
        assert line["records_scanned"] == len(records) - len(gone)
        (failed,) = [r for r in report["requests"] if r["status"] == "failed"]
        assert {x["offset"] for x in failed["residual"]} == subject - gone
        assert cli_main(["erase", "retry", failed["request_id"], "--state-dir", str(state),
                         "--reason", "the remote step"]) == 0

        # restarted (its remote index cache and metadata reloaded): the replacements stand
        broker.start()
        assert asyncio.run(_served(broker.bootstrap, local_start)) == [
            r for r in served if r[0] not in gone]
        assert _errors(broker.log_lines()) == []

        # erase apply --remote, the cluster running: every remote segment still holding the
        # subject replaced by its erased copy, named in the report with its new id
        before = _stored(remote)
        capsys.readouterr()
        assert cli_main(["erase", "apply", log_dir, "--remote", "--bootstrap-server",
                         broker.bootstrap, "--state-dir", str(state),
                         "--server-properties", props, "--json"]) == 0
        report = check_report(json.loads(capsys.readouterr().out.splitlines()[-1]))
        (line,) = report["partitions"]
        assert line["dir"] == f"remote:{TIERED}-0" and line["status"] == "rewritten", line
        replaced = line["remote_segments_rewritten"]
        assert line["records_erased"] == len(subject - gone)
        assert {r["segment_id"] for r in replaced} == {
            s.segment_id for s in segments if any(s.start_offset <= o <= s.end_offset
                                                  for o in subject - gone)}
        # Kafka serves every other record at its offset; the old segments are gone
        assert asyncio.run(_served(broker.bootstrap, local_start)) == [
            r for r in served if r[0] not in subject]
        stored = _stored(remote)
        assert not any(r["segment_id"] in n for n in stored for r in replaced)
        assert all(any(r["new_segment_id"] in n for n in stored) for r in replaced)
        assert len(stored) == len(before)
        # a second apply --remote has nothing left to do: every request is applied there
        assert cli_main(["erase", "apply", log_dir, "--remote", "--bootstrap-server",
                         broker.bootstrap, "--state-dir", str(state),
                         "--server-properties", props, "--json"]) == 0
        report = check_report(json.loads(capsys.readouterr().out.splitlines()[-1]))
        assert report["partitions"] == []
        broker.stop()
        broker.start()
        assert asyncio.run(_served(broker.bootstrap, local_start)) == [
            r for r in served if r[0] not in subject]
        assert _errors(broker.log_lines()) == []

    # the broker stopped: the retried request applied here again, and both tiers proven clean
    records = [r for r in records if r[0] not in subject]
    assert cli_main(["erase", "apply", log_dir, "--state-dir", str(state),
                     "--server-properties", props, "--json"]) == 0
    capsys.readouterr()
    assert cli_main(["erase", "verify", log_dir, "--state-dir", str(state),
                     "--server-properties", props, "--json"]) == 0
    report = check_report(json.loads(capsys.readouterr().out.splitlines()[-1]))
    (line,) = [p for p in report["partitions"] if p["dir"] == f"remote:{TIERED}-0"]
    assert line["copy"] == "remote" and line["status"] == "clean", line
    assert line["records_scanned"] == len(records)
    # the proof names every remote segment it read: the copies, none of the replaced ones
    now_ids = {x["segment_id"] for x in line["remote_segments"]}
    assert len(now_ids) == len(segments)
    assert not now_ids & {s.segment_id for s in segments if any(
        s.start_offset <= o <= s.end_offset for o in subject)}
    assert {r["status"] for r in report["requests"]} == {"verified"}, report["requests"]
    # the request's proof names the remote segments replaced at its remote place
    rid = failed["request_id"]
    assert cli_main(["erase", "report", "--state-dir", str(state), "--request-id", rid,
                     "--json", "--html", str(tmp_path / "proof.html")]) == 0
    proof = json.loads(capsys.readouterr().out)["proof"]
    (place,) = [p for k, p in proof["places"].items() if k.startswith("remote tier via ")]
    assert [(x["segment_id"], x["new_segment_id"]) for x in place["remote_segments"]] == [
        (r["segment_id"], r["new_segment_id"]) for r in replaced]
    page = (tmp_path / "proof.html").read_text()
    assert all(r["segment_id"] in page and r["new_segment_id"] in page for r in replaced)
    assert cli_main(["erase", "report", "--state-dir", str(state), "--request-id", rid]) == 0
    text = capsys.readouterr().out
    assert all(f"remote segment {r['segment_id']}" in text for r in replaced), text
