"""``compactor compact`` and ``compactor plan`` end to end (in-process, on the test's Spark
session): reports, exit codes and bad inputs. Nothing is changed when a run is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compactor.cleaner import planning
from compactor.cli import main as cli_main
from compactor.errors import EXIT_CONFIG, EXIT_LOCKED, EXIT_OK, EXIT_PARTIAL
from compactor.tools.ops.generator import DEFAULT_START_MS
from tests.helpers import (
    cli_json,
    inspect_problems,
    lock_held_by_other_process,
    report_line,
    topic_lines,
    tree_digest,
)

pytestmark = pytest.mark.spark

NOW = str(DEFAULT_START_MS + 3 * 86_400_000)
COMPACT = ["--now-ms", NOW, "--config", "cleanup.policy=compact", "--json"]


def test_plan_changes_nothing_and_compact_does_what_it_planned(
        spark, small_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = tree_digest(small_log)
    assert cli_main(["plan", "--assume-kafka-defaults", str(small_log), *COMPACT]) == EXIT_OK
    plan = report_line(capsys)
    assert tree_digest(small_log) == before
    assert plan["command"] == "plan"
    planned = {(p["topic"], p["partition"]): p for p in topic_lines(plan["partitions"])}
    assert all(p["status"] == "would_clean" and p["groups"] for p in planned.values())

    assert cli_main(["compact", "--assume-kafka-defaults", str(small_log), *COMPACT]) == EXIT_OK
    done = report_line(capsys)
    # every partition's segments fit one group: each is scanned, planned and written by one
    # task, and the general path's stages have nothing to do
    assert set(done["stages_s"]) == {"recover", "metadata", "one_pass", "scan_and_plan",
                                     "commit"}
    # the test's session was running already: no start to report
    assert not {"session_start", "worker_start"} & set(done["stages_s"])
    for p in topic_lines(done["partitions"]):
        expected = planned[(p["topic"], p["partition"])]
        assert p["status"] == "cleaned"
        assert p["groups"] == expected["groups"]
        assert p["bytes_in"] == expected["expected_input_bytes"]
        assert p["records_in"] == p["records_out"] + sum(p["dropped"].values())
        assert p["segments_after"] == p["segments_before"] - sum(len(g) - 1 for g in p["groups"])
        assert set(p["stages_s"]) == {"rewrite", "commit"}
        assert all(seconds >= 0 for seconds in p["stages_s"].values())
        assert (p["round_path"], p["round_path_reason"]) == ("one_task", "one_group")
    assert inspect_problems(small_log) == []
    assert all("round_path" not in p for p in plan["partitions"])


@pytest.mark.parametrize("task_keys, task_bytes, path, why", [
    (None, None, "one_task", "within_task_keys"),
    ("1", None, "offset_map", "over_task_keys"),
    ("0", None, "offset_map", "task_keys_0"),
    (None, 0, "offset_map", "over_task_bytes"),
])
def test_the_report_says_how_each_round_was_written_and_why(
        spark, small_log: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, task_keys: str | None, task_bytes: int | None,
        path: str, why: str) -> None:
    """Rounds of several groups: by one task within the key budget, else
    through the distributed offset map, each line saying why; a round of one group is
    always one task's."""
    if task_bytes is not None:
        monkeypatch.setattr(planning, "ONE_TASK_BYTES", task_bytes)
    # small indexes make several groups (segment.bytes may not go below 1 MiB)
    args = ["--config", "segment.index.bytes=48", *(["--task-keys", task_keys] if task_keys
                                                      else [])]
    assert cli_main(["compact", "--assume-kafka-defaults", str(small_log), *COMPACT,
                     *args]) == EXIT_OK
    lines = [p for p in topic_lines(report_line(capsys)["partitions"])
             if p["status"] == "cleaned"]
    several = [p for p in lines if len(p["groups"]) > 1]
    assert several, "no round of several groups: the case is not exercised"
    for p in lines:
        assert (p["round_path"], p["round_path_reason"]) == (
            (path, why) if len(p["groups"]) > 1 else ("one_task", "one_group"))


