"""The report pieces every maintenance command shares."""

from __future__ import annotations

import json

import pytest

from compactor.errors import EXIT_OK, EXIT_PARTIAL
from compactor.maintenance.report import Outcome, exit_code, problem_line


def test_outcomes_serialise_as_the_report_strings() -> None:
    assert json.dumps({"status": Outcome.WOULD_CLEAN}) == '{"status": "would_clean"}'
    assert {o for o in Outcome if o.is_problem} == {Outcome.CORRUPT, Outcome.REFUSED,
                                                     Outcome.FAILED, Outcome.LOCKED}


@pytest.mark.parametrize("statuses, code", [
    ([], EXIT_OK), (["cleaned", "skipped", "kept"], EXIT_OK), (["cleaned", "refused"],
                                                               EXIT_PARTIAL),
    (["failed"], EXIT_PARTIAL), (["deleted", "corrupt"], EXIT_PARTIAL),
])
def test_any_problem_makes_the_run_partial(statuses: list[str], code: int) -> None:
    assert exit_code(statuses) == code


def test_an_unknown_status_is_an_error_not_a_silent_ok() -> None:
    with pytest.raises(ValueError):
        exit_code(["clened"])


def test_the_problem_line_names_file_position_base_offset_and_remedy() -> None:
    line = problem_line("t-0", Outcome.CORRUPT, {
        "message": "bad CRC", "path": "/l/t-0/00000000000000000000.log", "position": 61,
        "base_offset": 0, "remedy": "restore it"}, left="left untouched")
    assert line == ("t-0: CORRUPT, left untouched: bad CRC (/l/t-0/00000000000000000000.log, "
                    "position 61, base offset 0); remedy: restore it")
    assert problem_line("t-1", Outcome.FAILED, {"message": "full", "path": "/x"},
                        left="left untouched") == "t-1: FAILED, left untouched: full (/x)"
