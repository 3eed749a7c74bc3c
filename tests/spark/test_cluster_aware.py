"""Issue 12 end to end: a log dir as a Kafka 4.x broker leaves it (the KRaft metadata log,
Kafka's internal topic, a removed topic's dir, a re-created topic's stale dir, a tiered topic)
through ``plan``, ``compact``, ``retain``, ``run``, ``erase`` and ``recover`` with no config
flags: configs come from the cluster, the special logs are never harmed, nothing happens on a
guess."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from compactor.cli import main as cli_main
from compactor.codec.checkpoints import LOG_START_OFFSET_CHECKPOINT, parse_offset_checkpoint
from compactor.errors import EXIT_CONFIG, EXIT_OK
from compactor.model import TopicPartition
from compactor.tools.ops.generator import DEFAULT_START_MS, GeneratorConfig, generate
from tests.helpers import init_ledger, inspect_problems, report_line, segment_bytes, tree_digest

pytestmark = pytest.mark.spark

DAY = 86_400_000
NOW = DEFAULT_START_MS + 30 * DAY  # every generated record is about 30 days old
CLUSTER = GeneratorConfig(
    topics=("payments", "events", "gone", "reborn", "tiered"), partitions=1,
    records_per_partition=600, distinct_keys=40, segment_bytes=8 * 1024, seed=21,
    internal_topics=("__consumer_offsets",),
    topic_configs={"payments": {"cleanup.policy": "compact"},
                   "events": {"retention.ms": str(20 * DAY)},
                   "tiered": {"remote.storage.enable": "true", "retention.ms": str(DAY),
                              "local.retention.ms": str(DAY)}},
    removed_topics=("gone",), recreated_topics=("reborn",))
UNTOUCHABLE = ("__cluster_metadata-0", "gone-0", "reborn-0")


@pytest.fixture(scope="module")
def cluster_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cluster") / "logs"
    generate(str(path), CLUSTER)
    # the tiered partition's log start lies above its first segment (remote data before it)
    (path / LOG_START_OFFSET_CHECKPOINT).write_text("0\n1\ntiered 0 100\n")
    return path


@pytest.fixture()
def cluster(cluster_template: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "logs"
    shutil.copytree(cluster_template, dest)
    return dest


def digests(log_dir: Path, names: tuple[str, ...]) -> dict[str, dict[str, str]]:
    return {n: tree_digest(log_dir / n) for n in names}


def lines_by_dir(partitions: list[dict]) -> dict[str, dict]:
    return {f"{p['topic']}-{p['partition']}": p for p in partitions}


def test_run_with_no_flags_follows_the_cluster(spark, cluster: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    kept = digests(cluster, UNTOUCHABLE)
    tiered = tree_digest(cluster / "tiered-0")
    events_before = segment_bytes(cluster / "events-0")
    offsets_before = segment_bytes(cluster / "__consumer_offsets-0")

    assert cli_main(["run", "--assume-kafka-defaults", str(cluster), "--now-ms", str(NOW),
                     "--json"]) == EXIT_OK
    report = report_line(capsys)
    compaction = lines_by_dir(report["compaction"]["partitions"])
    retention = lines_by_dir(report["retention"]["partitions"])

    # the metadata log, the removed topic and the stale re-created dir: byte-identical
    assert digests(cluster, UNTOUCHABLE) == kept
    assert (compaction["__cluster_metadata-0"]["status"], compaction["__cluster_metadata-0"]
            ["reason"]) == ("skipped", "metadata_log")
    assert retention["__cluster_metadata-0"]["reason"] == "metadata_log"
    for name in ("gone-0", "reborn-0"):
        assert compaction[name]["reason"] == retention[name]["reason"] == "stale_topic_id"
    # Kafka's internal topic: compacted (its ConfigRecord), never time-deleted
    assert compaction["__consumer_offsets-0"]["status"] == "cleaned"
    assert compaction["__consumer_offsets-0"]["config"]["cleanup.policy"] == {
        "value": "compact", "source": "topic"}
    assert retention["__consumer_offsets-0"]["deleted_segments"] == []
    assert set(segment_bytes(cluster / "__consumer_offsets-0")) <= set(offsets_before)
    # a compacted user topic likewise; a delete topic retained by its own retention.ms
    assert compaction["payments-0"]["status"] == "cleaned"
    assert compaction["events-0"]["reason"] == "not_compacted"
    events = retention["events-0"]
    assert events["config"]["retention.ms"] == {"value": 20 * DAY, "source": "topic"}
    assert events["status"] == "deleted" and events["rolled"]  # 30 days old > 20 days
    assert len(events_before) > 1 and list(segment_bytes(cluster / "events-0").values()) == [b""]
    # tiered storage: no local segment deleted, the log start checkpoint entry kept
    assert retention["tiered-0"]["status"] == "skipped"
    assert retention["tiered-0"]["reason"] == "tiered_storage"
    assert tree_digest(cluster / "tiered-0") == tiered
    starts = parse_offset_checkpoint((cluster / LOG_START_OFFSET_CHECKPOINT).read_text())
    assert starts[TopicPartition("tiered", 0)] == 100
    # the tiered configs are accepted; local.retention.ms is listed as not used
    assert "local.retention.ms" in report["retention"]["cluster"]["ignored_configs"]["tiered"]
    assert inspect_problems(cluster) == []


def test_plan_shows_every_config_and_its_source(spark, cluster: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    before = tree_digest(cluster)
    assert cli_main(["plan", "--assume-kafka-defaults", str(cluster), "--now-ms", str(NOW),
                     "--json",
                     "--topic-config", "payments:min.cleanable.dirty.ratio=0.2"]) == EXIT_OK
    plan = lines_by_dir(report_line(capsys)["partitions"])
    assert tree_digest(cluster) == before
    payments = plan["payments-0"]["config"]
    assert payments["cleanup.policy"] == {"value": "compact", "source": "topic"}
    assert payments["min.cleanable.dirty.ratio"] == {"value": 0.2, "source": "topic_flag"}
    assert payments["delete.retention.ms"] == {"value": DAY, "source": "default"}
    assert plan["events-0"]["retention"]["status"] == "would_delete"
    assert plan["tiered-0"]["retention"]["reason"] == "tiered_storage"


def test_the_old_readme_invocation_no_longer_harms_the_metadata_log(
        spark, cluster: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kept = digests(cluster, UNTOUCHABLE)
    assert cli_main(["compact", "--assume-kafka-defaults", str(cluster), "--now-ms", str(NOW),
                     "--json",
                     "--config", "cleanup.policy=compact"]) == EXIT_OK
    report = lines_by_dir(report_line(capsys)["partitions"])
    assert digests(cluster, UNTOUCHABLE) == kept
    assert report["events-0"]["status"] == "cleaned"  # the flag outranks the cluster
    assert report["events-0"]["config"]["cleanup.policy"]["source"] == "flag"
    assert cli_main(["retain", "--assume-kafka-defaults", str(cluster), "--now-ms", str(NOW),
                     "--json"]) == EXIT_OK
    capsys.readouterr()
    assert digests(cluster, UNTOUCHABLE) == kept


def test_recover_and_erase_never_touch_the_metadata_log(
        spark, cluster: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    meta = cluster / "__cluster_metadata-0"
    (meta / "00000000000000000000.log.deleted").write_bytes(b"left by a controller")
    kept = tree_digest(meta)
    assert cli_main(["recover", str(cluster)]) == EXIT_OK
    assert cli_main(["recover", str(meta)]) == EXIT_CONFIG
    assert "never modifies" in capsys.readouterr().err
    assert tree_digest(meta) == kept
    state = tmp_path / "state"
    init_ledger(str(state))
    assert cli_main(["erase", "request", "--state-dir", str(state), "--topic", "*",
                     "--key-hex", "00", "--reason", "art. 17"]) == EXIT_OK
    capsys.readouterr()
    assert cli_main(["erase", "apply", "--assume-kafka-defaults", str(cluster), "--state-dir",
                     str(state), "--json",
                     "--now-ms", str(NOW)]) == EXIT_OK
    report = report_line(capsys)
    assert "__cluster_metadata" not in {p["topic"] for p in report["partitions"]}
    assert tree_digest(meta) == kept


def test_without_metadata_nothing_is_deleted_or_compacted_on_a_guess(
        spark, cluster: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.rmtree(cluster / "__cluster_metadata-0")
    before = tree_digest(cluster)
    # nothing decided: exit 3, status unconfigured, never a success (issue 51.12)
    assert cli_main(["run", str(cluster), "--now-ms", str(NOW)]) == EXIT_CONFIG
    out = capsys.readouterr().out
    assert tree_digest(cluster) == before
    assert "--metadata-log-dir" in out and "--server-properties" in out
    # with the metadata found elsewhere (metadata.log.dir), the same run acts
    elsewhere = cluster.parent / "meta"
    generate(str(elsewhere), CLUSTER)
    assert cli_main(["retain", "--assume-kafka-defaults", str(cluster), "--now-ms", str(NOW),
                     "--json",
                     "--metadata-log-dir", str(elsewhere)]) == EXIT_OK
    retention = lines_by_dir(report_line(capsys)["partitions"])
    assert retention["events-0"]["status"] == "deleted"
    assert retention["__consumer_offsets-0"]["status"] == "kept"
    # Kafka's defaults only when asked for; __consumer_offsets then is what Kafka creates it
    # as (compacted), never a delete topic on a guess
    assert cli_main(["retain", str(cluster), "--now-ms", str(NOW), "--json",
                     "--assume-kafka-defaults", "--dry-run"]) == EXIT_OK
    assumed = lines_by_dir(report_line(capsys)["partitions"])
    assert assumed["payments-0"]["status"] == "would_delete"  # its compact policy is unknown here
    assert assumed["__consumer_offsets-0"]["status"] == "kept"
    assert assumed["__consumer_offsets-0"]["config"]["cleanup.policy"] == {
        "value": "compact", "source": "internal_topic"}


@pytest.mark.parametrize("flags", [["--topics", "paymnts"],
                                   ["--topic-config", "paymnts:cleanup.policy=compact"]])
def test_a_misspelt_topic_is_an_error_naming_the_closest(
        spark, cluster: Path, capsys: pytest.CaptureFixture[str], flags: list[str]) -> None:
    before = tree_digest(cluster)
    assert cli_main(["run", "--assume-kafka-defaults", str(cluster), "--now-ms", str(NOW),
                     *flags]) == EXIT_CONFIG
    assert "did you mean 'payments'" in capsys.readouterr().err
    assert tree_digest(cluster) == before


def test_server_properties_and_a_corrupt_metadata_log(
        spark, cluster: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    props = tmp_path / "server.properties"
    props.write_text("log.retention.hours=1000\n")  # 41 days: nothing of events is that old
    shutil.rmtree(cluster / "__cluster_metadata-0")
    assert cli_main(["retain", "--assume-kafka-defaults", str(cluster), "--now-ms", str(NOW),
                     "--json",
                     "--server-properties", str(props), "--dry-run"]) == EXIT_OK
    events = lines_by_dir(report_line(capsys)["partitions"])["events-0"]
    assert events["config"]["retention.ms"] == {"value": 1000 * 3_600_000,
                                                "source": "server.properties"}
    assert events["status"] == "kept"
    # a metadata log that does not decode: exit 5, nothing changed, the file named
    generate(str(tmp_path / "m"), CLUSTER)
    shutil.copytree(tmp_path / "m" / "__cluster_metadata-0", cluster / "__cluster_metadata-0")
    snapshot = next((cluster / "__cluster_metadata-0").glob("*.checkpoint"))
    data = bytearray(snapshot.read_bytes())
    data[150] ^= 0x01
    snapshot.write_bytes(bytes(data))
    before = tree_digest(cluster)
    assert cli_main(["run", "--assume-kafka-defaults", str(cluster), "--now-ms", str(NOW),
                     "--json"]) == 5
    error = report_line(capsys)
    assert error["code"] == "CORRUPT_METADATA" and error["path"] == str(snapshot)
    assert error["position"] is not None and error["base_offset"] is not None
    assert tree_digest(cluster) == before


def test_a_jbod_broker_is_maintained_and_erased_as_one_from_its_server_properties(
        spark, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One broker, two log dirs (the partitions spread over both, the metadata log in the
    first), a server.properties with non-default log.* values: the commands take its log.dirs,
    the second dir finds the first's metadata, and an erasure is verified only once both
    dirs were scanned clean. A dir of another cluster is refused before anything changes."""
    first, second = tmp_path / "d0", tmp_path / "d1"
    props = tmp_path / "server.properties"
    generate(str(first), dataclasses.replace(
        CLUSTER, removed_topics=(), recreated_topics=(), seed=33,
        static_configs={"log.retention.hours": "720", "log.cleaner.delete.retention.ms": "0"}),
        server_properties=str(props), extra_log_dirs=[str(second)])
    assert f"log.dirs={first},{second}" in props.read_text()
    held = {d: sorted(p.name for p in d.iterdir() if p.is_dir()) for d in (first, second)}
    assert "__cluster_metadata-0" in held[first] and "__cluster_metadata-0" not in held[second]
    assert held[first] and held[second] and not set(held[first]) & set(held[second])
    code = cli_main(["run", "--server-properties", str(props), "--now-ms", str(NOW), "--json"])
    reports = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]
    assert code == EXIT_OK and [r["log_dir"] for r in reports] == [str(first), str(second)]
    retention = {f"{p['topic']}-{p['partition']}": p for r in reports
                 for p in r["retention"]["partitions"]}
    compaction = {f"{p['topic']}-{p['partition']}": p for r in reports
                  for p in r["compaction"]["partitions"]}
    assert retention["events-0"]["config"]["retention.ms"]["source"] == "topic"
    assert retention["payments-0"]["config"]["cleanup.policy"]["source"] == "topic"
    assert compaction["payments-0"]["status"] == "cleaned"
    offsets = "__consumer_offsets-0"
    assert retention[offsets]["deleted_segments"] == []  # compacted, from the first's metadata
    # an erasure over both dirs, then verified: every replica of node 1 was scanned
    state = tmp_path / "state"
    init_ledger(str(state))
    assert cli_main(["erase", "request", "--state-dir", str(state), "--topic", "*",
                     "--key", "key-00000003", "--request-id", "r",
                     "--reason", "art. 17"]) == EXIT_OK
    capsys.readouterr()
    for action in ("apply", "verify"):
        code = cli_main(["erase", action, "--server-properties", str(props), "--state-dir",
                         str(state), "--now-ms", str(NOW), "--json"])
        reports = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]
        assert code == EXIT_OK, (code, [(r["status"], r["requests"]) for r in reports])
    assert reports[0]["requests"][0]["status"] == "partially_verified"
    assert reports[1]["requests"][0]["status"] == "verified_local_only"  # "tiered" is in d0
    # a log dir of another cluster is not this broker's
    other = tmp_path / "other"
    generate(str(other), dataclasses.replace(CLUSTER, removed_topics=(),
                                             recreated_topics=(), seed=34))
    before = tree_digest(first)
    assert cli_main(["retain", str(first), str(other), "--server-properties", str(props),
                     "--now-ms", str(NOW)]) == EXIT_CONFIG
    assert "cluster.id" in capsys.readouterr().err
    assert tree_digest(first) == before
