"""The swap of a partition on an object store, where nothing can be renamed.

Kafka's swap (``LocalLog.replaceSegments``, :mod:`compactor.log.swap`) makes each step durable
with an atomic rename. An object store has no rename and no directory fsync; its one atomic
step is a PUT. So the commit point of a partition is one PUT of a **swap manifest**,
``<partition>/.compactor-swap.json``, listing every change the swap makes:

1. executors have written each group's new files as ``<base><suffix>.cleaned`` objects
   (multipart uploads: nothing is visible until an upload completes);
2. the driver checks each cleaned ``.log`` against the CRC its executor reported and PUTs the
   manifest with ``If-None-Match: *``: the ``copies`` (``.cleaned`` -> final name, with the
   ETag of the ``.cleaned`` object) and the ``deletes`` (the old segments' files that no copy
   replaces, and the producer snapshots of the merged segments) -- **the commit point**;
3. copy each ``.cleaned`` object over its final name, on condition that it still has the ETag
   the manifest recorded (a straggling executor cannot slip in other bytes);
4. delete the ``deletes``;
5. delete the manifest -- the swap is complete;
6. delete the ``.cleaned`` objects.

After a crash (what :func:`compactor.log.layout.recover_partition` does, through
:func:`roll_forward`):

* before 2: no manifest; the old objects are untouched and the ``.cleaned`` objects are orphans
  that recovery deletes -> **old**;
* during 3-5: the manifest is there and every ``.cleaned`` object still is (they go only in
  6): steps 3-6 are run again (each is idempotent) -> **new**;
* during 6: no manifest, only ``.cleaned`` objects whose copies are done; recovery deletes
  them -> **new**.

A reader listing the prefix while a manifest is present is looking at a swap in progress
(some final names may already hold new data while old segments are still there): it must
run ``compactor recover`` (or wait) before reading. The manifest says so in its ``note``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from compactor.errors import CommitConflictError, ConditionFailedError, SwapRecoveryError
from compactor.log import storage

MANIFEST_NAME = ".compactor-swap.json"
FORMAT = 1
NOTE = ("a kafka-compactor swap is in progress in this partition: do not read it until this "
        "file is gone (`compactor recover <log dir>` finishes the swap)")


@dataclass(frozen=True, slots=True)
class Copy:
    source: str  # name of the .cleaned object in the partition directory
    target: str  # final name
    etag: str  # ETag of the .cleaned object when the manifest was written


@dataclass(frozen=True, slots=True)
class SwapManifest:
    copies: tuple[Copy, ...]
    deletes: tuple[str, ...]

    def encode(self) -> bytes:
        return json.dumps({
            "format": FORMAT, "note": NOTE,
            "copies": [{"from": c.source, "to": c.target, "etag": c.etag} for c in self.copies],
            "deletes": list(self.deletes),
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
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise SwapRecoveryError(f"swap manifest is unreadable: {err}", path=path,
                                    remedy="inspect the partition by hand; nothing was "
                                           "changed") from err
        for name in (*(c.source for c in copies), *(c.target for c in copies), *deletes):
            if "/" in name or name in ("", ".", ".."):
                raise SwapRecoveryError(f"swap manifest names {name!r}, not a file of this "
                                        f"partition", path=path)
        return SwapManifest(copies, deletes)


def manifest_path(partition_dir: str) -> str:
    return storage.join(partition_dir, MANIFEST_NAME)


def commit(partition_dir: str, manifest: SwapManifest) -> None:
    """Write the manifest (the commit point), then carry it out.

    Raises:
        CommitConflictError: a manifest is already there (an unfinished swap: recover first).
    """
    path = manifest_path(partition_dir)
    try:
        storage.write_new(path, manifest.encode())
    except ConditionFailedError as err:
        raise CommitConflictError(
            "an earlier swap of this partition is unfinished", path=path,
            remedy="run `compactor recover` on the log dir, then run again") from err
    roll_forward(partition_dir, manifest)


def read(partition_dir: str) -> SwapManifest | None:
    path = manifest_path(partition_dir)
    if not storage.exists(path):
        return None
    return SwapManifest.decode(storage.read_bytes(path), path=path)


def roll_forward(partition_dir: str, manifest: SwapManifest) -> None:
    """Steps 3-6 of the module docstring; idempotent, so a crash anywhere in it is healed by
    running it again.

    Raises:
        SwapRecoveryError: a ``.cleaned`` object the manifest names is gone or was replaced
            (the manifest is kept, nothing more is changed).
    """
    for c in manifest.copies:
        source = storage.join(partition_dir, c.source)
        if not storage.exists(source) or storage.object_etag(source) != c.etag:
            raise SwapRecoveryError(
                f"the swap manifest needs {c.source} with ETag {c.etag}, but it is "
                f"{'gone' if not storage.exists(source) else 'a different object'}",
                path=manifest_path(partition_dir),
                remedy="something other than kafka-compactor changed this partition during a "
                       "swap: inspect it by hand; nothing more was changed")
        storage.copy(source, storage.join(partition_dir, c.target), if_source_etag=c.etag)
    for name in manifest.deletes:
        storage.remove(storage.join(partition_dir, name), missing_ok=True)
    storage.remove(manifest_path(partition_dir), missing_ok=True)
    for c in manifest.copies:
        storage.remove(storage.join(partition_dir, c.source), missing_ok=True)


def names_after(names: list[str], manifest: SwapManifest) -> list[str]:
    """The directory's names once :func:`roll_forward` has run (for a dry run)."""
    gone = {*manifest.deletes, MANIFEST_NAME, *(c.source for c in manifest.copies)}
    return sorted((set(names) - gone) | {c.target for c in manifest.copies})
