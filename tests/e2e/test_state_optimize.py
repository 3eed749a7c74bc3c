"""The state dir over time: ``compactor optimize`` compacts and vacuums its Delta tables, and the
ledger's audit trail (its commit log) survives Delta's log cleanup."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from compactor.cli import main as cli_main
from compactor.errors import EXIT_CONFIG, EXIT_OK
from tests.helpers import init_ledger


def _request(state: Path, rid: str, capsys: pytest.CaptureFixture[str]) -> None:
    init_ledger(str(state))
    assert cli_main(["erase", "request", "--state-dir", str(state), "--topic", "t", "--key",
                     rid, "--request-id", rid, "--reason", f"ticket {rid}"]) == EXIT_OK
    capsys.readouterr()


def test_the_audit_trail_outlives_deltas_log_retention(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """delta-rs deletes commits older than ``delta.logRetentionDuration`` (30 days by
    default) at each checkpoint; the ledger's commits are its audit trail, so its table turns
    that cleanup off. Here the retention is one second and a checkpoint every second commit:
    the first request's commit must still be in its proof after many more."""
    state = tmp_path / "state"
    _request(state, "first", capsys)
    table = DeltaTable(str(state / "erasure_requests"))
    assert table.metadata().configuration["delta.enableExpiredLogCleanup"] == "false"
    table.alter.set_table_properties({"delta.logRetentionDuration": "interval 1 seconds",
                                      "delta.checkpointInterval": "2"})
    time.sleep(1.5)
    for i in range(6):
        _request(state, f"later-{i}", capsys)
    assert cli_main(["erase", "report", "--state-dir", str(state), "--request-id", "first",
                     "--json"]) == EXIT_OK
    proof = json.loads(capsys.readouterr().out)
    assert [c["action"] for c in proof["ledger_commits"]] == ["request"]
    assert len(DeltaTable(str(state / "erasure_requests")).history()) >= 9


def test_a_ledger_of_an_earlier_version_gets_the_property_on_first_use(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    _request(state, "a", capsys)
    table = DeltaTable(str(state / "erasure_requests"))
    table.alter.set_table_properties({"delta.enableExpiredLogCleanup": "true"})
    _request(state, "b", capsys)
    config = DeltaTable(str(state / "erasure_requests")).metadata().configuration
    assert config["delta.enableExpiredLogCleanup"] == "false"


def test_optimize_compacts_vacuums_and_keeps_every_commit(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    for i in range(8):
        _request(state, f"r{i}", capsys)
    commits = len(DeltaTable(str(state / "erasure_requests")).history())
    assert cli_main(["optimize", "--state-dir", str(state), "--json", "--dry-run"]) == EXIT_OK
    dry = json.loads(capsys.readouterr().out)
    (requests,) = [t for t in dry["tables"] if t["table"] == "erasure_requests"]
    assert requests["files_before"] == requests["files_after"] == 8
    assert cli_main(["optimize", "--state-dir", str(state), "--json",
                     "--retain-hours", "1"]) == EXIT_OK
    (requests,) = [t for t in json.loads(capsys.readouterr().out)["tables"]
                   if t["table"] == "erasure_requests"]
    assert (requests["files_before"], requests["files_after"]) == (8, 1)
    assert requests["files_compacted"] == 8
    table = DeltaTable(str(state / "erasure_requests"))
    assert len(table.history()) == commits + 1  # the optimize's own commit; none lost
    assert sorted(r["request_id"] for r in table.to_pyarrow_table().to_pylist()) == [
        f"r{i}" for i in range(8)]
    assert cli_main(["optimize", "--state-dir", str(tmp_path / "typo")]) == EXIT_CONFIG
