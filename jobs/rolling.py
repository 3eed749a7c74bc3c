"""Entry point of the rolling maintenance (``compactor rolling``): each broker of a plan in
turn stopped, maintained, started and back in sync. It needs no Spark itself (each maintenance
command starts its own); the Airflow DAG runs it without spark-submit.
Arguments and report: ``compactor.cli.jobs`` and the README."""

import sys

from compactor.cli.jobs import ROLLING as JOB

build_parser, main = JOB.build_parser, JOB.main

if __name__ == "__main__":
    sys.exit(main())
