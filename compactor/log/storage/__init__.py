"""The one place that touches files: local disks and object stores.

Everything else works on bytes and locations handed in. A location is a string: a local path
or an ``s3://bucket/key`` URL. Each function here asks :func:`store_for` for the location's
storage, a :class:`.stores.Store` (the local disk, :class:`.local.LocalStore`; an object
store, :class:`.objects.ObjectStore`), and calls it: what differs between them is theirs.
Joining and splitting locations is :mod:`.locations` (no I/O).

Configuration is per process: :func:`configure` sets the ``--storage-option`` pairs and
``--break-lease``; :func:`portable` wraps a function that runs on executors so that the
driver's configuration travels with it.
"""

from __future__ import annotations

import functools
import mmap
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from compactor.errors import LogDirLockedError
from compactor.log.storage import local
from compactor.log.storage.local import (
    LOCK_FILE,
    FileStat,
    Link,
    LocalStore,
    discard_stdout,
    temporary_dir,
)
from compactor.log.storage.locations import (
    STORAGE_OPTIONS,
    basename,
    check_location,
    dirname,
    is_url,
    join,
    parse_storage_options,
    url_contains,
)
from compactor.log.storage.objects import LEASE_NAME, ObjectStore
from compactor.log.storage.stores import Appender, Store

__all__ = [
    "LEASE_NAME", "LOCK_FILE", "STORAGE_OPTIONS", "FileStat", "Link", "StorageSettings",
    "absolute",
    "basename",
    "Appender",
    "Store", "check_location", "configure", "contains", "crc32c", "dirname", "exists", "is_dir",
    "is_link", "is_url", "join", "list_dir", "log_dir_lock", "make_dirs", "mapped",
    "open_durable", "parse_storage_options", "portable", "read_bytes", "read_text",
    "release_cache",
    "real_path", "remove", "rename", "settings", "stat", "supports_rename", "write_atomic",
    "write_durable", "write_new", "copy", "delta_options", "fsync_dir",
    "set_mtime", "discard_stdout", "identities", "links", "fence", "lease_lost", "store_for",
    "object_metadata",
    "write_output",
    "output_problem",
    "temporary_dir",
]

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class StorageSettings:
    """What a process needs to reach object stores (picklable: it travels to executors)."""

    options: Mapping[str, str] = field(default_factory=dict)
    break_lease: bool = False

    @property
    def key(self) -> tuple[Any, ...]:
        return tuple(sorted(self.options.items()))


_settings = StorageSettings()
_stores: dict[tuple[Any, ...], ObjectStore] = {}


def configure(new: StorageSettings) -> None:
    """Use ``new`` from now on in this process (validated: unknown options are errors)."""
    global _settings
    parse_storage_options(new.options)
    _settings = new


def settings() -> StorageSettings:
    return _settings


def portable(fn: Callable[..., R]) -> Callable[..., R]:
    """``fn`` with this process's storage settings applied wherever it runs (the settings are
    captured now, on the driver, and travel inside the pickled function). The wrapper takes
    as many positional arguments as ``fn`` (one or two): Spark tells a cogroup's
    ``(left, right)`` function from ``(key, left, right)`` by counting them."""
    captured = _settings
    if fn.__code__.co_argcount == 2:
        def run2(a: Any, b: Any) -> R:
            _use(captured)
            return fn(a, b)

        return functools.update_wrapper(run2, fn, updated=())

    def run1(a: Any) -> R:
        _use(captured)
        return fn(a)

    return functools.update_wrapper(run1, fn, updated=())


def _use(wanted: StorageSettings) -> None:
    # module level on purpose: cloudpickle ships a closure with a copy of the globals it reads,
    # so only a function pickled by reference sees (and sets) this module's settings
    if _settings != wanted:
        configure(wanted)


def _store() -> ObjectStore:
    key = _settings.key
    store = _stores.get(key)
    if store is None:
        store = _stores[key] = ObjectStore(_settings.options)
    return store


_LOCAL: Store = LocalStore()


def store_for(path: str) -> Store:
    """The storage of a location, chosen by its form: an object store for a URL (with this
    process's settings: :func:`configure`), the local disk for anything else. Every function
    below sends its location to it; what differs between the two lives in their
    implementations (:mod:`.stores`)."""
    return _store() if is_url(path) else _LOCAL


# --- reading -------------------------------------------------------------------------------


def read_bytes(path: str, start: int = 0, end: int | None = None) -> bytes:
    """Bytes ``[start, end)`` of a file (``end`` = end of file when ``None``)."""
    return store_for(path).read_bytes(path, start, end)


def crc32c(path: str) -> int:
    """CRC-32C of a whole file, streamed in chunks."""
    return store_for(path).crc32c(path)


@contextmanager
def mapped(path: str) -> Iterator[Any]:
    """The file's bytes for the duration of the block, without reading them all up front:
    memory-mapped on a local disk (:func:`.local.mapped`), fetched by ranged GETs with bounded
    read-ahead from an object store (:class:`.objects.RangedObject`). Either slices into
    ``bytes`` and has a length."""
    with store_for(path).mapped(path) as data:
        yield data


