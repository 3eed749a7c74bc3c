"""A plan's explanation states the numbers it compared and the bound that held the round back
(expected texts are written out here, from the scenario's own figures)."""

from __future__ import annotations

from compactor.cleaner.policy import (
    NO_CONTROL_TYPE,
    BatchHeader,
    CleaningPlan,
    SkipReason,
    explain,
    plan_partition,
)
from compactor.config import TopicConfig
from compactor.model import SegmentInfo

DAY = 86_400_000
NOW = 100 * DAY
CONFIG = TopicConfig(cleanup_policy=frozenset({"compact"}), min_cleanable_dirty_ratio=0.5,
                     min_compaction_lag_ms=30 * DAY)


def _plan(reason: SkipReason, *, clean: int, cleanable: int, delay: int = 0,
          groups: tuple = (), held_by: str = "") -> CleaningPlan:
    return CleaningPlan(log_start_offset=0, log_end_offset=40_000, high_watermark=40_000,
                        last_stable_offset=39_990, first_dirty_offset=100,
                        first_uncleanable_offset=30_000, checkpoint_reset=False,
                        clean_bytes=clean, cleanable_bytes=cleanable, compaction_delay_ms=delay,
                        groups=groups, reason=reason, held_by=held_by)


def test_each_reason_states_what_it_compared() -> None:
    assert explain(_plan(SkipReason.BELOW_DIRTY_RATIO, clean=69, cleanable=31), CONFIG) == (
        "dirty ratio 0.31 (31 cleanable of 100 bytes) <= min.cleanable.dirty.ratio 0.5, and no "
        "dirty segment is past max.compaction.lag.ms")
    assert explain(_plan(SkipReason.CLEAN, clean=1_000, cleanable=3_000,
                         groups=((0, 5), (9,))), CONFIG) == (
        "dirty ratio 0.75 (3,000 cleanable of 4,000 bytes) > min.cleanable.dirty.ratio 0.5: "
        "cleans offsets [100, 30000) in 2 output segment(s)")
    forced = explain(_plan(SkipReason.CLEAN, clean=90, cleanable=10, delay=5_000,
                           groups=((0,),)), CONFIG)
    assert forced.startswith("max.compaction.lag.ms=9223372036854775807 passed 5,000 ms ago")
    assert explain(_plan(SkipReason.NOTHING_CLEANABLE, clean=0, cleanable=0,
                         held_by="the active segment (base offset 100), which is never cleaned"),
                   CONFIG) == (
        "nothing cleanable: the 39,900 dirty offsets [100, 40000) are held back by the active "
        "segment (base offset 100), which is never cleaned")
    assert explain(_plan(SkipReason.EMPTY, clean=0, cleanable=0), CONFIG) == (
        "no records (log start offset 0, log end offset 40000)")


def _seg(base: int, *, largest: int, size: int = 1_000) -> SegmentInfo:
    return SegmentInfo(base_offset=base, log_path=f"/x/{base}.log", size_bytes=size,
                       mtime_ms=largest, largest_timestamp_ms=largest, has_index=True,
                       has_time_index=True, has_txn_index=False, index_bytes=8,
                       time_index_bytes=12)


def _batch(base: int, last: int, ts: int, seg_base: int) -> BatchHeader:
    return BatchHeader(segment_base=seg_base, position=0, size_in_bytes=100, base_offset=base,
                       last_offset=last, magic=2, is_control=False, is_transactional=False,
                       control_type=NO_CONTROL_TYPE, producer_id=-1, producer_epoch=0,
                       max_timestamp=ts, horizon_ms=-1, records_count=last - base + 1)


def test_a_young_log_is_held_by_the_compaction_lag_not_empty() -> None:
    """40,000 records two days old under min.compaction.lag.ms=30d: nothing cleanable, and
    the explanation names the lag and the age (it was once reported ``empty``)."""
    young = NOW - 2 * DAY
    segments = [_seg(0, largest=young), _seg(20_000, largest=young), _seg(40_000, largest=-1,
                                                                          size=0)]
    batches = [_batch(0, 19_999, young, 0), _batch(20_000, 39_999, young, 20_000)]
    plan = plan_partition(segments=segments, batches=batches, config=CONFIG,
                          cleaner_checkpoint=None, log_start_checkpoint=None,
                          replication_checkpoint=None, now_ms=NOW)
    assert plan.reason == SkipReason.NOTHING_CLEANABLE
    assert explain(plan, CONFIG) == (
        "nothing cleanable: the 40,000 dirty offsets [0, 40000) are held back by "
        "min.compaction.lag.ms=2592000000 (30d): segment 0's newest record is 2d old")


def test_an_open_transaction_and_an_empty_log_are_named() -> None:
    segments = [_seg(0, largest=1), _seg(10, largest=-1, size=0)]
    config = TopicConfig(cleanup_policy=frozenset({"compact"}))
    # the high watermark on disk (3) is below the active segment: the LSO holds the round
    plan = plan_partition(segments=segments, batches=[_batch(0, 9, 1, 0)], config=config,
                          cleaner_checkpoint=None, log_start_checkpoint=None,
                          replication_checkpoint=3, now_ms=NOW)
    assert plan.reason == SkipReason.NOTHING_CLEANABLE
    assert "held back by the last stable offset 3" in explain(plan, config)
    empty = plan_partition(segments=[_seg(0, largest=-1, size=0)], batches=[], config=config,
                           cleaner_checkpoint=None, log_start_checkpoint=None,
                           replication_checkpoint=None, now_ms=NOW)
    assert empty.reason == SkipReason.EMPTY
