"""The kernels' SHA-256 (:mod:`compactor.native.sha256`, OpenSSL's, called from numba) against
``hashlib``: every length around the one- and two-block padding boundaries, and random
values, digested in one kernel call as the erasure scan digests a batch's keys."""

from __future__ import annotations

import hashlib
import sys
import threading

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from compactor.erasure.rules import hex_sha256
from compactor.native import sha256


def test_libcrypto_is_here() -> None:
    assert sha256.available()  # Debian's libssl3, which Python's hashlib links too


def test_every_padding_boundary_equals_hashlib() -> None:
    values = [bytes((i * 131 + n) % 256 for i in range(n))
              for n in (*range(0, 130), 1000, 4096, 100_003)]
    assert sha256.sha256(values) == [hashlib.sha256(v).digest() for v in values]


@given(st.lists(st.binary(max_size=300), max_size=40))
def test_random_values_equal_hashlib(values: list[bytes]) -> None:
    assert sha256.sha256(values) == [hashlib.sha256(v).digest() for v in values]


@given(st.lists(st.binary(max_size=300), max_size=40), st.integers(0, 3))
def test_hex_digests_of_an_arrow_array_equal_hashlibs(values: list[bytes], skip: int) -> None:
    """The ledger check's hasher (hex digests of an Arrow array, a slice of one too) against
    the reference's ``hashlib`` (:func:`compactor.erasure.rules.hex_sha256`)."""
    array = pa.array(values, pa.large_binary())[skip:]
    made = sha256.hex_sha256(array)
    assert made.type == pa.large_string()
    assert made.to_pylist() == [hashlib.sha256(v).hexdigest() for v in values[skip:]]
    assert made.to_pylist() == hex_sha256(array).to_pylist()


def test_the_ledger_check_takes_the_kernel_only_where_it_pays(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """In a process that has not loaded the kernel (its module imported or not), a check of
    fewer rows than ``NATIVE_CHECK_ROWS`` keeps ``hashlib`` and imports nothing; a larger one
    loads the kernel in a thread, digesting with ``hashlib`` until it is there (the same
    digests before and after); any check takes the kernel once it is loaded; ``--writer
    pure`` never does."""
    from compactor import native

    monkeypatch.delitem(sys.modules, "compactor.native.sha256", raising=False)
    monkeypatch.delattr(native, "sha256", raising=False)  # as a fresh process has it
    assert native.integrity_digests("native", native.NATIVE_CHECK_ROWS - 1) is None
    assert "compactor.native.sha256" not in sys.modules
    values = [b"", b"x", bytes(range(200)) * 3]
    array = pa.array(values, pa.large_binary())
    made = native.integrity_digests("native", native.NATIVE_CHECK_ROWS)
    assert isinstance(made, native._LoadingHasher)
    assert made(array).to_pylist() == [hashlib.sha256(v).hexdigest() for v in values]
    made.join()
    # a hasher that waits for no load digests with hashlib meanwhile: the same digests
    impatient = native._LoadingHasher(wait_s=0)
    assert impatient(array).to_pylist() == [hashlib.sha256(v).hexdigest() for v in values]
    impatient.join()
    assert made.kernel is not None and made.kernel.__name__ == "hex_sha256"
    assert made(array).to_pylist() == [hashlib.sha256(v).hexdigest() for v in values]
    loaded = native.integrity_digests("native", 10)  # loaded now: every check takes it
    assert loaded is not None and loaded.__name__ == "hex_sha256"
    assert native.integrity_digests("pure", native.NATIVE_CHECK_ROWS) is None


def test_threads_digesting_at_once_each_get_hashlibs_digests() -> None:
    """The ledger's summary digests its batches on a thread a core, with the kernel's GIL
    released: every thread must digest in a ``SHA256_CTX`` of its own
    (:func:`compactor.native.sha256.context`), or one thread's digest takes another's
    state midway."""
    from concurrent.futures import ThreadPoolExecutor

    arrays = [pa.array([bytes([t]) * n for n in range(1, 3000)], pa.large_binary())
              for t in range(4)]
    expected = [[hashlib.sha256(v).hexdigest() for v in a.to_pylist()] for a in arrays]
    with ThreadPoolExecutor(4) as pool:
        for _ in range(5):
            made = list(pool.map(lambda a: sha256.hex_sha256(a).to_pylist(), arrays))
            assert made == expected
    seen: list[int] = []
    both = threading.Barrier(2)

    def note() -> None:  # both threads alive at once: their contexts cannot share memory
        seen.append(sha256.context())
        both.wait()

    others = [threading.Thread(target=note) for _ in range(2)]
    for t in others:
        t.start()
    for t in others:
        t.join()
    assert len(set(seen)) == 2
    assert sha256.context() == sha256.context()  # one a thread, made once
