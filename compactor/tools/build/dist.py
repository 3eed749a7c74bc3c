"""Build the ``--py-files`` archive of the Spark jobs: the ``compactor`` package with the
repository's ``schemas/`` as ``compactor.schemas`` (as the wheel installs it), zipped (sources
only, no bytecode), so executors of any cluster import the same code as the driver. The jobs
themselves (``jobs/*.py``) are given to spark-submit by path.

    python -m compactor.tools.build.dist dist/kafka_compactor.zip
"""

from __future__ import annotations

import os
import sys
import zipfile
from pathlib import Path

#: the repository's folders and where each goes in the archive
PACKAGES = {"compactor": "compactor", "schemas": "compactor/schemas"}


def build(out: str, root: str | None = None) -> list[str]:
    """Write the archive; returns the names it holds."""
    base = Path(root) if root else Path(__file__).resolve().parents[3]
    names = []
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    tmp = out + ".tmp"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for package, at in PACKAGES.items():
            for path in sorted((base / package).rglob("*.py")):
                name = f"{at}/{path.relative_to(base / package).as_posix()}"
                zf.write(path, name)
                names.append(name)
    os.replace(tmp, out)
    return names


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m compactor.tools.build.dist",
        description=f"Zip the {', '.join(PACKAGES)} packages (sources only) for spark-submit's "
                    f"--py-files.")
    parser.add_argument("out", nargs="?", default="dist/kafka_compactor.zip",
                        help="the archive to write (default: %(default)s)")
    args = parser.parse_args(argv)
    if not args.out.endswith(".zip"):
        parser.error(f"{args.out!r} does not end in .zip (spark-submit's --py-files takes "
                     f".zip, .egg or .py files)")
    names = build(args.out)
    print(f"{args.out}: {len(names)} files from {', '.join(PACKAGES)}")
    print(f"run a job with: mapfile -t START < <(python -m compactor.tools.ops.submit_args "
          f"--master MASTER); spark-submit --master MASTER --py-files {args.out} "
          f"\"${{START[@]}}\" jobs/<job>.py ...")
    return 0


if __name__ == "__main__":
    sys.exit(main())
