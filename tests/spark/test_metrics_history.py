"""``--metrics-file`` (Prometheus text format, read back with prometheus_client's own parser),
``compactor history`` and ``compactor --version``; expected values come from the JSON reports
and the project file, not from the code under test."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from compactor.errors import EXIT_OK
from compactor.tools.ops.generator import DEFAULT_START_MS
from tests.helpers import cli_json, init_ledger

pytestmark = pytest.mark.spark

DAY = 86_400_000
NOW = DEFAULT_START_MS + 3 * DAY
REPO = Path(__file__).resolve().parents[2]


def _samples(path: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(path.read_text()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def _labels(**labels: object) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, str(v)) for k, v in labels.items()))


def test_metrics_history_and_version(spark, small_log: Path, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    state, prom = tmp_path / "state", tmp_path / "compact.prom"
    code, report = cli_json(capsys, "compact", "--assume-kafka-defaults", str(small_log),
                            "--now-ms", str(NOW), "--config",
                            "cleanup.policy=compact,delete", "--json", "--state-dir",
                            str(state), "--metrics-file", str(prom))
    assert code == EXIT_OK
    got = _samples(prom)
    by_status = Counter(p["status"] for p in report["partitions"])
    for status, n in by_status.items():
        assert got[("kafka_compactor_partitions",
                    _labels(command="compact", status=status, log_dir=small_log))] == n
    bytes_in: dict[str, int] = defaultdict(int)
    dropped: dict[tuple[str, str], int] = defaultdict(int)
    for p in report["partitions"]:
        bytes_in[p["topic"]] += p["bytes_in"]
        for reason, n in p["dropped"].items():
            dropped[(p["topic"], reason)] += n
    for topic, n in bytes_in.items():
        assert got[("kafka_compactor_bytes_in",
                    _labels(command="compact", topic=topic, log_dir=small_log))] == n
    for (topic, reason), n in dropped.items():
        assert got[("kafka_compactor_records_dropped", _labels(
            command="compact", reason=reason, topic=topic, log_dir=small_log))] == n
    for stage, seconds in report["stages_s"].items():
        assert got[("kafka_compactor_stage_seconds", _labels(
            command="compact", stage=stage, log_dir=small_log))] == pytest.approx(seconds)
    assert got[("kafka_compactor_last_run_ok", _labels(command="compact",
                                                       log_dir=small_log))] == 1

    prom = tmp_path / "retain.prom"
    code, retained = cli_json(capsys, "retain", "--assume-kafka-defaults", str(small_log),
                              "--now-ms", str(NOW + 30 * DAY),
                              "--config", "cleanup.policy=compact,delete", "--json",
                              "--state-dir", str(state), "--metrics-file", str(prom))
    assert code == EXIT_OK
    deleted: dict[str, int] = defaultdict(int)
    for p in retained["partitions"]:
        deleted[p["topic"]] += len(p.get("deleted_segments") or [])
    assert sum(deleted.values()) > 0
    got = _samples(prom)
    for topic, n in deleted.items():
        if n:
            assert got[("kafka_compactor_segments_deleted",
                        _labels(command="retain", topic=topic, log_dir=small_log))] == n

    # history: both runs, newest first, with the reports' figures
    assert cli_main_ok(capsys, "history", "--state-dir", str(state), "--json")
    runs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["command"] for r in runs] == ["retain", "compact"]
    assert runs[1]["partitions"] == len(report["partitions"])
    assert runs[1]["bytes_in"] == sum(p["bytes_in"] for p in report["partitions"])
    assert runs[1]["run_id"] == report["run_id"]
    assert cli_main_ok(capsys, "history", "--state-dir", str(state))
    table = capsys.readouterr().out
    assert report["run_id"] in table and "compact" in table and str(small_log) in table

    # a run (compaction, then retention) is one run of the history, its partitions once
    code, ran = cli_json(capsys, "run", "--assume-kafka-defaults", str(small_log), "--now-ms",
                         str(NOW + 31 * DAY), "--config", "cleanup.policy=compact,delete",
                         "--json", "--state-dir", str(state))
    assert code == EXIT_OK
    assert ran["compaction"]["run_id"] == ran["retention"]["run_id"]
    assert cli_main_ok(capsys, "history", "--state-dir", str(state), "--json")
    newest = json.loads(capsys.readouterr().out.splitlines()[0])
    assert (newest["command"], newest["run_id"]) == ("run", ran["retention"]["run_id"])
    assert newest["partitions"] == len(ran["retention"]["partitions"])
    assert newest["steps"] == {"compact": len(ran["compaction"]["partitions"]),
                               "retain": len(ran["retention"]["partitions"])}
    page = tmp_path / "run.html"  # and its page has both steps again
    assert cli_main_ok(capsys, "report", "--state-dir", str(state), "--html", str(page))
    html = page.read_text()
    assert "<h2>Compaction</h2>" in html and "<h2>Retention</h2>" in html
    assert ran["retention"]["run_id"] in html

    # --version: the project's own version
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    res = subprocess.run([str(Path(sys.executable).parent / "compactor"), "--version"],
                         capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout.strip() == f"kafka-compactor {version}"


def cli_main_ok(capsys: pytest.CaptureFixture[str], *args: str) -> bool:
    from compactor.cli import main

    return main(list(args)) == EXIT_OK


def test_erase_status_metrics_count_overdue_requests(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    state, prom = tmp_path / "state", tmp_path / "erase.prom"
    for key, deadline in (("a", 1), ("b", 1), ("c", 400)):
        init_ledger(str(state))
        code, _ = cli_json(capsys, "erase", "request", "--state-dir", str(state), "--topic",
                           "t", "--key", key, "--deadline-days", str(deadline), "--now-ms", "0",
                           "--json", "--reason", "art. 17")
        assert code == EXIT_OK
    cli_json(capsys, "erase", "status", "--state-dir", str(state), "--now-ms",
             str(10 * DAY), "--json", "--metrics-file", str(prom))
    got = _samples(prom)
    assert got[("kafka_compactor_erasure_requests_overdue", ())] == 2
    assert got[("kafka_compactor_erasure_requests", ())] == 3
    assert got[("kafka_compactor_erasure_requests_failed", ())] == 0


def test_history_of_a_dir_without_runs_is_an_error(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code, line = cli_json(capsys, "history", "--state-dir", str(tmp_path / "typo"), "--json")
    assert code == 3 and line["code"] == "CONFIG_ERROR" and "no runs recorded" in line["message"]


def test_erase_apply_metrics_count_the_records_erased(spark, small_log: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    state, prom = tmp_path / "state", tmp_path / "apply.prom"
    init_ledger(str(state))
    code, _ = cli_json(capsys, "erase", "request", "--state-dir", str(state), "--topic", "*",
                       "--key", "key-00000007", "--now-ms", str(NOW), "--json",
                       "--reason", "art. 17")
    assert code == EXIT_OK
    code, report = cli_json(capsys, "erase", "apply", "--assume-kafka-defaults", str(small_log),
                            "--state-dir", str(state),
                            "--now-ms", str(NOW), "--json", "--metrics-file", str(prom))
    assert code == EXIT_OK
    erased: dict[str, int] = defaultdict(int)
    for p in report["partitions"]:
        erased[p["topic"]] += p["records_erased"]
    assert sum(erased.values()) > 0
    got = _samples(prom)
    for topic, n in erased.items():
        assert got[("kafka_compactor_records_erased",
                    _labels(command="erase_apply", topic=topic, log_dir=small_log))] == n
