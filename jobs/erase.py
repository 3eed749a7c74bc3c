"""spark-submit entry point: GDPR erasure: ``apply``, ``verify`` and ``status`` (``compactor
erase``).
Arguments and report: ``compactor.cli.jobs`` and the README."""

import sys

from compactor.cli.jobs import ERASE as JOB

build_parser, main = JOB.build_parser, JOB.main

if __name__ == "__main__":
    sys.exit(main())
