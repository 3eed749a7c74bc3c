"""The steps of ``compactor rolling`` that need no cluster (issue 53.1, 53.2): a stop or start
command ends its step when it exits, whatever its children hold open; each step says when it
starts and ends and what it did; a missing plan is a configuration error; a tiered broker's
erasure has its remote step before the stop, whose arguments are checked."""

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


def test_an_erasing_roll_erases_a_tiered_brokers_remote_tier_before_stopping_it(
        tmp_path: Path) -> None:
    """The remote step needs the cluster (its RLMM publishes through it), so it runs before the
    stop, only for a broker whose ``server.properties`` turn its remote tier on; the local
    steps run on the stopped broker as before, and a roll without ``erase`` has none."""
    plain, tiered = tmp_path / "plain.properties", tmp_path / "tiered.properties"
    plain.write_text("log.dirs=/logs\n")
    tiered.write_text("log.dirs=/logs\nremote.log.storage.system.enable=true\n")

    def plan(props: Path, erase: bool) -> tuple[rolling.Plan, rolling.Broker]:
        broker = rolling.Broker(name="b1", node_id=1, server_properties=str(props),
                                stop="true", start="true")
        return rolling.Plan(source="plan.yaml", bootstrap_servers="k1:9092,k2:9092",
                            brokers=(broker,), state_dir="/state", erase=erase), broker

    p, b = plan(tiered, True)
    (online,) = rolling._online(p, b, ["/logs"], ["--now-ms", "5"])
    assert online == ["erase", "apply", "/logs", "--remote", "--bootstrap-server",
                      "k1:9092,k2:9092", "--server-properties", str(tiered), "--state-dir",
                      "/state", "--now-ms", "5"]
    assert rolling._step_name(online) == "erase_apply_remote"
    offline = rolling._maintenance(p, b, ["/logs"], [])
    assert [rolling._step_name(a) for a in offline] == [
        "recover", "run", "erase_apply", "erase_verify"]
    assert not any("--remote" in a for a in offline)
    assert rolling._online(*plan(plain, True), ["/logs"], []) == []
    assert rolling._online(*plan(tiered, False), ["/logs"], []) == []


@pytest.mark.parametrize("flags", [["--remote"], ["--bootstrap-server", "k1:9092"]])
def test_the_remote_step_and_its_cluster_go_together(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str]) -> None:
    """``erase apply --remote`` needs the cluster it publishes through, and a cluster given
    without ``--remote`` would be silently ignored by the offline step: both are refused
    before anything is read."""
    (tmp_path / "logs").mkdir()
    assert cli_main(["erase", "apply", str(tmp_path / "logs"), "--state-dir",
                     str(tmp_path / "state"), *flags]) == EXIT_CONFIG
    assert "--remote and --bootstrap-server" in capsys.readouterr().err
