"""spark-submit entry point of ``compactor recover``: resolve interrupted swaps and deletions
in a log dir as a Kafka broker's loader does (driver only; no Spark work). Schedulers run it
before the maintenance job.

    spark-submit jobs/recover.py LOG_DIR [--dry-run] [--json]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from compactor.cli import recover_command
from compactor.options import add_recover_arguments, run_main


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jobs/recover.py",
                                     description="Recover interrupted swaps in a Kafka log dir.")
    add_recover_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_main("recover", build_parser(), recover_command, argv)


if __name__ == "__main__":
    sys.exit(main())
