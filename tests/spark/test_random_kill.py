"""SIGKILL at random points of ``compact``, ``retain`` and ``erase apply``, run as a user runs
them (the ``compactor`` CLI in its own process), followed by ``compactor recover``.

Two kinds of kill, at points drawn from a seeded generator (``CRASH_SEED`` overrides the seed;
every assertion message names the seed and the point, so a failure can be replayed):
- ``op``: the driver kills itself right before its N-th file operation (N uniform over the
  operations an uninterrupted run makes): recovery at start, each rename, deletion, directory
  fsync and checkpoint write of the swap or the deletion, the checkpoints after it;
- ``write``: the whole process group (driver, Spark's JVM, its Python workers) is killed a
  random moment after executors started writing ``.cleaned`` segments, as a machine dies.

After each kill and ``recover``: every compaction group is exactly old or exactly new, every
erased segment exactly old or exactly new, retention left a suffix of the old segments; and
the next run converges to the uninterrupted run's result, byte for byte.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from compactor.cli import main as cli_main
from compactor.errors import EXIT_OK
from compactor.tools.ops.generator import DEFAULT_START_MS, GeneratorConfig, generate
from tests.helpers import init_ledger, inspect_problems, records_of, segment_bytes

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
DAY = 86_400_000
NOW = DEFAULT_START_MS + 3 * DAY
SEED = int(os.environ.get("CRASH_SEED", "20261124"))
TOPIC = "accounts"
GEN = GeneratorConfig(topics=(TOPIC,), partitions=3, records_per_partition=1500,
                      distinct_keys=80, segment_bytes=8 * 1024, tombstone_ratio=0.2,
                      transactional_ratio=0.5, abort_ratio=0.4, record_interval_ms=60_000,
                      seed=31, topic_configs={TOPIC: {"cleanup.policy": "compact",
                                                      "segment.index.bytes": "48"}})
SUBJECT = "key-00000003"
COMMANDS = {
    "compact": ["compact", "--assume-kafka-defaults", "{logs}", "--now-ms", str(NOW), "--json"],
    "retain": ["retain", "--assume-kafka-defaults", "{logs}", "--now-ms", str(NOW), "--json",
               "--topics", TOPIC,
               "--topic-config", f"{TOPIC}:cleanup.policy=delete",
               "--topic-config", f"{TOPIC}:retention.ms={DAY}"],
    "erase": ["erase", "apply", "--assume-kafka-defaults", "{logs}", "--state-dir", "{state}",
              "--now-ms", str(NOW),
              "--json"],
}

# The CLI, killing itself (SIGKILL) before its N-th file operation (argv[1]); it prints how
# many it made when it was not killed.
RUNNER = r"""
import sys
from compactor.cli import main
from tests.crash import kill_before
ops = kill_before(int(sys.argv[1]))
code = main(sys.argv[2:])
print("OPS", ops(), flush=True)
sys.exit(code)
"""
NEVER = 10**9


def _argv(command: str, logs: Path, state: Path) -> list[str]:
    return [a.format(logs=logs, state=state) for a in COMMANDS[command]]


def _launch(crash_at: int, argv: list[str], stderr: Path) -> subprocess.Popen:
    with open(stderr, "w") as err:  # a file, not a pipe: Spark's output never blocks the run
        return subprocess.Popen([sys.executable, "-c", RUNNER, str(crash_at), *argv],
                                stdout=subprocess.PIPE, stderr=err, text=True, cwd=REPO,
                                env=dict(os.environ, PYTHONPATH=str(REPO)),
                                start_new_session=True)


def _process_groups(root_pid: int) -> set[int]:
    """Process groups of ``root_pid`` and every descendant (from /proc): PySpark's worker
    daemon puts itself and its workers in a group of their own (``pyspark.daemon`` calls
    ``os.setpgid``), which killing the driver's group would leave running."""
    parents: dict[int, int] = {}
    groups: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        try:
            # the fields after the command name, which may hold spaces and parentheses
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except (OSError, ValueError):
            continue
        if entry.name.isdigit():
            parents[int(entry.name)], groups[int(entry.name)] = int(fields[1]), int(fields[2])
    tree, grew = {root_pid}, True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree |= more
        grew = bool(more)
    return {groups[pid] for pid in tree if pid in groups}


def _kill_while_writing(proc: subprocess.Popen, logs: Path, delay_s: float) -> bool:
    """SIGKILL the process group ``delay_s`` after the first ``.cleaned`` file appears.
    Returns whether the kill came before the run ended."""
    deadline = time.monotonic() + 600
    while proc.poll() is None and time.monotonic() < deadline:
        if next(logs.rglob("*.cleaned"), None) is not None:
            time.sleep(delay_s)
            if proc.poll() is not None:
                return False
            for group in _process_groups(proc.pid):  # the driver's and the workers'
                os.killpg(group, signal.SIGKILL)
            proc.wait()
            return True
        time.sleep(0.002)
    proc.wait(timeout=600)
    return False


def _partitions(logs: Path) -> dict[str, dict[int, bytes]]:
    return {d.name: segment_bytes(d) for d in sorted(logs.glob(f"{TOPIC}-*"))}


