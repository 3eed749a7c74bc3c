"""Kafka's retention rules (``UnifiedLog.deleteOldSegments``) on segment metadata, one test per
retention scenario of Kafka's ``UnifiedLogTest``, plus a Hypothesis property (deleted segments
are always a prefix)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from compactor.config import TopicConfig
from compactor.model import SegmentInfo
from compactor.retention import RetentionReason, plan_retention

DELETE = TopicConfig(cleanup_policy=frozenset({"delete"}))
COMPACT = TopicConfig(cleanup_policy=frozenset({"compact"}))
BOTH = TopicConfig(cleanup_policy=frozenset({"compact", "delete"}))
RECORD = 70  # bytes per record in these logs


def _segments(*spec: tuple[int, int, int]) -> list[SegmentInfo]:
    """(base offset, records, largest timestamp) per segment; mtime 1000 after it."""
    return [
        SegmentInfo(base_offset=base, log_path=f"/p/{base:020d}.log", size_bytes=n * RECORD,
                    mtime_ms=ts + 1000, largest_timestamp_ms=ts, has_index=True,
                    has_time_index=True, has_txn_index=False)
        for base, n, ts in spec
    ]


def _cfg(base: TopicConfig, **kw: int) -> TopicConfig:
    from dataclasses import replace
    return replace(base, **kw)


THREE = _segments((0, 5, 10), (5, 5, 10), (10, 5, 10))  # 15 records, 5 per segment


def _plan(segments, cfg, *, start=None, leo=15, hw=None, now=100_000):
    return plan_retention(segments, config=cfg,
                          log_start_offset=segments[0].base_offset if start is None else start,
                          log_end_offset=leo, high_watermark=leo if hw is None else hw,
                          now_ms=now)


def _bases(plan) -> list[int]:
    return [s.base_offset for s, _ in plan.deleted]


def test_74_size_retention_deletes_down_to_the_floor() -> None:
    plan = _plan(THREE, _cfg(DELETE, retention_bytes=10 * RECORD))
    assert _bases(plan) == [0] and plan.new_log_start_offset == 5
    assert {r for _, r in plan.deleted} == {RetentionReason.RETENTION_BYTES}
    assert plan.by_reason()["retention_bytes"] == {"segments": 1, "bytes": 5 * RECORD}


def test_75_under_the_size_floor_nothing_goes() -> None:
    assert _plan(THREE, _cfg(DELETE, retention_bytes=15 * RECORD)).deleted == ()
    assert _plan(THREE, _cfg(DELETE, retention_bytes=16 * RECORD)).deleted == ()


def test_76_time_retention_deletes_everything_and_rolls() -> None:
    plan = _plan(THREE, _cfg(DELETE, retention_ms=10_000))
    assert _bases(plan) == [0, 5, 10] and plan.roll
    assert plan.new_log_start_offset == 15 == plan.log_end_offset


def test_77_fresh_segments_stay() -> None:
    assert _plan(THREE, _cfg(DELETE, retention_ms=10_000), now=10_005).deleted == ()


def test_78_compact_only_ignores_time_and_size() -> None:
    assert _plan(THREE, _cfg(COMPACT, retention_ms=10_000, retention_bytes=0)).deleted == ()


def test_79_compact_delete_applies_time_retention() -> None:
    plan = _plan(THREE, _cfg(BOTH, retention_ms=10_000))
    assert _bases(plan) == [0, 5, 10] and plan.roll


def test_80_log_start_offset_applies_to_compact_only() -> None:
    plan = _plan(THREE, COMPACT, start=5)
    assert _bases(plan) == [0] and plan.new_log_start_offset == 5
    assert {r for _, r in plan.deleted} == {RetentionReason.LOG_START_OFFSET}


def test_81_delete_records_moves_the_start() -> None:
    assert _bases(_plan(THREE, COMPACT, start=1)) == []
    assert _bases(_plan(THREE, COMPACT, start=6)) == [0]
    plan = _plan(THREE, COMPACT, start=15)
    assert _bases(plan) == [0, 5]  # the segment holding the start stays: it is the last one
    assert plan.new_log_start_offset == 15


def test_82_nothing_at_or_above_the_high_watermark_goes() -> None:
    cfg = _cfg(DELETE, retention_ms=10_000)
    assert _bases(_plan(THREE, cfg, hw=9)) == [0]
    assert _bases(_plan(THREE, cfg, hw=4)) == []
    plan = _plan(THREE, cfg, hw=10)
    assert _bases(plan) == [0, 5] and plan.new_log_start_offset <= plan.high_watermark


def test_83_a_second_pass_after_the_roll_deletes_nothing() -> None:
    cfg = _cfg(DELETE, retention_ms=10_000)
    first = _plan(THREE, cfg)
    assert first.roll
    rolled = _segments((15, 0, -1))
    second = plan_retention(rolled, config=cfg, log_start_offset=15, log_end_offset=15,
                            high_watermark=15, now_ms=10**9)
    assert second.deleted == () and not second.roll and second.new_log_start_offset == 15


def test_young_segment_blocks_later_ones() -> None:
    segs = _segments((0, 5, 10), (5, 5, 99_000), (10, 5, 10))
    assert _bases(_plan(segs, _cfg(DELETE, retention_ms=10_000))) == [0]


def test_future_timestamps_are_never_deleted_by_time() -> None:
    segs = _segments((0, 5, 10**12), (5, 5, 10))
    assert _plan(segs, _cfg(DELETE, retention_ms=10_000), leo=10).deleted == ()


def test_missing_timestamps_age_by_mtime() -> None:
    (seg,) = _segments((0, 5, -1))
    from dataclasses import replace
    segs = [replace(seg, mtime_ms=50_000), *_segments((5, 5, 99_999))]
    assert _bases(_plan(segs, _cfg(DELETE, retention_ms=10_000), leo=10, now=60_001)) == [0]
    assert _bases(_plan(segs, _cfg(DELETE, retention_ms=10_000), leo=10, now=59_999)) == []


def test_empty_last_segment_is_kept_and_no_roll_is_needed() -> None:
    segs = _segments((0, 5, 10), (5, 0, -1))
    plan = _plan(segs, _cfg(DELETE, retention_ms=10_000), leo=5)
    assert _bases(plan) == [0] and not plan.roll and plan.new_log_start_offset == 5


def test_passes_run_in_kafka_order_on_what_is_left() -> None:
    # start offset takes the first, size the second, time finds the third young
    segs = _segments((0, 5, 10), (5, 5, 10), (10, 5, 99_000))
    plan = _plan(segs, _cfg(BOTH, retention_ms=10_000, retention_bytes=5 * RECORD), start=5)
    assert [(s.base_offset, r) for s, r in plan.deleted] == [
        (0, RetentionReason.LOG_START_OFFSET), (5, RetentionReason.RETENTION_BYTES)]


def test_disabled_settings_delete_nothing() -> None:
    assert _plan(THREE, _cfg(DELETE, retention_ms=-1, retention_bytes=-1)).deleted == ()


@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 30_000)), min_size=1, max_size=8),
       st.integers(-1, 30_000), st.integers(-1, 40 * RECORD), st.integers(0, 60),
       st.integers(0, 60), st.sampled_from([DELETE, COMPACT, BOTH]))
def test_appendix_a3_item_10(spec, retention_ms, retention_bytes, hw_cut, start_cut, policy):
    segs, base = [], 0
    for n, ts in spec:
        segs.extend(_segments((base, n, ts if n else -1)))
        base += n
    leo = base
    hw = min(hw_cut, leo)
    start = max(segs[0].base_offset, min(start_cut, hw))
    cfg = _cfg(policy, retention_ms=retention_ms, retention_bytes=retention_bytes)
    plan = plan_retention(segs, config=cfg, log_start_offset=start, log_end_offset=leo,
                          high_watermark=hw, now_ms=40_000)
    gone = [s for s, _ in plan.deleted]
    assert gone == segs[:len(gone)]  # a prefix
    for i, seg in enumerate(gone):  # wholly below the high watermark
        upper = segs[i + 1].base_offset if i + 1 < len(segs) else leo
        assert upper <= hw
    assert plan.log_start_offset <= plan.new_log_start_offset <= max(hw, start)
    if plan.roll:
        assert len(gone) == len(segs) and plan.new_log_start_offset == leo
    elif gone:
        assert plan.new_log_start_offset == max(start, segs[len(gone)].base_offset)
    if not cfg.delete:
        assert all(r == RetentionReason.LOG_START_OFFSET for _, r in plan.deleted)


def test_explanations_say_the_numbers_compared_and_their_sources() -> None:
    """Issue 30.5: a retention line says why, with the numbers, as compaction lines do
    (expected text written out by hand)."""
    from compactor.retention import explain_retention

    day = 86_400_000
    segs = _segments((0, 5, 0), (5, 5, 40 * day), (10, 5, 45 * day))
    cfg = _cfg(DELETE, retention_ms=30 * day, retention_bytes=-1)
    now = 45 * day + 1
    plan = _plan(segs, cfg, now=now)
    assert _bases(plan) == [0]
    sources = {"retention.ms": "broker:log.retention.hours", "retention.bytes": "default"}
    assert explain_retention(segs, plan, cfg, now, sources) == (
        "size 1.1 kB, retention.bytes unlimited from default; oldest segment's newest record "
        "45.0 d old, past retention.ms 30.0 d from broker:log.retention.hours")
    young = _segments((0, 5, 44 * day), (5, 5, 45 * day))
    plan = _plan(young, cfg, leo=10, now=now)
    assert explain_retention(young, plan, cfg, now, {}) == (
        "size 700 B, retention.bytes unlimited; oldest segment's newest record 1.0 d old, "
        "within retention.ms 30.0 d")
    sized = _cfg(DELETE, retention_ms=-1, retention_bytes=700)
    plan = _plan(THREE, sized)
    assert explain_retention(THREE, plan, sized, 100_000) == (
        "size 1.1 kB at or over retention.bytes 700 B; retention.ms unlimited")
    plan = _plan(THREE, COMPACT, start=10)
    assert explain_retention(THREE, plan, COMPACT, 100_000) == (
        "log start offset 10 lies past 2 segments; cleanup.policy has no delete: only the "
        "log start offset deletes")
