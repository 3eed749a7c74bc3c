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
from collections.abc import Collection, Mapping, Sequence
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


@dataclass(frozen=True, slots=True)
class RemoteTarget:
    """A remote segment to replace by a copy without the ``erased`` records (batch position ->
    offsets; ``tombstones``: records left as bare tombstones, as ``--leave-tombstone``)."""

    segment: tier.RemoteSegment
    erased: Mapping[int, Collection[int]]
    config: TopicConfig
    tombstones: Mapping[int, Collection[int]] | None = None


def erase_remote_segments(helper: str, server_properties: str, log_dir: str, bootstrap: str,
                          targets: Sequence[RemoteTarget], *, state_dir: str
                          ) -> list[RemoteRewrite | RemoteTierError]:
    """Replace each target's segment by its erased copy, journaled in ``state_dir``: the
    segments fetched through the RSM in one helper, rebuilt here, then replaced in one more
    (one RLMM for all). Returns, per target, the replacement or why it did not end (before
    ``copy_finished`` the old segment is still the one served; the journal entry of one that
    began stays for :func:`resolve_interrupted`).

    Raises:
        RemoteTierError: the helper could not run or was killed (every entry stays).
    """
    out: dict[str, RemoteRewrite | RemoteTierError] = {}
    with storage.temporary_dir("kafka-compactor-remote-") as folder:
        logs = {}
        for t in targets:
            pdir = storage.join(folder, t.segment.segment_id, t.segment.partition_name)
            storage.make_dirs(pdir)
            logs[t.segment.segment_id] = segment_path(pdir, t.segment.start_offset)
        fetched = tier.fetch_segments(helper, server_properties, log_dir, list(logs.items()))
        built: dict[str, tuple[str, str, Any]] = {}  # segment id -> (new id, copy dir, message)
        for t in targets:
            seg = t.segment
            try:
                why = fetched.get(seg.segment_id)
                if why is not None:
                    raise RemoteTierError(f"remote segment {seg.segment_id} could not be "
                                          f"fetched: {why}", base_offset=seg.start_offset)
                copy, message = _rebuild(logs[seg.segment_id], t)
            except RemoteTierError as err:
                out[seg.segment_id] = err
                continue
            built[seg.segment_id] = (tier.new_segment_id(), copy, message)
            storage.make_dirs(storage.join(state_dir, JOURNAL))
            storage.write_atomic(_journal_path(state_dir, seg.segment_id), json.dumps({
                "segment_id": seg.segment_id, "new_segment_id": built[seg.segment_id][0],
                "topic": seg.topic, "topic_id": seg.topic_id, "partition": seg.partition,
                "start_offset": seg.start_offset, "end_offset": seg.end_offset},
                sort_keys=True).encode())
        done = tier.replace_segments(helper, server_properties, log_dir, bootstrap,
                                     [(old, new, copy) for old, (new, copy, _) in built.items()])
        for t in targets:
            seg = t.segment
            if seg.segment_id not in built:
                continue
            new_id, _, message = built[seg.segment_id]
            steps, error = done[seg.segment_id]
            if error is not None:
                out[seg.segment_id] = RemoteTierError(
                    f"the replacement of remote segment {seg.segment_id} failed: {error} "
                    f"(steps done: {', '.join(x['step'] for x in steps) or 'none'})",
                    base_offset=seg.start_offset)
                continue
            storage.remove(_journal_path(state_dir, seg.segment_id))
            out[seg.segment_id] = RemoteRewrite(
                segment_id=seg.segment_id, new_segment_id=new_id,
                start_offset=seg.start_offset, end_offset=seg.end_offset,
                records_in=message.records_in, records_out=message.records_out,
                steps=tuple(steps))
    return [out[t.segment.segment_id] for t in targets]


def _rebuild(log: str, target: RemoteTarget) -> tuple[str, Any]:
    """The erased copy of the fetched segment ``log``, its files named ``segment<suffix>`` in
    a folder of their own (returned, with the writer's message)."""
    seg = target.segment
    pdir = storage.dirname(log)
    part = load_partition(pdir)
    headers = [batch_header(b, seg.start_offset)
               for b in iter_batches(storage.read_bytes(log), path=log)]
    keep = {p for _, p in keep_when_emptied(headers, seg.end_offset + 1)}
    message = write_erased_segment(pdir, part.segments[0], target.erased, keep, target.config,
                                   tombstones=target.tombstones)
    if message.error is not None:
        raise RemoteTierError(f"the erased copy of remote segment {seg.segment_id} could not "
                              f"be written: {message.error.get('message')}",
                              base_offset=seg.start_offset)
    copy = storage.join(storage.dirname(pdir), "copy")
    storage.make_dirs(copy)
    for suffix in SEGMENT_SUFFIXES:
        cleaned = segment_path(pdir, seg.start_offset, suffix + CLEANED_SUFFIX)
        if storage.exists(cleaned):
            storage.rename(cleaned, storage.join(copy, f"segment{suffix}"))
    return copy, message


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
        try:
            steps = tier.resolve_replacement(
                helper, server_properties, log_dir, bootstrap, e["segment_id"],
                e["new_segment_id"], (e["topic_id"], e["topic"], e["partition"]))
        except RemoteTierError as err:
            out.append(Resolved(e["segment_id"], e["new_segment_id"], e["topic"],
                                e["partition"], None, error=err.to_dict()))
            continue
        storage.remove(path)
        out.append(Resolved(e["segment_id"], e["new_segment_id"], e["topic"], e["partition"],
                            steps[-1]["step"], tuple(steps)))
    return out
