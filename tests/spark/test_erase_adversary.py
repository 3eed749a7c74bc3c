"""Issue 51: nothing fools the erasure proof or the recovery. Each test is one way an adversary
(or a careless operator) made ``erase verify`` say ``verified`` while the subject was still on
disk, or made recovery trust a file it should not; each failed on the code before its fix.

A request must end either with the subject on disk and the request not ``verified``, or with
the subject gone from everything a broker would serve. Records are read back with
kafka-python (an independent parser)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from deltalake import DeltaTable

from compactor.cli import main as cli_main
from compactor.codec.segment import iter_batches
from compactor.errors import EXIT_CONFIG, EXIT_CORRUPT, EXIT_OK, EXIT_PARTIAL
from compactor.tools.generator import DEFAULT_START_MS, GeneratorConfig, generate
from tests.helpers import cli_json, segment_bytes, tree_digest

pytestmark = pytest.mark.spark

NOW = DEFAULT_START_MS + 3 * 86_400_000
GEN = GeneratorConfig(
    topics=("profiles", "__orders"), partitions=1, records_per_partition=1200,
    distinct_keys=40, segment_bytes=10 * 1024, transactional_producers=0, header_ratio=0.3,
    tombstone_ratio=0.1, zipf_exponent=0.0, seed=51, internal_topics=("__consumer_offsets",),
    topic_configs={"profiles": {"cleanup.policy": "compact"}})
SUBJECT = b"key-00000005"


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    logs = tmp_path_factory.mktemp("adversary") / "logs"
    generate(str(logs), GEN)
    return logs


@pytest.fixture()
def logs(template: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    capsys.readouterr()
    dest = tmp_path / "logs"
    shutil.copytree(template, dest)
    return dest


def subject_records(data: bytes) -> int:
    """How many records of :data:`SUBJECT` a segment's bytes hold (kafka-python reads them)."""
    from kafka.record.memory_records import MemoryRecords

    records = MemoryRecords(data)
    n = 0
    while records.has_next():
        batch = records.next_batch()
        if not batch.is_control_batch:
            n += sum(1 for r in batch if r.key == SUBJECT)
    return n


def subject_bases(pdir: Path) -> list[int]:
    """The base offsets of the segments of ``pdir`` that hold the subject."""
    return [base for base, data in segment_bytes(pdir).items() if subject_records(data)]


def erase(capsys: pytest.CaptureFixture[str], action: str, logs: Path, state: Path,
          *args: str) -> tuple[int, dict]:
    return cli_json(capsys, "erase", action, "--assume-kafka-defaults", str(logs),
                    "--state-dir", str(state), "--now-ms", str(NOW), "--json", *args)


def request(capsys: pytest.CaptureFixture[str], state: Path, topic: str,
            *args: str) -> str:
    code, out = cli_json(capsys, "erase", "request", "--state-dir", str(state), "--topic", topic,
                         "--key", SUBJECT.decode(), "--reason", "ticket 51", "--now-ms",
                         str(NOW), "--json", *args)
    assert code == EXIT_OK, out
    (rid,) = out["added"] + out["existing"]
    return rid


def statuses(state: Path) -> dict[str, str]:
    table = DeltaTable(str(state / "erasure_requests")).to_pyarrow_table(
        columns=["request_id", "status"])
    return dict(zip(table.column(0).to_pylist(), table.column(1).to_pylist(), strict=True))


def init(capsys: pytest.CaptureFixture[str], state: Path) -> None:
    assert cli_main(["erase", "init", "--state-dir", str(state)]) == EXIT_OK
    capsys.readouterr()


# -- 1. links --------------------------------------------------------------------------------


