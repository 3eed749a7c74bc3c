"""A production-shaped broker: ``server.properties`` with non-default ``log.*`` values, a second
JBOD dir without the metadata log, values Kafka accepts that look odd, and replicas Kafka would
move aside. ``retain`` (no Spark) must keep what Kafka keeps and delete what Kafka deletes, and
never act on a guess. All but the compact-default test (which checks the resolution the old
code already did when given server.properties) failed on the code before the static layer
was required (issue 27: segments of a 720 h topic deleted, ``__consumer_offsets``
time-deleted, whole runs refused over Kafka-legal values, stray dirs retained), and the
future-``now`` test on the code before issue 28's clock check."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from compactor.cli import main as cli_main
from compactor.errors import EXIT_CONFIG, EXIT_OK
from compactor.tools.ops.generator import DEFAULT_START_MS, GeneratorConfig, generate
from tests.helpers import segment_bytes, topic_lines, tree_digest

DAY = 86_400_000
NOW = DEFAULT_START_MS + 10 * DAY  # the data is 10 days old: past Kafka's 7-day default
GEN = GeneratorConfig(
    topics=("events", "fast", "nolimit"), partitions=1, records_per_partition=600,
    distinct_keys=200, segment_bytes=8 * 1024, record_interval_ms=1000, seed=27,
    internal_topics=("__consumer_offsets",),
    topic_configs={"fast": {"retention.ms": "60000"},  # below our floor: Kafka's to judge
                   "nolimit": {"retention.bytes": "-2", "retention.ms": "-1"}})


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("broker") / "logs-0"
    generate(str(path), GEN)
    return path


@pytest.fixture()
def logs(template: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "logs-0"
    shutil.copytree(template, dest)
    return dest


def _props(tmp_path: Path, *lines: str, log_dirs: tuple[Path, ...] = ()) -> Path:
    path = tmp_path / "server.properties"
    text = "process.roles=broker,controller\nnode.id=1\n"
    if log_dirs:
        text += "log.dirs=" + ",".join(str(d) for d in log_dirs) + "\n"
    path.write_text(text + "".join(f"{line}\n" for line in lines))
    return path


def _retain(logs: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    code = cli_main(["retain", str(logs), "--now-ms", str(NOW), "--json", *args])
    (report,) = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]
    return code, report


def _by_topic(report: dict) -> dict[str, dict]:
    return {p["topic"]: p for p in topic_lines(report["partitions"])}


def test_without_the_static_layer_nothing_is_deleted_and_the_report_says_what_is_missing(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = {p.name: segment_bytes(p) for p in logs.iterdir() if p.is_dir()}
    code, report = _retain(logs, capsys)
    # a run that decided nothing is not a success a scheduler could take for one (issue 51.12)
    assert code == EXIT_CONFIG and report["status"] == "unconfigured"
    assert "--server-properties" in report["unconfigured"] and report["segments_deleted"] == 0
    assert {p["reason"] for p in topic_lines(report["partitions"])} == {"no_config"}
    assert any("--server-properties" in m for m in report["cluster"]["missing"])
    assert "cleanup.policy" in report["cluster"]["guessed_configs"]["events"]
    assert {p.name: segment_bytes(p) for p in logs.iterdir() if p.is_dir()} == before
    code = cli_main(["retain", str(logs), "--now-ms", str(NOW)])
    out = capsys.readouterr().out
    assert code == EXIT_CONFIG and "--server-properties FILE" in out and "UNCONFIGURED" in out


def test_a_30_day_broker_keeps_its_10_day_old_segments(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = segment_bytes(logs / "events-0")
    props = _props(tmp_path, "log.retention.hours=720")
    code, report = _retain(logs, capsys, "--server-properties", str(props))
    assert code == EXIT_OK
    events = _by_topic(report)["events"]
    assert events["status"] == "kept" and events["deleted_segments"] == []
    assert events["config"]["retention.ms"] == {"value": 720 * 3_600_000,
                                                 "source": "server.properties"}
    assert segment_bytes(logs / "events-0") == before
    # the same data on a broker that runs Kafka's defaults (7 days) loses its old segments
    code, report = _retain(logs, capsys, "--assume-kafka-defaults")
    assert code == EXIT_OK and len(_by_topic(report)["events"]["deleted_segments"]) > 1


def test_a_compact_default_policy_never_time_deletes_topics_without_an_override(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    props = _props(tmp_path, "log.cleanup.policy=compact")
    code, report = _retain(logs, capsys, "--server-properties", str(props))
    assert code == EXIT_OK
    events = _by_topic(report)["events"]
    assert events["config"]["cleanup.policy"] == {"value": "compact",
                                                   "source": "server.properties"}
    assert events["deleted_segments"] == []


def test_kafka_legal_values_are_retained_as_kafka_retains_them(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """log.retention.hours=-1 (infinite), a topic's retention.bytes=-2 (no limit) and a
    topic's own retention.ms of one minute, below the floor our flags keep."""
    props = _props(tmp_path, "log.retention.hours=-1")
    code, report = _retain(logs, capsys, "--server-properties", str(props))
    assert code == EXIT_OK, report
    lines = _by_topic(report)
    assert lines["events"]["config"]["retention.ms"]["value"] == -1
    assert lines["events"]["deleted_segments"] == []  # infinite: kept
    assert lines["nolimit"]["status"] == "kept"
    assert lines["fast"]["status"] == "deleted" and lines["fast"]["deleted_segments"]
    # the floor still guards what is typed on our command line
    code, report = _retain(logs, capsys, "--server-properties", str(props),
                           "--topic-config", "events:retention.ms=60000")
    assert code == 3 and "safety floor" in report["message"]


