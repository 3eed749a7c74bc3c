"""Output files (issue 28.4): ``--report-file``, ``--metrics-file`` and ``--html-report`` are
checked before any change and written, not replaced: a symlink keeps pointing where it
pointed, a FIFO or a device stays what it is, a path in a missing directory stops the command
before it deletes anything, and no temporary file is left behind. Each test failed before
the fix (the symlink and the FIFO became regular files, ``retain`` deleted segments and then
said nothing was changed, ``DIR.tmp`` stayed)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import threading
from pathlib import Path

import pytest

from compactor.cli import main as cli_main
from compactor.errors import EXIT_CONFIG, EXIT_OK, EXIT_PARTIAL
from compactor.tools.ops.generator import DEFAULT_START_MS, GeneratorConfig, generate
from tests.helpers import tree_digest

GEN = GeneratorConfig(topics=("events",), partitions=1, records_per_partition=600,
                      distinct_keys=100, segment_bytes=8 * 1024, record_interval_ms=1000,
                      seed=5, topic_configs={"events": {"cleanup.policy": "delete",
                                                        "retention.ms": "3600000"}})
NOW = DEFAULT_START_MS + 30 * 86_400_000


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("outputs") / "logs"
    generate(str(path), GEN)
    return path


@pytest.fixture()
def logs(template: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "logs"
    shutil.copytree(template, dest)
    return dest


def _retain(logs: Path, *args: str) -> int:
    return cli_main(["retain", "--assume-kafka-defaults", str(logs), "--now-ms", str(NOW),
                     "--json", *args])


def _leftovers(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.endswith(".tmp")]


def test_a_report_file_in_a_missing_directory_stops_before_anything_is_deleted(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = tree_digest(logs)
    code = _retain(logs, "--report-file", str(tmp_path / "no-such-dir" / "report.json"))
    assert code == EXIT_CONFIG
    assert "no-such-dir" in capsys.readouterr().err
    assert tree_digest(logs) == before  # nothing deleted


def test_a_directory_as_output_is_refused_and_leaves_no_temporary_file(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "a-dir"
    target.mkdir()
    before = tree_digest(logs)
    assert _retain(logs, "--metrics-file", str(target)) == EXIT_CONFIG
    assert "is a directory" in capsys.readouterr().err
    assert tree_digest(logs) == before
    assert not _leftovers(tmp_path) and not list(target.iterdir())


def test_a_symlinked_report_file_writes_its_target_and_stays_a_link(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    real = tmp_path / "reports" / "latest.json"
    real.parent.mkdir()
    real.write_text("old")
    link = tmp_path / "report.json"
    link.symlink_to(real)
    assert _retain(logs, "--report-file", str(link)) == EXIT_OK
    capsys.readouterr()
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert json.loads(real.read_text())["command"] == "retain"
    assert not _leftovers(tmp_path) and not _leftovers(real.parent)


def test_a_fifo_is_written_in_place_and_one_nobody_reads_is_an_error_not_a_hang(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []

    def read() -> None:
        with open(fifo, "rb") as handle:
            got.append(handle.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()  # a reader waiting in open() already counts as one (Linux fifo_open)
    threading.Event().wait(0.3)
    assert _retain(logs, "--dry-run", "--report-file", str(fifo)) == EXIT_OK
    reader.join(timeout=30)
    capsys.readouterr()
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    assert got and json.loads(got[0])["command"] == "retain"
    # and with no reader: a clear error, no hang, the FIFO still a FIFO
    code = cli_main(["retain", "--assume-kafka-defaults", str(logs), "--now-ms", str(NOW),
                     "--dry-run", "--json", "--report-file", str(fifo)])
    assert code != EXIT_OK
    assert "no process reads this FIFO" in capsys.readouterr().err
    assert stat.S_ISFIFO(fifo.stat().st_mode)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create a device node")
def test_a_device_stays_a_device(logs: Path, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    null = tmp_path / "null"
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # what /dev/null is
    assert _retain(logs, "--dry-run", "--html-report", str(null)) == EXIT_OK
    capsys.readouterr()
    assert stat.S_ISCHR(null.stat().st_mode)
    assert not _leftovers(tmp_path)


@pytest.mark.parametrize("option", ["--report-file", "--metrics-file", "--html-report"])
def test_an_output_file_that_fails_after_changes_loses_no_report_and_says_the_changes_stand(
        logs: Path, capsys: pytest.CaptureFixture[str], option: str) -> None:
    """``/dev/full`` passes every check a path can be given before the run (a writable
    device) and fails when written. Before the fix retain deleted segments, then exited 3
    with "nothing was swapped" and no report (issue 51.9)."""
    before = tree_digest(logs)
    assert _retain(logs, option, "/dev/full") == EXIT_PARTIAL
    out, err = capsys.readouterr()
    lines = [json.loads(line) for line in out.splitlines()]
    (report,) = [line for line in lines if line["type"] == "report"]
    assert any(p["status"] == "deleted" for p in report["partitions"])
    assert tree_digest(logs) != before  # the segments went, and the report says so
    (failure,) = [line for line in lines if line["type"] == "output_error"]
    assert failure["step"] == f"write {option}" and failure["path"] == "/dev/full"
    assert failure["changed"] == ["events-0"] and "the changes stand" in failure["remedy"]
    assert "OUTPUT FILE NOT WRITTEN" in err and "the changes stand" in err
    # with nothing changed (a dry run) the same failure is the error's own, nothing stands
    logs_before = tree_digest(logs)
    code = _retain(logs, "--dry-run", option, "/dev/full")
    assert code not in (EXIT_OK, EXIT_PARTIAL) and "nothing was changed" in capsys.readouterr().err
    assert tree_digest(logs) == logs_before
