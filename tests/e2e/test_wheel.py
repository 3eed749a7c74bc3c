"""The wheel installs one top-level package, ``compactor`` (the repository's ``schemas/`` as
``compactor.schemas``; no generic ``jobs`` or ``schemas`` in site-packages), and what it
installs imports on its own, away from the repository."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def test_the_wheel_has_one_top_level_package_and_imports_alone(tmp_path: Path) -> None:
    # from a copy of the repository's files (no build/ left by an earlier build), by the
    # environment's setuptools: no index is reached
    source = tmp_path / "source"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO,
                           check=True, capture_output=True, text=True).stdout.split()
    for name in files:
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp_path / "dist"), str(source)], check=True,
                   capture_output=True, text=True)
    (wheel,) = (tmp_path / "dist").glob("kafka_compactor-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"compactor"}
    assert "compactor/schemas/delta.py" in names and "compactor/schemas/report.schema.json" in names
    assert "compactor/spark/pom.xml" in names
    assert not any(n.startswith("compactor/cleaner/reference") for n in names)  # a test oracle
    # every module of the package, in every folder (a folder missing from pyproject.toml's
    # list installs nothing, and only an import of it at run time would tell)
    modules = {str(p.relative_to(REPO)) for p in (REPO / "compactor").rglob("*.py")
               if p.relative_to(REPO).as_posix() in files
               and not p.relative_to(REPO).as_posix().startswith("compactor/cleaner/reference")}
    assert sorted(modules - set(names)) == []

    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                    str(target), str(wheel)], check=True, capture_output=True, text=True)
    # isolated (-I: no PYTHONPATH, no working directory on the path), the target first
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); "
             "import compactor.schemas.delta, compactor.spark.transforms, compactor.cli.app; "
             "print(compactor.schemas.delta.__file__)")
    out = subprocess.run([sys.executable, "-I", "-c", probe, str(target)], cwd=tmp_path,
                         check=True, capture_output=True, text=True).stdout
    assert out.strip().startswith(str(target))
