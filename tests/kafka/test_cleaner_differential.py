"""The differential against Kafka's own cleaner (issue 29.5), on the same bytes, for every
release the tool follows (4.1.2 and ``KAFKA_NEWER``: 4.2.2, 4.3.1, 4.4.0): one copy of a
generated log dir is cleaned by that release's ``Cleaner`` (``tests/kafka/KafkaClean.java``:
``UnifiedLog`` opened as after a clean shutdown, ``LogCleanerManager.cleanableOffsets`` at the
same ``now``, one ``Cleaner.doClean`` pass with a map large enough for it), the other by
``compactor compact``. Then the two are compared: the cleanable range, segment by segment the
batches (every header field) and the records (offset, timestamp, key, value, headers), then
the bytes of every ``.log``, ``.index``, ``.timeindex`` and ``.txnindex``. Our side runs with
``--kafka-version`` naming the release (the generated metadata log registers a 4.1 broker);
where the releases' rules differ (KAFKA-20452 in 4.4: the round's emptied last batch) the
tool follows each. Every comparison is written to ``differential.jsonl`` in pytest's base
temp dir: the per-release table of docs/design.md comes from it.

The logs are generated with every codec, legacy v0/v1 data, idempotent and transactional
producers (committed, aborted), tombstones, LogAppendTime and several groups, one seed per
case, plus eight seeded mixes (:func:`_seeded_cases`); ``now`` lies within
``producer.id.expiration.ms`` of the data. The outputs are equal batch by batch and record by
record, and byte for byte except where the snappy library compresses the same records into
other bytes (:data:`LIBRARY_BYTES`, a deliberate difference; the indexes, whose entries then
follow other batch sizes, are checked by DumpLogSegments against our own log). What this found:
gzip headers (Java writes OS 255), zstd frames (zstd-jni's stream: no content size, a flush
block, an empty last block) and lz4 blocks (Kafka's default level takes lz4's fast
compressor, not LZ4HC) now match Kafka's. The one
deliberate difference, an expired producer's emptied batch, is accepted by name in
:func:`test_the_one_deliberate_difference_is_an_expired_producers_empty_batch`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import asdict
from pathlib import Path

import pytest

from compactor.cli import main as cli_main
from compactor.codec.checkpoints import parse_offset_checkpoint
from compactor.codec.compression import Codec
from compactor.codec.segment import iter_batches
from compactor.errors import EXIT_OK
from compactor.model import TopicPartition
from compactor.tools.ops.generator import DEFAULT_START_MS, GeneratorConfig, generate
from tests.kafka.broker import KAFKA_NEWER, KAFKA_VERSION, classpath, dump_log_segments

pytestmark = [pytest.mark.kafka_cleaner, pytest.mark.spark, pytest.mark.slow]

HARNESS = Path(__file__).with_name("KafkaClean.java")
RELEASES = (KAFKA_VERSION, *KAFKA_NEWER)
# The codec whose compressed bytes depend on the library (snappy-java's C++ snappy against
# the snap crate): the same records, valid streams, other bytes. gzip, lz4, zstd and
# uncompressed batches are byte for byte Kafka's.
LIBRARY_BYTES = (Codec.SNAPPY,)
DELETE_HORIZON_FLAG = 0x40  # DefaultRecordBatch.DELETE_HORIZON_FLAG_MASK (KIP-534)
NOW = DEFAULT_START_MS + 3 * 3_600_000  # within producer.id.expiration.ms: see the docstring
TOPIC = "t"
# both sides read the same topic configs: the metadata log (ours), a properties file (Kafka's)
TOPIC_CONFIGS = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01",
                 "segment.bytes": str(1 << 20), "delete.retention.ms": "3600000"}

CASES = {
    "every-codec-transactions": GeneratorConfig(
        topics=(TOPIC,), partitions=1, records_per_partition=900, distinct_keys=60,
        segment_bytes=8 * 1024, tombstone_ratio=0.2, transactional_ratio=0.4, abort_ratio=0.4,
        seed=101),
    "uncompressed-many-keys": GeneratorConfig(
        topics=(TOPIC,), partitions=1, records_per_partition=1500, distinct_keys=400,
        segment_bytes=16 * 1024, codecs=(Codec.NONE,), transactional_ratio=0.0, seed=102),
    "zstd-log-append-time": GeneratorConfig(
        topics=(TOPIC,), partitions=1, records_per_partition=800, distinct_keys=40,
        segment_bytes=8 * 1024, codecs=(Codec.ZSTD,), log_append_time_topics=(TOPIC,),
        seed=103),
    "legacy-then-v2": GeneratorConfig(
        topics=(TOPIC,), partitions=1, records_per_partition=700, distinct_keys=50,
        segment_bytes=8 * 1024, legacy_records=150, transactional_ratio=0.2, seed=104),
    # the round's last batch holds one null-key record, which the cleaner drops: Kafka 4.1-4.3
    # keep it as an empty batch (it ends the round, KAFKA-17076), 4.4 drops it (the high
    # watermark lies further, KAFKA-20452)
    "null-key-round-end": GeneratorConfig(
        topics=(TOPIC,), partitions=1, records_per_partition=300, distinct_keys=40,
        segment_bytes=4 * 1024, codecs=(Codec.NONE,), max_batch_records=1, null_key_ratio=0.3,
        plain_producers=1, idempotent_producers=0, transactional_producers=0,
        transactional_ratio=0.0, seed=5213),
    "tombstone-heavy-gzip": GeneratorConfig(
        topics=(TOPIC,), partitions=1, records_per_partition=900, distinct_keys=30,
        segment_bytes=4 * 1024, codecs=(Codec.GZIP,), tombstone_ratio=0.5, seed=105),
}



def _seeded_cases(seeds: range) -> dict[str, GeneratorConfig]:
    """More generated logs, each seed drawing its own mix (codecs, producers, legacy data,
    LogAppendTime, tombstones, key space, segment size): the differential as a property
    over a fixed, derandomized sample."""
    import random

    out = {}
    for seed in seeds:
        rng = random.Random(seed)
        codecs = tuple(rng.sample(list(Codec), rng.randint(1, len(Codec))))
        out[f"seed-{seed}"] = GeneratorConfig(
            topics=(TOPIC,), partitions=1, records_per_partition=rng.randint(300, 1200),
            distinct_keys=rng.randint(10, 300), segment_bytes=rng.choice((4, 8, 16)) * 1024,
            codecs=codecs, tombstone_ratio=rng.choice((0.0, 0.1, 0.4)),
            transactional_ratio=rng.choice((0.0, 0.3, 0.6)), abort_ratio=rng.random() * 0.5,
            legacy_records=rng.choice((0, 0, 100)), header_ratio=rng.random() * 0.5,
            log_append_time_topics=(TOPIC,) if rng.random() < 0.3 else (), seed=seed)
    return out


CASES.update(_seeded_cases(range(2901, 2909)))


def _checkpoint(log_dir: Path, name: str) -> int | None:
    path = log_dir / name
    if not path.exists():
        return None
    return parse_offset_checkpoint(path.read_text()).get(TopicPartition(TOPIC, 0))


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """KafkaClean.java compiled once per release (no run pays the source launcher's
    compile): release -> the class path that runs it."""
    out = {}
    for version in RELEASES:
        classes = tmp_path_factory.mktemp(f"kafka-clean-{version}")
        subprocess.run(["javac", "-nowarn", "-cp", classpath(version), "-d", str(classes),
                        str(HARNESS)], check=True, capture_output=True, timeout=300)
        out[version] = f"{classes}{os.pathsep}{classpath(version)}"
    return out


def _kafka_clean(log_dir: Path, work: Path, now: int = NOW, buffer_bytes: int | None = None,
                 cp: str | None = None) -> dict:
    props = work / "topic.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in TOPIC_CONFIGS.items()))
    start = _checkpoint(log_dir, "log-start-offset-checkpoint") or 0
    proc = subprocess.run(
        ["java", "-Xmx512m", *(["-cp", cp, "KafkaClean"] if cp else
                               ["-cp", classpath(KAFKA_VERSION), str(HARNESS)]),
         str(log_dir / f"{TOPIC}-0"), str(now), str(props), str(start),
         str(_checkpoint(log_dir, "recovery-point-offset-checkpoint") or 0),
         str(_checkpoint(log_dir, "replication-offset-checkpoint") or 2**62),
         str(_checkpoint(log_dir, "cleaner-offset-checkpoint") or -1),
         *([str(buffer_bytes)] if buffer_bytes else [])],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for leftover in (log_dir / f"{TOPIC}-0").glob("*.deleted"):  # Kafka deletes them later
        leftover.unlink()
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _files(partition: Path) -> dict[str, bytes]:
    """The segment files of a partition. The active segment's indexes without the zero slots
    Kafka preallocates: Kafka 4.4 leaves them when it closes the log (4.1-4.3 trim them); a
    broker loading either trims or grows them alike, and neither side wrote that segment."""
    out = {p.name: p.read_bytes() for p in sorted(partition.iterdir())
           if p.suffix in (".log", ".index", ".timeindex", ".txnindex")}
    active = max((n for n in out if n.endswith(".log")), default=None)
    for suffix, slot in ((".index", 8), (".timeindex", 12)):
        name = active and active.replace(".log", suffix)
        if name in out:
            used = len(out[name].rstrip(b"\0"))
            out[name] = out[name][:-(-used // slot) * slot]
    return out


def _batches(data: bytes) -> list[dict]:
    out = []
    for b in iter_batches(data):
        header = {k: getattr(b, k) for k in (
            "base_offset", "last_offset_delta", "magic", "attributes", "base_timestamp",
            "max_timestamp", "producer_id", "producer_epoch", "base_sequence",
            "partition_leader_epoch", "records_count") if hasattr(b, k)}
        header["records"] = [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers))
                             for r in b.records()]
        out.append(header)
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_compactor_leaves_what_kafkas_cleaner_leaves(spark, tmp_path: Path, case: str,
                                                     harness: dict[str, str],
                                                     tmp_path_factory: pytest.TempPathFactory,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    cfg = CASES[case]
    cfg = GeneratorConfig(**{**asdict(cfg), "topic_configs": {TOPIC: TOPIC_CONFIGS}})
    generated = tmp_path / "generated"
    generate(str(generated), cfg)
    results = tmp_path_factory.getbasetemp() / "differential.jsonl"
    for version in RELEASES:
        release = version.rsplit(".", 1)[0]
        ours, kafkas = tmp_path / f"ours-{version}", tmp_path / f"kafka-{version}"
        shutil.copytree(generated, ours)
        shutil.copytree(generated, kafkas)
        judged = _kafka_clean(kafkas, tmp_path, cp=harness[version])
        assert cli_main(["compact", str(ours), "--assume-kafka-defaults", "--now-ms", str(NOW),
                         "--kafka-version", release, "--json"]) == EXIT_OK
        report = json.loads(capsys.readouterr().out.splitlines()[-1])
        (line,) = [p for p in report["partitions"] if p["topic"] == TOPIC]
        assert line["status"] == "cleaned", line
        # the same cleanable range as Kafka's LogCleanerManager.cleanableOffsets
        assert (line["first_dirty_offset"], line["first_uncleanable_offset"]) == (
            judged["first_dirty"], judged["first_uncleanable"]), version
        compared = _compare(ours / f"{TOPIC}-0", kafkas / f"{TOPIC}-0", version)
        # our one deliberate difference within a round: a group's placeholder header
        # (docs/design.md), each one counted in the report
        assert compared["placeholders"] == line.get("placeholders", 0), (version, line)
        with results.open("a") as f:
            f.write(json.dumps({"case": case, "release": version, **compared}) + "\n")


def _compare(mine_dir: Path, theirs_dir: Path, version: str) -> dict[str, int]:
    """Asserts our partition equals Kafka's: segment by segment the batches and records,
    then the bytes (snappy's payloads excepted, :data:`LIBRARY_BYTES`), then DumpLogSegments
    over ours. A segment may end in our placeholder header where Kafka's has none (a group
    whose last batch Kafka 4.4 drops, KAFKA-20452). Returns what was equal: batches,
    records, batches and files equal in bytes, and the placeholders."""
    mine, theirs = _files(mine_dir), _files(theirs_dir)
    logs = sorted(n for n in theirs if n.endswith(".log"))
    assert sorted(n for n in mine if n.endswith(".log")) == logs, (version, "segments differ")
    recompressed = batches = records = 0  # snappy batches whose payload bytes differ
    placeholders = set()  # segments ending in a placeholder Kafka has not
    for name in logs:  # batch by batch, record by record, then bytes
        ours_, kafkas_ = _batches(mine[name]), _batches(theirs[name])
        if ours_ and _is_placeholder(ours_[-1]) and ours_[-1]["base_offset"] not in {
                b["base_offset"] for b in kafkas_}:
            ours_ = ours_[:-1]
            placeholders.add(name)
        assert ours_ == kafkas_, (version, name)
        batches += len(ours_)
        records += sum(len(b["records"]) for b in ours_)
        for a, b in zip(iter_batches(mine[name]), iter_batches(theirs[name])):
            if a.raw != b.raw:
                assert a.compression in LIBRARY_BYTES, (version, name, a.base_offset,
                                                        a.compression)
                recompressed += 1
        if not recompressed and name not in placeholders:
            assert mine[name] == theirs[name], (version, name)
    assert set(mine) == set(theirs), version
    files_equal = 0
    for name in sorted(theirs):
        if mine[name] == theirs[name]:
            files_equal += 1
        else:
            # a log of snappy batches was compared batch by batch above; the indexes' entries
            # follow the batches' sizes (index.interval.bytes), so with snappy they are
            # checked against our own log by DumpLogSegments below instead
            assert (recompressed or name.split(".")[0] + ".log" in placeholders) and \
                name.endswith((".log", ".index", ".timeindex")), (version, name)
    # and Kafka's DumpLogSegments over every file we wrote (once for outputs alike in bytes:
    # most releases' are)
    digest = hashlib.sha256(b"".join(n.encode() + mine[n] for n in sorted(mine))).hexdigest()
    if digest not in _DUMPED:
        files = [mine_dir / n for n in sorted(mine)]
        for args in (("--deep-iteration", "--index-sanity-check"), ("--verify-index-only",)):
            assert dump_log_segments(files, *args) == [], args
        _DUMPED.add(digest)
    return {"batches": batches, "records": records, "batches_bytes_equal": batches - recompressed,
            "files": len(theirs), "files_bytes_equal": files_equal,
            "placeholders": len(placeholders)}


_DUMPED: set[str] = set()  # outputs DumpLogSegments found sound, by digest


def _is_placeholder(batch: dict) -> bool:
    """Our placeholder header (``rebatch.placeholder_batch``): no records, no producer, no
    timestamps."""
    return (batch["records_count"] == 0 and batch["producer_id"] == -1
            and batch["base_timestamp"] == batch["max_timestamp"] == -1)


def test_several_passes_of_a_small_map_leave_what_our_one_round_leaves(
        spark, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Kafka's cleaner with a map too small for the dirty section's keys (a 4 KiB
    ``log.cleaner.dedupe.buffer.size``: 170 MD5 slots, 153 keys a pass at the 0.9 load factor,
    for 400 keys) cleans in passes, each up to where its map filled, as a broker's cleaner
    thread does over its next cycles; the harness loops them (``bench/kafka_cleaner.py`` times
    Kafka's cleaner the same way). Our round, one pass over the distributed map, leaves the
    same batches and records. Two differences come from the passes' history, not the rules:
    the segments' grouping, and a batch whose tombstone one pass kept (stamping the batch's
    delete horizon, KIP-534) and a later pass dropped as superseded keeps that stamp
    (``MemoryRecords.filterTo`` carries ``batch.deleteHorizonMs()`` into the rebuilt batch);
    one pass drops the tombstone unstamped."""
    cfg = GeneratorConfig(**{**asdict(CASES["uncompressed-many-keys"]),
                             "topic_configs": {TOPIC: TOPIC_CONFIGS}})
    ours, kafkas = tmp_path / "ours", tmp_path / "kafka"
    generate(str(ours), cfg)
    shutil.copytree(ours, kafkas)
    judged = _kafka_clean(kafkas, tmp_path, buffer_bytes=4096)
    assert judged["passes"] >= 3, judged
    assert judged["next_dirty"] == judged["first_uncleanable"], judged
    assert cli_main(["compact", str(ours), "--assume-kafka-defaults", "--now-ms", str(NOW),
                     "--json"]) == EXIT_OK
    capsys.readouterr()

    def batches(partition: Path) -> list[dict]:
        return [b for seg in sorted(partition.glob("*.log")) for b in _batches(seg.read_bytes())]

    mine, theirs = batches(ours / f"{TOPIC}-0"), batches(kafkas / f"{TOPIC}-0")
    assert [b["records"] for b in mine] == [b["records"] for b in theirs]
    horizon = NOW + int(TOPIC_CONFIGS["delete.retention.ms"])
    stamped = 0
    for a, b in zip(mine, theirs):
        if b["attributes"] & DELETE_HORIZON_FLAG and not a["attributes"] & DELETE_HORIZON_FLAG:
            assert b["base_timestamp"] == horizon, b  # the earlier pass's stamp, nothing else
            b = {**b, "attributes": b["attributes"] & ~DELETE_HORIZON_FLAG,
                 "base_timestamp": a["base_timestamp"]}
            stamped += 1
        assert a == b
    assert stamped < len(mine) // 4, stamped  # a few batches, not the log