def test_a_symlinked_segment_is_refused_by_apply_verify_compact_and_retain(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before the fix the swap replaced the link and never touched the file it pointed to:
    apply and verify exited 0 with the request verified while the target kept the subject."""
    pdir = logs / "profiles-0"
    base = subject_bases(pdir)[0]
    name = f"{base:020d}.log"
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (pdir / name).rename(outside / name)
    (pdir / name).symlink_to(outside / name)
    target_before = (outside / name).read_bytes()
    state = tmp_path / "state"
    init(capsys, state)
    rid = request(capsys, state, "profiles")
    code, report = erase(capsys, "apply", logs, state)
    assert code == EXIT_PARTIAL, report
    (line,) = [p for p in report["partitions"] if p["dir"] == "profiles-0"]
    assert line["status"] == "corrupt" and line["error"]["code"] == "LINKED_FILE"
    assert line["error"]["path"].endswith(name) and line["error"]["base_offset"] == base
    assert statuses(state) == {rid: "pending"}
    assert (pdir / name).is_symlink() and (outside / name).read_bytes() == target_before
    code, report = erase(capsys, "verify", logs, state)
    assert statuses(state) == {rid: "pending"}
    # compaction and retention refuse the partition the same way, and change nothing in it
    before = tree_digest(pdir)
    code, report = cli_json(capsys, "compact", "--assume-kafka-defaults", str(logs), "--now-ms",
                            str(NOW), "--json")
    assert code == EXIT_PARTIAL
    (line,) = [p for p in report["partitions"] if p["topic"] == "profiles"]
    assert line["status"] == "corrupt" and line["reason"] == "LINKED_FILE"
    code, report = cli_json(capsys, "retain", str(logs), "--assume-kafka-defaults",
                            "--config", "retention.ms=3600000", "--now-ms", str(NOW), "--json")
    (line,) = [p for p in report["partitions"] if p["topic"] == "profiles"]
    assert line["status"] == "corrupt"
    assert tree_digest(pdir) == before and (pdir / name).is_symlink()


def test_a_hard_linked_segment_is_refused_by_erasure_only(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A second hard link keeps the subject under the other name after the swap."""
    pdir = logs / "profiles-0"
    base = subject_bases(pdir)[0]
    other = tmp_path / "backup.log"
    os.link(pdir / f"{base:020d}.log", other)
    state = tmp_path / "state"
    init(capsys, state)
    rid = request(capsys, state, "profiles")
    code, report = erase(capsys, "apply", logs, state)
    assert code == EXIT_PARTIAL
    (line,) = [p for p in report["partitions"] if p["dir"] == "profiles-0"]
    assert line["error"]["code"] == "LINKED_FILE" and "2 hard links" in line["error"]["message"]
    assert statuses(state) == {rid: "pending"} and subject_records(other.read_bytes())
    # with the other name gone, the same request is applied and verified
    other.unlink()
    assert erase(capsys, "apply", logs, state)[0] == EXIT_OK
    assert erase(capsys, "verify", logs, state)[0] == EXIT_OK
    assert statuses(state) == {rid: "verified"} and not subject_bases(pdir)


# -- 2. '*' covers every application topic, whatever its name --------------------------------


def test_every_topic_request_erases_a_user_topic_named_with_two_underscores(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before the fix ``*`` skipped every topic whose name starts with ``__``: ``__orders``
    kept the subject and the request ended verified."""
    orders = logs / "__orders-0"
    assert subject_bases(orders)
    offsets = segment_bytes(logs / "__consumer_offsets-0")
    state = tmp_path / "state"
    init(capsys, state)
    rid = request(capsys, state, "*")
    assert erase(capsys, "apply", logs, state)[0] == EXIT_OK
    assert erase(capsys, "verify", logs, state)[0] == EXIT_OK
    assert statuses(state) == {rid: "verified"}
    assert not subject_bases(orders) and not subject_bases(logs / "profiles-0")
    assert segment_bytes(logs / "__consumer_offsets-0") == offsets  # Kafka's own: not covered


# -- 3. leftovers of an interrupted swap ------------------------------------------------------


def test_verify_settles_an_interrupted_swap_before_it_scans(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A ``.log.swap`` that a broker's loader would promote on start-up holds the subject:
    before the fix verify scanned only the ``.log`` files and said verified."""
    pdir = logs / "profiles-0"
    state = tmp_path / "state"
    init(capsys, state)
    rid = request(capsys, state, "profiles")
    base = subject_bases(pdir)[-1]
    original = (pdir / f"{base:020d}.log").read_bytes()
    assert erase(capsys, "apply", logs, state)[0] == EXIT_OK
    assert not subject_bases(pdir)
    # the segment as it was, left as an interrupted swap's new segment
    (pdir / f"{base:020d}.log.swap").write_bytes(original)
    code, report = erase(capsys, "verify", logs, state)
    assert statuses(state)[rid] != "verified"
    assert code != EXIT_OK
    # a broker loading the dir would serve the swap's records: the subject is on disk
    # in what it serves
    assert subject_bases(pdir) or (pdir / f"{base:020d}.log.swap").exists()


# -- 8. a swap that is not one ------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["empty", "earlier_segment"])
def test_a_swap_that_cannot_be_a_cleaned_copy_is_refused_and_nothing_changes(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str) -> None:
    """Before the fix an empty ``.log.swap`` replaced its segment (3,005 records gone, exit
    0) and a copy of another segment renamed as a swap deleted the segments in its range."""
    pdir = logs / "profiles-0"
    bases = sorted(segment_bytes(pdir))
    target = bases[1]
    swap = pdir / f"{target:020d}.log.swap"
    swap.write_bytes(b"" if kind == "empty" else (pdir / f"{bases[0]:020d}.log").read_bytes())
    before = tree_digest(logs)
    code, report = cli_json(capsys, "recover", str(logs), "--json")
    assert code in (EXIT_CORRUPT, EXIT_PARTIAL), report
    assert tree_digest(logs) == before
    state = tmp_path / "state"
    init(capsys, state)
    rid = request(capsys, state, "profiles")
    code, report = erase(capsys, "apply", logs, state)
    assert code == EXIT_PARTIAL
    (line,) = [p for p in report["partitions"] if p["dir"] == "profiles-0"]
    assert line["error"]["code"] == "SWAP_RECOVERY" and line["error"]["base_offset"] == target
    assert statuses(state) == {rid: "pending"}
    assert {k: v for k, v in tree_digest(logs).items() if k.startswith("profiles-0/")} == {
        k: v for k, v in before.items() if k.startswith("profiles-0/")}
    assert [b for b in iter_batches(segment_bytes(pdir)[target])]


def test_a_state_dir_without_a_ledger_takes_no_request(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before the fix ``erase request --state-dir WRONG`` created a new ledger there and
    exited 0: nothing that reads the real ledger would ever apply it."""
    code, out = cli_json(capsys, "erase", "request", "--state-dir", str(tmp_path / "wrong"),
                         "--topic", "profiles", "--key", "k", "--reason", "r", "--json")
    assert code == EXIT_CONFIG and "erase init" in out["remedy"]
    assert not (tmp_path / "wrong").exists()
