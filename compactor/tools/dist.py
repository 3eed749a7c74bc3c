"""Build the ``--py-files`` archive of the Spark jobs: the ``compactor``, ``schemas`` and
``jobs`` packages, zipped (sources only, no bytecode), so executors of any cluster import the
same code as the driver.

    python -m compactor.tools.dist dist/kafka_compactor.zip
"""

from __future__ import annotations

import os
import sys
import zipfile
from pathlib import Path

PACKAGES = ("compactor", "schemas", "jobs")


def build(out: str, root: str | None = None) -> list[str]:
    """Write the archive; returns the names it holds."""
    base = Path(root) if root else Path(__file__).resolve().parents[2]
    names = []
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    tmp = out + ".tmp"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for package in PACKAGES:
            for path in sorted((base / package).rglob("*.py")):
                name = path.relative_to(base).as_posix()
                zf.write(path, name)
                names.append(name)
    os.replace(tmp, out)
    return names


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    out = args[0] if args else "dist/kafka_compactor.zip"
    names = build(out)
    print(f"{out}: {len(names)} files from {', '.join(PACKAGES)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