PRODUCER_ID_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms, Kafka's default


def test_the_one_deliberate_difference_is_an_expired_producers_empty_batch(
        spark, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Three days after the data, past producer.id.expiration.ms: right after it loads a log,
    Kafka's cleaner still counts as active a producer the snapshot held with an open
    transaction (LogLoader replays without expiring; ProducerStateManager.removeExpiredProducers
    runs only every producer.id.expiration.check.interval.ms), and keeps that producer's last
    batch as an empty batch. kafka-compactor applies the expiration, as a broker that has run
    longer than that interval does, and drops it. Everything else is equal, batch by batch."""
    now = DEFAULT_START_MS + 3 * 86_400_000
    cfg = GeneratorConfig(**{**asdict(CASES["legacy-then-v2"]),
                             "topic_configs": {TOPIC: TOPIC_CONFIGS}})
    ours, kafkas = tmp_path / "ours", tmp_path / "kafka"
    generate(str(ours), cfg)
    shutil.copytree(ours, kafkas)
    _kafka_clean(kafkas, tmp_path, now)
    assert cli_main(["compact", str(ours), "--assume-kafka-defaults", "--now-ms", str(now),
                     "--json"]) == EXIT_OK
    capsys.readouterr()
    mine, theirs = _files(ours / f"{TOPIC}-0"), _files(kafkas / f"{TOPIC}-0")
    extra = []
    for name in sorted(n for n in theirs if n.endswith(".log")):
        kept = {b.base_offset for b in iter_batches(mine[name])}
        for b in iter_batches(theirs[name]):
            if b.base_offset not in kept:
                extra.append(b)
        assert _batches(mine[name]) == [x for x in _batches(theirs[name])
                                        if x["base_offset"] in kept], name
    assert extra, "the case no longer shows the difference: pick another seed"
    for b in extra:  # each one an expired producer's emptied data batch, nothing else
        assert b.records_count == 0 and not b.is_control and b.producer_id >= 0
        assert now - b.max_timestamp >= PRODUCER_ID_EXPIRATION_MS
