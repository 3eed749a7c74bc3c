"""Log dirs on a local (POSIX) file system.

Writes that must survive a crash go through :func:`write_durable` (file fsynced) or
:func:`write_atomic` (temporary file, fsync, rename, directory fsync), renames that commit a
state change are followed by :func:`fsync_dir`. ``OSError`` is translated into
:class:`~compactor.errors.LogDirError` naming the path.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import stat as stat_module
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

from crc32c import crc32c as crc32c_of

from compactor.errors import LogDirError, LogDirLockedError

LOCK_FILE = ".lock"


@dataclass(frozen=True, slots=True)
class FileStat:
    size: int
    mtime_ms: int
    is_dir: bool


# What an operator can do about the OS errors a run meets most, by errno.
_REMEDIES = {
    errno.ENOSPC: "the file system is full: free space (a round needs room for one cleaned copy "
                  "of the groups it rewrites) and rerun; the partial file was removed and "
                  "nothing was swapped",
    errno.EDQUOT: "the disk quota is exhausted: raise it or free space and rerun; the partial "
                  "file was removed and nothing was swapped",
    errno.EROFS: "the file system is mounted read-only: remount it read-write and rerun",
    errno.EACCES: "this user may not change the file: run as the user that owns the log dir",
    errno.EPERM: "this user may not change the file: run as the user that owns the log dir",
    errno.EIO: "the device reported an I/O error: check the disk (dmesg, SMART) before "
               "rerunning",
}


def _fail(err: OSError, path: str, action: str) -> LogDirError:
    return LogDirError(f"cannot {action}: {err.strerror or err}", path=path,
                       remedy=_REMEDIES.get(err.errno or 0))


def _open_regular(path: str) -> Any:
    """``path`` opened for reading, refused unless it is a regular file (after symlinks):
    opened without blocking, so that a FIFO named like a segment cannot hang the run, and
    checked before a byte is read, so that a link to ``/dev/zero`` cannot fill memory.

    Raises:
        LogDirError: not a regular file, or it cannot be opened.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as err:
        raise _fail(err, path, "read file") from err
    mode = os.fstat(fd).st_mode
    if not stat_module.S_ISREG(mode):
        os.close(fd)
        kind = ("a directory" if stat_module.S_ISDIR(mode) else "a FIFO" if
                stat_module.S_ISFIFO(mode) else "a device" if stat_module.S_ISCHR(mode)
                or stat_module.S_ISBLK(mode) else "a socket")
        raise LogDirError(f"is {kind}, not a regular file: Kafka's files are regular files "
                          f"and only those are read", path=path,
                          remedy="move it out of the log dir (a broker would not load it "
                                 "either); nothing was changed")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_bytes(path: str, start: int = 0, end: int | None = None) -> bytes:
    """Bytes ``[start, end)`` of a regular file (``end`` = end of file when ``None``)."""
    try:
        with _open_regular(path) as handle:
            if start:
                handle.seek(start)
            return handle.read() if end is None else handle.read(max(0, end - start))
    except OSError as err:
        raise _fail(err, path, "read file") from err


def crc32c(path: str, chunk_bytes: int = 1 << 20) -> int:
    """CRC-32C of a whole file, read in chunks of ``chunk_bytes``: checking a 1 GiB segment
    costs one chunk of memory, not the file's size (and 0.08 s of a core: the instruction
    set's CRC-32C runs at 14 GB/s here, zlib's CRC-32 at 4)."""
    value = 0
    try:
        with _open_regular(path) as handle:
            while chunk := handle.read(chunk_bytes):
                value = crc32c_of(chunk, value)
    except OSError as err:
        raise _fail(err, path, "read file") from err
    return value


