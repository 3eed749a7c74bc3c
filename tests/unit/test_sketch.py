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
    # built batch by batch, as the ledger's summary streams the requests
    builder = DigestFilter.empty(subjects).building()
    for start in range(0, subjects, 64 * 1024):
        builder.add(added[start:start + 64 * 1024])
    sketch = builder.done()
    assert sketch.might_contain(added).all()
    strangers = _digests("stranger", 100_000)
    rate = sketch.might_contain(strangers).mean()
    assert rate <= 3 * FALSE_POSITIVE_RATE, rate


def test_its_size_grows_with_the_subjects_by_the_formula() -> None:
    bits, hashes = size_for(1_000_000)
    assert 19_000_000 < bits < 19_300_000 and hashes == 13  # -n ln p / ln^2 2; log2 1/p
    assert size_for(1) == (8192, 13)  # the floor's bits, never more hashes


def test_hex_digests_read_from_an_arrow_column_are_the_same_words() -> None:
    """The ledger keeps each subject's SHA-256 as 64 hex digits: decoded from the column's
    buffer at once, a sliced column too, they are the digests' own bytes."""
    import numpy as np
    import pyarrow as pa

    from compactor.erasure.sketch import hex_digest_words

    digests = _digests("col", 50)
    column = pa.array(["x" * 64, *(d.hex() for d in digests)], pa.string()).slice(1)
    assert np.array_equal(hex_digest_words(column),
                          np.frombuffer(b"".join(digests), dtype="<u8").reshape(-1, 4))
    assert DigestFilter.empty(50).adding(hex_digest_words(column)) == \
        DigestFilter.empty(50).adding(digests)
    for bad in (pa.array(["ab"], pa.string()), pa.array([None], pa.string())):
        with pytest.raises(ValueError):
            hex_digest_words(bad)


@pytest.mark.parametrize("subjects,hashes", [(1, 13), (300, 2), (5_000, 3)])
def test_the_scalar_rule_the_kernel_compiles_answers_as_the_arrays_do(subjects: int,
                                                                      hashes: int) -> None:
    """``may_hold`` (compiled into the native scan's kernel, a digest at a time) says what
    ``might_contain`` (the pure scan, a batch at once) says, for members and strangers, on
    filters full enough that strangers pass too."""
    import numpy as np

    from compactor.erasure.sketch import may_hold

    # 8,192 bits and few hashes: with many members, strangers pass it
    probe = DigestFilter(bytes(1024), 8192, hashes).adding(_digests("member", subjects)).probe()
    asked = _digests("member", subjects) + _digests("stranger", 3_000)
    words = np.frombuffer(b"".join(asked), dtype="<u8").reshape(-1, 4)
    scalar = [may_hold(probe.table, probe.bits, probe.hashes, w[0], w[1]) for w in words]
    assert scalar == probe.might_contain(asked).tolist()
    assert all(scalar[:subjects]) and sum(scalar[subjects:]) < 3_000
    assert subjects == 1 or any(scalar[subjects:])  # false positives were compared too
