"""Print spark-submit's arguments for a job of the tool: the command line's start, submitted.

Usage: python -m compactor.tools.submit_args --master MASTER [--object-store]
       [--executors-installed] [--json]

A job started with them starts as fast as the ``compactor`` command does: its driver's JVM maps
this installation's class-data archive and logs errors only, the jars are on its classpath,
and its Python workers are the package's own daemon
(:func:`compactor.spark.session.submit_args`)::

    mapfile -t START < <(python -m compactor.tools.submit_args --master local[4])
    spark-submit --master local[4] "${START[@]}" \\
        jobs/run.py /var/lib/kafka/data --server-properties /etc/kafka/server.properties

The output is one argument a line (the driver's java options are one argument with spaces;
``--json``: a JSON list, for a program). Exits 3 when the jars were never fetched
(``python -m compactor.tools.jars``).
"""

from __future__ import annotations

import argparse
import json
import sys

from compactor.errors import EXIT_CONFIG, EXIT_OK, SparkUnavailableError


def main(argv: list[str] | None = None) -> int:
    from compactor.spark.session import submit_args

    ap = argparse.ArgumentParser(prog="python -m compactor.tools.submit_args",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--master", required=True,
                    help="the master the job is submitted to (local[N], spark://..., k8s://...)")
    ap.add_argument("--object-store", action="store_true",
                    help="the job's state dir is on S3: S3A's jars too")
    ap.add_argument("--executors-installed", action="store_true",
                    help="every executor runs this same installation (the container image): "
                         "its JVMs and Python workers start as the driver's")
    ap.add_argument("--json", action="store_true", help="print a JSON list")
    args = ap.parse_args(argv)
    try:
        out = submit_args(args.master, object_store=args.object_store,
                          executors_installed=args.executors_installed)
    except SparkUnavailableError as err:
        print(f"submit_args: {err.message}; {err.remedy}", file=sys.stderr)
        return EXIT_CONFIG
    print(json.dumps(out) if args.json else "\n".join(out))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
