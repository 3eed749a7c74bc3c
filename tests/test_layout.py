"""The layout's rules, checked by reading every module's imports (``ast``, nothing imported):

- the pure layers (codec, cleaner rules, retention, erasure rules, metadata replay, configs,
  value types, errors) import neither ``compactor.log`` nor ``compactor.spark`` nor pyspark,
  nor the clock, nor anything that touches files;
- only ``compactor/log/storage/`` touches files (``open``, ``os``/``shutil``/``pathlib``
  file calls); the tools that launch JVMs or build archives are the declared exceptions;
- pyspark is imported (at run time) only under ``compactor/spark/`` and by the local-cluster
  tool; the driver modules name Spark types under ``TYPE_CHECKING`` only;
- the S3 client (boto3, botocore) is imported only by the object store's implementation of
  the storage protocol (``compactor/log/storage/objects.py``) and the test server's tool;
- numba is imported only under ``compactor/native/`` (the native seam), and its kernels are
  made only by ``compactor/native/cache.py`` (the disk cache keyed on every compiled source:
  no ``numba.njit``/``numba.jit`` call elsewhere);
- a batch's delete horizon (``... + delete_retention_ms``) is computed only in
  ``compactor/cleaner/policy.py``, where the batch-rebuild rules live once for both paths;
- only ``compactor/cleaner/planning.py`` decides a round's path (one task or the distributed
  offset map): the one-task budget and the path's rules are defined there and nowhere else,
  and the byte budget and the key projection are read nowhere else;
- nothing under ``compactor/`` imports ``jobs``;
- executor code (``compactor.spark.writer``, ``compactor.spark.transforms`` and everything
  they import) never reaches the ledger or the driver's swap;
- ``compactor/maintenance`` neither parses arguments nor prints;
- no import cycles among the project's modules (imports inside functions count), nor among
  its folders (``log/`` -> ``cluster/`` -> ``log/`` is a cycle even when no chain of modules
  closes it).

The rules are read from one table, :data:`RULES`.

Each rule is also run against a copy of the tree with one forbidden import added, which it
must report: the checks can fail.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PROJECT = ("compactor", "jobs", "schemas")

# The rules, in one table: each names the modules it applies to (a name covers its
# submodules) and what they may or must not import.
RULES: dict[str, tuple[str, ...]] = {
    # pure layers: no files, no Spark, no clock, no ledger; they may import each other
    "pure": ("compactor.codec", "compactor.cleaner", "compactor.retention",
             "compactor.erasure.rules", "compactor.erasure.outcomes", "compactor.erasure.sketch",
             "compactor.erasure.status",
             "compactor.cluster.metadata", "compactor.cluster.release", "compactor.log.names",
             "compactor.config",
             "compactor.model", "compactor.errors"),
    "forbidden_in_pure": ("compactor.log", "compactor.spark", "compactor.maintenance",
                          "compactor.cli", "compactor.erasure.ledger", "compactor.state",
                          "compactor.native",
                          "pyspark", "numba", "time", "datetime", "os", "shutil", "pathlib",
                          "io", "mmap", "fcntl", "deltalake"),
    # the only modules that touch files
    "file_touchers": ("compactor.log.storage", "compactor.tools.fixtures",
                      "compactor.tools.build.dist", "compactor.tools.build.jars"),
    # the only importers of pyspark (at run time) and of numba (the native seam)
    "spark_importers": ("compactor.spark", "compactor.schemas.spark",
                        "compactor.tools.fixtures.local_cluster"),
    "numba_importers": ("compactor.native",),
    # the only importers of the S3 client: the object store's implementation of the storage
    # protocol (compactor.log.storage.stores) and the test server's upload tool
    "s3_client_importers": ("compactor.log.storage.objects", "compactor.tools.fixtures.s3_server"),
    # the only maker of numba kernels (numba.njit / numba.jit calls)
    "kernel_makers": ("compactor.native.cache",),
    # the only module that computes a delete horizon (the batch-rebuild rules)
    "rebuild_rules": ("compactor.cleaner.policy",),
    # the only module that decides a round's path
    "planning": ("compactor.cleaner.planning",),
    # executor code, and the driver-only modules its import closure must not reach
    "executor_roots": ("compactor.spark.writer", "compactor.spark.transforms"),
    "driver_only": ("compactor.erasure.ledger", "compactor.state", "compactor.log.swap"),
    # no import cycles among these folders (the root package is the API's lazy facade)
    "packages": ("compactor.cleaner", "compactor.cli", "compactor.cluster", "compactor.codec",
                 "compactor.erasure", "compactor.log", "compactor.maintenance",
                 "compactor.native", "compactor.remote", "compactor.schemas", "compactor.spark",
                 "compactor.state", "compactor.tools", "jobs"),
}
#: the round-path rules and budget: defined only in RULES["planning"] ...
PLANNING_DEFINED = frozenset({"ONE_TASK_KEYS", "ONE_TASK_BYTES", "one_task_scans",
                              "offset_map_reason", "over_task_keys", "projected_keys",
                              "round_path"})
#: ... and these read only there (``--task-keys``' default reads ONE_TASK_KEYS elsewhere)
PLANNING_READ = frozenset({"ONE_TASK_BYTES", "PROJECT_AFTER_SHARE", "PROJECT_AFTER_KEYS",
                           "PROJECT_MARGIN", "projected_keys"})
FILE_CALLS = {"open"}
FILE_MODULE_CALLS = {"os": {"remove", "rename", "replace", "unlink", "listdir", "scandir", "stat",
                            "lstat", "makedirs", "mkdir", "rmdir", "open", "fsync", "utime",
                            "symlink", "link"},
                     "os.path": {"exists", "isdir", "isfile", "islink", "getsize", "getmtime",
                                 "realpath"},
                     "shutil": {"copy", "copy2", "copyfile", "copytree", "rmtree", "move"}}


@dataclass
class Module:
    name: str
    path: Path
    imports: set[str] = field(default_factory=set)  # run-time imports (absolute names)
    typing_only: set[str] = field(default_factory=set)  # under TYPE_CHECKING
    file_calls: list[str] = field(default_factory=list)
    argparse_or_print: list[str] = field(default_factory=list)
    kernels_made: list[str] = field(default_factory=list)  # numba.njit / numba.jit calls
    horizons: list[str] = field(default_factory=list)  # `... + delete_retention_ms`
    defined: set[str] = field(default_factory=set)  # top-level functions, classes, names
    read: set[str] = field(default_factory=set)  # names and attributes read anywhere


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[0] == "schemas":  # installed (and imported) as compactor.schemas
        parts.insert(0, "compactor")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk(tree: ast.AST, typing_only: bool = False) -> Iterator[tuple[ast.AST, bool]]:
    for node in ast.iter_child_nodes(tree):
        guarded = typing_only or (isinstance(node, ast.If) and _is_type_checking(node))
        yield node, guarded
        yield from _walk(node, guarded)


def parse_module(name: str, path: Path, source: str) -> Module:
    mod = Module(name, path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(source)
    for top in tree.body:
        if isinstance(top, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            mod.defined.add(top.name)
        elif isinstance(top, ast.Assign | ast.AnnAssign):
            targets = top.targets if isinstance(top, ast.Assign) else [top.target]
            mod.defined.update(n.id for t in targets for n in ast.walk(t)
                               if isinstance(n, ast.Name))
    for node, guarded in _walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Name):
            mod.read.add(node.id)
        elif isinstance(node, ast.Attribute):
            mod.read.add(node.attr)
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            # `from a import b` may import the module a.b
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in FILE_CALLS:
                mod.file_calls.append(f"{func.id}() at line {node.lineno}")
            if isinstance(func, ast.Name) and func.id == "print":
                mod.argparse_or_print.append(f"print() at line {node.lineno}")
            if isinstance(func, ast.Attribute):
                owner = ast.unparse(func.value)
                if func.attr in FILE_MODULE_CALLS.get(owner, ()):
                    mod.file_calls.append(f"{owner}.{func.attr}() at line {node.lineno}")
                if owner == "numba" and func.attr in ("njit", "jit"):
                    mod.kernels_made.append(f"numba.{func.attr}() at line {node.lineno}")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and any(
                ast.unparse(side).endswith("delete_retention_ms")
                for side in (node.left, node.right)):
            mod.horizons.append(f"{ast.unparse(node)} at line {node.lineno}")
        (mod.typing_only if guarded else mod.imports).update(names)
    if "argparse" in mod.imports:
        mod.argparse_or_print.append("imports argparse")
    return mod


def load_tree(overrides: Mapping[str, str] | None = None) -> dict[str, Module]:
    """Every project module, parsed; ``overrides`` replaces a module's source by name."""
    mods = {}
    for top in PROJECT:
        for path in sorted((REPO / top).rglob("*.py")):
            name = _module_name(path, REPO)
            source = (overrides or {}).get(name, path.read_text())
            mods[name] = parse_module(name, path, source)
    return mods


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _project_edges(mods: Mapping[str, Module], name: str) -> set[str]:
    """Project modules ``name`` imports at run time (a ``from pkg import sub`` edge goes to
    ``pkg.sub`` when that is a module, else to ``pkg``)."""
    out = set()
    for imp in mods[name].imports:
        if imp in mods and imp != name:
            out.add(imp)
    return out