def test_corrupt_partition_is_reported_and_untouched_while_others_are_compacted(
        spark, small_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    victim = small_log / "orders-v2-0"
    segment = sorted(victim.glob("*.log"))[1]
    data = bytearray(segment.read_bytes())
    data[200] ^= 0xFF  # inside the first batch's records: CRC mismatch
    segment.write_bytes(bytes(data))
    before = tree_digest(victim)

    assert cli_main(["compact", "--assume-kafka-defaults", str(small_log),
                     *COMPACT]) == EXIT_PARTIAL
    report = report_line(capsys)
    assert report["status"] == "partial"
    by_dir = {f"{p['topic']}-{p['partition']}": p for p in topic_lines(report["partitions"])}
    bad = by_dir["orders-v2-0"]
    assert bad["status"] == "corrupt"
    assert bad["error"]["code"] == "CRC_MISMATCH"
    assert bad["error"]["path"] == str(segment)
    assert bad["error"]["position"] == 0 and bad["error"]["base_offset"] is not None
    assert tree_digest(victim) == before
    assert all(p["status"] == "cleaned" for d, p in by_dir.items() if d != "orders-v2-0")


@pytest.mark.parametrize(("args", "needle"), [
    (["--config", "min.cleanable.dirty.ratio=2"], "min.cleanable.dirty.ratio"),
    (["--config", "cleanup.policy=compact,shred"], "cleanup.policy"),
    (["--config", "no.such.config=1"], "no.such.config"),
    (["--config", "min.compaction.lag.ms=10", "--config", "max.compaction.lag.ms=5"],
     "min.compaction.lag.ms (10) is greater than max.compaction.lag.ms (5)"),
    (["--topic-config", "orders-v2=compact"], "TOPIC:KEY=VALUE"),
])
def test_invalid_configs_are_refused_before_anything_changes(
        spark, small_log: Path, capsys: pytest.CaptureFixture[str], args: list[str],
        needle: str) -> None:
    before = tree_digest(small_log)
    assert cli_main(["compact", "--assume-kafka-defaults", str(small_log), "--now-ms", NOW,
                     *args]) == EXIT_CONFIG
    assert needle in capsys.readouterr().err
    assert tree_digest(small_log) == before


def test_topic_configs_file_selects_the_compacted_topics(
        spark, small_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    configs = tmp_path / "topics.yaml"
    configs.write_text("user-profiles:\n  cleanup.policy: compact,delete\n"
                       "  min.cleanable.dirty.ratio: 0.1\n")
    assert cli_main(["compact", "--assume-kafka-defaults", str(small_log), "--now-ms", NOW,
                     "--topic-configs",
                     str(configs), "--json"]) == EXIT_OK
    statuses = {(p["topic"], p["status"]) for p in topic_lines(report_line(capsys)["partitions"])}
    assert statuses == {("user-profiles", "cleaned"), ("orders-v2", "skipped")}


def test_locked_log_dir_is_refused(spark, small_log: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    with lock_held_by_other_process(small_log) as pid:
        before = tree_digest(small_log)
        assert cli_main(["compact", "--assume-kafka-defaults", str(small_log),
                         *COMPACT]) == EXIT_LOCKED
        error = report_line(capsys)
        assert error["code"] == "LOG_DIR_LOCKED"
        # the message names the holder (issue 30.8)
        assert f"locked by another kafka-compactor run (pid {pid}:" in error["message"]
        assert tree_digest(small_log) == before


def test_a_plan_tells_its_numbers_predicts_no_figures_and_is_recorded(
        spark, small_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each line explains with the dirty ratio it compared; output figures are null (a plan
    has none); the retention preview says what it is computed on and covers the selected
    topics only; ``--state-dir`` records a ``plan`` run."""
    topics = sorted({p.name.rsplit("-", 1)[0] for p in small_log.iterdir() if p.is_dir()
                     and not p.name.startswith("__")})
    chosen = topics[0]
    state = tmp_path / "state"
    args = ["--now-ms", str(int(NOW) + 30 * 86_400_000), "--config",
            "cleanup.policy=compact,delete", "--topics", chosen, "--state-dir", str(state)]
    code, plan = cli_json(capsys, "plan", "--assume-kafka-defaults", str(small_log), *args,
                          "--json")
    assert code == EXIT_OK
    assert "before compaction" in plan["retention_basis"]
    for p in topic_lines(plan["partitions"]):
        if p["topic"] != chosen:
            assert (p["status"], p["reason"], p["retention"]) == ("skipped", "not_selected",
                                                                  None)
            continue
        assert p["status"] == "would_clean"
        threshold = p["config"]["min.cleanable.dirty.ratio"]["value"]
        assert p["explanation"].startswith(f"dirty ratio {p['dirty_ratio']:.2f} (")
        assert f"> min.cleanable.dirty.ratio {float(threshold):g}" in p["explanation"]
        assert all(p[k] is None for k in ("records_in", "records_out", "bytes_in",
                                          "bytes_out", "segments_after", "dropped"))
        assert p["retention"]["topic"] == chosen
    assert cli_main(["history", "--state-dir", str(state), "--json"]) == EXIT_OK
    runs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["command"], r["run_id"], r["bytes_in"]) for r in runs] == [
        ("plan", plan["run_id"], None)]

    # the human summary: the same explanations, the preview's basis, a totals line
    assert cli_main(["plan", "--assume-kafka-defaults", str(small_log), *args[:-2]]) == EXIT_OK
    text = capsys.readouterr().out
    for p in topic_lines(plan["partitions"]):
        if p["topic"] == chosen:
            assert f"{p['topic']}-{p['partition']}: would clean ({p['explanation']})" in text
    assert plan["retention_basis"] in text
    assert text.splitlines()[-1 if "retention preview" not in text else 0]
    assert "plan as of " in text and " UTC: " in text


def test_the_pure_writer_writes_the_same_log_dir_as_the_native_one(
        spark, small_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--writer pure`` (the reference path, for platforms without numba) and the default
    native kernels leave byte-identical log dirs and the same figures."""
    import shutil

    pure_log = tmp_path / "pure"
    shutil.copytree(small_log, pure_log)
    assert cli_main(["compact", "--assume-kafka-defaults", str(small_log), *COMPACT]) == EXIT_OK
    native = report_line(capsys)
    assert cli_main(["compact", "--assume-kafka-defaults", str(pure_log), *COMPACT, "--writer",
                     "pure"]) == EXIT_OK
    pure = report_line(capsys)
    assert tree_digest(small_log) == tree_digest(pure_log)
    figures = ("status", "records_in", "records_out", "bytes_in", "bytes_out", "dropped")
    assert ([{k: p.get(k) for k in figures} for p in topic_lines(native["partitions"])]
            == [{k: p.get(k) for k in figures} for p in topic_lines(pure["partitions"])])
    assert any(p["status"] == "cleaned" for p in topic_lines(native["partitions"]))
    with pytest.raises(SystemExit):
        cli_main(["compact", "--assume-kafka-defaults", str(small_log), *COMPACT, "--writer",
                  "fast"])


def test_a_checkpoint_failure_after_the_swaps_says_what_changed_and_exits_partial(
        spark, small_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 28.5: the cleaner checkpoint cannot be written after every partition was swapped
    (its temporary name is taken by a directory). Before the fix: "nothing was swapped",
    exit 3, no report."""
    (small_log / "cleaner-offset-checkpoint.tmp").mkdir()
    assert cli_main(["compact", "--assume-kafka-defaults", str(small_log),
                     *COMPACT]) == EXIT_PARTIAL
    report = report_line(capsys)
    (error,) = report["log_dir_errors"]
    cleaned = [f"{p['topic']}-{p['partition']}" for p in topic_lines(report["partitions"])
               if p["status"] == "cleaned"]
    assert cleaned and error["step"] == "cleaner-offset-checkpoint"
    assert sorted(error["changed"]) == sorted(cleaned)
    assert "swapped in and complete" in error["remedy"]
    assert "nothing was swapped" not in json.dumps(report)
    (small_log / "cleaner-offset-checkpoint.tmp").rmdir()
    assert not inspect_problems(small_log)


def test_a_plan_refuses_what_the_round_refuses(
        spark, small_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 28.9: ``plan`` predicted would_clean for a partition whose leftover (an
    unreadable .log.swap) ``compact`` refuses. Now both say SWAP_RECOVERY."""
    part = next(p for p in sorted(small_log.iterdir()) if p.is_dir() and p.name[-1].isdigit()
                and not p.name.startswith("__"))
    base = min(int(p.name[:20]) for p in part.glob("*.log"))
    (part / f"{base:020d}.log.swap").write_bytes(b"\x00\x00\x00\x00garbage, not a batch")

    def line(command: str) -> dict:
        cli_main([command, "--assume-kafka-defaults", str(small_log), *COMPACT])
        return next(p for p in report_line(capsys)["partitions"]
                    if f"{p['topic']}-{p['partition']}" == part.name)

    planned, done = line("plan"), line("compact")
    assert done["status"] == "corrupt" and done["reason"] == "SWAP_RECOVERY"
    assert (planned["status"], planned["reason"]) == (done["status"], done["reason"])


def test_a_now_before_the_newest_record_is_refused_unless_confirmed(
        spark, small_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 28.3: a --now-ms days before the newest record would stamp delete horizons in
    the past (the next round drops tombstones at once). Refused before any rewrite unless
    --allow-past-now; the wall clock (no --now-ms) is never refused this way."""
    before = tree_digest(small_log)
    past = str(DEFAULT_START_MS - 10 * 86_400_000)
    args = ["compact", "--assume-kafka-defaults", str(small_log), "--now-ms", past,
            "--config", "cleanup.policy=compact", "--json"]
    assert cli_main(args) == EXIT_CONFIG
    assert "before the newest record" in capsys.readouterr().err
    assert tree_digest(small_log) == before
    assert cli_main([*args, "--allow-past-now"]) == EXIT_OK
    capsys.readouterr()
