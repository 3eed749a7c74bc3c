"""Entry point of ``compactor optimize``: the state dir's Delta tables compacted, vacuumed and
checkpointed (no Spark; the Airflow DAG runs it without spark-submit).
Arguments and report: ``compactor.cli.jobs`` and the README."""

import sys

from compactor.cli.jobs import OPTIMIZE as JOB

build_parser, main = JOB.build_parser, JOB.main

if __name__ == "__main__":
    sys.exit(main())
