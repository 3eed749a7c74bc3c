"""Every option of every command and job has help text that names its default; shell
completion (argcomplete) answers for the installed ``compactor`` script."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from compactor.cli import jobs
from compactor.cli.app import build_parser
from compactor.cli.args import add_verbosity_arguments

COMPACTOR = str(Path(sys.executable).parent / "compactor")


def _parsers() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    def walk(name: str, parser: argparse.ArgumentParser
             ) -> Iterator[tuple[str, argparse.ArgumentParser]]:
        yield name, parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub_name, sub in action.choices.items():
                    yield from walk(f"{name} {sub_name}", sub)

    yield from walk("compactor", build_parser())
    for job in (jobs.COMPACT, jobs.RETAIN, jobs.RUN, jobs.ERASE, jobs.RECOVER):
        parser = job.build_parser()
        add_verbosity_arguments(parser)
        yield from walk(job.name, parser)


def test_every_option_has_help_with_its_default() -> None:
    missing, no_default = [], []
    for name, parser in _parsers():
        rendered = parser.format_help()
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._VersionAction,
                                   argparse._SubParsersAction)):
                continue
            label = f"{name} {action.option_strings or action.dest}"
            if not action.help:
                missing.append(label)
            elif action.option_strings and action.default not in (None, False, []):
                # the help line of this option, as printed, names the default
                formatter = parser._get_formatter()
                text = formatter._expand_help(action) if action.help else ""
                if "default" not in text:
                    no_default.append(label)
        assert rendered
    assert missing == []
    assert no_default == []


@pytest.mark.parametrize(("line", "expected"), [
    ("compactor pl", {"plan"}),
    ("compactor compact /x --now", {"--now-ms"}),
    ("compactor erase ap", {"apply"}),
])
def test_shell_completion_answers(line: str, expected: set[str], tmp_path: Path) -> None:
    out = tmp_path / "completions"
    env = {**os.environ, "_ARGCOMPLETE": "1", "COMP_LINE": line, "COMP_POINT": str(len(line)),
           "_ARGCOMPLETE_STDOUT_FILENAME": str(out), "_ARGCOMPLETE_IFS": "\n"}
    res = subprocess.run([COMPACTOR], env=env, capture_output=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert {c.strip() for c in out.read_text().split("\n") if c.strip()} == expected
