"""The driver's choices for the one-pass path: which partitions can only be one group
(``policy.fits_one_group``, against ``group_segments`` itself), which one task scans and which
it may write (``planning.one_task_scans``, ``planning.offset_map_reason``) and how partitions are
binned into tasks (``stages.balanced_bins``)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from compactor.cleaner import planning
from compactor.cleaner.planning import (
    OVER_TASK_BYTES,
    TASK_KEYS_ZERO,
    offset_map_reason,
    one_task_scans,
    over_task_keys,
    projected_keys,
)
from compactor.cleaner.policy import fits_one_group, group_segments
from compactor.model import SegmentInfo
from compactor.spark.stages import balanced_bins

segment_sizes = st.lists(st.tuples(st.integers(0, 5_000), st.integers(0, 400),
                                   st.integers(0, 600)), min_size=1, max_size=12)


def _segments(sizes: list[tuple[int, int, int]]) -> list[SegmentInfo]:
    return [SegmentInfo(base_offset=k * 100, log_path=f"/x/{k * 100}.log", size_bytes=log,
                        mtime_ms=0, largest_timestamp_ms=0, has_index=True, has_time_index=True,
                        has_txn_index=False, index_bytes=index, time_index_bytes=time_index)
            for k, (log, index, time_index) in enumerate(sizes)]


@given(segment_sizes, st.integers(1, 30_000), st.integers(1, 3_000), st.data())
def test_fits_one_group_means_every_run_is_one_group(sizes, segment_bytes, index_bytes,
                                                     data) -> None:
    # the partition's segments, the last one active: a round cleans a run of the others
    segments = _segments(sizes + [(0, 0, 0)])
    start = data.draw(st.integers(0, len(segments) - 2))
    end = data.draw(st.integers(start + 1, len(segments) - 1))
    run = segments[start:end]
    groups = group_segments(run, run[-1].base_offset + 50, segment_bytes, index_bytes)
    if fits_one_group(segments, segment_bytes, index_bytes):
        assert len(groups) == 1
    # and no stricter than it must be: two or more segments make one group only when they
    # fit together (a lone segment is a group whatever its size)
    if (start == 0 and end == len(segments) - 1 > 1
            and all(s.size_bytes for s in run)):
        assert fits_one_group(segments, segment_bytes, index_bytes) == (len(groups) == 1)


def test_fits_one_group_by_hand() -> None:
    three = _segments([(100, 8, 12)] * 3 + [(10**9, 10**6, 10**6)])  # a large active one
    assert fits_one_group(three, 300, 36)
    assert not fits_one_group(three, 299, 36)  # the logs
    assert not fits_one_group(three, 300, 35)  # the time indexes
    assert fits_one_group(three[-1:], 1, 1)  # nothing but the active segment


def test_one_task_scans_what_it_may_not_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """One task scans, plans and decides every partition of at most ``ONE_TASK_BYTES``
    (``--task-keys 0`` included: it then hands its decisions to the offset map); a larger one
    only when its round is one group."""
    monkeypatch.setattr(planning, "ONE_TASK_BYTES", 1_000)
    small = _segments([(400, 8, 12)] * 2 + [(100, 8, 12)])  # 900 bytes, two groups
    large = _segments([(400, 8, 12)] * 2 + [(300, 8, 12)])  # 1,100 bytes
    for segments in (small, large):
        assert not fits_one_group(segments, 500, 100)
    assert one_task_scans(small, 500, 100)
    assert not one_task_scans(large, 500, 100)
    assert offset_map_reason(small, 500, 100, task_keys=1) is None
    assert offset_map_reason(small, 500, 100, task_keys=0) == TASK_KEYS_ZERO
    assert offset_map_reason(large, 500, 100, task_keys=1) == OVER_TASK_BYTES
    assert offset_map_reason(large, 500, 100, task_keys=0) == TASK_KEYS_ZERO
    # one group: scanned and written by one task, whatever its size and the budget
    assert one_task_scans(large, 2_000, 100)
    assert offset_map_reason(large, 2_000, 100, task_keys=0) is None


@given(st.dictionaries(st.integers(0, 500), st.integers(0, 10**9), max_size=60),
       st.integers(1, 16))
def test_balanced_bins(sizes: dict[int, int], count: int) -> None:
    bins = balanced_bins(sizes, count)
    assert sorted(k for b in bins for k in b) == sorted(sizes)
    assert len(bins) <= count and all(bins)
    loads = [sum(sizes[k] for k in b) for b in bins]
    assert loads == sorted(loads, reverse=True)  # the heaviest task starts first
    if len(bins) == count:  # every bin used: none is lighter than the heaviest less one item
        assert loads[0] - loads[-1] <= max(sizes.values())


def test_balanced_bins_by_hand() -> None:
    assert balanced_bins({1: 10, 2: 7, 3: 5, 4: 4}, 2) == [[1, 4], [2, 3]]
    assert balanced_bins({1: 10, 2: 7}, 8) == [[1], [2]]
    assert balanced_bins({}, 4) == []


# -- the key budget's projection (planning.projected_keys, planning.over_task_keys) ---------------


def _distinct_newest_and_all(keys: np.ndarray, share: float) -> tuple[int, int, int]:
    """(distinct keys of the newest ``share`` of ``keys``, records there, distinct in all),
    counted by numpy: what the projection is checked against."""
    newest = keys[len(keys) - int(len(keys) * share):]
    return len(np.unique(newest)), len(newest), len(np.unique(keys))


@pytest.mark.parametrize("population", [20_000, 200_000, 2_000_000])
@pytest.mark.parametrize("share", [1 / 8, 1 / 3])
def test_projected_keys_of_uniform_keys_is_the_count_of_the_whole(population, share) -> None:
    keys = np.random.default_rng(population).integers(0, population, 400_000)
    seen, records, whole = _distinct_newest_and_all(keys, share)
    assert projected_keys(seen, records, share) == pytest.approx(whole, rel=0.05)


def test_projected_keys_underestimates_skewed_and_growing_key_spaces() -> None:
    rng = np.random.default_rng(7)
    skewed = rng.zipf(1.3, 400_000)  # a few hot keys and a long tail
    growing = np.arange(400_000) // 2  # new keys arrive over time, each written twice
    for keys in (skewed, growing):
        seen, records, whole = _distinct_newest_and_all(keys, 1 / 8)
        assert projected_keys(seen, records, 1 / 8) <= whole


def test_projected_keys_at_the_edges() -> None:
    assert projected_keys(500, 500, 1 / 4) == 2_000  # every record a new key: all of them
    assert projected_keys(0, 0, 1 / 8) == 0
    assert projected_keys(300, 1_000, 1.0) == pytest.approx(300, rel=1e-6)  # all seen


def test_over_task_keys_is_exact_until_the_sample_suffices() -> None:
    budget = 4 * planning.PROJECT_AFTER_KEYS
    after = planning.PROJECT_AFTER_SHARE
    enough = planning.PROJECT_AFTER_KEYS
    # past the budget: always, and it says so
    assert over_task_keys(budget + 1, budget + 1, 0.01, budget) == planning.OVER_TASK_KEYS
    # every record a new key, the whole round far past the budget, but too early to say
    assert not over_task_keys(enough, enough, after * 0.99, budget)
    assert not over_task_keys(enough - 1, enough - 1, after, budget)
    # projected 8 x the sample: the projection's doing, and it says so
    assert over_task_keys(enough, enough, after, budget) == planning.PROJECTED_OVER_TASK_KEYS
    # projected over the budget: within the margin it goes on, past it it stops
    records = enough * 21 // 20  # one record in 21 repeats a key
    projected = projected_keys(enough, records, after)
    assert projected > 4 * enough
    within = int(projected / (1 + (planning.PROJECT_MARGIN - 1) / 2))
    assert not over_task_keys(enough, records, after, within)
    assert (over_task_keys(enough, records, after, int(projected / planning.PROJECT_MARGIN) - 1)
            == planning.PROJECTED_OVER_TASK_KEYS)
    # few keys, written over and over: never
    assert not over_task_keys(enough, 50 * enough, 0.5, budget)
