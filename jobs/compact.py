"""spark-submit entry point: one compaction round over a Kafka log dir (``compactor compact``;
``--dry-run`` plans).
Arguments and report: ``compactor.cli.jobs`` and the README."""

import sys

from compactor.cli.jobs import COMPACT as JOB

build_parser, main = JOB.build_parser, JOB.main

if __name__ == "__main__":
    sys.exit(main())
