"""Kafka as the judge of ``compactor run``'s order of passes (issue 52.2): on a
``compact,delete`` topic whose old segments expire, with tombstones, the tool's ``run`` and a
real broker's own retention and cleaner leave the same records.

A broker (4.1.2) produces the topic through a real client: old bursts stamped three days ago
(each its own segment: ``segment.ms``), then recent ones; some keys only in the old bursts,
some in both, tombstones in both. It is stopped and its work dir copied twice:

* on one copy ``compactor run`` runs with the broker's own ``server.properties``;
* on the other the broker itself runs: its retention first, then its cleaner.

Kafka guarantees no order between the two for a ``compact,delete`` log: its cleaner thread
cleans the filthiest log, then runs ``deleteOldSegments`` on every compacted log
(``LogCleaner.CleanerThread.cleanFilthiestLog``, ``LogCleanerManager.deletableLogs``), so a log
is retained on every pass and cleaned when it is the filthiest; in a running broker its expired
segments go before a pass merges them. The judge makes that order certain with Kafka's own
code: the topic is ``delete`` while ``LogManager.cleanupLogs`` deletes its expired segments,
then ``compact,delete`` again until the cleaner has cleaned it.

Then kafka-python (an independent parser) reads every record of both copies: offsets, keys and
values are equal. Before the fix ``run`` compacted first: a group that merged expired old
segments with recent ones made one young segment, so keys written only in the old bursts
survived where the broker deleted them."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from kafka.record.memory_records import MemoryRecords

from compactor.cli import main as cli_main
from compactor.errors import EXIT_OK
from tests.kafka.broker import KafkaBroker

pytestmark = [pytest.mark.kafka_broker, pytest.mark.slow]

TOPIC = "mixed"
DAY = 86_400_000
OLD_ONLY = [f"old-{i:02d}".encode() for i in range(12)]
BOTH = [f"both-{i:02d}".encode() for i in range(12)]


CONFIGS = {"cleanup.policy": "compact,delete", "retention.ms": str(DAY),
           "min.cleanable.dirty.ratio": "0.01", "segment.ms": "300"}


async def _create(bootstrap: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(TOPIC, 1, 1, topic_configs=CONFIGS)])
    finally:
        await admin.close()


async def _policy(bootstrap: str, policy: str) -> None:
    """The topic's cleanup.policy (AlterConfigs replaces every config: all are given)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, TOPIC,
                                                  {**CONFIGS, "cleanup.policy": policy})])
    finally:
        await admin.close()


async def _produce(bootstrap: str) -> None:
    """Three old bursts (three days ago), then three recent ones; tombstones in both."""
    now = int(time.time() * 1000)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
    await producer.start()
    try:
        for burst in range(6):
            old = burst < 3
            stamp = now - 3 * DAY + burst * 1000 if old else now - (6 - burst) * 1000
            keys = OLD_ONLY + BOTH if old else BOTH
            for n, key in enumerate(keys):
                tombstone = (burst + n) % 7 == 0
                await producer.send(TOPIC, None if tombstone else b"%s@%d" % (key, burst),
                                    key=key, timestamp_ms=stamp)
            await producer.flush()
            await asyncio.sleep(0.4)  # segment.ms: the next burst rolls a new segment
    finally:
        await producer.stop()


def _records(pdir: Path) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    for log in sorted(pdir.glob("*.log")):
        records = MemoryRecords(log.read_bytes())
        while records.has_next():
            batch = records.next_batch()
            if not batch.is_control_batch:
                out += [(r.offset, r.key, r.value) for r in batch]
    return out


def _wait(condition, what: str, timeout_s: float = 180) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)
    raise TimeoutError(what)


def test_run_and_the_broker_leave_the_same_records_on_an_expiring_compact_delete_topic(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    producer_side = KafkaBroker(tmp_path / "produced")
    loop = asyncio.new_event_loop()
    try:
        producer_side.start()
        loop.run_until_complete(_create(producer_side.bootstrap))
        loop.run_until_complete(_produce(producer_side.bootstrap))
    finally:
        loop.close()
        producer_side.stop()
    pdir = producer_side.log_dir / f"{TOPIC}-0"
    produced = _records(pdir)
    assert len(sorted(pdir.glob("*.log"))) >= 6 and any(v is None for _, _, v in produced)

    tool_dir, broker_dir = tmp_path / "tool", tmp_path / "broker"
    shutil.copytree(producer_side.work_dir, tool_dir)
    tool = KafkaBroker(tool_dir, port=producer_side.port,
                       controller_port=producer_side.controller_port,
                       cluster_id=producer_side.cluster_id)
    tool._write_config()  # its properties name its own copy's log dir
    assert cli_main(["run", str(tool.log_dir), "--server-properties",
                     str(tool.properties_file), "--json"]) == EXIT_OK
    capsys.readouterr()

    # the judge: the same broker, retention first (the topic "delete" for a while), then its
    # cleaner; a shell of its own so that nothing runs on the tool's copy
    def judge() -> KafkaBroker:
        return KafkaBroker(broker_dir, port=producer_side.port,
                           controller_port=producer_side.controller_port,
                           cluster_id=producer_side.cluster_id, extra={
                               "log.segment.delete.delay.ms": "0",
                               "log.retention.check.interval.ms": "1000",
                               "log.cleaner.enable": "true", "log.cleaner.backoff.ms": "200"})

    loop = asyncio.new_event_loop()
    try:
        producer_side.start()  # the topic turns "delete" before the judge's cleaner starts
        loop.run_until_complete(_policy(producer_side.bootstrap, "delete"))
        producer_side.stop()
        shutil.copytree(producer_side.work_dir, broker_dir)
        broker = judge()
        broker.start()
        jdir = broker_dir / "logs" / f"{TOPIC}-0"
        first = min(int(p.name[:20]) for p in jdir.glob("*.log"))
        try:
            # LogManager.cleanupLogs: after its 30 s initial delay, every second
            _wait(lambda: min(int(p.name[:20]) for p in jdir.glob("*.log")) > first,
                  "the broker's retention deleted nothing")
            time.sleep(2)
            loop.run_until_complete(_policy(broker.bootstrap, "compact,delete"))
            checkpoint = broker_dir / "logs" / "cleaner-offset-checkpoint"
            _wait(lambda: checkpoint.exists() and any(
                line.startswith(f"{TOPIC} 0 ") for line in
                checkpoint.read_text().splitlines()[2:]),
                "the broker's cleaner did not clean the partition")
        finally:
            broker.stop()
    finally:
        loop.close()

    by_tool = _records(tool.log_dir / f"{TOPIC}-0")
    by_broker = _records(broker_dir / "logs" / f"{TOPIC}-0")
    assert by_tool == by_broker
    assert not {k for _, k, _ in by_broker} & set(OLD_ONLY)  # expired with their segments
    assert len(by_broker) < len(produced)
