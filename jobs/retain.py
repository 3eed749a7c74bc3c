"""spark-submit entry point: Kafka retention over a log dir (``compactor retain``; driver only, no
Spark work).
Arguments and report: ``compactor.cli.jobs`` and the README."""

import sys

from compactor.cli.jobs import RETAIN as JOB

build_parser, main = JOB.build_parser, JOB.main

if __name__ == "__main__":
    sys.exit(main())
