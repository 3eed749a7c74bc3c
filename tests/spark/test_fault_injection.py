"""The fault-injection suite: one generated log dir in which every partition carries a different
fault (or none), run through ``inspect --verify``, ``plan``, ``compact``, ``retain`` and
``erase apply``.

For every fault and command it asserts the exit code, an error naming the file, the byte
position from the file's start and the base offset where they apply, no traceback, every byte
of a refused partition unchanged, and the healthy partitions processed in the same run.
Expected positions come from a byte-level walk of the files written here, never from the code
under test.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import crc32c
import pytest

from compactor.codec.compression import Codec
from compactor.codec.records import NewRecord, NewRecordBatch, encode_batch
from compactor.errors import EXIT_FAILURE, EXIT_PARTIAL
from compactor.tools.ops.generator import DEFAULT_START_MS, GeneratorConfig, generate
from tests.helpers import cli_json, init_ledger, tree_digest

TOPIC = "faults"
DAY = 86_400_000
NOW = DEFAULT_START_MS + 30 * DAY


@dataclass(frozen=True)
class Expect:
    """Where a fault must be reported: a file (relative to the log dir), the error code, the
    byte position from the start of that file and the base offset (``None`` where they do not
    apply)."""

    file: str
    code: str
    position: int | None
    base_offset: int | None


# -- an independent byte-level view of segments (the test's own framing, not the codec's) --


def frames(data: bytes) -> list[tuple[int, int, int]]:
    """``(position, base offset, size)`` of every ``offset:int64 size:int32`` entry."""
    out, pos = [], 0
    while pos + 12 <= len(data):
        base, size = struct.unpack_from(">qi", data, pos)
        out.append((pos, base, size))
        pos += 12 + size
    return out


def v2_frames(data: bytes, *, codec: int | None = None, control: bool = False
              ) -> list[tuple[int, int, int]]:
    """The v2 batches (magic at byte 16) with the given codec and control flag."""
    out = []
    for pos, base, size in frames(data):
        if data[pos + 16] != 2:
            continue
        attributes = struct.unpack_from(">h", data, pos + 21)[0]
        if bool(attributes & 0x20) != control:
            continue
        if codec is not None and attributes & 7 != codec:
            continue
        out.append((pos, base, size))
    return out


def fix_crc(data: bytearray, pos: int, size: int) -> None:
    """Store the CRC-32C of bytes [21, end) of the v2 batch at ``pos``."""
    struct.pack_into(">I", data, pos + 17, crc32c.crc32c(bytes(data[pos + 21: pos + 12 + size])))


def segments(pdir: Path) -> list[Path]:
    return sorted(pdir.glob("*.log"))


def first_v2(pdir: Path, codecs: tuple[int, ...]) -> tuple[Path, bytearray, int, int, int]:
    """The first v2 data batch with one of ``codecs`` in a rolled segment: its segment, the
    segment's bytes, and the batch's position, base offset and size."""
    for seg in segments(pdir)[:-1]:
        data = bytearray(seg.read_bytes())
        found = sorted(f for c in codecs for f in v2_frames(data, codec=c)
                       if struct.unpack_from(">i", data, f[0] + 57)[0] > 0)
        if found:
            return (seg, data, *found[0])
    raise AssertionError(f"the generated partition has no v2 batch with codec in {codecs}")


def rel(path: Path, logs: Path) -> str:
    return str(path.relative_to(logs))


def last_offset(data: bytes) -> int:
    pos, base, _ = frames(data)[-1]
    return base + struct.unpack_from(">i", data, pos + 23)[0]


# -- the faults: each changes one partition directory and says where it must be reported --


def crc(pdir: Path, logs: Path) -> Expect:
    seg = segments(pdir)[0]
    data = bytearray(seg.read_bytes())
    pos, base, size = frames(data)[1]
    data[pos + size] ^= 0xFF  # the batch's last byte: covered by its CRC
    seg.write_bytes(data)
    return Expect(rel(seg, logs), "CRC_MISMATCH", pos, base)


def truncated(pdir: Path, logs: Path) -> Expect:
    seg = segments(pdir)[0]
    data = seg.read_bytes()
    pos, base, size = frames(data)[-1]
    seg.write_bytes(data[: pos + size // 2])
    return Expect(rel(seg, logs), "TRUNCATED_SEGMENT", pos, base)


def zero_tail(pdir: Path, logs: Path) -> Expect:
    seg = segments(pdir)[0]
    size = seg.stat().st_size
    seg.write_bytes(seg.read_bytes() + bytes(4096))
    return Expect(rel(seg, logs), "CORRUPT_SEGMENT", size, 0)


def length(pdir: Path, logs: Path) -> Expect:
    seg = segments(pdir)[0]
    data = bytearray(seg.read_bytes())
    pos, base, _ = frames(data)[1]
    struct.pack_into(">i", data, pos + 8, 1 << 30)
    seg.write_bytes(data)
    return Expect(rel(seg, logs), "TRUNCATED_SEGMENT", pos, base)


def magic(pdir: Path, logs: Path) -> Expect:
    seg = segments(pdir)[0]
    data = bytearray(seg.read_bytes())
    pos, base, _ = frames(data)[1]
    data[pos + 16] = 7
    seg.write_bytes(data)
    return Expect(rel(seg, logs), "UNSUPPORTED_FORMAT", pos, base)


def codec_bits(pdir: Path, logs: Path) -> Expect:
    seg = segments(pdir)[0]
    data = bytearray(seg.read_bytes())
    pos, base, size = v2_frames(data)[0]
    data[pos + 22] |= 0x07  # compression codec id 7 (unknown), CRC made to match
    fix_crc(data, pos, size)
    seg.write_bytes(data)
    return Expect(rel(seg, logs), "UNSUPPORTED_FORMAT", pos, base)


def compressed_garbage(pdir: Path, logs: Path) -> Expect:
    seg, data, pos, base, size = first_v2(pdir, (1, 2, 3, 4))
    for at in range(pos + 61 + 4, pos + 12 + size):  # keep the codec's magic bytes
        data[at] = (data[at] * 7 + 13) & 0xFF
    fix_crc(data, pos, size)
    seg.write_bytes(data)
    return Expect(rel(seg, logs), "CORRUPT_SEGMENT", pos, base)


def record_count(pdir: Path, logs: Path) -> Expect:
    seg, data, pos, base, size = first_v2(pdir, (0,))
    count = struct.unpack_from(">i", data, pos + 57)[0]
    struct.pack_into(">i", data, pos + 57, count + 1)
    fix_crc(data, pos, size)
    seg.write_bytes(data)
    return Expect(rel(seg, logs), "CORRUPT_SEGMENT", pos, base)


def varint_overflow(pdir: Path, logs: Path) -> Expect:
    seg, data, pos, base, size = first_v2(pdir, (0,))
    data[pos + 61: pos + 71] = b"\xff" * 10  # the first record's length: an endless varint
    fix_crc(data, pos, size)
    seg.write_bytes(data)
    return Expect(rel(seg, logs), "CORRUPT_SEGMENT", pos, base)


def offsets_backwards(pdir: Path, logs: Path) -> Expect:
    seg = segments(pdir)[0]
    data = bytearray(seg.read_bytes())
    (_, first, _), (pos, _, _) = frames(data)[1], frames(data)[2]
    struct.pack_into(">q", data, pos, first)  # the base offset is not covered by the CRC
    seg.write_bytes(data)
    return Expect(rel(seg, logs), "BAD_OFFSETS", pos, first)


def misnamed(pdir: Path, logs: Path) -> Expect:
    seg = segments(pdir)[1]
    base = int(seg.name.split(".")[0])
    for f in pdir.glob(f"{seg.stem}.*"):
        f.rename(pdir / f.name.replace(seg.stem, f"{base + 1:020d}"))
    renamed = pdir / f"{base + 1:020d}.log"
    return Expect(rel(renamed, logs), "BAD_OFFSETS", 0, base)


def overlapping(pdir: Path, logs: Path) -> Expect:
    first, second = segments(pdir)[1:3]
    data = first.read_bytes()
    new_base = last_offset(data)  # the last batch of `first` runs into the renamed segment
    for f in pdir.glob(f"{second.stem}.*"):
        if f.suffix in (".index", ".timeindex", ".txnindex"):
            f.unlink()  # Kafka rebuilds missing indexes; only the overlap is wrong
        else:
            f.rename(pdir / f.name.replace(second.stem, f"{new_base:020d}"))
    pos, base, _ = frames(data)[-1]
    return Expect(rel(first, logs), "BAD_OFFSETS", pos, base)


def offset_index(pdir: Path, logs: Path) -> Expect:
    for seg in segments(pdir)[:-1]:
        index = seg.with_suffix(".index")
        raw = bytearray(index.read_bytes())
        if raw:
            struct.pack_into(">i", raw, 4, struct.unpack_from(">i", raw, 4)[0] + 1)
            index.write_bytes(raw)
            return Expect(rel(index, logs), "CORRUPT_INDEX", 0, int(seg.stem))
    raise AssertionError("no .index entry")


def index_length(pdir: Path, logs: Path) -> Expect:
    seg = segments(pdir)[0]
    index = seg.with_suffix(".index")
    size = index.stat().st_size
    index.write_bytes(index.read_bytes() + b"\x00\x00\x01")
    return Expect(rel(index, logs), "CORRUPT_INDEX", size - size % 8 if size % 8 else None,
                  int(seg.stem))


def time_index(pdir: Path, logs: Path) -> Expect:
    seg = segments(pdir)[0]
    tindex = seg.with_suffix(".timeindex")
    raw = bytearray(tindex.read_bytes())
    last = len(raw) - 12
    struct.pack_into(">q", raw, last, struct.unpack_from(">q", raw, last)[0] + 10 * DAY)
    tindex.write_bytes(raw)
    return Expect(rel(tindex, logs), "CORRUPT_INDEX", last, int(seg.stem))


def _txn_segment(pdir: Path) -> Path:
    return next(s.with_suffix(".txnindex") for s in segments(pdir)
                if s.with_suffix(".txnindex").exists()
                and s.with_suffix(".txnindex").stat().st_size)


def txn_index(pdir: Path, logs: Path) -> Expect:
    txn = _txn_segment(pdir)
    raw = bytearray(txn.read_bytes())
    struct.pack_into(">q", raw, 2, struct.unpack_from(">q", raw, 2)[0] + 99)  # producer id
    txn.write_bytes(raw)
    return Expect(rel(txn, logs), "CORRUPT_INDEX", 0, int(txn.stem))


def txn_entry_missing(pdir: Path, logs: Path) -> Expect:
    txn = _txn_segment(pdir)
    txn.unlink()
    return Expect(rel(txn, logs), "CORRUPT_INDEX", None, int(txn.stem))


def epoch_file(pdir: Path, logs: Path) -> Expect:
    path = pdir / "leader-epoch-checkpoint"
    path.write_text("0\n2\n0 0\n")  # declares 2 entries, holds 1
    return Expect(rel(path, logs), "CORRUPT_CHECKPOINT", None, None)


def producer_snapshot(pdir: Path, logs: Path) -> Expect:
    snap = sorted(pdir.glob("*.snapshot"))[0]
    raw = bytearray(snap.read_bytes())
    raw[-1] ^= 0xFF
    snap.write_bytes(raw)
    return Expect(rel(snap, logs), "CORRUPT_CHECKPOINT", None, None)


def offset_jump(pdir: Path, logs: Path) -> Expect:
    seg = segments(pdir)[-1]
    base = int(seg.stem)
    size = seg.stat().st_size
    jump = base + 2**31 + 5
    seg.write_bytes(seg.read_bytes() + encode_batch(NewRecordBatch(
        base_offset=jump, records=[NewRecord(offset_delta=0, timestamp=DEFAULT_START_MS,
                                             key=b"late", value=b"v")])))
    return Expect(rel(seg, logs), "BAD_OFFSETS", size, jump)


def swap_leftover(pdir: Path, logs: Path) -> Expect:
    seg = segments(pdir)[1]
    swap = pdir / f"{seg.stem}.log.swap"
    swap.write_bytes(b"\x00\x00\x00\x00\x00\x00\x00\x07garbage")
    return Expect(rel(swap, logs), "SWAP_RECOVERY", 0, 7)


def log_start_beyond_end(pdir: Path, logs: Path) -> Expect:
    path = logs / "log-start-offset-checkpoint"
    lines = path.read_text().splitlines()
    ours = f"{TOPIC} {pdir.name.rsplit('-', 1)[1]} "
    entries = [ln for ln in lines[2:] if not ln.startswith(ours)]
    entries.append(f"{TOPIC} {pdir.name.rsplit('-', 1)[1]} {10**12}")
    path.write_text("\n".join(["0", str(len(entries)), *entries]) + "\n")
    return Expect(rel(path, logs), "CORRUPT_CHECKPOINT", None, None)


def dangling_segment(pdir: Path, logs: Path) -> Expect:
    link = pdir / f"{99_999:020d}.log"
    os.symlink(pdir / "nowhere.log", link)
    # a link named like a segment file is refused as a link, whatever it points to
    return Expect(rel(link, logs), "LINKED_FILE", None, 99_999)


def leading_zeros(pdir: Path, logs: Path) -> Expect:
    n = int(pdir.name.rsplit("-", 1)[1])
    renamed = logs / f"{TOPIC}-0{n}"
    pdir.rename(renamed)
    return Expect(rel(renamed, logs), "LOG_DIR_ERROR", None, None)


FAULTS: dict[str, Callable[[Path, Path], Expect]] = {f.__name__: f for f in (
    crc, truncated, zero_tail, length, magic, codec_bits, compressed_garbage, record_count,
    varint_overflow, offsets_backwards, misnamed, overlapping, offset_index, index_length,
    time_index, txn_index, txn_entry_missing, epoch_file, producer_snapshot, offset_jump,
    swap_leftover, log_start_beyond_end, dangling_segment, leading_zeros)}
# Faults a command reading only what it needs may not see (retention reads the tails of
# segments and their time indexes, as Kafka's does): for them the command may also succeed.
DEEP = {"crc", "length", "magic", "codec_bits", "compressed_garbage", "record_count",
        "varint_overflow", "offsets_backwards", "misnamed", "overlapping", "offset_index",
        "time_index", "txn_index", "txn_entry_missing", "offset_jump"}
CLEAN = ("healthy", "empty", "huge_record", "offset_gap")
NAMES = [*FAULTS, *CLEAN]


def empty(pdir: Path, logs: Path) -> None:
    for f in pdir.iterdir():
        if f.suffix in (".log", ".index", ".timeindex"):
            f.write_bytes(b"")
        elif f.suffix in (".txnindex", ".snapshot"):
            f.unlink()


def huge_record(pdir: Path, logs: Path) -> None:
    seg = segments(pdir)[-1]
    nxt = last_offset(seg.read_bytes()) + 1
    seg.write_bytes(seg.read_bytes() + encode_batch(NewRecordBatch(
        base_offset=nxt, compression=Codec.ZSTD, records=[NewRecord(
            offset_delta=0, timestamp=DEFAULT_START_MS + DAY, key=b"k" * (1 << 20),
            value=os.urandom(1 << 20))])))


def offset_gap(pdir: Path, logs: Path) -> None:
    """A segment past a gap of more than 2^31 offsets: legal (Kafka rolls a segment when an
    offset no longer fits), and the cleaner must not group across it."""
    seg = segments(pdir)[-1]
    base = last_offset(seg.read_bytes()) + 2**31 + 100
    (pdir / f"{base:020d}.log").write_bytes(encode_batch(NewRecordBatch(
        base_offset=base, records=[NewRecord(offset_delta=0, timestamp=DEFAULT_START_MS + DAY,
                                             key=b"key-gap", value=b"v")])))


SETUPS: dict[str, Callable[[Path, Path], None]] = {
    "healthy": lambda p, logs: None, "empty": empty, "huge_record": huge_record,
    "offset_gap": offset_gap}


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Expect]]:
    """The log dir: partition i of topic ``faults`` carries fault NAMES[i]; plus a foreign
    file, a foreign directory and a dangling symlink at the root."""
    logs = tmp_path_factory.mktemp("faults") / "logs"
    generate(str(logs), GeneratorConfig(
        topics=(TOPIC,), partitions=len(NAMES), records_per_partition=360, distinct_keys=40,
        segment_bytes=5 * 1024, transactional_ratio=0.5, abort_ratio=0.6, seed=5,
        topic_configs={TOPIC: {"cleanup.policy": "compact,delete"}}))
    expected = {}
    for i, name in enumerate(NAMES):
        pdir = logs / f"{TOPIC}-{i}"
        if name in FAULTS:
            expected[name] = FAULTS[name](pdir, logs)
        else:
            SETUPS[name](pdir, logs)
    (logs / "notes.txt").write_text("an operator's note\n")
    (logs / "backup").mkdir()
    os.symlink(logs / "gone", logs / "old-link")
    return logs, expected


@pytest.fixture()
def logs(template: tuple[Path, dict[str, Expect]], tmp_path: Path) -> Path:
    dest = tmp_path / "logs"
    shutil.copytree(template[0], dest, symlinks=True)
    return dest


def _dir(name: str) -> str:
    i = NAMES.index(name)
    return f"{TOPIC}-0{i}" if name == "leading_zeros" else f"{TOPIC}-{i}"


def _by_partition(report: dict) -> dict[int, dict]:
    return {p["partition"]: p for p in report["partitions"] if p.get("topic") == TOPIC}


def _located(error: dict, expect: Expect, logs: Path) -> None:
    assert error["code"] == expect.code, error
    assert error["path"] == str(logs / expect.file), error
    if expect.position is not None:
        assert error["position"] == expect.position, error
    if expect.base_offset is not None:
        assert error["base_offset"] == expect.base_offset, error


def _untouched(before: dict[str, str], logs: Path, name: str) -> None:
    prefix = _dir(name) + "/"
    after = tree_digest(logs)
    assert {k: v for k, v in after.items() if k.startswith(prefix)} == \
        {k: v for k, v in before.items() if k.startswith(prefix)}, name


def test_inspect_verify_reports_every_fault_at_its_place_and_nothing_in_healthy_partitions(
        template: tuple[Path, dict[str, Expect]], capsys: pytest.CaptureFixture[str]) -> None:
    from compactor.cli import main

    logs, expected = template
    assert main(["inspect", str(logs), "--verify", "--json"]) == EXIT_FAILURE
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err

    flat = []
    for line in out.splitlines():
        item = json.loads(line)
        if item["type"] == "segment":
            flat += item["problems"]
        elif item["type"] == "problem":
            flat.append(item)
    for name, expect in expected.items():
        if name == "swap_leftover":  # inspect names the leftover; recovery reads it
            assert any(p["code"] == "SWAP_LEFTOVER" and p["path"] == str(logs / expect.file)
                       for p in flat), name
            continue
        if name == "log_start_beyond_end":  # a root file: its entries need the log ends
            continue
        matching = [p for p in flat if p["path"] == str(logs / expect.file)
                    and p["code"] == expect.code]
        assert matching, (name, [p for p in flat if _dir(name) in (p["path"] or "")])
        if expect.position is not None:
            assert any(p["position"] == expect.position for p in matching), (name, matching)
    for name in CLEAN:
        assert not [p for p in flat if f"/{_dir(name)}/" in (p["path"] or "")], name
    codes = {p["code"] for p in flat if p["path"] and Path(p["path"]).parent == logs}
    assert {"FOREIGN_FILE", "FOREIGN_DIRECTORY", "DANGLING_SYMLINK"} <= codes


def test_compact_refuses_every_faulty_partition_untouched_and_cleans_the_others(
        spark, logs: Path, template: tuple[Path, dict[str, Expect]],
        capsys: pytest.CaptureFixture[str]) -> None:
    expected = template[1]
    before = tree_digest(logs)
    code, report = cli_json(capsys, "compact", "--assume-kafka-defaults", str(logs), "--now-ms",
                            str(NOW), "--json")
    assert code == EXIT_PARTIAL
    lines = _by_partition(report)
    for name, expect in expected.items():
        line = lines[NAMES.index(name)]
        assert line["status"] in ("corrupt", "refused"), (name, line)
        _located(line["error"], expect, logs)
        _untouched(before, logs, name)
    assert lines[NAMES.index("healthy")]["status"] == "cleaned"
    assert lines[NAMES.index("offset_gap")]["status"] == "cleaned"
    assert {f["name"] for f in report["foreign"]} == {"notes.txt", "backup", "old-link"}
    for name in CLEAN:  # what was written passes every check
        code, check = cli_json(capsys, "inspect", str(logs / _dir(name)), "--verify", "--json")
        assert code == 0, (name, check)


def test_plan_runs_the_same_checks_as_compact(
        spark, logs: Path, template: tuple[Path, dict[str, Expect]],
        capsys: pytest.CaptureFixture[str]) -> None:
    before = tree_digest(logs)
    code, report = cli_json(capsys, "plan", "--assume-kafka-defaults", str(logs), "--now-ms",
                            str(NOW), "--json")
    lines = _by_partition(report)
    for name in template[1]:
        if name in ("compressed_garbage", "record_count", "varint_overflow", "swap_leftover"):
            continue  # found when records are decoded (the rewrite) or leftovers recovered
        assert lines[NAMES.index(name)]["status"] in ("corrupt", "refused"), name
    assert lines[NAMES.index("healthy")]["status"] == "would_clean"
    assert tree_digest(logs) == before
    assert code == EXIT_PARTIAL


def test_retain_refuses_what_it_reads_broken_and_deletes_in_the_healthy_partitions(
        logs: Path, template: tuple[Path, dict[str, Expect]],
        capsys: pytest.CaptureFixture[str]) -> None:
    expected = template[1]
    before = tree_digest(logs)
    code, report = cli_json(capsys, "retain", "--assume-kafka-defaults", str(logs), "--now-ms",
                            str(NOW), "--json")
    assert code == EXIT_PARTIAL
    lines = _by_partition(report)
    for name, expect in expected.items():
        line = lines[NAMES.index(name)]
        if name in DEEP and line["status"] not in ("corrupt", "refused"):
            continue  # retention never reads that byte (Kafka's does not either)
        assert line["status"] in ("corrupt", "refused"), (name, line)
        _located(line["error"], expect, logs)
        _untouched(before, logs, name)
    assert lines[NAMES.index("healthy")]["status"] == "deleted"


def test_erase_apply_refuses_faulty_partitions_and_keeps_the_request_pending(
        spark, logs: Path, template: tuple[Path, dict[str, Expect]], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    expected = template[1]
    state = tmp_path / "state"
    assert cli_json(capsys, "erase", "init", "--state-dir", str(state))[0] == 0
    init_ledger(str(state))
    assert cli_json(capsys, "erase", "request", "--state-dir", str(state), "--topic", TOPIC,
                    "--key", "key-00000003", "--reason", "fault suite", "--json")[0] == 0
    before = tree_digest(logs)
    code, report = cli_json(capsys, "erase", "apply", "--assume-kafka-defaults", str(logs),
                            "--state-dir", str(state),
                            "--now-ms", str(NOW), "--json")
    assert code == EXIT_PARTIAL
    lines = {p["dir"]: p for p in report["partitions"]}
    for name, expect in expected.items():
        if name == "log_start_beyond_end":
            continue  # erasure never moves the log start: the entry does not concern it
        line = lines[_dir(name)]
        assert line["status"] == "corrupt", (name, line)
        _located(line["error"], expect, logs)
        _untouched(before, logs, name)
    assert lines[_dir("healthy")]["status"] == "rewritten"
    (request,) = report["requests"]
    assert request["status"] == "pending" and request["blocked_by"]
