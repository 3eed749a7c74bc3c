"""What an operator sees: quiet by default (no Spark start-up chatter), ``-v`` for Spark's
logging, ``-q`` for errors only, human summary or ``--json`` (never both on stdout), the JSON
report in ``--report-file`` either way, one line and exit 130 on Ctrl-C, silence when the
reader of stdout goes away."""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compactor.errors import EXIT_OK
from compactor.human import human_bytes
from compactor.tools.ops.generator import DEFAULT_START_MS

COMPACTOR = str(Path(sys.executable).parent / "compactor")
NOW = str(DEFAULT_START_MS + 3 * 86_400_000)
COMPACT = ["--now-ms", NOW, "--config", "cleanup.policy=compact"]
SPARK_CHATTER = ("log4j", "NativeCodeLoader", "resolves to a loopback address",
                 "Setting default log level", "WARN ", "incubator")


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([COMPACTOR, *args], capture_output=True, text=True, timeout=300)


def test_a_round_prints_its_summary_and_nothing_of_spark(small_log: Path,
                                                         tmp_path: Path) -> None:
    report_file = tmp_path / "report.json"
    # the bytes of the topics' segments: each partition fits one group, so the one pass reads
    # them all (the cluster's metadata log is never read)
    scanned = sum(f.stat().st_size for f in small_log.glob("*/*.log")
                  if not f.parent.name.startswith("__"))
    res = _run("compact", "--assume-kafka-defaults", str(small_log), *COMPACT, "--report-file",
               str(report_file))
    assert res.returncode == EXIT_OK, res.stderr
    assert [c for c in SPARK_CHATTER if c in res.stderr] == [], res.stderr
    assert not any(line.startswith("{") for line in res.stdout.splitlines())  # human only
    assert "cleaned" in res.stdout
    report = json.loads(report_file.read_text())
    assert report["command"] == "compact" and any(
        p["status"] == "cleaned" for p in report["partitions"])
    # the command started its own session: its start and the workers' are stages of their own
    assert {"session_start", "worker_start", "one_pass", "scan_and_plan"} <= set(
        report["stages_s"])
    assert all(report["stages_s"][s] > 0 for s in ("session_start", "worker_start"))
    # stderr is no terminal: one progress line per step, every task of it done, the step's
    # input bytes in the report's units
    steps = {line.split(":")[0]: line for line in res.stderr.splitlines()
             if re.match(r"^[a-z_]+: \d+/\d+ tasks", line)}
    assert set(steps) == {"one_pass"}, res.stderr
    # the JVM's start is a step too, shown before any other (no silent start)
    first = res.stderr.splitlines()[0]
    assert re.fullmatch(r"starting Spark: \d+\.\d s", first), res.stderr
    for line in steps.values():
        done, total = re.search(r"(\d+)/(\d+) tasks", line).groups()  # type: ignore[union-attr]
        assert done == total and int(total) > 0, line
    assert sum(p["status"] == "cleaned" for p in report["partitions"]) == 4
    assert f", {human_bytes(scanned)}, " in steps["one_pass"]


def test_json_prints_only_the_report_and_the_report_file_holds_the_same(
        small_log: Path, tmp_path: Path) -> None:
    report_file = tmp_path / "report.json"
    res = _run("plan", "--assume-kafka-defaults", str(small_log), *COMPACT, "--json",
               "--report-file", str(report_file))
    assert res.returncode == EXIT_OK, res.stderr
    (line,) = res.stdout.splitlines()
    assert json.loads(line) == json.loads(report_file.read_text())


@pytest.mark.slow  # two rounds in commands of their own, one with Spark's logging: 14 s
def test_verbose_shows_spark_logging_and_quiet_shows_nothing(small_log: Path) -> None:
    loud = _run("plan", "--assume-kafka-defaults", str(small_log), *COMPACT, "-v")
    assert loud.returncode == EXIT_OK and "log4j" in loud.stderr
    quiet = _run("plan", "--assume-kafka-defaults", str(small_log), *COMPACT, "-q")
    assert quiet.returncode == EXIT_OK and quiet.stdout == ""
    assert " tasks" not in quiet.stderr  # no progress either
    off = _run("plan", "--assume-kafka-defaults", str(small_log), *COMPACT, "--progress", "off")
    assert off.returncode == EXIT_OK and " tasks" not in off.stderr and "would clean" in off.stdout
    failing = _run("plan", "--assume-kafka-defaults", str(small_log / "missing"), "-q")
    assert failing.returncode == 3 and "does not exist" in failing.stderr


