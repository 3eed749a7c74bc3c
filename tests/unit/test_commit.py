"""A failed swap is kept to its partition: the partition is settled old (or new) at once."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from compactor.cleaner.policy import BatchDecision, BatchRetention, PartitionInput
from compactor.cleaner.rewrite import PURE
from compactor.codec.records import NewRecord, NewRecordBatch, encode_batch
from compactor.codec.segment import iter_batches
from compactor.config import TopicConfig
from compactor.errors import CommitConflictError
from compactor.log import storage, swap
from compactor.log.layout import load_partition
from compactor.spark.writer import write_erased_segment, write_group, write_groups
from tests.helpers import cached_pages, tree_digest

#: every batch kept as it is (the superseded records go, the batch stays)
KEEP = BatchDecision(retention=BatchRetention.DELETE_EMPTY, aborted=False,
                     discard_records=False, retain_deletes=True, marker_horizon=False)


def _input(pdir: Path) -> PartitionInput:
    """The round's input for the compacted partition at ``pdir``."""
    return PartitionInput(path=str(pdir), segments=load_partition(str(pdir)).segments,
                          config=TopicConfig(cleanup_policy=frozenset({"compact"})),
                          cleaner_checkpoint=None, log_start_checkpoint=None,
                          replication_checkpoint=None, aborted_txns=(), now_ms=10)


def _cleaned(tmp_path: Path) -> tuple[Path, object]:
    """A one-segment partition and the commit message of its rewritten group."""
    pdir = tmp_path / "t-0"
    pdir.mkdir()
    data = encode_batch(NewRecordBatch(base_offset=0, records=[
        NewRecord(offset_delta=i, timestamp=1_700_000_000_000 + i, key=b"k%d" % i, value=b"v")
        for i in range(3)]))
    (pdir / f"{0:020d}.log").write_bytes(data)
    (pdir / f"{3:020d}.log").write_bytes(b"")  # the active segment
    decisions = {(0, b.position): KEEP for b in iter_batches(data)}
    message = write_group(_input(pdir), [0], decisions, {1}, first_dirty=0, engine=PURE)
    assert message.error is None and list(pdir.glob("*.cleaned"))
    return pdir, message


def test_a_failed_swap_leaves_the_partition_as_it_was_and_no_leftover(tmp_path: Path) -> None:
    pdir, message = _cleaned(tmp_path)
    cleaned = next(pdir.glob("*.log.cleaned"))
    cleaned.write_bytes(cleaned.read_bytes()[:-1])  # not what the executor reported
    before = {k: v for k, v in tree_digest(pdir).items() if not k.endswith(".cleaned")}
    failure = swap.commit_isolated(str(pdir), [message], storage.identities(str(pdir)))
    assert isinstance(failure, CommitConflictError)
    assert failure.path == str(cleaned)
    assert tree_digest(pdir) == before  # the .cleaned files are gone, the old ones untouched


def test_a_successful_swap_reports_no_failure(tmp_path: Path) -> None:
    pdir, message = _cleaned(tmp_path)
    assert swap.commit_isolated(str(pdir), [message], storage.identities(str(pdir))) is None
    (batch,) = iter_batches((pdir / f"{0:020d}.log").read_bytes())
    assert [r.offset for r in batch.records()] == [0, 2]  # offset 1 was superseded
    assert not [p for p in pdir.iterdir() if p.suffix in (".cleaned", ".swap", ".deleted")]


