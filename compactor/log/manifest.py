"""The swap of a partition on an object store, where nothing can be renamed.

Kafka's swap (``LocalLog.replaceSegments``, :mod:`compactor.log.swap`) makes each step durable
with an atomic rename. An object store has no rename and no directory fsync; its one atomic
step is a PUT, and its one guard a condition on an ETag. So the commit point of a partition
is one PUT of a **swap manifest**, ``<partition>/.compactor-swap.json``, listing every change
the swap makes and the identity (ETag) of every object it changes as the scan saw it:

1. executors have written each group's new files as ``<base><suffix>.cleaned`` objects
   (multipart uploads: nothing is visible until an upload completes);
2. the driver checks each cleaned ``.log`` against the CRC its executor reported, checks that
   every object the swap will overwrite or delete still has the ETag the scan saw (and that
   no new file took a name it will write), proves it still holds the log dir's lease, and
   PUTs the manifest with ``If-None-Match: *`` -- **the commit point**;
3. *backups*: each final name that exists is copied to ``<name>.deleted`` (on condition of its
   scanned ETag), so that the old bytes survive until the swap is complete;
4. *copies*: each ``.cleaned`` object is copied over its final name (on condition of the ETag
   the manifest recorded: a straggling executor or another writer cannot slip in other bytes);
5. *deletes*: the old segments' files no copy replaces, and the producer snapshots of the
   merged segments, each deleted only while it still has its scanned ETag (``If-Match``);
6. delete the manifest -- the swap is complete; then the ``.cleaned`` objects and backups.

Every object a swap writes carries the swap's id in its metadata (``x-amz-meta-compactor-
swap``), so a later look can tell "done by this swap" from "written by someone else". Each of
steps 3-6 proves the lease first (a conditional renewal, :func:`storage.fence`).

After a crash, :func:`roll_forward` (called by :func:`compactor.log.recovery.recover_partition`)
looks at every object the manifest names and then either **finishes** the swap (-> new) or,
when something other than this swap changed one of them and no old file has been deleted
yet, **undoes** it (-> old: backups copied back, the manifest marked ``undo`` first so that
the decision survives a crash of its own). Once deletes have begun, every copy is in place and
the swap is finished; an old file changed by another writer at that point is kept and named
in the error. Without a manifest, the ``.cleaned`` objects and ``.deleted`` backups are
orphans of a swap that either never committed (old) or completed (new), and recovery deletes
them.

What the conditions cannot close: a store that ignores conditional requests, and a write
that reaches the store after the lease was proven but stays in flight (a proxy holding it)
beyond the lease's margin; README's guarantees say so.

A reader listing the prefix while a manifest is present is looking at a swap in progress: it
must run ``compactor recover`` (or wait) before reading. The manifest says so in its ``note``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from compactor.errors import CommitConflictError, ConditionFailedError, SwapRecoveryError
from compactor.log import storage
from compactor.log.names import DELETED_SUFFIX

MANIFEST_NAME = ".compactor-swap.json"
FORMAT = 2
NOTE = ("a kafka-compactor swap is in progress in this partition: do not read it until this "
        "file is gone (`compactor recover <log dir>` finishes the swap)")
SWAP_KEY = "compactor-swap"  # user metadata of every object a swap writes: "<id>" / "<id>-undo"
BACKUP_SUFFIX = DELETED_SUFFIX  # what Kafka's loader and ours delete when no swap needs it


@dataclass(frozen=True, slots=True)
class Copy:
    source: str  # name of the .cleaned object in the partition directory
    target: str  # final name
    etag: str  # ETag of the .cleaned object when the manifest was written


@dataclass(frozen=True, slots=True)
class SwapManifest:
    """A swap: ``sources`` is ``(name, ETag)`` of every existing object it overwrites or
    deletes, as the scan saw them; ``undo`` marks a swap being undone."""

    copies: tuple[Copy, ...]
    deletes: tuple[str, ...]
    sources: tuple[tuple[str, str], ...]
    id: str = ""
    undo: bool = False

    @property
    def scanned(self) -> dict[str, str]:
        return dict(self.sources)

    def encode(self) -> bytes:
        return json.dumps({
            "format": FORMAT, "note": NOTE, "id": self.id, "undo": self.undo,
            "copies": [{"from": c.source, "to": c.target, "etag": c.etag} for c in self.copies],
            "deletes": list(self.deletes),
            "sources": dict(self.sources),
        }, indent=1).encode()

    @staticmethod
    def decode(data: bytes, *, path: str) -> SwapManifest:
        """Raises: SwapRecoveryError: not a manifest this version writes."""
        try:
            raw = json.loads(data)
            if raw.get("format") != FORMAT:
                raise ValueError(f"format {raw.get('format')!r}, expected {FORMAT}")
            copies = tuple(Copy(str(c["from"]), str(c["to"]), str(c["etag"]))
                           for c in raw["copies"])
            deletes = tuple(str(n) for n in raw["deletes"])
            sources = tuple((str(k), str(v)) for k, v in dict(raw["sources"]).items())
            swap_id, undo = str(raw["id"]), bool(raw["undo"])
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise SwapRecoveryError(f"swap manifest is unreadable: {err}", path=path,
                                    remedy="inspect the partition by hand; nothing was "
                                           "changed") from err
        for name in (*(c.source for c in copies), *(c.target for c in copies), *deletes,
                     *(n for n, _ in sources)):
            if "/" in name or name in ("", ".", ".."):
                raise SwapRecoveryError(f"swap manifest names {name!r}, not a file of this "
                                        f"partition", path=path)
        if not swap_id:
            raise SwapRecoveryError("swap manifest has no id", path=path)
        return SwapManifest(copies, deletes, sources, swap_id, undo)


def manifest_path(partition_dir: str) -> str:
    return storage.join(partition_dir, MANIFEST_NAME)


def new_manifest(copies: tuple[Copy, ...], deletes: tuple[str, ...],
                 scanned: Mapping[str, str]) -> SwapManifest:
    """The manifest of a swap about to commit; ``scanned`` holds the identity of every file
    of the partition when the scan listed it."""
    names = {c.target for c in copies} | set(deletes)
    return SwapManifest(copies, deletes, tuple(sorted((n, scanned[n]) for n in names
                                                      if n in scanned)),
                        id=uuid.uuid4().hex)


def changed_since_scan(manifest: SwapManifest, current: Mapping[str, str]) -> list[str]:
    """What differs now from what the scan saw, among the files the swap changes (empty when
    nothing): a source written again or gone, a new file where the swap writes one."""
    scanned = manifest.scanned
    out = []
    for name, etag in scanned.items():
        now = current.get(name)
        if now != etag:
            out.append(f"{name} {'is gone' if now is None else 'was written again'}")
    for name in manifest.deletes:
        if name not in scanned:
            out.append(f"{name} appeared")
    for c in manifest.copies:
        if c.target not in scanned and c.target in current:
            out.append(f"{c.target} appeared")
        if current.get(c.source) != c.etag:
            out.append(f"{c.source} {'is gone' if c.source not in current else 'was replaced'}")
    return out


def commit(partition_dir: str, manifest: SwapManifest) -> None:
    """Check the sources, prove the lease, write the manifest (the commit point), then carry
    it out.

    Raises:
        CommitConflictError: a file changed since the scan (nothing was changed), or an
            earlier swap is unfinished (recover first), or this swap had to be undone.
        LogDirLockedError: the lease is lost; nothing was changed.
    """
    path = manifest_path(partition_dir)
    changed = changed_since_scan(manifest, storage.identities(partition_dir))
    if changed:
        raise CommitConflictError(
            "files changed since the scan: " + "; ".join(changed), path=partition_dir,
            remedy="something other than this run writes to the partition: stop it, then "
                   "run again (nothing was changed)")
    storage.fence(partition_dir)
    try:
        storage.write_new(path, manifest.encode())
    except ConditionFailedError as err:
        raise CommitConflictError(
            "an earlier swap of this partition is unfinished", path=path,
            remedy="run `compactor recover` on the log dir, then run again") from err
    if roll_forward(partition_dir, manifest) == UNDONE:
        raise CommitConflictError(
            "a file the swap changes was changed by another writer during the swap; the swap "
            "was undone and the partition is as it was", path=partition_dir,
            remedy="something other than this run writes to the partition: stop it, then "
                   "run again")


def read(partition_dir: str) -> SwapManifest | None:
    path = manifest_path(partition_dir)
    if not storage.exists(path):
        return None
    return SwapManifest.decode(storage.read_bytes(path), path=path)


FINISHED, UNDONE = "finished", "undone"


@dataclass
class _Survey:
    """Each named object's state: ``old`` (as scanned), ``new`` (written by this swap),
    ``gone``, ``foreign`` (written by someone else)."""

    targets: dict[str, str]
    backups: dict[str, str]
    cleaned: dict[str, str]
    deletes: dict[str, str]

    def foreign(self) -> list[str]:
        return [f"{n} ({kind})" for kind, states in (
            ("final name", self.targets), ("backup", self.backups), ("cleaned copy", self.cleaned),
            ("old file", self.deletes)) for n, s in states.items() if s == "foreign"]


def _mark(partition_dir: str, name: str) -> str | None:
    found = storage.object_metadata(storage.join(partition_dir, name))
    return None if found is None else found[1].get(SWAP_KEY, "")


def _survey(partition_dir: str, m: SwapManifest) -> _Survey:
    current = storage.identities(partition_dir)
    scanned = m.scanned

    def state(name: str, expected: str | None, written: bool) -> str:
        """``written``: whether this swap may have written ``name`` (its mark decides first:
        new bytes may equal the old ones, and so may their ETags)."""
        now = current.get(name)
        if now is None:
            return "gone"
        mark = _mark(partition_dir, name) if written else None
        if mark == m.id:
            return "new"
        if mark == m.id + "-undo" or (expected is not None and now == expected):
            return "old"  # as scanned, or copied back from its backup by an undo
        return "foreign"

    targets, backups, cleaned = {}, {}, {}
    for c in m.copies:
        targets[c.target] = state(c.target, scanned.get(c.target), True)
        if targets[c.target] == "gone" and c.target not in scanned:
            targets[c.target] = "old"  # a new name: absent is as scanned
        if c.target in scanned:
            backups[c.target] = state(c.target + BACKUP_SUFFIX, None, True)
        now = current.get(c.source)
        cleaned[c.source] = ("gone" if now is None else "old" if now == c.etag else "foreign")
    deletes = {d: state(d, scanned.get(d), False) for d in m.deletes}
    return _Survey(targets, backups, cleaned, deletes)


def _located(partition_dir: str, message: str, remedy: str) -> SwapRecoveryError:
    return SwapRecoveryError(message, path=manifest_path(partition_dir), remedy=remedy)


def roll_forward(partition_dir: str, manifest: SwapManifest) -> str:
    """Carry a committed swap to its end (module docstring): :data:`FINISHED` or
    :data:`UNDONE`. Idempotent: a crash anywhere in it is healed by running it again.

    Raises:
        SwapRecoveryError: the swap can be neither finished nor undone (the manifest is kept
            and names what is missing); or it was finished but an old file another writer
            changed meanwhile was kept.
        LogDirLockedError: the lease was lost (nothing more is changed).
    """
    survey = _survey(partition_dir, manifest)
    deleting = any(s == "gone" for s in survey.deletes.values())
    if manifest.undo or (survey.foreign() and not deleting) or (
            not deleting and any(s != "old" for c, s in survey.cleaned.items()
                                 if survey.targets[_target_of(manifest, c)] != "new")):
        _undo(partition_dir, manifest, survey)
        return UNDONE
    kept = _finish(partition_dir, manifest, survey)
    if kept is None:
        return UNDONE
    if kept:
        raise _located(partition_dir, "the swap was finished, but another writer changed "
                       + ", ".join(kept) + " while it ran; that file was kept",
                       "inspect the partition (`compactor inspect --verify`): the kept file "
                       "overlaps the new segment; remove it or restore the old log by hand")
    return FINISHED


def _target_of(m: SwapManifest, cleaned: str) -> str:
    return next(c.target for c in m.copies if c.source == cleaned)


def _finish(partition_dir: str, m: SwapManifest, survey: _Survey) -> list[str] | None:
    """Steps 3-6; returns the old files kept because another writer changed them after
    deleting began, or ``None`` when a change met before then made it undo the swap."""
    join = lambda n: storage.join(partition_dir, n)  # noqa: E731
    scanned = m.scanned
    if any(s == "gone" for s in survey.deletes.values()):  # deleting began: copies are done
        missing = [t for t, s in survey.targets.items() if s != "new"]
        if missing:
            raise _located(partition_dir, "the swap began deleting old files, but "
                           + ", ".join(missing) + " do not hold its new bytes",
                           "inspect the partition by hand; nothing more was changed")
    try:
        for c in m.copies:
            if survey.targets[c.target] == "new":
                continue
            if c.target in scanned and survey.backups.get(c.target) != "new":
                found = storage.object_metadata(join(c.target))
                storage.fence(partition_dir)
                storage.copy(join(c.target), join(c.target + BACKUP_SUFFIX),
                             if_source_etag=scanned[c.target],
                             metadata={**(found[1] if found else {}), SWAP_KEY: m.id})
            found = storage.object_metadata(join(c.source))
            storage.fence(partition_dir)
            storage.copy(join(c.source), join(c.target), if_source_etag=c.etag,
                         metadata={**(found[1] if found else {}), SWAP_KEY: m.id})
        if not any(s == "gone" for s in survey.deletes.values()):
            # the last look before the first delete: a change now can still be undone
            again = _survey(partition_dir, m)
            if again.foreign():
                raise ConditionFailedError("changed during the swap: "
                                           + ", ".join(again.foreign()), path=partition_dir)
    except ConditionFailedError:
        _undo(partition_dir, m, _survey(partition_dir, m))
        return None
    kept = []
    for name in m.deletes:
        if survey.deletes[name] == "gone":
            continue
        storage.fence(partition_dir)
        try:
            storage.remove(join(name), missing_ok=True, if_match=scanned[name])
        except ConditionFailedError:
            kept.append(name)
    _complete(partition_dir, m)
    return kept


def _undo(partition_dir: str, m: SwapManifest, survey: _Survey) -> None:
    """Put every final name back as scanned, then drop the swap (-> old)."""
    join = lambda n: storage.join(partition_dir, n)  # noqa: E731
    path = manifest_path(partition_dir)
    if not m.undo:  # the decision first, so that a crash from here on goes on undoing
        found = storage.object_metadata(path)
        if found is None:
            raise _located(partition_dir, "the swap manifest vanished while it was undone",
                           "inspect the partition by hand")
        storage.fence(partition_dir)
        storage.write_atomic(path, SwapManifest(m.copies, m.deletes, m.sources, m.id,
                                                undo=True).encode())
    lost = [d for d, s in survey.deletes.items() if s == "gone"]
    for c in m.copies:
        if survey.targets[c.target] != "new":
            continue
        if c.target not in m.scanned:  # a name the swap created
            storage.fence(partition_dir)
            storage.remove(join(c.target), missing_ok=True)
            continue
        backup = join(c.target + BACKUP_SUFFIX)
        found = storage.object_metadata(backup)
        if found is None or found[1].get(SWAP_KEY) != m.id:
            lost.append(c.target)
            continue
        storage.fence(partition_dir)
        storage.copy(backup, join(c.target), if_source_etag=found[0],
                     metadata={**found[1], SWAP_KEY: m.id + "-undo"})
    if lost:
        raise _located(partition_dir, "the swap cannot be undone: the old bytes of "
                       + ", ".join(lost) + " are gone", "inspect the partition by hand; the "
                       "swap manifest lists what the swap changed")
    _complete(partition_dir, m)


def _complete(partition_dir: str, m: SwapManifest) -> None:
    """Drop the manifest, then the swap's temporary objects (orphans without it)."""
    storage.fence(partition_dir)
    storage.remove(manifest_path(partition_dir), missing_ok=True)
    for c in m.copies:
        storage.remove(storage.join(partition_dir, c.source), missing_ok=True)
        if c.target in m.scanned:
            storage.remove(storage.join(partition_dir, c.target + BACKUP_SUFFIX),
                           missing_ok=True)


def names_after(names: list[str], manifest: SwapManifest) -> list[str]:
    """The directory's names once :func:`roll_forward` has finished the swap (a dry run)."""
    gone = {*manifest.deletes, MANIFEST_NAME, *(c.source for c in manifest.copies),
            *(c.target + BACKUP_SUFFIX for c in manifest.copies)}
    return sorted((set(names) - gone) | {c.target for c in manifest.copies})