def violations(mods: Mapping[str, Module]) -> list[str]:
    found = []
    for name, mod in mods.items():
        if _under(name, RULES["pure"]):
            found += [f"{name} (pure) imports {i}" for i in sorted(mod.imports)
                      if _under(i, RULES["forbidden_in_pure"]) and not _under(i, RULES["pure"])]
        if not _under(name, RULES["file_touchers"]) and name.startswith("compactor"):
            found += [f"{name} touches files: {c}" for c in mod.file_calls]
        if not _under(name, RULES["spark_importers"]):
            found += [f"{name} imports {i} at run time" for i in sorted(mod.imports)
                      if _under(i, ("pyspark",)) and name.startswith("compactor")]
        if not _under(name, RULES["numba_importers"]):
            found += [f"{name} imports {i} outside the native seam"
                      for i in sorted(mod.imports | mod.typing_only) if _under(i, ("numba",))]
        if not _under(name, RULES["s3_client_importers"]) and name.startswith("compactor"):
            found += [f"{name} imports {i} outside the object store"
                      for i in sorted(mod.imports) if _under(i, ("boto3", "botocore"))]
        if name.startswith("compactor"):
            found += [f"{name} imports {i}" for i in sorted(mod.imports) if _under(i, ("jobs",))]
        if not _under(name, RULES["kernel_makers"]):
            found += [f"{name} makes a kernel outside compactor.native.cache: {k}"
                      for k in mod.kernels_made]
        if not _under(name, RULES["planning"]) and name.startswith("compactor"):
            found += [f"{name} defines {d}: a round's path is decided only in planning"
                      for d in sorted(mod.defined & PLANNING_DEFINED)]
            found += [f"{name} reads {d}: a round's path is decided only in planning"
                      for d in sorted(mod.read & PLANNING_READ)]
        if not _under(name, RULES["rebuild_rules"]):
            found += [f"{name} computes a delete horizon outside the rebuild rules: {h}"
                      for h in mod.horizons]
        if _under(name, ("compactor.maintenance",)):
            found += [f"{name}: {what}" for what in mod.argparse_or_print]
    for root in RULES["executor_roots"]:  # the executor side's whole import closure
        seen, todo = {root}, [root]
        while todo:
            for nxt in _project_edges(mods, todo.pop()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        found += [f"executor code {root} reaches {d}" for d in RULES["driver_only"]
                  if d in seen]
    found += [f"import cycle: {' -> '.join(c)}" for c in cycles(mods)]
    found += [f"folder cycle: {' <-> '.join(c)}" for c in package_cycles(mods)]
    return found


def _package(name: str) -> str | None:
    return next((p for p in RULES["packages"] if _under(name, (p,))), None)


def package_cycles(mods: Mapping[str, Module]) -> list[list[str]]:
    """Cycles among the folders of ``RULES["packages"]``: module edges lifted to the folders
    that hold them (a cycle of folders is one the file-level check cannot see, when no
    single chain of modules closes it). Each cycle is named with one module edge per step."""
    edges: dict[str, dict[str, str]] = {}
    for name in mods:
        src = _package(name)
        for dst_mod in _project_edges(mods, name):
            dst = _package(dst_mod)
            if src and dst and src != dst:
                edges.setdefault(src, {}).setdefault(dst, f"{name} -> {dst_mod}")
    graph = {p: set(e) for p, e in edges.items()}
    out = []
    for comp in _strongly_connected(sorted(RULES["packages"]), graph):
        if len(comp) > 1:
            out.append(sorted(f"{a} ({edges[a][b]})" for a in comp for b in edges.get(a, {})
                              if b in comp))
    return out


def _strongly_connected(nodes: list[str], graph: Mapping[str, set[str]]) -> list[list[str]]:
    reach = {}
    for v in nodes:
        seen, todo = set(), [v]
        while todo:
            for w in graph.get(todo.pop(), ()):
                if w not in seen:
                    seen.add(w)
                    todo.append(w)
        reach[v] = seen
    comps = {frozenset([v, *(w for w in reach[v] if v in reach[w])]) for v in nodes}
    return [sorted(c) for c in comps]


def cycles(mods: Mapping[str, Module]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in _project_edges(mods, v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            # a package importing its own submodule is not a cycle of concern
            if len(comp) > 1 and not all(c.startswith(min(comp, key=len)) for c in comp):
                out.append(sorted(comp))

    for v in sorted(mods):
        if v not in index:
            visit(v)
    return out


def test_the_layout_rules_hold() -> None:
    assert violations(load_tree()) == []


def _source(name: str) -> str:
    return (REPO / (name.replace(".", "/") + ".py")).read_text()


@pytest.mark.parametrize("module, added, expected", [
    ("compactor.cleaner.policy", "from compactor.log import storage", "(pure) imports"),
    ("compactor.codec.records", "import time", "(pure) imports time"),
    ("compactor.retention", "from compactor.spark import stages", "(pure) imports"),
    ("compactor.erasure.rules", "import pyspark.sql", "(pure) imports pyspark"),
    ("compactor.maintenance.retain", "from pyspark.sql import SparkSession",
     "imports pyspark.sql at run time"),
    ("compactor.log.layout", "from jobs import compact", "imports jobs"),
    ("compactor.codec.records", "from compactor.cleaner import rebatch", "import cycle"),
    ("compactor.cleaner.verify", "from compactor.erasure import ledger",
     "executor code compactor.spark.transforms reaches compactor.erasure.ledger"),
    ("compactor.maintenance.run", "import argparse", "imports argparse"),
    ("compactor.maintenance.compact", "def f():\n    open('x')", "touches files: open()"),
    ("compactor.cluster.catalog", "def f(p):\n    os.remove(p)", "touches files: os.remove()"),
    ("compactor.spark.writer", "import numba", "imports numba outside the native seam"),
    ("compactor.log.storage.local", "import boto3", "imports boto3 outside the object store"),
    ("compactor.maintenance.erase", "def f():\n    import botocore.exceptions",
     "imports botocore.exceptions outside the object store"),
    ("compactor.cleaner.scan", "from compactor.native import fast", "(pure) imports"),
    ("compactor.log.layout", "def f():\n    from compactor.cluster import catalog",
     "folder cycle"),
    ("compactor.erasure.ledger", "from compactor.spark import delta", "folder cycle"),
    ("compactor.state.tables", "from compactor.erasure import status", "folder cycle"),
    ("compactor.cleaner.verify", "from compactor.state import runs",
     "executor code compactor.spark.transforms reaches compactor.state"),
    ("compactor.native.fast", "k = numba.njit(cache=True)(len)",
     "makes a kernel outside compactor.native.cache"),
    ("compactor.native.fast", "def f(now_ms, delete_retention_ms):\n"
                              "    return now_ms + delete_retention_ms",
     "computes a delete horizon outside the rebuild rules"),
    ("compactor.maintenance.compact", "def one_task_scans(segments):\n    return True",
     "defines one_task_scans: a round's path is decided only in planning"),
    ("compactor.spark.stages", "def f(n):\n    return n < planning.ONE_TASK_BYTES",
     "reads ONE_TASK_BYTES: a round's path is decided only in planning"),
])
def test_a_forbidden_import_is_reported(module: str, added: str, expected: str) -> None:
    tree = load_tree({module: _source(module) + "\n" + added + "\n"})
    assert any(expected in v for v in violations(tree)), violations(tree)


def test_type_checking_imports_are_not_run_time_imports() -> None:
    mod = parse_module("compactor.x", REPO / "compactor/x.py",
                       "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                       "    from pyspark.sql import SparkSession\n")
    assert "pyspark.sql" in mod.typing_only and "pyspark.sql" not in mod.imports
