"""spark-submit entry point: what a scheduler calls: compaction and retention per topic
``cleanup.policy`` (``compactor run``).
Arguments and report: ``compactor.cli.jobs`` and the README."""

import sys

from compactor.cli.jobs import RUN as JOB

build_parser, main = JOB.build_parser, JOB.main

if __name__ == "__main__":
    sys.exit(main())
