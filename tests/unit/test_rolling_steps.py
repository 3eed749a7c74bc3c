"""The steps of ``compactor rolling`` that need no cluster (issue 53.1, 53.2): a stop or start
command ends its step when it exits, whatever its children hold open; each step says when it
starts and ends and what it did; a missing plan is a configuration error."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from compactor.cli import main as cli_main
from compactor.errors import EXIT_CONFIG
from compactor.maintenance import rolling


def test_a_command_that_leaves_a_child_holding_its_output_ends_when_it_exits() -> None:
    """As ``nohup kafka-server-start.sh ... &`` does: a child keeps the command's output open
    for five seconds after the command exited. Reading a pipe to its end (the code before)
    waited for the child and hit the two-second timeout."""
    started = time.monotonic()
    code, output = rolling._run_command("(sleep 5 &) ; echo launched", timeout_s=2)
    assert (code, output) == (0, "launched\n")
    assert time.monotonic() - started < 2


def test_a_command_that_does_not_exit_is_stopped_and_named() -> None:
    code, output = rolling._run_command("echo waiting; sleep 30", timeout_s=1)
    assert code == -1 and "did not exit within 1 s" in output and "waiting" in output


def test_each_step_says_when_it_starts_and_ends_and_what_it_did() -> None:
    said: list[str] = []
    line = rolling._Broker(rolling.Broker(name="b1", node_id=1, server_properties="p",
                                          stop="true", start="true"), said.append)
    started = line.begin("run", "compactor run /logs")
    line.step("run", started, "ok", rolling._what_it_did([
        {"compaction": {"partitions_by_status": {"cleaned": 3, "skipped": 1}},
         "retention": {"partitions_by_status": {"retained": 4}}}]))
    assert said[0] == "b1: run: started: compactor run /logs"
    assert said[1].startswith("b1: run: ok in ") and said[1].endswith(
        ": compaction cleaned 3, compaction skipped 1, retention retained 4")
    assert line.steps[0]["step"] == "run" and line.steps[0]["status"] == "ok"


def test_a_missing_plan_is_a_configuration_error(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["rolling", "--config", str(tmp_path / "nope.yaml")]) == EXIT_CONFIG
    assert "no rolling plan at" in capsys.readouterr().err
