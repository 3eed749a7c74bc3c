"""The storage module's reads and durable writes: what callers rely on, including the errors
that name the file."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import pytest

from compactor.errors import LogDirError
from compactor.log import storage
from compactor.log.storage import local
from tests.helpers import cached_pages


def test_mapped_reads_like_bytes_and_empty_files_give_empty_bytes(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(bytes(range(256)) * 3)
    with storage.mapped(str(path)) as data:
        assert len(data) == 768
        assert data[10:14] == bytes([10, 11, 12, 13]) and data[255] == 255
        assert bytes(data[:]) == path.read_bytes()
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    with storage.mapped(str(empty)) as data:
        assert data == b""


def test_mapped_missing_file_names_it(tmp_path: Path) -> None:
    missing = tmp_path / "gone.log"
    with pytest.raises(LogDirError) as err, storage.mapped(str(missing)):
        pass
    assert err.value.path == str(missing)


def test_open_durable_streams_then_sets_the_mtime(tmp_path: Path) -> None:
    path = tmp_path / "x.log.cleaned"
    with storage.open_durable(str(path), mtime_ms=1_700_000_000_123) as write:
        write(b"abc")
        write(b"def")
    assert path.read_bytes() == b"abcdef"
    assert os.stat(path).st_mtime_ns // 1_000_000 == 1_700_000_000_123


def test_open_durable_leaves_the_file_as_it_is_on_an_error(tmp_path: Path) -> None:
    path = tmp_path / "y.log.cleaned"
    with pytest.raises(RuntimeError), storage.open_durable(str(path), mtime_ms=5) as write:
        write(b"partial")
        raise RuntimeError("the producer of the bytes failed")
    assert path.read_bytes() == b"partial"  # the caller removes it
    assert os.stat(path).st_mtime_ns // 1_000_000 != 5


def test_open_durable_in_a_missing_dir_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "no-such-dir" / "z.log.cleaned"
    with pytest.raises(LogDirError) as err, storage.open_durable(str(path)):
        pass
    assert err.value.path == str(path)


def test_the_lock_file_is_never_unlinked(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Unlinking on release let a process that had opened the old file lock an orphaned
    inode while another locked a new file: two holders at once. Kafka never removes .lock."""
    with storage.log_dir_lock(str(tmp_path)):
        inode = (tmp_path / ".lock").stat().st_ino
    assert (tmp_path / ".lock").stat().st_ino == inode
    with storage.log_dir_lock(str(tmp_path)):  # and it can be taken again
        assert (tmp_path / ".lock").stat().st_ino == inode
    assert (tmp_path / ".lock").exists()


@pytest.mark.parametrize("chunk", [10, 1 << 20])  # buffered (fails at flush) / direct write
def test_a_full_device_is_a_clear_error_whether_it_shows_at_write_or_at_close(chunk: int) -> None:
    # /dev/full answers every write with ENOSPC: a real full disk, without filling one
    with pytest.raises(LogDirError) as caught:
        with storage.open_durable("/dev/full", fsync=False) as write:
            write(b"x" * chunk)
    assert "No space left on device" in caught.value.message
    assert caught.value.path == "/dev/full"
    assert "file system is full" in caught.value.remedy


def test_an_error_inside_the_block_is_not_replaced_by_the_failing_close() -> None:
    with pytest.raises(ZeroDivisionError):
        with storage.open_durable("/dev/full", fsync=False) as write:
            write(b"x")  # buffered: closing the file fails with ENOSPC
            raise ZeroDivisionError


def test_crc32c_streams_the_file_in_chunks(tmp_path: Path) -> None:
    path = tmp_path / "data"
    path.write_bytes(b"123456789")  # the CRC-32C check value (RFC 3720, Castagnoli)
    assert storage.crc32c(str(path)) == 0xE3069283
    data = os.urandom(300_001)
    path.write_bytes(data)
    whole = local.crc32c(str(path), 1 << 20)
    for chunk in (13, 4096):
        assert local.crc32c(str(path), chunk) == whole
    path.write_bytes(b"")
    assert storage.crc32c(str(path)) == 0
    with pytest.raises(LogDirError):
        storage.crc32c(str(tmp_path / "missing"))


