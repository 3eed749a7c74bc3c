"""The releases the tool follows, judged by Kafka's own jars of each (4.1.2 and the newer
releases ``make kafka`` fetches): the ``metadata.version`` feature levels that name a release
(``MetadataVersion``), and the offset index entry size a release writes (KIP-1333 proposes 12
bytes; ``OffsetIndex`` of every release here reads and writes 8)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from compactor.cli import main as cli_main
from compactor.cluster.release import KNOWN, NEWEST, release_of_level, text
from compactor.errors import EXIT_PARTIAL
from compactor.tools.ops.generator import LATEST_METADATA_VERSION, GeneratorConfig, generate
from tests.kafka.broker import KAFKA_NEWER, KAFKA_VERSION, classpath, dump_log_segments

pytestmark = [pytest.mark.kafka_cleaner]

RELEASES = [KAFKA_VERSION, *KAFKA_NEWER]
HARNESS = Path(__file__).with_name("MetadataVersions.java")


@pytest.mark.parametrize("version", RELEASES)
def test_feature_levels_name_the_release_kafka_gives_them(version: str) -> None:
    """Every level a release's MetadataVersion knows from 4.0 on maps to the release in its
    name (``4.2-IV1`` -> 4.2); the release's latest production level, what its brokers
    register, maps to the release itself, and is what the generator writes for it."""
    import subprocess

    proc = subprocess.run(["java", "-cp", classpath(version), str(HARNESS)],
                          capture_output=True, text=True, timeout=120, check=True)
    judged = json.loads(proc.stdout.strip().splitlines()[-1])
    release = tuple(int(x) for x in version.split(".")[:2])
    for level, name in judged["levels"].items():
        named = tuple(int(x) for x in name.split("-")[0].split("."))
        if named >= (4, 0):
            assert release_of_level(int(level)) == named, (level, name)
    assert release_of_level(judged["latest_production"]) == release
    if release in KNOWN:
        assert LATEST_METADATA_VERSION[text(release)] == judged["latest_production"]
    assert release <= NEWEST


@pytest.mark.parametrize("parity", [1, 0], ids=["odd", "even"])
def test_an_index_of_12_byte_entries_is_refused_by_the_tool_and_by_kafka(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], parity: int) -> None:
    """KIP-1333 (proposed) would write 12-byte offset index entries. No release here writes
    them (the newest's OffsetIndex sanity check refuses the file); the tool refuses it too,
    with the file, the format it saw, and what to do, and changes nothing."""
    out = tmp_path / "logs"
    generate(str(out), GeneratorConfig(topics=("kv",), partitions=1, records_per_partition=1500,
                                       segment_bytes=32 * 1024, seed=8,
                                       topic_configs={"kv": {"cleanup.policy": "compact"}}))
    # odd: 12 bytes an entry make no whole number of 8; even: they do, and misread as 8-byte
    # entries they break the order of offsets
    index = next(p for p in sorted((out / "kv-0").glob("*.index"))
                 if p.stat().st_size > 8 and p.stat().st_size // 8 % 2 == parity)
    entries = [struct.unpack_from(">ii", index.read_bytes(), p)
               for p in range(0, index.stat().st_size, 8)]
    # relative offset (4 bytes) and position (8 bytes): 12 bytes an entry
    index.write_bytes(b"".join(struct.pack(">iq", r, p) for r, p in entries))
    before = {p.name: p.read_bytes() for p in (out / "kv-0").iterdir()}

    # Kafka's judgement: its sanity check (a size of whole 8-byte entries) or, when that
    # passes, its check of every entry against the segment
    problems = (dump_log_segments([index], "--index-sanity-check", version=RELEASES[-1])
                or dump_log_segments([index], "--verify-index-only", version=RELEASES[-1]))
    assert problems, "Kafka reads the file as a valid offset index"

    assert cli_main(["compact", str(out), "--assume-kafka-defaults", "--json"]) == EXIT_PARTIAL
    report = json.loads(capsys.readouterr().out.splitlines()[-1])
    (line,) = [p for p in report["partitions"] if p["topic"] == "kv"]
    assert line["error"]["code"] == "CORRUPT_INDEX", line
    assert line["error"]["path"] == str(index) and "KIP-1333" in line["error"]["message"]
    assert {p.name: p.read_bytes() for p in (out / "kv-0").iterdir()} == before


@pytest.mark.parametrize("version", [v for v in RELEASES
                                     if tuple(int(x) for x in v.split(".")[:2]) >= (4, 3)])
def test_cordoned_log_dirs_are_read_from_the_records_kafka_writes(version: str) -> None:
    """KIP-1066's records as Kafka 4.3+ serializes them, replayed by the tool: the broker's
    release from its registration, then its cordoned log dirs (a registration change
    replaces them)."""
    import subprocess

    from compactor.cluster.metadata import Replay
    from compactor.codec.kraft import decode_metadata_record

    dirs = ["G7v0bDBCQp6HTJjAlU2k4g", "AbCdEfGhIjKlMnOpQrStUw"]
    proc = subprocess.run(["java", "-cp", classpath(version), str(HARNESS.with_name(
        "CordonedRecords.java")), *dirs], capture_output=True, text=True, timeout=120,
        check=True)
    register, change = (bytes.fromhex(h) for h in proc.stdout.split())
    replay = Replay()
    replay.apply(decode_metadata_record(register))
    assert replay.state.broker_levels == {1: 30} and replay.state.cordoned == {1: dirs}
    replay.apply(decode_metadata_record(change))
    assert replay.state.cordoned == {1: dirs[:1]}
