"""A small, sequential, pure-Python compactor: the oracle of the differential tests.

It follows Kafka's ``Cleaner.doClean`` literally for one partition: the offset map is a plain
dict keyed by the raw key bytes, built by walking the dirty section in offset order, and every
record is decided in the same walk that rewrites it. It shares the per-batch rules
(:mod:`compactor.cleaner.policy`) and the byte-level re-batching (:mod:`compactor.cleaner.rebatch`)
with the Spark job, but none of the distributed machinery: no digests, no shuffles, no DataFrames.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from compactor.cleaner.policy import BatchRetention, CleaningPlan, PartitionInput
from compactor.cleaner.rebatch import SegmentFiles, assemble_segment, filter_batch
from compactor.cleaner.scan import batch_header
from compactor.codec.records import Record
from compactor.codec.segment import iter_batches


@dataclass(frozen=True, slots=True, kw_only=True)
class ReferenceRound:
    """Result of one round: the plan, and (when it cleans) one output segment per group."""

    plan: CleaningPlan
    outputs: Mapping[int, SegmentFiles]
    records_in: int = 0
    records_out: int = 0
    dropped: Mapping[str, int] | None = None


def compact_partition(inp: PartitionInput, logs: Mapping[int, bytes]) -> ReferenceRound:
    """One round over one partition.

    Args:
        inp: the partition's metadata, configs and clock.
        logs: the ``.log`` bytes of every segment, by base offset.
    """
    batches = {base: list(iter_batches(data)) for base, data in logs.items()}
    headers = [batch_header(b, s.base_offset) for s in inp.segments for b in batches[s.base_offset]]
    plan = inp.plan(headers)
    if not plan.will_clean:
        return ReferenceRound(plan=plan, outputs={})
    decided = inp.decide(plan, headers)
    decision_of = {(h.segment_base, h.position): d for h, d in decided}

    # the offset map over the dirty section [D, F): latest offset of every key
    latest: dict[bytes, int] = {}
    for h, d in decided:
        if h.is_control or d.aborted or h.last_offset < plan.first_dirty_offset:
            continue
        batch = next(b for b in batches[h.segment_base] if b.position == h.position)
        for r in batch.records():
            if r.key is not None and r.offset >= plan.first_dirty_offset:
                latest[r.key] = r.offset

    dropped: Counter[str] = Counter()
    outputs: dict[int, SegmentFiles] = {}
    records_in = records_out = 0
    for group in plan.groups:
        out: list[bytes] = []
        txn = []
        last = None
        for base in group:
            for batch in batches[base]:
                last = batch
                d = decision_of[(base, batch.position)]
                drops = set()
                if d.retention != BatchRetention.DELETE:
                    for r in batch.records():
                        reason = _drop_reason(r, batch.is_control, d.discard_records,
                                              d.retain_deletes, latest)
                        if reason:
                            drops.add(r.offset)
                            dropped[reason] += 1
                else:
                    n = len(batch.records())
                    dropped["marker_expired" if batch.is_control else "aborted"] += n
                result = filter_batch(batch, d, drops, now_ms=inp.now_ms,
                                      delete_retention_ms=inp.config.delete_retention_ms)
                records_in += result.records_in
                records_out += result.records_out
                if result.data is not None:
                    out.append(result.data)
                    if d.txn_entry is not None:
                        txn.append(d.txn_entry)
        outputs[group[0]] = assemble_segment(
            group[0], out, txn, last_source_batch=last, source_segments=len(group),
            index_interval_bytes=inp.config.index_interval_bytes,
            segment_index_bytes=inp.config.segment_index_bytes,
        )
    return ReferenceRound(plan=plan, outputs=outputs, records_in=records_in,
                          records_out=records_out, dropped=dict(dropped))


def _drop_reason(record: Record, is_control: bool, discard: bool, retain_deletes: bool,
                 latest: Mapping[bytes, int]) -> str | None:
    """Kafka's ``Cleaner.shouldRetainRecord`` for one record; ``None`` when it stays."""
    if discard:
        return "marker_expired" if is_control else "aborted"
    if is_control:
        return None
    key = record.key
    if key is None:
        return "null_key"
    if record.offset < latest.get(key, -1):
        return "superseded"
    if record.value is None and not retain_deletes:
        return "tombstone_expired"
    return None