@pytest.mark.parametrize("change", ["appended", "touched", "replaced"])
def test_a_source_changed_since_the_scan_aborts_the_swap(tmp_path: Path, change: str) -> None:
    """Issue 28.2, locally: a segment whose size, mtime or inode differs from what the scan
    listed is not swapped (before the fix the swap went ahead and the change was lost)."""
    pdir, message = _cleaned(tmp_path)
    scanned = storage.identities(str(pdir))
    log = pdir / f"{0:020d}.log"
    if change == "appended":
        with open(log, "ab") as handle:
            handle.write(b"\0")
    elif change == "touched":
        os.utime(log, ns=(1, 1))
    else:
        data = log.read_bytes()
        log.unlink()
        log.write_bytes(data)
        os.utime(log, ns=(os.stat(log).st_atime_ns, scanned_mtime_ns(scanned, log.name)))
    before = {k: v for k, v in tree_digest(pdir).items() if not k.endswith(".cleaned")}
    failure = swap.commit_isolated(str(pdir), [message], scanned)
    assert isinstance(failure, CommitConflictError)
    assert "changed since the scan" in failure.message and log.name in failure.message
    assert tree_digest(pdir) == before


def scanned_mtime_ns(scanned: dict[str, str], name: str) -> int:
    return int(scanned[name].split(":")[1])


def _two_groups(tmp_path: Path) -> tuple[Path, list[object]]:
    """A partition of two segments, each its own group, and their commit messages."""
    pdir = tmp_path / "t-0"
    pdir.mkdir()
    segments = {}
    for base in (0, 3):
        segments[base] = encode_batch(NewRecordBatch(base_offset=base, records=[
            NewRecord(offset_delta=i, timestamp=1_700_000_000_000 + base + i,
                      key=b"k%d" % (base + i), value=b"v") for i in range(3)]))
        (pdir / f"{base:020d}.log").write_bytes(segments[base])
    (pdir / f"{6:020d}.log").write_bytes(b"")  # the active segment
    inp = _input(pdir)
    decisions = {(base, b.position): KEEP for base, data in segments.items()
                 for b in iter_batches(data)}
    messages = [write_group(inp, [base], decisions, {base + 1}, first_dirty=0, engine=PURE)
                for base in (0, 3)]
    assert all(m.error is None for m in messages)
    return pdir, messages


def test_a_later_groups_bad_cleaned_log_leaves_every_group_of_the_partition_old(
        tmp_path: Path) -> None:
    """Every group's cleaned log is checked before the first swap: a partition is never left
    with its first groups new when a later one's cleaned log is not what its executor wrote
    (the check ran group by group before, just ahead of each group's swap)."""
    pdir, messages = _two_groups(tmp_path)
    later = pdir / f"{3:020d}.log.cleaned"
    later.write_bytes(later.read_bytes()[:-1])
    before = tree_digest(pdir)
    with pytest.raises(CommitConflictError) as raised:
        swap.commit_partition(str(pdir), messages, storage.identities(str(pdir)))
    assert raised.value.path == str(later)
    assert tree_digest(pdir) == before  # nothing renamed, the first group's .cleaned too
    assert swap.commit_isolated(str(pdir), messages, storage.identities(str(pdir))) is not None
    assert tree_digest(pdir) == {k: v for k, v in before.items() if not k.endswith(".cleaned")}


def test_two_groups_swap_in_order(tmp_path: Path) -> None:
    pdir, messages = _two_groups(tmp_path)
    swap.commit_partition(str(pdir), messages, storage.identities(str(pdir)))
    for base in (0, 3):
        (batch,) = iter_batches((pdir / f"{base:020d}.log").read_bytes())
        assert [r.offset for r in batch.records()] == [base, base + 2]
    assert not [p for p in pdir.iterdir() if p.suffix in (".cleaned", ".swap", ".deleted")]


def _read_from_disk(pdir: Path) -> list[Path]:
    """The partition's segment logs made clean (fsync) and read into the page cache, as a
    round finds them after its scans."""
    logs = sorted(p for p in pdir.glob("*.log") if p.stat().st_size)
    for log in logs:
        with log.open("rb") as handle:
            os.fsync(handle.fileno())
            handle.read()
        assert cached_pages(log) > 0
    return logs