@pytest.fixture(scope="module")
def staged(spark, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The generated log dir, a pending erasure request, and for each command the result and
    file-operation count of one uninterrupted run in a process of its own."""
    root = tmp_path_factory.mktemp("randomkill")
    logs, state = root / "logs", root / "state"
    generate(str(logs), GEN)
    init_ledger(str(state))
    assert cli_main(["erase", "request", "--state-dir", str(state), "--topic", TOPIC, "--key",
                     SUBJECT, "--request-id", "r1", "--now-ms", str(NOW), "--json",
                     "--reason", "art. 17"]) == EXIT_OK
    done: dict[str, dict] = {}
    for command in COMMANDS:
        work, work_state = root / f"done-{command}", root / f"state-{command}"
        shutil.copytree(logs, work)
        shutil.copytree(state, work_state)
        proc = _launch(NEVER, _argv(command, work, work_state), root / f"{command}.err")
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == EXIT_OK, (root / f"{command}.err").read_text()[-3000:]
        lines = out.splitlines()
        report = json.loads(next(line for line in lines if line.startswith("{")))
        ops = int(next(line for line in lines if line.startswith("OPS")).split()[1])
        done[command] = {"report": report, "ops": ops, "after": _partitions(work)}
    assert done["compact"]["ops"] > 20 and done["retain"]["ops"] > 10
    return {"logs": logs, "state": state, "before": _partitions(logs), "done": done}


def _groups(report: dict) -> dict[str, list[list[int]]]:
    return {f"{p['topic']}-{p['partition']}": p.get("groups", []) for p in report["partitions"]
            if p["topic"] == TOPIC}


def _assert_compact_old_or_new(after: Mapping[str, dict[int, bytes]], staged: dict,
                               where: str) -> None:
    done = staged["done"]["compact"]
    new_all, groups = done["after"], _groups(done["report"])
    for name, old in staged["before"].items():
        now, new = after[name], new_all[name]
        covered: set[int] = set()
        for group in groups[name]:
            lo = group[0]
            hi = min((b for b in old if b > group[-1]), default=None)
            in_group = {b: d for b, d in now.items() if b >= lo and (hi is None or b < hi)}
            covered |= set(in_group) | set(group)
            assert in_group in ({lo: new[lo]}, {b: old[b] for b in group}), (
                f"{where}: {name} group {group} is a mix")
        assert {b: d for b, d in now.items() if b not in covered} == {
            b: d for b, d in old.items() if b not in covered}, f"{where}: {name} outside groups"


def _assert_retain_suffix(after: Mapping[str, dict[int, bytes]], staged: dict,
                          where: str) -> None:
    for name, old in staged["before"].items():
        now = after[name]
        kept = sorted(b for b in now if b in old)
        assert kept == sorted(old)[len(old) - len(kept):], f"{where}: {name} not a suffix"
        assert all(now[b] == old[b] for b in kept), f"{where}: {name} changed a segment"
        extra = [b for b in now if b not in old]  # only the empty segment a roll creates
        assert all(not now[b] and b >= max(old) for b in extra), f"{where}: {name} {extra}"


def _assert_erase_old_or_new(after: Mapping[str, dict[int, bytes]], staged: dict,
                             where: str) -> None:
    new_all = staged["done"]["erase"]["after"]
    for name, old in staged["before"].items():
        now, new = after[name], new_all[name]
        assert sorted(now) == sorted(old), f"{where}: {name} lost or gained segments"
        for base, data in now.items():
            assert data in (old[base], new[base]), f"{where}: {name}/{base} is neither"


CHECKS = {"compact": _assert_compact_old_or_new, "retain": _assert_retain_suffix,
          "erase": _assert_erase_old_or_new}


def _trials(command: str) -> list[tuple[str, float]]:
    """Seeded kill points per command: file operations everywhere, and mid-write kills for
    the commands whose executors write."""
    rng = random.Random(f"{SEED}-{command}")
    kinds = ["op", "op", "op"] if command == "retain" else ["op", "write"]
    return [(kind, rng.random()) for kind in kinds]


@pytest.mark.parametrize("command", list(COMMANDS))
def test_sigkill_at_random_points_recovers_old_or_new_and_the_next_run_converges(
        staged, tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]) -> None:
    expected = staged["done"][command]["after"]
    for n, (kind, u) in enumerate(_trials(command)):
        work, state = tmp_path / f"logs-{n}", tmp_path / f"state-{n}"
        shutil.copytree(staged["logs"], work)
        shutil.copytree(staged["state"], state)
        argv = _argv(command, work, state)
        if kind == "op":
            crash_at = 1 + int(u * staged["done"][command]["ops"])
            where = f"seed {SEED}, {command} killed before file operation {crash_at}"
            proc = _launch(crash_at, argv, tmp_path / f"{n}.err")
            proc.communicate(timeout=600)
            assert proc.returncode == -signal.SIGKILL, (
                f"{where}: {(tmp_path / f'{n}.err').read_text()[-2000:]}")
        else:
            delay = 0.1 * u  # executors write for longer than this: the kill lands mid-round
            where = f"seed {SEED}, {command} killed {delay:.3f} s into the writes"
            proc = _launch(NEVER, argv, tmp_path / f"{n}.err")
            assert _kill_while_writing(proc, work, delay), f"{where}: the run ended first"
        assert cli_main(["recover", str(work)]) == EXIT_OK, where
        capsys.readouterr()
        assert not list(work.rglob("*.cleaned")) and not list(work.rglob("*.swap")), where
        CHECKS[command](_partitions(work), staged, where)
        assert inspect_problems(work) == [], where
        assert cli_main(argv) == EXIT_OK, where
        capsys.readouterr()
        converged = _partitions(work)
        for name, segments in expected.items():
            # the same records at the same offsets: batch boundaries may differ, as a round
            # that re-cleans groups swapped before the kill groups them anew (as Kafka would)
            assert records_of(converged[name]) == records_of(segments), (
                f"{where}: {name} did not converge")
        shutil.rmtree(work)
        shutil.rmtree(state)
