"""numba's disk cache, keyed on every source the kernels compile.

numba keys a cached kernel on its own file only (``numba.core.caching``: the index holds the
content hash of the file that defines the function). A kernel also compiles what it calls and
inlines from other files: :func:`compactor.cleaner.policy.record_fate`, the batch-rebuild
rules, :func:`compactor.erasure.sketch.may_hold`, the varint readers of
:mod:`compactor.native.kernels`. With numba's key alone, editing one of those leaves the
callers' cached machine code as it was: the native path would keep the old rule while the
pure path runs the new one.

:func:`kernel` is ``numba.njit`` whose cache stamp is numba's own plus the content hash of
every module in :data:`COMPILED_SOURCES`: editing any of them recompiles every kernel once
(60-75 s on 2 cores, :func:`compactor.native.compile_kernels`). ``tests/unit/test_native_cache.py``
shows a kernel that inlines another file's rule go stale with ``numba.njit(cache=True)``
and stay fresh with :func:`keyed_on`, and checks that every kernel of the seam is built here
from a function of a listed module.
"""

from __future__ import annotations

import hashlib
import importlib.util
from collections.abc import Callable, Sequence
from typing import Any

import numba
from numba.core import caching

#: every module a kernel compiles functions of: the native seam's own and the pure rules it
#: compiles into its kernels
COMPILED_SOURCES = (
    "compactor.native.cache",
    "compactor.native.chunks",
    "compactor.native.erasure",
    "compactor.native.fast",
    "compactor.native.kernels",
    "compactor.native.keytable",
    "compactor.native.offsetmap",
    "compactor.native.sha256",
    "compactor.native.xxh3",
    "compactor.cleaner.policy",
    "compactor.erasure.sketch",
)


def sources_digest(modules: Sequence[str]) -> str:
    """The SHA-256 of the named modules' source files, in order (read, not imported)."""
    digest = hashlib.sha256()
    for name in modules:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None or spec.loader is None:
            raise ImportError(f"no source file for {name}")
        source = spec.loader.get_data(spec.origin)  # type: ignore[attr-defined]
        digest.update(name.encode() + b"\0" + hashlib.sha256(source).digest())
    return digest.hexdigest()


def keyed_on(modules: Sequence[str]) -> Callable[..., Any]:
    """A ``numba.njit`` whose disk cache is stale as soon as any of ``modules`` changes
    (``@decorator``, ``@decorator(inline="always")`` or ``decorator(**options)(function)``;
    numba's options, without ``cache``, which is always on)."""
    stamp = sources_digest(modules)

    class _Stamped:
        def get_source_stamp(self) -> Any:
            return (super().get_source_stamp(), stamp)  # type: ignore[misc]

    class _Impl(caching.CompileResultCacheImpl):
        _locator_classes: list[type[Any]] = [
            type(f"Stamped{c.__name__}", (_Stamped, c), {})
            for c in caching.CompileResultCacheImpl._locator_classes]

    class _Cache(caching.FunctionCache):
        _impl_class = _Impl

    def decorate(function: Callable[..., Any] | None = None, **options: Any) -> Any:
        def make(f: Callable[..., Any]) -> Any:
            dispatcher = numba.njit(**options)(f)
            dispatcher._cache = _Cache(f)  # numba's Dispatcher.enable_caching, our stamp
            return dispatcher
        return make(function) if function is not None else make

    decorate.cache_class = _Cache  # type: ignore[attr-defined]
    return decorate


#: the seam's ``numba.njit``: every kernel of ``compactor/native`` is made by it
kernel = keyed_on(COMPILED_SOURCES)