def window(data: Any, start: int, end: int) -> Any:
    """``data[start:end]`` of a file :func:`mapped`, without a copy where it can: a read-only
    ``memoryview`` of the mapped pages on a local disk (it keeps the mapping alive: the map
    is closed when the last view of it goes), the fetched ``bytes`` from an object store.
    The writer's passes and the offset map's key scan take their 16 MB chunks this way: a
    copy of each cost more than the kernels' filter of it (a fresh allocation's page faults
    and the copy), and a tenth of the key scan."""
    if isinstance(data, mmap.mmap):
        return memoryview(data)[start:end]
    return data[start:end]


def read_text(path: str) -> str:
    return store_for(path).read_text(path)


def release_cache(path: str) -> None:
    """Drop a local file's pages from the page cache (:func:`.local.release_cache`: it will
    not be read again); an object store caches nothing, so there it does nothing."""
    store_for(path).release_cache(path)


def exists(path: str) -> bool:
    return store_for(path).exists(path)


def is_dir(path: str) -> bool:
    return store_for(path).is_dir(path)


def is_link(path: str) -> bool:
    return store_for(path).is_link(path)


def stat(path: str) -> FileStat:
    """Size and modification time (an object's ``mtime-ms`` metadata, else Last-Modified)."""
    return store_for(path).stat(path)


def list_dir(path: str) -> list[str]:
    """Sorted entry names of a directory (objects and sub-prefixes under a prefix)."""
    return store_for(path).list_dir(path)


def identities(path: str) -> dict[str, str]:
    """``{name: identity}`` of the files directly in a directory, from one listing: an
    object's ETag, a local file's size, modification time and inode. A file written again
    has another identity: what a commit compares with what its scan saw."""
    return store_for(path).identities(path)


def links(path: str) -> dict[str, Link]:
    """``{name: link}`` of the entries of a local directory whose data also has another name
    (a symbolic link, or a file with several hard links: :func:`local.links`); empty on an
    object store, which has neither."""
    return store_for(path).links(path)


def object_metadata(path: str) -> tuple[str, dict[str, str]] | None:
    """``(ETag, user metadata)`` of an object, ``None`` when there is none."""
    return _store().metadata(path)


# --- locations -----------------------------------------------------------------------------


def absolute(path: str) -> str:
    """``path`` in the form every command passes on: a URL checked and kept, a local path made
    absolute against the driver's working directory (executors of a cluster run elsewhere).

    Raises:
        ConfigError: an unknown or unsupported URL scheme.
    """
    path = check_location(path)
    return store_for(path).absolute(path)


def real_path(path: str) -> str:
    """``path`` absolute with every symlink resolved (to compare locations)."""
    return store_for(path).real_path(path)


def contains(outer: str, inner: str) -> bool:
    """Whether ``inner`` is ``outer`` or lies under it (never across a disk and a store)."""
    if is_url(outer) or is_url(inner):
        return is_url(outer) and is_url(inner) and url_contains(outer, inner)
    return local.contains(outer, inner)


def supports_rename(path: str) -> bool:
    """Whether renames under ``path`` are atomic (local disks; object stores have none)."""
    return store_for(path).renames_atomically


# --- writing -------------------------------------------------------------------------------


def make_dirs(path: str) -> None:
    """Create a directory (nothing to do under an object-store prefix)."""
    store_for(path).make_dirs(path)


def fsync_dir(path: str) -> None:
    """Make renames and creations inside ``path`` durable (an object PUT already is)."""
    store_for(path).fsync_dir(path)


def write_durable(path: str, data: bytes, *, mtime_ms: int | None = None,
                  fsync: bool = True) -> None:
    """Create or replace ``path`` with ``data``, durable (fsynced / one PUT) unless ``fsync``
    is false (generated test data on a local disk only)."""
    store_for(path).write_durable(path, data, mtime_ms=mtime_ms, fsync=fsync)


@contextmanager
def open_durable(path: str, *, mtime_ms: int | None = None,
                 fsync: bool = True) -> Iterator[Appender]:
    """Create or replace ``path`` and yield an :class:`Appender` of bytes to it (or of
    bytes that lie in another local file, :meth:`Appender.append_copy`); durable and
    given ``mtime_ms`` when the block ends normally (a local file is fsynced, an object is
    completed as a multipart upload). On an exception a local file is closed as it is (the
    caller removes it); an object upload is aborted and nothing appears."""
    with store_for(path).open_durable(path, mtime_ms=mtime_ms, fsync=fsync) as write:
        yield write


def write_atomic(path: str, data: bytes) -> None:
    """Replace ``path`` so that readers see the old or the new content: Kafka's checkpoint
    write (temporary file, fsync, rename, directory fsync) locally, one PUT on an object
    store."""
    store_for(path).write_atomic(path, data)


def write_output(path: str, data: bytes) -> None:
    """Write a file the user named for output (``--report-file``, ``--metrics-file``,
    ``--html-report``): one PUT on an object store; locally, a regular file is replaced
    atomically and a FIFO, a device or a symlink's target is written in place
    (:func:`.local.write_output`)."""
    store_for(path).write_output(path, data)