@pytest.mark.parametrize("writer", ["a group a task", "every group in one task", "erasure"])
def test_a_written_groups_source_logs_leave_the_page_cache_and_its_output_stays(
        tmp_path: Path, writer: str) -> None:
    """Once a group's ``.cleaned`` log is written, its sources are not read again before the
    swap deletes them: their pages go from the cache (for the next group's writes to reuse),
    while the output's stay for the driver's check of it (compactor/log/swap.py)."""
    pdir, _ = _two_groups(tmp_path)
    for cleaned in pdir.glob("*.cleaned"):
        cleaned.unlink()
    sources = _read_from_disk(pdir)
    inp = _input(pdir)
    decisions = {(s.base_offset, b.position): KEEP for s in inp.segments
                 for b in iter_batches(Path(s.log_path).read_bytes())}
    if writer == "a group a task":
        messages = [write_group(inp, [0], decisions, {1}, first_dirty=0, engine=PURE)]
    elif writer == "every group in one task":
        written = write_groups(inp, [[0], [3]], decisions, first_dirty=0, engine=PURE)
        assert not isinstance(written, str)
        messages = written
    else:
        messages = [write_erased_segment(str(pdir), inp.segments[0], {0: {1}}, set(),
                                         inp.config)]
    assert messages and all(m.error is None for m in messages)
    written_bases = {b for m in messages for b in m.source_bases}
    for source in sources:
        base = int(source.name.split(".")[0])
        assert (cached_pages(source) == 0) == (base in written_bases), source.name
        if base in written_bases:
            assert cached_pages(pdir / f"{base:020d}.log.cleaned") > 0


@pytest.mark.parametrize("engine", ["pure", "native"])
def test_an_erasures_kept_batches_go_from_the_mapped_source_to_the_output_uncopied(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str) -> None:
    """The batches an erasure keeps go from the source to the output by the kernel's copy,
    never through the writer: its own allocations stay far below the segment's 40 MB (a copy
    of each run of kept batches cost a 64 MiB segment a fresh 64 MiB, 40 ms on the
    benchmark's machine), and the output is the source less the erased record."""
    import tracemalloc

    from compactor.native import engine as engine_for

    pdir = tmp_path / "t-0"
    pdir.mkdir()
    batches = [encode_batch(NewRecordBatch(base_offset=100 * b, records=[
        NewRecord(offset_delta=i, timestamp=1_700_000_000_000 + 100 * b + i,
                  key=b"k%d-%d" % (b, i), value=bytes(10_000)) for i in range(100)]))
        for b in range(40)]
    log = b"".join(batches)
    (pdir / f"{0:020d}.log").write_bytes(log)
    (pdir / f"{4000:020d}.log").write_bytes(b"")  # the active segment
    inp = _input(pdir)
    erased = {sum(map(len, batches[:20])): {2000}}  # one record of the 21st batch
    write_erased_segment(str(pdir), inp.segments[0], erased, set(), inp.config,
                         engine=engine_for(engine))  # compiles and warms what it calls
    for cleaned in pdir.glob("*.cleaned"):
        cleaned.unlink()
    copied: list[int] = []
    kernel_copy = os.copy_file_range

    def counted(*args: int) -> int:  # the kernel's own call, its bytes counted
        copied.append(kernel_copy(*args))
        return copied[-1]

    monkeypatch.setattr(os, "copy_file_range", counted)
    tracemalloc.start()
    try:
        message = write_erased_segment(str(pdir), inp.segments[0], erased, set(), inp.config,
                                       engine=engine_for(engine))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert message.error is None and message.records_out == 40 * 100 - 1
    assert sum(copied) == len(log) - len(batches[20])  # all but the rebuilt batch
    # the native framing's scratch arrays (5.7 MB whatever the segment) besides
    assert peak < len(log) // 4, f"the writer allocated {peak} bytes for a {len(log)}-byte log"
    out = [r.offset for b in iter_batches((pdir / f"{0:020d}.log.cleaned").read_bytes())
           for r in b.records()]
    assert out == [o for o in range(4000) if o != 2000]
