"""The pending subjects' Bloom filter (compactor.erasure.sketch): never a false negative, and
false positives at about the rate it is sized for, on digests it never saw."""

from __future__ import annotations

import hashlib

import pytest

from compactor.erasure.sketch import FALSE_POSITIVE_RATE, DigestFilter, size_for


def _digests(prefix: str, n: int) -> list[bytes]:
    return [hashlib.sha256(f"{prefix}-{i}".encode()).digest() for i in range(n)]


@pytest.mark.parametrize("subjects", [1, 1_000, 200_000])
def test_every_added_digest_is_found_and_strangers_rarely(subjects: int) -> None:
    added = _digests("subject", subjects)
    # built in two halves and merged, as the executors' partitions are
    half = subjects // 2
    sketch = DigestFilter.empty(subjects).adding(added[:half]).union(
        DigestFilter.empty(subjects).adding(added[half:]))
    assert sketch.might_contain(added).all()
    strangers = _digests("stranger", 100_000)
    rate = sketch.might_contain(strangers).mean()
    assert rate <= 3 * FALSE_POSITIVE_RATE, rate


def test_its_size_grows_with_the_subjects_by_the_formula() -> None:
    bits, hashes = size_for(1_000_000)
    assert 19_000_000 < bits < 19_300_000 and hashes == 13  # -n ln p / ln^2 2; log2 1/p
    assert size_for(1) == (8192, 13)  # the floor's bits, never more hashes


def test_filters_of_different_sizes_do_not_merge() -> None:
    with pytest.raises(ValueError):
        DigestFilter.empty(10).union(DigestFilter.empty(10_000_000))


def test_digests_read_from_an_arrow_column_are_the_same_words() -> None:
    import numpy as np
    import pyarrow as pa

    from compactor.erasure.sketch import digest_words

    digests = _digests("col", 50)
    column = pa.array([None, *digests[:20], None, *digests[20:]], pa.binary()).slice(1)
    assert np.array_equal(digest_words(column),
                          np.frombuffer(b"".join(digests), dtype="<u8").reshape(-1, 4))
    added = DigestFilter.empty(50).adding(digest_words(column))
    assert added == DigestFilter.empty(50).adding(digests)
    with pytest.raises(ValueError):
        digest_words(pa.array([b"short"], pa.binary()))