def test_release_cache_drops_a_files_pages_from_the_cache_and_leaves_the_file(
        tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    data = os.urandom(16 * mmap.PAGESIZE)
    path.write_bytes(data)
    with path.open("rb") as handle:  # clean pages, as a segment on disk has: dirty ones stay
        os.fsync(handle.fileno())
    assert path.read_bytes() == data and cached_pages(path) == 16
    storage.release_cache(str(path))
    assert cached_pages(path) == 0
    assert path.read_bytes() == data
    storage.release_cache(str(tmp_path / "gone.log"))  # only a hint: nothing to release


def _copy_spy(monkeypatch: pytest.MonkeyPatch, refuse: int | None = None) -> list[int]:
    """Each ``copy_file_range`` call's byte count, the kernel's own call made, or (``refuse``)
    that errno raised instead."""
    calls: list[int] = []
    real = os.copy_file_range

    def spy(src: int, dst: int, count: int, offset_src: int | None = None,
            offset_dst: int | None = None) -> int:
        calls.append(count)
        if refuse is not None:
            raise OSError(refuse, os.strerror(refuse))
        return real(src, dst, count, offset_src, offset_dst)

    monkeypatch.setattr(os, "copy_file_range", spy)
    return calls


@pytest.mark.parametrize("kernel", ["copies", "refuses (another file system)"])
def test_append_copy_appends_a_source_files_bytes_between_written_ones(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kernel: str) -> None:
    """An erasure's kept runs go from the source segment to its output by the kernel; where
    the kernel does not copy between the two files, the bytes are written all the same."""
    import errno

    source = tmp_path / "00000000000000000000.log"
    data = os.urandom(3 * 1024 * 1024 + 17)
    source.write_bytes(data)
    calls = _copy_spy(monkeypatch, None if kernel == "copies" else errno.EXDEV)
    out = tmp_path / "00000000000000000000.log.cleaned"
    with storage.mapped(str(source)) as mapped, storage.open_durable(
            str(out), mtime_ms=1_700_000_000_000) as write:
        write(b"head")
        write.append_copy(storage.window(mapped, 5, 2_000_005), str(source), 5)
        write(b"middle")
        write.append_copy(storage.window(mapped, 3_000_000, len(data)), str(source),
                          3_000_000)
        write(b"tail")
    assert out.read_bytes() == (b"head" + data[5:2_000_005] + b"middle" + data[3_000_000:]
                                + b"tail")
    assert out.stat().st_mtime_ns // 1_000_000 == 1_700_000_000_000
    assert calls and calls[0] == 2_000_000  # the kernel was asked, whatever it answered


def test_append_copy_writes_what_the_source_no_longer_holds_and_locates_a_failure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A source shorter than the bytes given (it shrank: the kernel copies what is there)
    gets the rest from the bytes, one it cannot open all of them; a failure of the copy
    itself (a full disk) is the output file's located error, not a silent fallback."""
    import errno

    source = tmp_path / "00000000000000000000.log"
    data = os.urandom(100_000)
    source.write_bytes(data[:60_000])
    out = tmp_path / "out.cleaned"
    with storage.open_durable(str(out)) as write:
        write.append_copy(data, str(source), 0)
    assert out.read_bytes() == data
    with storage.open_durable(str(out)) as write:  # a source it cannot open: written too
        write(b"x")
        write.append_copy(data, str(tmp_path / "gone.log"), 0)
    assert out.read_bytes() == b"x" + data
    _copy_spy(monkeypatch, errno.ENOSPC)
    with pytest.raises(LogDirError) as raised, storage.open_durable(str(out)) as write:
        write.append_copy(data, str(source), 0)
    assert raised.value.path == str(out)