def output_problem(path: str) -> str | None:
    """Why an output file cannot be written (``None`` when it can; an object-store URL is
    only known when it is written)."""
    return store_for(path).output_problem(path)


def write_new(path: str, data: bytes) -> None:
    """Create ``path`` only if nothing is there (``If-None-Match: *``); object stores only.

    Raises:
        ConditionFailedError: something is already there.
    """
    _store().put(path, data, if_none_match=True)


def copy(src: str, dst: str, *, if_source_etag: str | None = None,
         metadata: Mapping[str, str] | None = None) -> None:
    """Copy an object server-side, refused when the source is no longer ``if_source_etag``
    (:class:`~compactor.errors.ConditionFailedError`); ``metadata`` replaces the source's."""
    _store().copy(src, dst, if_source_etag=if_source_etag, metadata=metadata)


def set_mtime(path: str, mtime_ms: int) -> None:
    store_for(path).set_mtime(path, mtime_ms)


def rename(src: str, dst: str) -> None:
    """Atomic rename on a local disk; copy-then-delete on an object store (not atomic: use
    only where running the step again after a crash is harmless)."""
    store_for(src).rename(src, dst)


def remove(path: str, *, missing_ok: bool = False, if_match: str | None = None) -> None:
    """Delete a file; ``if_match`` (object stores) deletes an object only while it still
    has that ETag (:class:`~compactor.errors.ConditionFailedError` otherwise)."""
    store_for(path).remove(path, missing_ok=missing_ok, if_match=if_match)


def fence(path: str) -> None:
    """Before a commit point: prove this process still holds the lease of the object-store
    log dir ``path`` lies in (:meth:`.objects.ObjectStore.fence`). On a local disk the
    broker's fcntl lock, held by the process for as long as it lives, is the proof already.

    Raises:
        LogDirLockedError: the lease is lost or may have expired.
        StorageError: the lease could not be renewed.
    """
    store_for(path).fence(path)


def lease_lost(path: str) -> LogDirLockedError | None:
    """Why this process no longer holds the lease of the object-store log dir ``path`` (its
    :func:`fence` fails: another run took it, or it expired), else ``None`` (on a local disk
    the lock is held for as long as the process lives). A store that cannot be asked says
    nothing here: the run's own next write fails with that."""
    return store_for(path).lease_lost(path)


_held: set[str] = set()  # the log dirs whose lock (or lease) this process holds


@contextmanager
def log_dir_lock(log_dir: str) -> Iterator[None]:
    """Hold the log dir exclusively: Kafka's ``.lock`` (an fcntl lock a broker honours) on a
    local disk, a lease object on an object store (:class:`.objects._Lease`). Reentrant
    within the process: a run over several log dirs takes every lock first, and each log
    dir's command finds its own already held (an fcntl lock is the process's: taking it a
    second time and releasing that would release it for the whole process).

    Raises:
        LogDirError: the log dir does not exist or the lock cannot be taken.
        LogDirLockedError: another process holds the lock or a live lease.
    """
    key = real_path(log_dir)
    if key in _held:  # this process holds it already (a run over a broker's log dirs)
        yield
        return
    with store_for(log_dir).log_dir_lock(log_dir, break_lease=_settings.break_lease):
        _held.add(key)
        try:
            yield
        finally:
            _held.discard(key)


#: how long a commit to the state dir's tables waits for another process's commit
STATE_LOCK_WAIT_S = 120.0
#: the lock object of the state dir's writers (beside its tables)
STATE_LOCK_NAME = "_writers.lock"
_state_threads = threading.RLock()


@contextmanager
def state_dir_lock(state_dir: str, wait_s: float = STATE_LOCK_WAIT_S) -> Iterator[None]:
    """Hold the state dir's writer lock: every commit the tool makes to the Delta tables
    under ``state_dir`` (delta-rs's or delta-spark's) holds it, so two of its processes never
    race for one commit version. delta-rs alone would be safe (an atomic rename on a local
    disk, ``If-None-Match`` on S3), but delta-spark's log stores exclude only writers of the
    same JVM (``S3SingleDriverLogStore``; ``HDFSLogStore`` checks, then renames, on a local
    disk), so one of its commits could replace another process's. An fcntl lock on
    ``<state_dir>/_writers.lock`` on a local disk, a lease object (:class:`.objects._Lease`)
    on an object store; waited for up to ``wait_s`` seconds; reentrant within the process.

    Raises:
        LogDirLockedError: another process held it all that time.
    """
    key = real_path(state_dir) + "#" + STATE_LOCK_NAME
    with _state_threads:
        if key in _held:
            yield
            return
        make_dirs(state_dir)
        where = join(state_dir, STATE_LOCK_NAME)
        with store_for(state_dir).waiting_lock(where, wait_s):
            _held.add(key)
            try:
                yield
            finally:
                _held.discard(key)


def delta_options(path: str) -> dict[str, str] | None:
    """``storage_options`` for a ``deltalake`` table at ``path`` (``None`` on a local disk)."""
    return store_for(path).delta_options()