@contextmanager
def mapped(path: str) -> Iterator[bytes]:
    """The file's bytes, memory-mapped read-only for the duration of the block: pages come
    from the page cache as they are read instead of being copied into the process up front
    (a 1 GiB segment does not cost 1 GiB of process memory). Slicing it gives ``bytes``. An
    empty file gives ``b""``. The file must not shrink meanwhile (the broker lock keeps
    writers away; a shrink would end the process with SIGBUS, leaving only ``.cleaned``
    files that the next run's recovery removes)."""
    try:
        with _open_regular(path) as handle:
            view = (mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
                    if os.fstat(handle.fileno()).st_size else None)
    except OSError as err:
        raise _fail(err, path, "read file") from err
    if view is None:
        yield b""
        return
    try:
        yield view  # type: ignore[misc]  # an mmap slices and unpacks like bytes
    finally:
        try:
            view.close()
        except BufferError:  # a view of it is still alive (an error's traceback): the GC closes it
            pass


def release_cache(path: str) -> None:
    """Tell the kernel the file's cached pages will not be read again
    (``posix_fadvise(POSIX_FADV_DONTNEED)``: clean pages are dropped from the page cache
    at once; the file is untouched). A round calls it on a group's source segments once
    their output is written: the swap deletes them, and their freed pages take the next
    group's output writes instead of pages the kernel must find afresh (on a VM that hands
    freed memory back to its host, fresh pages cost 15 s of system time per GB:
    docs/benchmarks.md). Only a hint: a file that is gone, or a platform without the call,
    is left as it is."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except (OSError, AttributeError):  # not on this platform or file system: a hint only
        pass
    finally:
        os.close(fd)


def read_text(path: str) -> str:
    try:  # universal newlines, as text mode reads them
        return read_bytes(path).decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError as err:
        raise LogDirError(f"file is not UTF-8 text: {err}", path=path) from err


def exists(path: str) -> bool:
    return os.path.exists(path)


def is_dir(path: str) -> bool:
    return os.path.isdir(path)


def is_link(path: str) -> bool:
    return os.path.islink(path)


def stat(path: str) -> FileStat:
    try:
        st = os.stat(path)
    except OSError as err:
        raise _fail(err, path, "stat") from err
    return FileStat(size=st.st_size, mtime_ms=st.st_mtime_ns // 1_000_000,
                    is_dir=stat_module.S_ISDIR(st.st_mode))


def identities(path: str) -> dict[str, str]:
    """``{name: identity}`` of the regular files directly in a directory, where the identity
    is size, modification time, inode and status-change time (ns): a file written, replaced
    or touched since is another identity (the change time cannot be set back)."""
    out = {}
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.is_file(follow_symlinks=False):
                    st = entry.stat(follow_symlinks=False)
                    out[entry.name] = f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}:{st.st_ctime_ns}"
    except OSError as err:
        raise _fail(err, path, "list directory") from err
    return out


@dataclass(frozen=True, slots=True)
class Link:
    """How an entry's data has another name: a symbolic link, or a file with several hard
    links; ``what`` says it to a person (``symlink to <target>``, ``file with N hard links``)."""

    symlink: bool
    what: str


def links(path: str) -> dict[str, Link]:
    """``{name: link}`` of the entries directly in a directory whose data has another name:
    a symbolic link or a regular file with more than one hard link."""
    out = {}
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.is_symlink():
                    out[entry.name] = Link(True, f"symlink to {os.readlink(entry.path)}")
                elif entry.is_file(follow_symlinks=False):
                    n = entry.stat(follow_symlinks=False).st_nlink
                    if n > 1:
                        out[entry.name] = Link(False, f"file with {n} hard links")
    except OSError as err:
        raise _fail(err, path, "list directory") from err
    return out


def list_dir(path: str) -> list[str]:
    """Sorted entry names of a directory."""
    try:
        return sorted(os.listdir(path))
    except OSError as err:
        raise _fail(err, path, "list directory") from err


def absolute(path: str) -> str:
    """``path`` made absolute against the driver's working directory: executors of a cluster
    run elsewhere, so every path shipped to them must be absolute."""
    return os.path.abspath(path)


def real_path(path: str) -> str:
    """``path`` absolute with every symlink resolved (to compare locations)."""
    return os.path.realpath(path)


def contains(outer: str, inner: str) -> bool:
    """Whether ``inner`` is ``outer`` or lies under it (both resolved)."""
    a, b = real_path(outer), real_path(inner)
    return os.path.commonpath([a, b]) == a


def make_dirs(path: str) -> None:
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as err:
        raise _fail(err, path, "create directory") from err


def fsync_dir(path: str) -> None:
    """Make renames and creations inside ``path`` durable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as err:
        raise _fail(err, path, "fsync directory") from err


