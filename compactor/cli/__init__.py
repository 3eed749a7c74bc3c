# PYTHON_ARGCOMPLETE_OK
"""The command line: argparse (one function per command), text and JSON rendering, and the one
map from errors to exit codes. Nothing under :mod:`compactor` below this package parses
arguments or prints."""

from compactor.cli.app import main

__all__ = ["main"]
