"""How an executor decides and re-encodes the records of a group: the seam between the writer
(``compactor/spark/writer.py``), which walks segments, and the code that does the per-record
work. Two implementations give the same decisions and the same bytes:

- :data:`PURE` (here): :func:`compactor.cleaner.rebatch.iter_drops` and
  :func:`compactor.cleaner.rebatch.filter_batch`, a Python object per record. It is the
  reference, and the path of any group the native one cannot vouch for.
- the native one (``compactor/native/``, numba kernels), chosen by
  :func:`compactor.native.engine`, the only place that imports numba.

Both decide each record by :func:`compactor.cleaner.policy.record_fate`.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Callable, Collection, Container, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from compactor.cleaner.policy import BatchDecision, BatchHeader
from compactor.cleaner.rebatch import FilteredBatch, filter_batch, iter_drops
from compactor.codec.indexes import AbortedTxn
from compactor.codec.records import RecordBatch
from compactor.errors import ConfigError

#: which path wrote a group, in its commit message and report: the native kernels, the pure
#: path by choice (``--writer pure``), or the pure path for a group the kernels handed back
PATHS = ("native", "pure", "fallback")

#: a chunk decided in one call: batch positions, base offsets, fates, in file order
Decided = tuple[Sequence[int], Sequence[int], list[Any]]
#: a chunk filtered in one call: its output batches in runs that lie end to end (bytes or a
#: view, each with its batches' sizes), their .txnindex entries, records in, records out
Filtered = tuple[list[tuple[Any, list[int]]], list[AbortedTxn], int, int]
#: keys read from a segment: (offsets, key_hi, key_lo, batch index) columns, and the batch
#: positions left to read one by one
KeyColumns = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


class DigestProbe(Protocol):
    """The pending requests' Bloom filter as an erasure scan asks it
    (:class:`compactor.erasure.sketch.Probe`): ``might_contain`` of rows of 32-byte digests
    (the pure scan, a batch at once); ``table`` (one byte a bit), ``bits`` and ``hashes``
    (the native kernel tests each digest as it makes it, by
    :func:`compactor.erasure.sketch.may_hold`). ``False`` is certain: no false negative."""

    @property
    def table(self) -> np.ndarray: ...

    @property
    def bits(self) -> int: ...

    @property
    def hashes(self) -> int: ...

    def might_contain(self, digests: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True, slots=True)
class SubjectDigests:
    """The SHA-256 digests an erasure matches subjects against, for the data records of one
    segment (columns, one entry per digest, in record order: the record's key, then the value
    of each header whose name is asked for). The matching itself is a join in Spark
    (:func:`compactor.spark.stages.erasure_matches`), so no subject reaches an executor.

    Attributes:
        position: the batch's position in the segment (int64).
        offset: the record's offset (int64).
        header: -1 for the key, else the index of the header's name in ``names`` (int32).
        digest: what is matched, one row of 32 bytes an entry (uint8).
        key_digest: the record's key digest (zeros when ``key_null``): an erasure by header
            takes the older records of that key with it on a compacted topic.
        key_null: the record's key is null (bool).
        bare: the record has a null value and no headers, what ``--leave-tombstone`` leaves
            behind (bool).
        names: the header names asked, sorted.
        batches: the batches read, control batches included.
        records: the data records read.
        headers: every batch's header.
    """

    position: np.ndarray
    offset: np.ndarray
    header: np.ndarray
    digest: np.ndarray
    key_digest: np.ndarray
    key_null: np.ndarray
    bare: np.ndarray
    names: tuple[str, ...]
    batches: int
    records: int
    headers: list[BatchHeader]
#: ``window(data, start, end)``: ``data[start:end]`` of a segment's bytes, a view where the
#: caller can give one (``compactor.log.storage.window`` over a mapped file)
Window = Callable[[Any, int, int], Any]


def sliced(data: Any, start: int, end: int) -> Any:
    """The :data:`Window` of bytes in memory: a slice."""
    return data[start:end]


class Fallback(Exception):
    """The group needs the pure path (``compactor/native/fast.py`` says when); raised before
    anything of the group is written."""


class GroupRewrite(Protocol):
    """The record work of one group. The writer walks its segments twice: newest chunk first
    to decide (:meth:`decide_chunk`, else :meth:`decide` batch by batch), then oldest first to
    filter (:meth:`filter_chunk`, else :meth:`filter` batch by batch)."""

    path: str  # one of PATHS

    def decide_chunk(self, chunk: bytes, start: int, segment_base: int,
                     decisions: Mapping[tuple[int, int], BatchDecision]) -> Decided | None:
        """A whole chunk of a segment (at byte ``start``) decided in one call, or ``None``:
        the writer then decodes its batches and calls :meth:`decide`."""

    def decide(self, newest_first: Sequence[tuple[RecordBatch, BatchDecision]]) -> list[Any]:
        """The fate of each batch, given and returned newest first."""

    def decided(self) -> None:
        """The backward pass is over: the key table is not read again (the native path
        keeps a large one for the worker's next group). Before any filter call."""

    def filter_chunk(self, chunk: bytes, start: int, segment_base: int,
                     positions: Sequence[int], base_offsets: Sequence[int], fates: Sequence[Any],
                     decisions: Sequence[BatchDecision], *, now_ms: int,
                     delete_retention_ms: int) -> Filtered | None:
        """Every output batch of a chunk (the one :meth:`decide_chunk` saw) in one call, or
        ``None`` (then :meth:`filter`)."""

    def filter(self, batch: RecordBatch, decision: BatchDecision, fate: object, *, now_ms: int,
               delete_retention_ms: int) -> tuple[FilteredBatch, int]:
        """One batch filtered by its fate, and how many of its records were decided to go."""

    def reasons(self) -> Counter[str]:
        """The records decided to go so far, by reason."""

    def from_map(self) -> int:
        """How many of them the offset map superseded across groups."""

    def later(self) -> int:
        """How many of them a later record of their key in the group superseded."""

    def keys(self) -> int:
        """The distinct keys its key table holds so far: what its memory grows with."""

    def records(self) -> int:
        """The records it has decided so far."""


class Engine(Protocol):
    """One implementation of the record work: its groups and its key scan."""

    name: str

    def group(self, superseded: Collection[int], first_dirty: int,
              within: np.ndarray | None = None) -> GroupRewrite:
        """The record work of a group whose records ``superseded`` (distinct offsets: a set,
        or a numpy array as the offset map's rows give them) go by the offset map;
        ``first_dirty`` is the round's first dirty offset. ``within``, when given, are the
        offsets of the group's records that a later record of their key in the group
        supersedes, as the offset map's scan found them by key digest
        (:func:`compactor.cleaner.scan.locally_superseded`): the native group then holds no
        key table; ``None``, the group finds them by key in a table of its own."""

    def segment_keys(self, data: bytes, positions: Sequence[int], chunk_bytes: int,
                     window: Window) -> tuple[KeyColumns, Sequence[int]] | None:
        """The keyed records of the batches at ``positions`` read in bulk, ``chunk_bytes``
        at a time, each chunk taken by ``window``, and the positions left to read one by
        one; ``None``: read every batch one by one."""

    def batch_keys(self, batch: RecordBatch) -> tuple[np.ndarray, list[bytes]] | None:
        """Offsets and keys of one batch's keyed records, or ``None`` (the compiled reader)."""

    def combine_keys(self, key_hi: np.ndarray, key_lo: np.ndarray, offset: np.ndarray,
                     in_map: np.ndarray, buckets: int
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The map-side combine of a group's keyed rows
        (:func:`compactor.cleaner.scan.combine_group`), or ``None``: the reference's."""

    def segment_headers(self, data: Any, path: str, segment_base: int
                        ) -> list[BatchHeader] | None:
        """A segment's batch headers, CRCs verified, read in bulk; ``None``: the pure scan
        (:func:`compactor.cleaner.scan.segment_headers`) reads them."""

    def segment_digests(self, data: Any, path: str, segment_base: int, names: Sequence[str],
                        keep: DigestProbe | None) -> SubjectDigests | None:
        """The erasure digests of a segment (``names``: the header names asked, sorted;
        ``keep``: as :func:`compactor.cleaner.scan.subject_digests`), or ``None``: the pure
        scan reads the segment, and raises where it cannot."""


class _PureRewrite:
    """:data:`PURE`'s group: batch by batch, a Python object per record. Fates are arrays of
    the offsets that go (``None``: every record stays)."""

    def __init__(self, superseded: Collection[int], first_dirty: int, path: str) -> None:
        self.path = path
        # a set to look offsets up in (the offset map's rows arrive as an array)
        self._superseded: Container[int] = (
            frozenset(superseded.tolist()) if isinstance(superseded, np.ndarray) else superseded)
        self._first_dirty = first_dirty
        self._later: set[bytes] = set()  # keys entering the map later in the group
        self._reasons: Counter[str] = Counter()
        self._from_map = self._later_count = self._records = 0

    def decide_chunk(self, chunk: bytes, start: int, segment_base: int,
                     decisions: Mapping[tuple[int, int], BatchDecision]) -> Decided | None:
        return None

    def decide(self, newest_first: Sequence[tuple[RecordBatch, BatchDecision]]) -> list[Any]:
        fates: list[Any] = []
        self._records += sum(batch.records_count for batch, _ in newest_first)
        for goes in iter_drops(newest_first, self._superseded, self._first_dirty, self._later):
            fates.append(array("q", goes.offsets) if goes.offsets else None)
            self._reasons.update(goes.reasons)
            self._from_map += goes.from_map
            self._later_count += goes.later
        return fates

    def decided(self) -> None:
        return None  # the key set goes with the group

    def filter_chunk(self, chunk: bytes, start: int, segment_base: int,
                     positions: Sequence[int], base_offsets: Sequence[int], fates: Sequence[Any],
                     decisions: Sequence[BatchDecision], *, now_ms: int,
                     delete_retention_ms: int) -> Filtered | None:
        return None

    def filter(self, batch: RecordBatch, decision: BatchDecision, fate: object, *, now_ms: int,
               delete_retention_ms: int) -> tuple[FilteredBatch, int]:
        goes = fate if isinstance(fate, array) else ()
        return filter_batch(batch, decision, frozenset(goes), now_ms=now_ms,
                            delete_retention_ms=delete_retention_ms), len(goes)

    def reasons(self) -> Counter[str]:
        return self._reasons

    def from_map(self) -> int:
        return self._from_map

    def later(self) -> int:
        return self._later_count

    def keys(self) -> int:
        return len(self._later)

    def records(self) -> int:
        return self._records


class _PureEngine:
    name = "pure"

    def group(self, superseded: Collection[int], first_dirty: int,
              within: np.ndarray | None = None) -> GroupRewrite:
        # ``within`` unused: the reference finds them by key (the writer checks the counts)
        return _PureRewrite(superseded, first_dirty, "pure")

    def segment_keys(self, data: bytes, positions: Sequence[int], chunk_bytes: int,
                     window: Window) -> tuple[KeyColumns, Sequence[int]] | None:
        return None

    def batch_keys(self, batch: RecordBatch) -> tuple[np.ndarray, list[bytes]] | None:
        return None

    def combine_keys(self, key_hi: np.ndarray, key_lo: np.ndarray, offset: np.ndarray,
                     in_map: np.ndarray, buckets: int
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        return None

    def segment_headers(self, data: Any, path: str, segment_base: int
                        ) -> list[BatchHeader] | None:
        return None

    def segment_digests(self, data: Any, path: str, segment_base: int, names: Sequence[str],
                        keep: DigestProbe | None) -> SubjectDigests | None:
        return None


#: the pure-Python path, importable without numba
PURE: Engine = _PureEngine()

#: the engines a round can use (``--writer``): the numba kernels
#: (:func:`compactor.native.engine`), or :data:`PURE`, the reference
WRITERS = ("native", "pure")


def check_writer(writer: str) -> None:
    """Raises: ConfigError: ``writer`` is none of :data:`WRITERS` (numba is not imported)."""
    if writer not in WRITERS:
        raise ConfigError(f"unknown writer {writer!r}; use one of {', '.join(WRITERS)}",
                          remedy="pass --writer native or --writer pure")


def fallback_group(superseded: Collection[int], first_dirty: int) -> GroupRewrite:
    """The pure path for a group the native one handed back (:class:`Fallback`)."""
    return _PureRewrite(superseded, first_dirty, "fallback")
