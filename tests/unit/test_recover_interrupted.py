"""Recovery is itself crash-safe (issue 28.9): a recovery stopped after any of its file
operations, then run again, reaches exactly the files of one uninterrupted recovery. Before
the fix, a recovery stopped after renaming a ``.index.swap`` but before the ``.log.swap``
made the next one delete the good new index (the ``.log.swap`` still marked the range)."""

from __future__ import annotations

from pathlib import Path

import pytest

from compactor.codec.records import NewRecord, NewRecordBatch, encode_batch
from compactor.log import storage
from compactor.log.recovery import recover_partition


def _batch(base: int, deltas: list[int]) -> bytes:
    return encode_batch(NewRecordBatch(base_offset=base, records=[
        NewRecord(offset_delta=d, timestamp=1_700_000_000_000 + d, key=b"k%d" % (base + d),
                  value=b"v") for d in deltas]))


def _name(base: int, suffix: str) -> str:
    return f"{base:020d}{suffix}"


def _interrupted_swap(pdir: Path, old_renamed: bool) -> None:
    """Old segments 0 and 3, a complete swap set for the new segment 0 (it replaces both);
    the old files renamed to .deleted or not yet."""
    pdir.mkdir()
    old = {_name(0, ".log"): _batch(0, [0, 1, 2]), _name(0, ".index"): b"old index 0",
           _name(0, ".timeindex"): b"old time 0", _name(3, ".log"): _batch(3, [0, 1, 2]),
           _name(3, ".index"): b"old index 3", _name(3, ".timeindex"): b"old time 3",
           _name(3, ".snapshot"): b"snapshot 3", _name(6, ".log"): _batch(6, [0]),
           _name(6, ".snapshot"): b"snapshot 6"}
    for name, data in old.items():
        if old_renamed and int(name[:20]) < 6 and not name.endswith(".snapshot"):
            name += ".deleted"
        (pdir / name).write_bytes(data)
    new = {_name(0, ".log.swap"): _batch(0, [1, 4]), _name(0, ".index.swap"): b"new index",
           _name(0, ".timeindex.swap"): b"new time", _name(0, ".txnindex.swap"): b""}
    for name, data in new.items():
        (pdir / name).write_bytes(data)


def _files(pdir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(pdir.iterdir())}


class Stop(Exception):
    pass


@pytest.mark.parametrize("old_renamed", [False, True])
def test_a_recovery_stopped_at_any_step_and_run_again_ends_as_one_uninterrupted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, old_renamed: bool) -> None:
    reference = tmp_path / "reference"
    _interrupted_swap(reference, old_renamed)
    recover_partition(str(reference))
    expected = _files(reference)
    assert expected[_name(0, ".index")] == b"new index" and _name(3, ".log") not in expected
    steps = 0
    for stop_at in range(1, 40):
        work = tmp_path / f"stop-{stop_at}"
        _interrupted_swap(work, old_renamed)
        calls = 0
        real = {n: getattr(storage, n) for n in ("remove", "rename")}

        def counted(name: str):  # noqa: ANN202
            def op(*args: object, **kwargs: object) -> object:
                nonlocal calls
                calls += 1
                if calls == stop_at:
                    raise Stop
                return real[name](*args, **kwargs)
            return op

        for n in real:
            monkeypatch.setattr(storage, n, counted(n))
        try:
            recover_partition(str(work))
            stopped = False
        except Stop:
            stopped = True
        for n, fn in real.items():
            monkeypatch.setattr(storage, n, fn)
        recover_partition(str(work))
        assert _files(work) == expected, f"stopped before file operation {stop_at}"
        if not stopped:
            break
        steps += 1
    assert steps > 5


def test_a_checkpoint_write_killed_before_its_rename_leaves_no_tmp_after_recovery(
        tmp_path: Path) -> None:
    """A kill between ``<checkpoint>.tmp`` and its rename left the ``.tmp`` for ever (before
    the fix); recovery removes it, and nothing else."""
    from compactor.cli import main as cli_main

    logs = tmp_path / "logs"
    part = logs / "t-0"
    part.mkdir(parents=True)
    (part / _name(0, ".log")).write_bytes(_batch(0, [0]))
    (logs / "cleaner-offset-checkpoint").write_text("0\n1\nt 0 1\n")
    (logs / "cleaner-offset-checkpoint.tmp").write_text("0\n1\nt 0 9\n")
    (logs / "notes.tmp").write_text("not ours")
    (part / "leader-epoch-checkpoint.tmp").write_text("0\n0\n")
    assert cli_main(["recover", str(logs)]) == 0
    assert sorted(p.name for p in logs.iterdir()) == [
        ".lock", "cleaner-offset-checkpoint", "notes.tmp", "t-0"]
    assert (logs / "cleaner-offset-checkpoint").read_text() == "0\n1\nt 0 1\n"
    assert sorted(p.name for p in part.iterdir()) == [_name(0, ".log")]