def write_durable(
    path: str, data: bytes, *, mtime_ms: int | None = None, fsync: bool = True
) -> None:
    """Create or replace ``path`` with ``data`` and fsync it (not its directory) unless
    ``fsync`` is false (generated test data only)."""
    with open_durable(path, mtime_ms=mtime_ms, fsync=fsync) as write:
        write(data)


#: what :meth:`DurableFile.append_copy` falls back to writing on: the kernel or the file
#: system does not copy between these files (another file system, an old kernel, a special
#: file), which ``copy_file_range(2)`` says before it has copied anything
_NO_KERNEL_COPY = frozenset({errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL,
                             errno.EBADF, errno.EPERM})


class DurableFile:
    """What :func:`open_durable` yields: called with bytes, it appends them to the file;
    :meth:`append_copy` appends bytes that lie in another local file."""

    __slots__ = ("_handle", "_path")

    def __init__(self, handle: Any, path: str) -> None:
        self._handle, self._path = handle, path

    def __call__(self, data: Any) -> None:
        try:
            self._handle.write(data)
        except OSError as err:
            raise _fail(err, self._path, "write file") from err

    def append_copy(self, data: Any, source: str, start: int) -> None:
        """Append ``data``, which are the bytes of the file ``source`` from ``start`` on (a
        view of it mapped): copied by the kernel from the one file's page cache to the
        other's (``copy_file_range(2)``), not through this process, where it can; else, or
        for what it did not copy, by writing ``data``. An erasure's rewrite copies a
        segment's untouched batches this way: 0.32 s less of a 1.1 GB rewrite's 1.7 s on the
        benchmark's machine, where a write of a mapped file's view into the page cache cost
        0.04-0.3 s a 64 MiB segment (docs/benchmarks.md)."""
        size = len(data)
        copied = 0
        if not hasattr(os, "copy_file_range"):  # not Linux
            self(data)
            return
        try:
            self._handle.flush()
            at = self._handle.tell()
        except OSError as err:
            raise _fail(err, self._path, "write file") from err
        try:
            fd = os.open(source, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:  # the bytes are at hand: what the source's own reads would say
            self(data)
            return
        try:
            while copied < size:
                n = os.copy_file_range(fd, self._handle.fileno(), size - copied,
                                       start + copied, at + copied)
                if n == 0:  # the source ends before: what is left is written from ``data``
                    break
                copied += n
        except OSError as err:
            if copied or err.errno not in _NO_KERNEL_COPY:
                raise _fail(err, self._path, "write file") from err
        finally:
            os.close(fd)
        try:
            self._handle.seek(at + copied)
        except OSError as err:
            raise _fail(err, self._path, "write file") from err
        if copied < size:
            self(memoryview(data)[copied:])


@contextmanager
def open_durable(path: str, *, mtime_ms: int | None = None,
                 fsync: bool = True) -> Iterator[DurableFile]:
    """Create or replace ``path`` and yield a :class:`DurableFile` that appends to it; when
    the block ends normally the file is flushed, fsynced (unless ``fsync`` is false) and
    given ``mtime_ms``. On an exception the file is closed as it is (the caller removes
    it)."""
    try:
        handle = open(path, "wb")
    except OSError as err:
        raise _fail(err, path, "write file") from err

    try:
        yield DurableFile(handle, path)
    except BaseException:
        # the first error is the one to report: closing a file whose buffer cannot be flushed
        # (ENOSPC again) must not replace it
        try:
            handle.close()
        except OSError:
            pass
        raise
    try:
        # flush and close are where a full disk shows when the last writes fit the buffer
        handle.flush()
        if fsync:
            os.fsync(handle.fileno())
        handle.close()
    except OSError as err:
        try:
            handle.close()
        except OSError:
            pass
        raise _fail(err, path, "write file") from err
    if mtime_ms is not None:
        set_mtime(path, mtime_ms)


def write_atomic(path: str, data: bytes) -> None:
    """Kafka's checkpoint write: ``<path>.tmp``, fsync, rename over ``path``, fsync the dir.
    A failure removes the temporary file (a kill leaves it: the next recovery removes it,
    :func:`compactor.log.recovery.remove_stale_temporaries`)."""
    tmp = path + ".tmp"
    try:
        write_durable(tmp, data)
        rename(tmp, path)
    except BaseException:
        try:
            if os.path.isfile(tmp) and not os.path.islink(tmp):
                os.remove(tmp)
        except OSError:
            pass
        raise
    fsync_dir(os.path.dirname(os.path.abspath(path)))


def output_problem(path: str) -> str | None:
    """Why a file the user named for output (``--report-file`` and the like) cannot be
    written, or ``None``: checked before a command changes anything. A symlink is judged by
    its target."""
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except FileNotFoundError:
        parent = os.path.dirname(real)
        if not os.path.isdir(parent):
            return f"its directory {parent} does not exist"
        if not os.access(parent, os.W_OK | os.X_OK):
            return f"this user may not create files in {parent}"
        return None
    except OSError as err:
        return f"it cannot be looked at: {err.strerror or err}"
    if stat_module.S_ISDIR(st.st_mode):
        return "it is a directory"
    if not os.access(real, os.W_OK):
        return "this user may not write it"
    if stat_module.S_ISREG(st.st_mode) and not os.access(os.path.dirname(real),
                                                         os.W_OK | os.X_OK):
        return f"this user may not replace files in {os.path.dirname(real)}"
    return None


def write_output(path: str, data: bytes) -> None:
    """Write a file the user named for output. A regular file (or a new one) is replaced
    atomically (a temporary file next to it, fsynced, renamed over it); anything else --
    a FIFO, a character device such as ``/dev/stdout`` -- is written in place, and a
    symlink's target is written while the link stays. A FIFO nobody reads is an error, not
    a hang; no temporary file is left behind on any failure."""
    real = os.path.realpath(path)
    problem = output_problem(real)
    if problem is not None:
        raise LogDirError(f"cannot write output file: {problem}", path=path)
    try:
        st: os.stat_result | None = os.stat(real)
    except FileNotFoundError:
        st = None
    if st is not None and not stat_module.S_ISREG(st.st_mode):
        fifo = stat_module.S_ISFIFO(st.st_mode)
        try:
            fd = os.open(real, os.O_WRONLY | (os.O_NONBLOCK if fifo else 0))
        except OSError as err:
            if err.errno == errno.ENXIO:
                raise LogDirError("cannot write output file: no process reads this FIFO",
                                  path=path, remedy="start its reader first") from err
            raise _fail(err, path, "write output file") from err
        try:
            if fifo:  # opened without blocking only to refuse a FIFO nobody reads
                os.set_blocking(fd, True)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except OSError as err:
            raise _fail(err, path, "write output file") from err
        finally:
            os.close(fd)
        return
    directory, name = os.path.split(real)
    tmp = os.path.join(directory, f".{name}.{os.getpid()}.tmp")
    try:
        write_durable(tmp, data)
        rename(tmp, real)
        fsync_dir(directory)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


def set_mtime(path: str, mtime_ms: int) -> None:
    try:
        ns = mtime_ms * 1_000_000
        os.utime(path, ns=(ns, ns))
    except OSError as err:
        raise _fail(err, path, "set modification time") from err


def rename(src: str, dst: str) -> None:
    """Atomic rename within one file system."""
    try:
        os.replace(src, dst)
    except OSError as err:
        raise _fail(err, src, f"rename to {dst}") from err


def remove(path: str, *, missing_ok: bool = False) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        if not missing_ok:
            raise LogDirError("cannot delete missing file", path=path) from None
    except OSError as err:
        raise _fail(err, path, "delete file") from err


@contextmanager
def log_dir_lock(log_dir: str) -> Iterator[None]:
    """Hold the exclusive lock a Kafka broker takes on ``<log_dir>/.lock``.

    Kafka locks the file with ``FileChannel.tryLock()``, a POSIX ``fcntl`` record lock over
    the whole file; ``fcntl.lockf`` takes the same kind of lock, so a running broker and
    kafka-compactor exclude each other. The lock file is never removed, as Kafka never
    removes it: a process that opened it before an unlink would lock an orphaned inode while a
    third one locks a new file, and both would believe they hold the log dir.

    Raises:
        LogDirError: the log dir does not exist or the lock file cannot be created.
        LogDirLockedError: another process holds the lock.
    """
    if not os.path.isdir(log_dir):
        raise LogDirError("log dir does not exist or is not a directory", path=log_dir)
    lock_path = os.path.join(log_dir, LOCK_FILE)

    def busy(holder: str | None) -> LogDirLockedError:
        return LogDirLockedError(
            f"log dir is locked by {holder}" if holder else
            "log dir is locked by another process (a running Kafka broker or another "
            "kafka-compactor run)", path=lock_path)

    with _fcntl_lock(lock_path, wait_s=0.0, busy=busy):
        yield


def waiting_lock(path: str, wait_s: float) -> AbstractContextManager[None]:
    """An exclusive ``fcntl`` lock on the file ``path`` (created, never removed), waited for
    up to ``wait_s`` seconds.

    Raises:
        LogDirLockedError: another process held it all that time.
    """
    return _fcntl_lock(path, wait_s=wait_s, busy=lambda holder: LogDirLockedError(
        f"held by {holder or 'another process'} for over {wait_s:.0f} s", path=path))


@contextmanager
def _fcntl_lock(path: str, *, wait_s: float,
                busy: Callable[[str | None], LogDirLockedError]) -> Iterator[None]:
    """Hold an exclusive ``fcntl`` lock on ``path``, trying for ``wait_s`` seconds; ``busy``
    makes the error, given who holds it (:func:`_lock_holder`)."""
    import time

    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise _fail(err, path, "open lock file") from err
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as err:
                if err.errno not in (errno.EACCES, errno.EAGAIN):
                    raise _fail(err, path, "lock") from err
                if time.monotonic() >= deadline:
                    raise busy(_lock_holder(fd)) from err
                time.sleep(0.02)
        try:
            yield
        finally:
            fcntl.lockf(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _lock_holder(fd: int) -> str | None:
    """Who holds the lock on ``fd``'s file, as far as this host can tell: ``F_GETLK`` names the
    holder's pid (``struct flock``), ``/proc`` its command line. ``None`` when it cannot be
    told (another host over NFS, another PID namespace, no ``/proc``)."""
    import struct

    layout = "hhqqi"  # struct flock: l_type, l_whence, l_start, l_len, l_pid (native)
    probe = struct.pack(layout, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
    try:
        answer = fcntl.fcntl(fd, fcntl.F_GETLK, probe + b"\0" * 8)
        kind, _, _, _, pid = struct.unpack_from(layout, answer)
    except (OSError, struct.error):
        return None
    if kind == fcntl.F_UNLCK or pid <= 0:
        return None
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv = [a.decode(errors="replace") for a in handle.read().split(b"\0") if a]
    except OSError:
        return f"process {pid}"
    if "kafka.Kafka" in argv:
        return f"a running Kafka broker (pid {pid})"
    shown = " ".join(argv)[:160]
    if "compactor" in shown:
        return f"another kafka-compactor run (pid {pid}: {shown})"
    return f"process {pid} ({shown})"


def discard_stdout(fileno: int) -> None:
    """Point file descriptor ``fileno`` (stdout) at ``/dev/null``: its reader went away
    (``| head``), and the interpreter's last flush must not fail on it again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fileno)
    os.close(devnull)


@contextmanager
def temporary_dir(prefix: str) -> Iterator[str]:
    """A new private folder in the machine's temporary directory for the block, removed with
    what it holds at its end."""
    with tempfile.TemporaryDirectory(prefix=prefix) as path:
        yield path


class LocalStore:
    """The local disk as a :class:`compactor.log.storage.stores.Store`: this module's
    functions. Renames are atomic and a file is made durable by fsync (its own, then its
    directory's); the log dir is held by Kafka's fcntl lock, which the process holds for as
    long as it lives, so there is no lease to fence or lose."""

    renames_atomically = True

    def read_bytes(self, path: str, start: int = 0, end: int | None = None) -> bytes:
        return read_bytes(path, start, end)

    def crc32c(self, path: str) -> int:
        return crc32c(path)

    def mapped(self, path: str) -> AbstractContextManager[Any]:
        return mapped(path)

    def read_text(self, path: str) -> str:
        return read_text(path)

    def release_cache(self, path: str) -> None:
        release_cache(path)

    def exists(self, path: str) -> bool:
        return exists(path)

    def is_dir(self, path: str) -> bool:
        return is_dir(path)

    def is_link(self, path: str) -> bool:
        return is_link(path)

    def stat(self, path: str) -> FileStat:
        return stat(path)

    def list_dir(self, path: str) -> list[str]:
        return list_dir(path)

    def identities(self, path: str) -> dict[str, str]:
        return identities(path)

    def links(self, path: str) -> dict[str, Link]:
        return links(path)

    def absolute(self, path: str) -> str:
        return absolute(path)

    def real_path(self, path: str) -> str:
        return real_path(path)

    def make_dirs(self, path: str) -> None:
        make_dirs(path)

    def fsync_dir(self, path: str) -> None:
        fsync_dir(path)

    def write_durable(self, path: str, data: bytes, *, mtime_ms: int | None = None,
                      fsync: bool = True) -> None:
        write_durable(path, data, mtime_ms=mtime_ms, fsync=fsync)

    def open_durable(self, path: str, *, mtime_ms: int | None = None, fsync: bool = True
                     ) -> AbstractContextManager[DurableFile]:
        return open_durable(path, mtime_ms=mtime_ms, fsync=fsync)

    def write_atomic(self, path: str, data: bytes) -> None:
        write_atomic(path, data)

    def write_output(self, path: str, data: bytes) -> None:
        write_output(path, data)

    def output_problem(self, path: str) -> str | None:
        return output_problem(path)

    def set_mtime(self, path: str, mtime_ms: int) -> None:
        set_mtime(path, mtime_ms)

    def rename(self, src: str, dst: str) -> None:
        rename(src, dst)

    def remove(self, path: str, *, missing_ok: bool = False,
               if_match: str | None = None) -> None:
        if if_match is not None:
            raise ValueError("a conditional delete is an object store's; a local file has "
                             "no ETag")
        remove(path, missing_ok=missing_ok)

    def fence(self, path: str) -> None:
        """Nothing to prove: the broker's fcntl lock is held for as long as the process
        lives."""

    def lease_lost(self, path: str) -> LogDirLockedError | None:
        return None

    def log_dir_lock(self, log_dir: str, *, break_lease: bool
                     ) -> AbstractContextManager[None]:
        return log_dir_lock(log_dir)  # a broker's lock is never broken: there is no lease

    def waiting_lock(self, path: str, wait_s: float) -> AbstractContextManager[None]:
        return waiting_lock(path, wait_s)

    def delta_options(self) -> dict[str, str] | None:
        return None