def test_a_second_jbod_dir_takes_its_topic_configs_from_the_first_dirs_metadata(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The metadata log lives in one of log.dirs only: the other dirs find it through
    server.properties; without it no topic is configured, internal ones least of all."""
    second = tmp_path / "logs-1"
    shutil.copytree(logs, second)
    shutil.rmtree(second / "__cluster_metadata-0")
    # a log dir of its own: its own directory.id (a copied one is refused, as Kafka refuses it)
    meta = second / "meta.properties"
    meta.write_text("".join(line if not line.startswith("directory.id=") else
                            "directory.id=AAAAAAAAAAAAAAAAAAAAAQ\n"
                            for line in meta.read_text().splitlines(keepends=True)))
    offsets = segment_bytes(second / "__consumer_offsets-0")
    alone = _props(tmp_path, "log.retention.hours=24", log_dirs=(second,))
    code, report = _retain(second, capsys, "--server-properties", str(alone))
    assert code == EXIT_CONFIG and report["segments_deleted"] == 0
    assert {p["reason"] for p in topic_lines(report["partitions"])} == {"no_config"}
    props = _props(tmp_path, "log.retention.hours=24", log_dirs=(logs, second))
    code, report = _retain(second, capsys, "--server-properties", str(props))
    assert code == EXIT_OK
    lines = _by_topic(report)
    assert report["cluster"]["metadata_log"] == str(logs / "__cluster_metadata-0")
    assert lines["__consumer_offsets"]["config"]["cleanup.policy"] == {
        "value": "compact", "source": "topic"}
    assert lines["__consumer_offsets"]["deleted_segments"] == []
    assert segment_bytes(second / "__consumer_offsets-0") == offsets
    assert lines["events"]["deleted_segments"]  # 10 days old, 24 h retention


def test_stray_replicas_are_left_as_kafka_leaves_them(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """LogManager.isStrayKraftReplica: no partition.metadata, or a partition the topic
    does not have; Kafka renames such dirs -stray and keeps them."""
    (logs / "events-0" / "partition.metadata").unlink()
    shutil.copytree(logs / "fast-0", logs / "fast-3")
    before = {d: segment_bytes(logs / d) for d in ("events-0", "fast-3")}
    code, report = _retain(logs, capsys, "--assume-kafka-defaults")
    assert code == EXIT_OK
    reasons = {f"{p['topic']}-{p['partition']}": p["reason"] for p in report["partitions"]}
    assert reasons["events-0"] == reasons["fast-3"] == "stray"
    assert {d: segment_bytes(logs / d) for d in before} == before
    assert reasons["fast-0"] == "expired"


@pytest.mark.parametrize("now", [str(NOW * 10), "2530-01-01T00:00:00Z"])
def test_a_now_years_ahead_is_refused_before_anything_is_deleted(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], now: str) -> None:
    """One digit too many (year 2530) would make retention delete every segment: a --now-ms
    more than an hour ahead of this machine's clock needs --allow-future-now (issue 28)."""
    before = {p.name: segment_bytes(p) for p in logs.iterdir() if p.is_dir()}
    code = cli_main(["retain", str(logs), "--assume-kafka-defaults", "--now-ms", now])
    assert code == 3 and "--allow-future-now" in capsys.readouterr().err
    assert {p.name: segment_bytes(p) for p in logs.iterdir() if p.is_dir()} == before
    code = cli_main(["retain", str(logs), "--assume-kafka-defaults", "--now-ms", now,
                     "--allow-future-now", "--dry-run", "--json"])
    assert code == EXIT_OK


@pytest.mark.parametrize(("text", "expected"), [
    ("", None), ("None", None), ("1767225600000", DEFAULT_START_MS),
    ("2026-01-01T00:00:00Z", DEFAULT_START_MS), ("2026-01-01T01:00:00+01:00", DEFAULT_START_MS),
])
def test_now_takes_epoch_ms_or_iso_8601_with_an_offset(text: str, expected: int | None) -> None:
    from compactor.cli.args import clock_ms

    assert clock_ms(text) == expected


@pytest.mark.parametrize("text", ["-5", str(2**63), "2026-01-01T00:00:00", "tomorrow"])
def test_now_refuses_negative_huge_naive_and_free_text(text: str) -> None:
    import argparse

    from compactor.cli.args import clock_ms

    with pytest.raises(argparse.ArgumentTypeError):
        clock_ms(text)


def test_a_run_that_decided_nothing_exits_3_with_its_html_report_saying_why(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before the fix ``run --html-report`` without the broker's configs ended with
    INTERNAL_ERROR AttributeError (the page took the compaction step that did not run), and
    ``run`` alone exited 0 (issue 51.12)."""
    page = tmp_path / "run.html"
    before = tree_digest(logs)
    code = cli_main(["run", str(logs), "--now-ms", str(NOW), "--json", "--html-report",
                     str(page)])
    out, err = capsys.readouterr()
    assert code == EXIT_CONFIG and "INTERNAL_ERROR" not in out + err
    report = json.loads(out.splitlines()[0])
    assert report["status"] == "unconfigured" and report["compaction"] is None
    assert "--server-properties" in report["unconfigured"]
    html = page.read_text()
    assert "Configs not known: nothing was changed" in html and "--server-properties" in html
    assert tree_digest(logs) == before


def test_the_broker_cleaner_switched_off_is_said_with_its_source(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``log.cleaner.enable=false`` (Kafka's ``CleanerConfig``, a static config): the broker
    compacts nothing; the tool still does, and says so (issue 52.4). Before the fix no code
    read it."""
    off = _props(tmp_path, "log.retention.hours=720", "log.cleaner.enable=false")
    code, report = _retain(logs, capsys, "--server-properties", str(off))
    assert code == EXIT_OK
    assert report["cluster"]["broker_cleaner"] == {"enabled": False,
                                                   "source": "server.properties"}
    assert cli_main(["retain", str(logs), "--now-ms", str(NOW), "--server-properties",
                     str(off)]) == EXIT_OK
    assert "the broker's own cleaner is off" in capsys.readouterr().out
    on = _props(tmp_path, "log.retention.hours=720")
    code, report = _retain(logs, capsys, "--server-properties", str(on))
    assert report["cluster"]["broker_cleaner"] == {"enabled": True, "source": "default"}


def test_only_the_brokers_metadata_log_dir_is_read_a_stale_copy_never(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Kafka reads the metadata log only from ``KafkaConfig.metadataLogDir``
    (``metadata.log.dir``, else the first of ``log.dirs``). A second log dir holding an old
    copy of ``__cluster_metadata-0`` (where ``fast`` still had a 10-day retention) must not win
    over it (issue 52.5): before the fix the log dir's own copy was read first."""
    second = tmp_path / "logs-1"
    generate(str(second), dataclasses.replace(
        GEN, topic_configs={**GEN.topic_configs, "fast": {"retention.ms": str(10 * DAY)}}))
    meta = second / "meta.properties"
    meta.write_text("".join(line if not line.startswith("directory.id=") else
                            "directory.id=AAAAAAAAAAAAAAAAAAAAAg\n"
                            for line in meta.read_text().splitlines(keepends=True)))
    props = _props(tmp_path, "log.retention.hours=720", log_dirs=(logs, second))
    code, report = _retain(second, capsys, "--server-properties", str(props))
    assert report["cluster"]["metadata_log"] == str(logs / "__cluster_metadata-0")
    assert report["cluster"]["stale_metadata_log"] == str(second / "__cluster_metadata-0")
    assert _by_topic(report)["fast"]["config"]["retention.ms"] == {"value": 60000,
                                                                   "source": "topic"}
    # without the broker's properties, the log dir's own metadata log is all there is
    code, report = _retain(second, capsys, "--assume-kafka-defaults")
    assert report["cluster"]["metadata_log"] == str(second / "__cluster_metadata-0")


def test_dynamic_broker_configs_kafka_rejects_as_a_set_are_all_left_out(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A broker applies its dynamic configs with its static ones as one set and keeps its
    previous config when a check across keys fails (``DynamicLogConfig.validateReconfiguration``:
    ``log.local.retention.ms`` must not exceed ``log.retention.ms``). Here the cluster-wide
    default sets a 2-hour local retention, and this broker's own config a 1-hour total one:
    each valid alone, the broker's set fails, so Kafka keeps the static 24 hours and the data
    stays. Before the fix the broker's 1 hour was taken and its segments deleted (issue 52.7)."""
    logs = tmp_path / "logs"
    generate(str(logs), dataclasses.replace(GEN, broker_configs={
        "": {"log.local.retention.ms": str(2 * 3_600_000)},
        "1": {"log.retention.ms": "3600000"}}))
    props = _props(tmp_path, "log.retention.hours=24")
    # the data is 10 days old: 24 hours or 1 hour, it all expires; an hour-old clock tells
    now = DEFAULT_START_MS + 600 * 1000 + 3 * 3_600_000
    before = segment_bytes(logs / "events-0")
    code = cli_main(["retain", str(logs), "--now-ms", str(now), "--json", "--server-properties",
                     str(props)])
    (report,) = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]
    assert code == EXIT_OK
    events = _by_topic(report)["events"]
    assert events["config"]["retention.ms"] == {"value": 86_400_000,
                                                "source": "server.properties"}
    assert events["deleted_segments"] == [] and segment_bytes(logs / "events-0") == before
    dropped = report["cluster"]["dropped_broker_configs"]
    assert "log.retention.ms" in dropped and "whole dynamic update" in dropped["log.retention.ms"]
    assert "log.local.retention.ms" not in dropped  # the cluster default alone passes
