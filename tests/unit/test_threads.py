"""``compactor.threads.map_ahead`` against the plain loop it stands for: the same results in the
same order, the same failure at the same place, and no more items drawn ahead than it says."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compactor.threads import check_each, map_ahead


def _slow_square(x: int) -> int:
    time.sleep((x % 4) / 2000)  # later items often finish first
    return x * x


@given(st.lists(st.integers(0, 50), max_size=30), st.integers(1, 4), st.integers(1, 6))
def test_results_come_in_the_items_order(items: list[int], threads: int, ahead: int) -> None:
    assert list(map_ahead(_slow_square, items, threads=threads, ahead=ahead)) == [
        x * x for x in items]


def _failing_items(good: int) -> Iterator[int]:
    yield from range(good)
    raise OSError("the reader failed")


@given(st.integers(0, 12), st.one_of(st.none(), st.integers(0, 15)))
def test_a_failure_surfaces_where_the_loop_would_raise_it(good: int, bad: int | None) -> None:
    """Items 0..good-1 are drawn, then drawing fails; work fails on item ``bad``: the plain
    loop yields the results before the first of the two and raises that one."""
    def work(x: int) -> int:
        if x == bad:
            raise ValueError(f"item {x} is bad")
        return _slow_square(x)

    def plain() -> Iterator[int]:
        for x in _failing_items(good):
            yield work(x)

    def outcome(results: Iterator[int]) -> tuple[list[int], str]:
        got: list[int] = []
        with pytest.raises(Exception) as raised:  # noqa: PT011 - either failure, compared
            for r in results:
                got.append(r)
        return got, f"{type(raised.value).__name__}: {raised.value}"

    assert outcome(map_ahead(work, _failing_items(good), threads=2, ahead=3)) == outcome(plain())


def test_no_more_than_ahead_items_are_drawn_before_their_results_are_taken() -> None:
    drawn = 0

    def items() -> Iterator[int]:
        nonlocal drawn
        for x in range(40):
            drawn += 1
            yield x

    taken = 0
    for _ in map_ahead(_slow_square, items(), threads=2, ahead=3):
        taken += 1
        assert drawn - taken <= 2  # the one just taken was among the 3 drawn ahead
    assert taken == drawn == 40


def test_closing_early_stops_drawing_and_waits_for_the_work_under_way() -> None:
    started: list[int] = []
    running = threading.Event()

    def work(x: int) -> int:
        started.append(x)
        running.set()
        time.sleep(0.01)
        return x

    results = map_ahead(work, range(1000), threads=1, ahead=4)
    assert next(results) == 0
    results.close()
    assert running.is_set()
    settled = len(started)
    time.sleep(0.05)
    # item 0 taken, item 1 under way at most: the two still queued were cancelled
    assert len(started) == settled <= 2
    assert not [t for t in threading.enumerate() if t.name.startswith("map-ahead")]


@given(st.lists(st.booleans(), max_size=12))
def test_check_each_raises_the_first_failure_in_the_items_order(fails: list[bool]) -> None:
    """Whatever order the threads finish in (an earlier item's check sleeps longer), the
    failure raised is the first failing item's, as the plain loop's first would be, and
    every item is checked."""
    checked: list[int] = []

    def check(i: int) -> None:
        time.sleep((len(fails) - i) / 4000)  # the later items finish first
        checked.append(i)
        if fails[i]:
            raise ValueError(f"item {i}")

    first = next((i for i, f in enumerate(fails) if f), None)
    if first is None:
        check_each(check, range(len(fails)))
    else:
        with pytest.raises(ValueError, match=f"^item {first}$"):
            check_each(check, range(len(fails)))
    assert sorted(checked) == list(range(len(fails)))
