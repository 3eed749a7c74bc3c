"""Work on the driver's own cores: a loop's per-item work spread over a thread a core, its
results taken in the loop's order (:func:`map_ahead`), and checks of many items whose first
failure in order is the one raised (:func:`check_each`). Pure of files, Spark and the clock;
the work itself must release the GIL (Arrow's compute, numpy's, a ``nogil`` kernel, file
reads) for the threads to pay."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def map_ahead(work: Callable[[T], R], items: Iterable[T], *, threads: int | None = None,
              ahead: int | None = None) -> Iterator[R]:
    """``work(item)`` for each of ``items``, yielded in ``items``' order, computed on
    ``threads`` threads (one a core by default) while the caller draws the next items (on its
    own thread: a reader that must stay on one thread stays there) and uses the results: at
    most ``ahead`` items (``threads + 1`` by default) are in work or waiting to be taken, so
    memory is bounded by a few items whatever their number.

    A failure surfaces where the plain loop ``for item in items: yield work(item)`` would
    raise it: ``work``'s for an item comes before the items' own failure at a later one, and
    no result after a failure is yielded (items drawn before the failure may have been worked
    on all the same). Closing the iterator early cancels the work not yet
    started and waits for the rest."""
    count = max(1, threads if threads is not None else os.cpu_count() or 1)
    limit = max(1, ahead if ahead is not None else count + 1)
    source = iter(items)
    pending: deque[Future[R]] = deque()
    failure: Exception | None = None
    drawn = False  # the items are all drawn (or one failed)
    with ThreadPoolExecutor(count, thread_name_prefix="map-ahead") as pool:
        try:
            while pending or not drawn:
                while not drawn and len(pending) < limit:
                    try:
                        item = next(source)
                    except StopIteration:
                        drawn = True
                    except Exception as err:  # raised once the items before it are taken
                        failure, drawn = err, True
                    else:
                        pending.append(pool.submit(work, item))
                if pending:
                    yield pending.popleft().result()
            if failure is not None:
                raise failure
        finally:
            for future in pending:
                future.cancel()


def check_each(check: Callable[[T], object], items: Sequence[T]) -> None:
    """``check(item)`` for every one of ``items``, on a thread a core (one a core at most,
    none more than there are items); then the first of them in ``items``' order whose check
    raised has its exception raised again, whatever order the threads finished in, so the
    item a failure names does not depend on timing. Every check runs to its end first."""
    def caught(item: T) -> Exception | None:
        try:
            check(item)
        except Exception as err:  # raised below, the first in the items' order
            return err
        return None

    with ThreadPoolExecutor(max(1, min(len(items), os.cpu_count() or 1)),
                            thread_name_prefix="check-each") as pool:
        failures = list(pool.map(caught, items))
    first = next((f for f in failures if f is not None), None)
    if first is not None:
        raise first
