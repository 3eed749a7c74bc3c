"""``erase request`` as an auditor needs it (issue 53.5): a request carries its reason (or
ticket id), and filing an id again says what happened: nothing, and why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from deltalake import DeltaTable

from compactor.cli import main as cli_main
from compactor.errors import EXIT_CONFIG, EXIT_OK, EXIT_USAGE
from tests.helpers import init_ledger

NOW = 1_767_225_600_000  # 2026-01-01 00:00 UTC


def _request(state: Path, *args: str) -> int:
    return cli_main(["erase", "request", "--state-dir", str(state), "--topic", "profiles",
                     "--key", "subject-1", "--request-id", "r1", "--now-ms", str(NOW), *args])


def test_a_request_without_a_reason_is_refused(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    init_ledger(tmp_path)
    with pytest.raises(SystemExit) as missing:
        _request(tmp_path)
    assert missing.value.code == EXIT_USAGE and "--reason" in capsys.readouterr().err
    assert _request(tmp_path, "--reason", "   ") == EXIT_CONFIG
    assert "needs its reason or ticket id" in capsys.readouterr().err
    assert DeltaTable(str(tmp_path / "erasure_requests")).to_pyarrow_table().num_rows == 0


def test_filing_an_id_again_changes_nothing_and_says_so(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    init_ledger(tmp_path)
    assert _request(tmp_path, "--reason", "PRIV-1") == EXIT_OK
    assert capsys.readouterr().out.strip() == "r1 added"
    assert _request(tmp_path, "--reason", "PRIV-2") == EXIT_OK
    said = capsys.readouterr().out.strip()
    assert said.startswith("r1 exists (filed 2026-01-01 00:00 UTC, pending): its reason "
                           "stays 'PRIV-1'; a request is never edited"), said
    assert "erase cancel r1" in said
    assert _request(tmp_path, "--reason", "PRIV-2", "--json") == EXIT_OK
    out = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert out["existing"] == ["r1"]
    assert out["existing_requests"][0]["reason"] == "PRIV-1"
    (row,) = DeltaTable(str(tmp_path / "erasure_requests")).to_pyarrow_table().to_pylist()
    assert row["reason"] == "PRIV-1"
