"""Print spark-submit's arguments for a job of the tool: the command line's start, submitted.

Usage: python -m compactor.tools.ops.submit_args --master MASTER [--log-dir DIR ...]
       [--object-store] [--executors-installed] [--json]

A job started with them starts as fast as the ``compactor`` command does: its driver's JVM maps
this installation's class-data archive and logs errors only, the jars are on its classpath,
and its Python workers are the package's own daemon
(:func:`compactor.spark.session.submit_args`)::

    mapfile -t START < <(python -m compactor.tools.ops.submit_args --master local[4] \\
        --log-dir /var/lib/kafka/data)
    spark-submit --master local[4] "${START[@]}" \\
        jobs/run.py /var/lib/kafka/data --server-properties /etc/kafka/server.properties

The output is one argument a line (the driver's java options are one argument with spaces;
``--json``: a JSON list, for a program). Exits 3 when the jars were never fetched
(``python -m compactor.tools.build.jars``).
"""

from __future__ import annotations

import argparse
import json
import sys

from compactor.errors import EXIT_CONFIG, EXIT_OK, SparkUnavailableError


def _size(log_dirs: list[str]) -> int | None:
    """The bytes of the files in ``log_dirs`` and their partition directories; None when none
    is given or one cannot be listed (unknown: the JVM is started for long work)."""
    from compactor.errors import CompactorError
    from compactor.log import storage

    def files(path: str, depth: int) -> int:
        total = 0
        for name in storage.list_dir(path):
            entry = storage.join(path, name)
            if storage.is_dir(entry):
                total += files(entry, depth - 1) if depth else 0
            else:
                total += storage.stat(entry).size
        return total

    try:
        return sum(files(d, 1) for d in log_dirs) if log_dirs else None
    except (CompactorError, OSError):
        return None


def main(argv: list[str] | None = None) -> int:
    from compactor.spark.session import submit_args

    ap = argparse.ArgumentParser(prog="python -m compactor.tools.ops.submit_args",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--master", required=True,
                    help="the master the job is submitted to (local[N], spark://..., k8s://...)")
    ap.add_argument("--log-dir", action="append", default=[],
                    help="the job's log dir (repeat for several): a local job that reads at "
                         "most 1 GiB starts its JVM for short work, as the command does")
    ap.add_argument("--object-store", action="store_true",
                    help="the job's state dir is on S3: S3A's jars too")
    ap.add_argument("--executors-installed", action="store_true",
                    help="every executor runs this same installation (the container image): "
                         "its JVMs and Python workers start as the driver's")
    ap.add_argument("--json", action="store_true", help="print a JSON list")
    args = ap.parse_args(argv)
    try:
        out = submit_args(args.master, object_store=args.object_store,
                          executors_installed=args.executors_installed,
                          input_bytes=_size(args.log_dir))
    except SparkUnavailableError as err:
        print(f"submit_args: {err.message}; {err.remedy}", file=sys.stderr)
        return EXIT_CONFIG
    print(json.dumps(out) if args.json else "\n".join(out))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
