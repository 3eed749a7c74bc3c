"""Make this installation's class-data-sharing archive of Spark's classes (AppCDS).

Usage: python -m compactor.tools.build.class_archive [--force] [--out PATH]

A session of this installation runs a compaction round on a small generated log dir with
``-XX:ArchiveClassesAtExit``, so its driver JVM loads the classes a command uses (Spark's
core, SQL, Arrow and shuffle paths, the Python worker factory); the JVM writes them into the
archive when it exits, and every later session the command line starts maps them instead of
loading and verifying each class (:func:`compactor.spark.session.get_spark`). The archive
belongs to one JDK and one pyspark: the JVM ignores it with another, and ``make`` makes it
anew with the Python environment. It is written under a temporary name and renamed only once
the JVM has exited cleanly, so a run cut short leaves no archive rather than a bad one.

Exits 0 when the archive is there (made now or before); 1, with the reason, when it could not
be made (the commands work without it, as they did before).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

from compactor.errors import CompactorError
from compactor.log import storage

DUMP_TIMEOUT_S = 300


def make(out: str) -> str | None:
    """Make the archive at ``out``; the reason when it could not be made."""
    from compactor import api
    from compactor.spark.session import get_spark
    from compactor.tools.ops.generator import GeneratorConfig, generate

    storage.make_dirs(os.path.dirname(out))
    partial = f"{out}.{os.getpid()}.partial"
    with tempfile.TemporaryDirectory(prefix="kafka-compactor-cds-") as work:
        log_dir = os.path.join(work, "logs")
        generate(log_dir, GeneratorConfig(topics=("classes",), partitions=2,
                                          records_per_partition=2000, seed=1))
        spark = get_spark("local[2]", "kafka-compactor-class-archive", archive_out=partial)
        proc = getattr(spark.sparkContext._gateway, "proc", None)
        result = api.compact(log_dir, configs={"cleanup.policy": "compact"},
                             assume_kafka_defaults=True)
        spark.stop()
    if proc is None or proc.stdin is None:
        return "the JVM's process is not this process's child (a spark-submit JVM?)"
    proc.stdin.close()  # PythonGatewayServer exits on end of input: the JVM writes the archive
    code = proc.wait(timeout=DUMP_TIMEOUT_S)
    written = storage.exists(partial)
    if result.exit_code != 0 or code != 0 or not written:
        storage.remove(partial, missing_ok=True)
        return (f"the round exited {result.exit_code}, the JVM {code}"
                + ("" if written else ", and it wrote no archive"))
    storage.rename(partial, out)
    return None


def main(argv: list[str] | None = None) -> int:
    from compactor.spark.session import class_archive

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=class_archive(),
                    help="where to write it (default: %(default)s)")
    ap.add_argument("--force", action="store_true", help="make it again when it is there")
    args = ap.parse_args(argv)
    if storage.exists(args.out) and not args.force:
        print(f"class archive: {args.out} (there already)")
        return 0
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    try:
        reason = make(args.out)
    except CompactorError as err:  # no Java, for one
        reason = err.message
    if reason is None:
        print(f"class archive: {args.out} ({storage.stat(args.out).size / 1e6:.0f} MB)")
    else:
        print(f"class archive: not made ({reason}); commands start without it", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    # the JVM is gone: pyspark's exit handlers would only report the lost connection
    os._exit(0 if reason is None else 1)


if __name__ == "__main__":
    sys.exit(main())
