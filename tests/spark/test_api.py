"""The Python API (``import compactor``) does what the command line does: the same report
(schema-valid), the same bytes on disk, the same exit code; errors are raised, not printed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import compactor
from compactor.errors import EXIT_OK, ConfigError
from compactor.tools.ops.generator import DEFAULT_START_MS
from tests.helpers import check_report, cli_json, tree_digest

pytestmark = pytest.mark.spark

NOW = DEFAULT_START_MS + 3 * 86_400_000
CONFIGS = {"cleanup.policy": "compact,delete"}


def _without_timings(report: dict) -> dict:
    def strip(obj):  # type: ignore[no-untyped-def]
        if isinstance(obj, dict):
            return {k: strip(v) for k, v in obj.items() if k not in ("stages_s", "run_id")}
        if isinstance(obj, list):
            return [strip(v) for v in obj]
        return obj

    return strip(report)


def test_the_api_matches_the_command_line(spark, small_log: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "other"
    shutil.copytree(small_log, other)
    planned = compactor.plan(str(small_log), now_ms=NOW, configs=CONFIGS,
                             assume_kafka_defaults=True)
    check_report(planned.report)
    assert planned.ok and planned.command == "plan"
    assert all(p["explanation"] for p in planned.partitions() if p["status"] == "would_clean")
    assert "would clean" in planned.summary

    done = compactor.compact(str(small_log), now_ms=NOW, configs=CONFIGS,
                             assume_kafka_defaults=True)
    code, by_cli = cli_json(capsys, "compact", "--assume-kafka-defaults", str(other), "--now-ms",
                            str(NOW), "--config",
                            "cleanup.policy=compact,delete", "--json")
    assert (done.exit_code, code) == (EXIT_OK, EXIT_OK)
    import json

    expected = json.loads(json.dumps(_without_timings(by_cli)).replace(str(other),
                                                                          str(small_log)))
    assert _without_timings(dict(done.report)) == expected
    assert tree_digest(small_log) == tree_digest(other)

    frame = done.to_pandas()
    assert list(frame["status"]) == [p["status"] for p in by_cli["partitions"]]
    assert "<svg" in done._repr_html_()

    later = NOW + 30 * 86_400_000
    retained = compactor.retain(str(small_log), now_ms=later, configs=CONFIGS,
                                assume_kafka_defaults=True, dry_run=True)
    check_report(retained.report)
    assert retained.report["dry_run"] and retained.report["segments_deleted"] > 0
    ran = compactor.run(str(small_log), now_ms=later, configs=CONFIGS, assume_kafka_defaults=True)
    check_report(ran.report)
    assert ran.report["retention"]["segments_deleted"] == retained.report["segments_deleted"]

    with pytest.raises(ConfigError):
        compactor.plan(str(small_log), now_ms=NOW, configs={"no.such.config": "1"})
    with pytest.raises(ConfigError):
        compactor.erase("wipe", str(small_log), str(tmp_path / "state"))
    with pytest.raises(AttributeError):
        compactor.no_such_function  # noqa: B018


def test_the_api_takes_the_writer_of_the_command_line(spark, small_log: Path,
                                                      tmp_path: Path) -> None:
    """``writer="pure"`` is ``--writer pure``: the pure-Python reference writes the same
    bytes as the kernels; an unknown writer is an error that changes nothing."""
    pure = tmp_path / "pure"
    shutil.copytree(small_log, pure)
    before = tree_digest(small_log)
    with pytest.raises(ConfigError, match="unknown writer 'fast'"):
        compactor.compact(str(small_log), now_ms=NOW, configs=CONFIGS, assume_kafka_defaults=True,
                          writer="fast")
    assert tree_digest(small_log) == before
    native = compactor.compact(str(small_log), now_ms=NOW, configs=CONFIGS,
                               assume_kafka_defaults=True)
    reference = compactor.compact(str(pure), now_ms=NOW, configs=CONFIGS,
                                  assume_kafka_defaults=True, writer="pure")
    assert native.ok and reference.ok
    assert any(p["status"] == "cleaned" for p in reference.partitions())
    assert tree_digest(small_log) == tree_digest(pure) != before
    # each cleaned partition's report says which path wrote each of its groups
    # (the small log's legacy entries send the native writer's groups to the pure path)
    for result, paths in ((native, {"native", "fallback"}), (reference, {"pure"})):
        writers = [w for p in result.report["partitions"] for w in p.get("writers", {}).values()]
        assert writers and set(writers) <= paths, (paths, writers)


def test_the_divergence_guard_and_its_override_through_the_api(spark, tmp_path: Path) -> None:
    from compactor.tools.ops.generator import GeneratorConfig, generate

    logs = tmp_path / "logs"
    generate(str(logs), GeneratorConfig(
        topics=("kv",), partitions=1, records_per_partition=300, segment_bytes=4096, seed=8,
        topic_configs={"kv": {"cleanup.policy": "compact"}}, out_of_sync_topics=("kv",)))
    guarded = compactor.plan(str(logs), now_ms=NOW, assume_kafka_defaults=True)
    allowed = compactor.plan(str(logs), now_ms=NOW, assume_kafka_defaults=True,
                             allow_replica_divergence=True)

    def reason(result: compactor.Result) -> str:
        return next(p["reason"] for p in result.report["partitions"] if p["topic"] == "kv")

    assert reason(guarded) == "replicas_out_of_sync" and "--allow-replica-divergence" in str(
        guarded)
    assert reason(allowed) == "clean"


def test_a_cluster_master_is_refused_while_another_session_runs_in_the_process(
        spark, small_log: Path) -> None:
    """A process has one SparkContext: with a local session running (a notebook's, these
    tests'), ``master="spark://..."`` must fail before anything is read, not run the job on
    the local session while the report says nothing of it. A local master uses the running
    session."""
    from compactor.errors import SparkUnavailableError
    from compactor.spark.session import get_spark

    with pytest.raises(SparkUnavailableError, match="already runs a Spark session on local"):
        compactor.compact(str(small_log), master="spark://127.0.0.1:7077",
                          configs=CONFIGS, now_ms=NOW, assume_kafka_defaults=True)
    assert get_spark("local[1]") is spark
