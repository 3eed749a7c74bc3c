"""spark-submit entry point: resolve interrupted swaps and deletions as a broker's loader does
(``compactor recover``; driver only). Schedulers run it before the maintenance job.
Arguments and report: ``compactor.cli.jobs`` and the README."""

import sys

from compactor.cli.jobs import RECOVER as JOB

build_parser, main = JOB.build_parser, JOB.main

if __name__ == "__main__":
    sys.exit(main())