def test_a_reader_that_goes_away_ends_the_command_quietly(small_log: Path) -> None:
    proc = subprocess.Popen([COMPACTOR, "inspect", str(small_log), "--records"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()  # as `| head -1` does
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def _children(pid: int) -> list[tuple[int, str]]:
    """(pid, command name) of the processes whose parent is ``pid``."""
    out = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            head, tail = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)
        except OSError:
            continue
        if int(tail.split()[1]) == pid:
            out.append((int(name), head.split("(", 1)[1]))
    return out


def _terminal_job(*argv: str) -> subprocess.Popen:
    """``argv`` started as a terminal starts a foreground job, in a process group of its own
    with SIGINT at its default action. (A job a non-interactive shell starts with ``&``, such
    as a test run in the background, inherits SIGINT ignored, and Python then installs no
    handler of its own: Ctrl-C would not reach the command until pyspark installs one.)"""
    reset = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
             "os.execv(sys.argv[1], sys.argv[1:])")
    return subprocess.Popen([sys.executable, "-c", reset, *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize("when", ["jvm_starting", "running"])
def test_ctrl_c_says_what_state_the_log_dir_is_in_and_leaves_no_process(
        small_log: Path, when: str) -> None:
    """Ctrl-C to the whole process group (as a terminal sends it) while the Spark JVM starts
    (pyspark starts it ignoring SIGINT: it must not outlive the command) and while the round
    runs: one line, exit 130, no process of the command left."""
    proc = _terminal_job(COMPACTOR, "compact", "--assume-kafka-defaults", str(small_log),
                         *COMPACT)
    deadline = time.monotonic() + 120
    while not any(cmd == "java" for _, cmd in _children(proc.pid)):
        assert proc.poll() is None and time.monotonic() < deadline, "no JVM started"
        time.sleep(0.05)
    if when == "running":  # Spark runs Python tasks: the JVM has started the workers' daemon
        java = next(pid for pid, cmd in _children(proc.pid) if cmd == "java")
        while not any(cmd.startswith("python") for _, cmd in _children(java)):
            assert proc.poll() is None and time.monotonic() < deadline, "no Python worker"
            time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted" in err and "compactor recover" in err
    assert "Traceback" not in err, err[-3000:]
    while not _group_gone(proc.pid):  # the JVM and its Python workers end too
        assert time.monotonic() < deadline, "processes of the command outlived it"
        time.sleep(0.1)


def test_ctrl_c_after_the_report_leaves_the_command_s_outcome(small_log: Path) -> None:
    """Ctrl-C to the whole process group just after the report is printed, while the
    process exits (Python's exit restores SIGINT's default action; the process used to die of
    the signal, with no word): the command ends as it reported, and no process is left."""
    proc = _terminal_job(COMPACTOR, "compact", "--assume-kafka-defaults", str(small_log),
                         *COMPACT, "--json")
    assert proc.stdout is not None
    report = json.loads(proc.stdout.readline())
    time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert report["command"] == "compact" and out == ""
    # 130 with the line when the interrupt beat the report's last step, else the report's own
    assert proc.returncode == EXIT_OK or (proc.returncode == 130 and "interrupted" in err), (
        proc.returncode, err[-2000:])
    deadline = time.monotonic() + 120
    while not _group_gone(proc.pid):
        assert time.monotonic() < deadline, "processes of the command outlived it"
        time.sleep(0.1)


def test_a_terminal_gets_a_live_bar_with_tasks_and_eta(small_log: Path) -> None:
    """stderr on a pseudo-terminal: rich redraws a bar (carriage returns, tasks done/total,
    ETA) and leaves each finished step as a line."""
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen([COMPACTOR, "compact", "--assume-kafka-defaults", str(small_log),
                                 *COMPACT],
                                stdout=subprocess.PIPE, stderr=follower,
                                env={**os.environ, "TERM": "xterm", "COLUMNS": "120"})
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal closed with the process
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert proc.wait(timeout=300) == EXIT_OK
    finally:
        os.close(leader)
    screen = b"".join(chunks).decode(errors="replace")
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen)
    assert "\r" in screen and "ETA" in plain
    assert re.search(r"one_pass .*\d+/\d+ tasks", plain), plain[-2000:]
    assert re.search(r"one_pass: (\d+)/\1 tasks", plain), plain[-2000:]
