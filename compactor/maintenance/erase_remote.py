"""Erasure in a broker's remote tier (KIP-405): one served remote segment replaced by a copy
without a subject's records, through Kafka's own interfaces (:mod:`compactor.remote.tier`).

The broker never rewrites an uploaded segment, and serves a remote segment by its id (its
``RemoteIndexCache`` keeps the indexes under that id), so an erased copy is a new segment: same
start and end offsets, leader epochs and max timestamp, a new id. Its records are rebuilt as a
local erasure rebuilds them (:func:`compactor.spark.writer.write_erased_segment`: the same
offsets, CRCs, producer fields; the offset and time indexes rebuilt, the transaction index
carried over), and the batches that must stay as empty headers are those
:func:`compactor.erasure.rules.keep_when_emptied` keeps among the segment's own batches (every
producer's last batch in it: a superset of the log-wide rule, so no producer state is lost).
The copy is published before the old segment is retired (``RemoteTier.java``'s ``replace``),
so the broker serves one whole segment at every step. This runs against a live cluster (its
remote log metadata manager is reached through ``bootstrap``); nothing here touches the log dir.

A replacement is journaled in the state dir before its first step (``remote-replacements/``:
the old id, the new id chosen here, the partition) and the entry removed after its last, so a
crash at any step leaves an entry that :func:`resolve_interrupted` settles by the cluster's
remote log metadata: a copy not yet finished is retired (the old segment was served all
along), a finished copy has the old segment retired.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from compactor.cleaner.scan import batch_header
from compactor.codec.segment import iter_batches
from compactor.config import TopicConfig
from compactor.erasure.rules import keep_when_emptied
from compactor.errors import RemoteTierError
from compactor.log import storage
from compactor.log.layout import load_partition, segment_path
from compactor.log.names import CLEANED_SUFFIX, INDEX_FILE_SUFFIXES, LOG_SUFFIX
from compactor.remote import tier
from compactor.spark.writer import write_erased_segment

#: the files of a segment the RSM copies (named ``segment<suffix>`` for the helper)
SEGMENT_SUFFIXES = (LOG_SUFFIX, *INDEX_FILE_SUFFIXES)
#: the state dir's folder of replacements under way (one JSON file each, by old segment id)
JOURNAL = "remote-replacements"


@dataclass(frozen=True, slots=True)
class RemoteRewrite:
    """One remote segment replaced: the old and the new id, the records erased, the steps."""

    segment_id: str
    new_segment_id: str
    start_offset: int
    end_offset: int
    records_in: int
    records_out: int
    steps: tuple[dict[str, Any], ...]


def erase_remote_segment(helper: str, server_properties: str, log_dir: str, bootstrap: str,
                         segment: tier.RemoteSegment, erased: Mapping[int, Collection[int]],
                         config: TopicConfig, *, state_dir: str,
                         tombstones: Mapping[int, Collection[int]] | None = None
                         ) -> RemoteRewrite:
    """Replace ``segment`` by a copy without the ``erased`` records (batch position ->
    offsets; ``tombstones``: records left as bare tombstones, as ``--leave-tombstone``),
    journaled in ``state_dir``.

    Raises:
        RemoteTierError: the segment could not be fetched, rebuilt or replaced (the steps done
            are named; before ``copy_finished`` the old segment is still the one served); the
            journal entry stays for :func:`resolve_interrupted`.
    """
    with storage.temporary_dir("kafka-compactor-remote-") as folder:
        pdir = storage.join(folder, segment.partition_name)
        storage.make_dirs(pdir)
        log = segment_path(pdir, segment.start_offset)
        why = tier.fetch_segments(helper, server_properties, log_dir,
                                  [(segment.segment_id, log)]).get(segment.segment_id)
        if why is not None:
            raise RemoteTierError(f"remote segment {segment.segment_id} could not be fetched: "
                                  f"{why}", base_offset=segment.start_offset)
        part = load_partition(pdir)
        headers = [batch_header(b, segment.start_offset)
                   for b in iter_batches(storage.read_bytes(log), path=log)]
        keep = {p for _, p in keep_when_emptied(headers, segment.end_offset + 1)}
        message = write_erased_segment(pdir, part.segments[0], erased, keep, config,
                                       tombstones=tombstones)
        if message.error is not None:
            raise RemoteTierError(f"the erased copy of remote segment {segment.segment_id} "
                                  f"could not be written: {message.error.get('message')}",
                                  base_offset=segment.start_offset)
        copy = storage.join(folder, "copy")
        storage.make_dirs(copy)
        for suffix in SEGMENT_SUFFIXES:
            cleaned = segment_path(pdir, segment.start_offset, suffix + CLEANED_SUFFIX)
            if storage.exists(cleaned):
                storage.rename(cleaned, storage.join(copy, f"segment{suffix}"))
        new_id = tier.new_segment_id()
        entry = _journal_path(state_dir, segment.segment_id)
        storage.make_dirs(storage.join(state_dir, JOURNAL))
        storage.write_atomic(entry, json.dumps({
            "segment_id": segment.segment_id, "new_segment_id": new_id,
            "topic": segment.topic, "topic_id": segment.topic_id,
            "partition": segment.partition, "start_offset": segment.start_offset,
            "end_offset": segment.end_offset}, sort_keys=True).encode())
        steps = tier.replace_segment(helper, server_properties, log_dir, bootstrap,
                                     segment.segment_id, new_id, copy)
        storage.remove(entry)
    return RemoteRewrite(segment_id=segment.segment_id, new_segment_id=new_id,
                         start_offset=segment.start_offset, end_offset=segment.end_offset,
                         records_in=message.records_in, records_out=message.records_out,
                         steps=tuple(steps))


def _journal_path(state_dir: str, segment_id: str) -> str:
    return storage.join(state_dir, JOURNAL, f"{segment_id}.json")


@dataclass(frozen=True, slots=True)
class Resolved:
    """An interrupted replacement settled: ``finished`` (the copy is served, the old segment
    retired) or ``undone`` (the copy retired, the old segment still served), or why not."""

    segment_id: str
    new_segment_id: str
    topic: str
    partition: int
    outcome: str | None
    steps: tuple[dict[str, Any], ...] = ()
    error: dict[str, Any] | None = None

    def line(self) -> dict[str, Any]:
        out: dict[str, Any] = {"segment_id": self.segment_id,
                               "new_segment_id": self.new_segment_id,
                               "partition": f"{self.topic}-{self.partition}",
                               "outcome": self.outcome}
        if self.error is not None:
            out["error"] = self.error
        return out


def resolve_interrupted(helper: str, server_properties: str, log_dir: str, bootstrap: str,
                        state_dir: str) -> list[Resolved]:
    """Every replacement the journal in ``state_dir`` holds, settled (its entry removed);
    one the cluster cannot settle now keeps its entry and says why."""
    folder = storage.join(state_dir, JOURNAL)
    if not storage.is_dir(folder):
        return []
    out = []
    for name in sorted(storage.list_dir(folder)):
        if not name.endswith(".json"):
            continue
        path = storage.join(folder, name)
        e = json.loads(storage.read_text(path))
        segment = tier.RemoteSegment(
            topic=e["topic"], topic_id=e["topic_id"], partition=e["partition"],
            segment_id=e["segment_id"], start_offset=e["start_offset"],
            end_offset=e["end_offset"], state="", size_bytes=0, max_timestamp_ms=0,
            leader_epochs={})
        try:
            steps = tier.resolve_replacement(helper, server_properties, log_dir, bootstrap,
                                             segment, e["new_segment_id"])
        except RemoteTierError as err:
            out.append(Resolved(e["segment_id"], e["new_segment_id"], e["topic"],
                                e["partition"], None, error=err.to_dict()))
            continue
        storage.remove(path)
        out.append(Resolved(e["segment_id"], e["new_segment_id"], e["topic"], e["partition"],
                            steps[-1]["step"], tuple(steps)))
    return out
