"""The kernels' disk cache (compactor.native.cache) is keyed on every source they compile: a
kernel that inlines a rule from another file is recompiled when that file changes. numba's
own ``cache=True`` is shown keeping the stale machine code in the same scenario (the control:
the check can fail), and every kernel of the native seam is shown built by the keyed
decorator from a function of a listed module."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("numba")

RULE = "def rule(x):\n    return x + {}\n"
KERNEL = """
import sys
{decorator_import}
from pkgx import rule

inlined = kernel(inline="always")(rule.rule)


@kernel
def twice(x):
    return 2 * inlined(x)


print(twice(10), twice.stats.cache_hits and "hit" or "miss")
"""


def _run(root: Path) -> tuple[int, str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.getcwd()]))
    env.pop("NUMBA_CACHE_DIR", None)  # next to the sources, in the temporary package
    out = subprocess.run([sys.executable, "-m", "pkgx.kernel"], cwd=root, env=env,
                         capture_output=True, text=True, timeout=300, check=True).stdout
    value, hit = out.split()
    return int(value), hit


def _package(root: Path, *, keyed: bool) -> None:
    pkg = root / "pkgx"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "rule.py").write_text(RULE.format(1))
    imports = ("from compactor.native.cache import keyed_on\n"
               "kernel = keyed_on(('pkgx.rule', 'pkgx.kernel'))") if keyed else (
        "import functools, numba\n"
        "kernel = functools.partial(numba.njit, cache=True)")
    (pkg / "kernel.py").write_text(textwrap.dedent(KERNEL).format(decorator_import=imports))


def _edit_rule(root: Path) -> None:
    path = root / "pkgx" / "rule.py"
    stat = path.stat()
    path.write_text(RULE.format(5))  # same size: numba's stamp of kernel.py is unchanged anyway
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))


@pytest.mark.parametrize("keyed", [False, True], ids=["numba cache=True", "keyed_on"])
def test_a_kernel_is_recompiled_when_a_rule_it_inlines_changes(tmp_path: Path,
                                                                keyed: bool) -> None:
    _package(tmp_path, keyed=keyed)
    assert _run(tmp_path) == (22, "miss")
    assert _run(tmp_path) == (22, "hit")  # cached: the second process loads it
    _edit_rule(tmp_path)
    if keyed:
        assert _run(tmp_path) == (30, "miss")  # recompiled with the new rule
        assert _run(tmp_path) == (30, "hit")
    else:
        # numba's own key is kernel.py's content only: the old rule's machine code is loaded
        assert _run(tmp_path) == (22, "hit")


def test_every_kernel_of_the_seam_is_keyed_on_the_listed_sources() -> None:
    import numba.core.registry

    from compactor.native import cache, chunks, erasure, fast, kernels, keytable, sha256, xxh3

    kernels_seen = 0
    for module in (cache, chunks, erasure, fast, kernels, keytable, sha256, xxh3):
        for value in vars(module).values():
            if isinstance(value, numba.core.registry.CPUDispatcher):
                kernels_seen += 1
                assert isinstance(value._cache, cache.kernel.cache_class), value
                assert value.py_func.__module__ in cache.COMPILED_SOURCES, value
    assert kernels_seen > 40
