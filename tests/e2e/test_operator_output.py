"""What an operator sees: quiet by default (no Spark start-up chatter), ``-v`` for Spark's
logging, ``-q`` for errors only, human summary or ``--json`` (never both on stdout), the JSON
report in ``--report-file`` either way, one line and exit 130 on Ctrl-C, silence when the
reader of stdout goes away."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from compactor.errors import EXIT_OK
from compactor.tools.generator import DEFAULT_START_MS

COMPACTOR = str(Path(sys.executable).parent / "compactor")
NOW = str(DEFAULT_START_MS + 3 * 86_400_000)
COMPACT = ["--now-ms", NOW, "--config", "cleanup.policy=compact"]
SPARK_CHATTER = ("log4j", "NativeCodeLoader", "resolves to a loopback address",
                 "Setting default log level", "WARN ")


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([COMPACTOR, *args], capture_output=True, text=True, timeout=300)


def test_a_round_prints_its_summary_and_nothing_of_spark(small_log: Path,
                                                         tmp_path: Path) -> None:
    report_file = tmp_path / "report.json"
    res = _run("compact", str(small_log), *COMPACT, "--report-file", str(report_file))
    assert res.returncode == EXIT_OK, res.stderr
    assert [c for c in SPARK_CHATTER if c in res.stderr] == [], res.stderr
    assert not any(line.startswith("{") for line in res.stdout.splitlines())  # human only
    assert "cleaned" in res.stdout
    report = json.loads(report_file.read_text())
    assert report["command"] == "compact" and any(
        p["status"] == "cleaned" for p in report["partitions"])


def test_json_prints_only_the_report_and_the_report_file_holds_the_same(
        small_log: Path, tmp_path: Path) -> None:
    report_file = tmp_path / "report.json"
    res = _run("plan", str(small_log), *COMPACT, "--json", "--report-file", str(report_file))
    assert res.returncode == EXIT_OK, res.stderr
    (line,) = res.stdout.splitlines()
    assert json.loads(line) == json.loads(report_file.read_text())


def test_verbose_shows_spark_logging_and_quiet_shows_nothing(small_log: Path) -> None:
    loud = _run("plan", str(small_log), *COMPACT, "-v")
    assert loud.returncode == EXIT_OK and "log4j" in loud.stderr
    quiet = _run("plan", str(small_log), *COMPACT, "-q")
    assert quiet.returncode == EXIT_OK and quiet.stdout == ""
    failing = _run("plan", str(small_log / "missing"), "-q")
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


def test_ctrl_c_says_what_state_the_log_dir_is_in(small_log: Path) -> None:
    proc = subprocess.Popen([COMPACTOR, "compact", str(small_log), *COMPACT],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    # after the imports, while Spark starts (its JVM alone takes longer than this): the round
    # cannot have finished
    time.sleep(4)
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the JVM and workers get it too
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted" in err and "compactor recover" in err
    assert "Traceback" not in err, err[-3000:]
