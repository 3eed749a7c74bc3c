"""The docs are the user's manual (issue 53.10): every command and subcommand of the
``compactor`` CLI, every option of each, and every DAG of ``airflow_dags/`` is named in the
docs; every subcommand's ``--help`` describes what it does."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from compactor.cli.app import build_parser

REPO = Path(__file__).resolve().parent.parent
DOCS = "\n".join(p.read_text() for p in [REPO / "README.md", *sorted((REPO / "docs").glob(
    "*.md")), REPO / "airflow_dags" / "README.md"])


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
              ) -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    out = [(path, parser)] if path else []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += _commands(sub, (*path, name))
    return out


COMMANDS = _commands(build_parser())


def test_every_command_is_in_the_docs() -> None:
    missing = [" ".join(path) for path, _ in COMMANDS
               if f"compactor {' '.join(path)}" not in DOCS
               and not (len(path) == 2 and re.search(
                   rf"compactor {path[0]} [^`\n]*\b{path[1]}\b", DOCS))]
    assert missing == [], missing


def test_every_option_is_in_the_docs() -> None:
    missing = sorted({f"{' '.join(path)} {opt}" for path, parser in COMMANDS
                      for action in parser._actions for opt in action.option_strings
                      if opt.startswith("--") and opt != "--help" and opt not in DOCS})
    assert missing == [], missing


def test_every_subcommand_describes_itself_in_its_help() -> None:
    bare = [" ".join(path) for path, parser in COMMANDS if not parser.description]
    assert bare == [], bare


def test_every_dag_is_in_the_dags_readme() -> None:
    source = (REPO / "airflow_dags" / "kafka_compactor_dags.py").read_text()
    dags = set(re.findall(r'dag_id="([a-z_]+)"', source))
    readme = (REPO / "airflow_dags" / "README.md").read_text()
    assert len(dags) >= 6 and sorted(d for d in dags if d not in readme) == []
