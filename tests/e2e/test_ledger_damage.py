"""A damaged ledger (issue 28.6) is a ``LEDGER_ERROR`` naming the file and what to do, from
every command, in every run (never a native abort), and nothing is written over it: a
zero-byte latest commit, a removed ``_delta_log``, a data file cut short or overwritten.

Before the fix: the zero-byte commit made a pending request vanish from ``erase status``
(exit 0) and the next ``erase request`` wrote on top; a removed ``_delta_log`` made the next
request create a new, empty table over the orphaned data; a corrupt data file gave
``INTERNAL_ERROR`` with the swap protocol's remedy, and SIGABRT in some runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from compactor.cli import main as cli_main
from compactor.errors import EXIT_FAILURE, EXIT_OK
from tests.helpers import init_ledger, tree_digest

REPO = Path(__file__).resolve().parents[2]
NOW = 1_767_225_600_000  # 2026-01-01


def _request(state: Path, request_id: str) -> int:
    return cli_main(["erase", "request", "--state-dir", str(state), "--topic", "profiles",
                     "--key", f"subject-{request_id}", "--request-id", request_id,
                     "--now-ms", str(NOW), "--json", "--reason", "art. 17"])


@pytest.fixture()
def state(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    state = tmp_path / "state"
    init_ledger(state)
    for rid in ("r1", "r2"):
        assert _request(state, rid) == EXIT_OK
    capsys.readouterr()
    return state


def _log(state: Path) -> Path:
    return state / "erasure_requests" / "_delta_log"


def _commits(state: Path) -> list[Path]:
    return sorted(_log(state).glob("*.json"))


def _status(state: Path) -> subprocess.CompletedProcess:
    """``erase status`` in its own process: an abort would show as exit 134."""
    return subprocess.run([sys.executable, "-m", "compactor.cli", "erase", "status",
                           "--state-dir", str(state), "--now-ms", str(NOW), "--json"],
                          capture_output=True, text=True, cwd=REPO, timeout=120)


def _ledger_error(proc: subprocess.CompletedProcess, needle: str) -> dict:
    assert proc.returncode == EXIT_FAILURE, (proc.returncode, proc.stderr[-1500:])
    (line,) = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    assert line["code"] == "LEDGER_ERROR", line
    assert needle in line["path"], line
    assert "restore" in line["remedy"] and "swap" not in line["remedy"], line
    return line


def test_a_zero_byte_latest_commit_is_an_error_and_nothing_is_written_on_top(
        state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    latest = _commits(state)[-1]
    latest.write_bytes(b"")
    before = tree_digest(state)
    _ledger_error(_status(state), latest.name)
    assert _request(state, "r3") == EXIT_FAILURE
    assert "LEDGER_ERROR" in capsys.readouterr().err
    assert tree_digest(state) == before


def test_a_removed_delta_log_is_an_orphaned_table_not_a_new_ledger(
        state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for f in _log(state).iterdir():
        f.unlink()
    _log(state).rmdir()
    before = tree_digest(state)
    assert _request(state, "r3") == EXIT_FAILURE
    assert "orphaned" in capsys.readouterr().err
    assert tree_digest(state) == before
    _ledger_error(_status(state), "erasure_requests")


@pytest.mark.parametrize("damage", ["cut short", "zeroed", "bytes flipped"])
def test_a_damaged_data_file_is_a_ledger_error_in_every_run(state: Path, damage: str) -> None:
    data = sorted((state / "erasure_requests").glob("*.parquet"))[-1]
    raw = bytearray(data.read_bytes())
    if damage == "cut short":
        raw = raw[:len(raw) // 2]
    elif damage == "zeroed":
        raw = bytearray(len(raw))
    else:
        for i in range(len(raw) // 3, len(raw) // 3 + 64):
            raw[i] ^= 0xA5
    data.write_bytes(bytes(raw))
    for _ in range(4):  # an abort came in some runs only
        proc = _status(state)
        if damage == "bytes flipped" and proc.returncode == EXIT_OK:
            pytest.fail("a ledger with a damaged data file read as healthy")
        _ledger_error(proc, f"erasure_requests/{data.name}")  # that file, of the two checked
