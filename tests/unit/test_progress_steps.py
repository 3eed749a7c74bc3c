"""A progress step's line and its bar's fraction, which never moves back."""

from __future__ import annotations

import io
import re

from compactor import progress


def test_the_bar_only_moves_forward_while_the_total_grows() -> None:
    step = progress.Step("rewrite", total=5, done=5)
    shown = step.shown_fraction(0.0)
    assert shown == 1.0
    step.update(5, total=12)  # a later job of the step submitted its stages
    assert step.shown_fraction(shown) == 1.0  # the count says 5/12; the bar stays
    step = progress.Step("scan", total=4, done=1)
    assert step.shown_fraction(0.5) == 0.5 and step.shown_fraction(0.1) == 0.25
    assert progress.Step("plan").shown_fraction(0.3) == 0.3  # no total yet


def test_a_step_without_units_says_only_its_time() -> None:
    out = io.StringIO()
    progress.configure(progress.Mode.LINES, out)
    try:
        with progress.step("starting Spark", unit=""):
            pass
        with progress.step("rewrite", total=3) as step:
            step.update(3)
    finally:
        progress.configure(progress.Mode.OFF)
    first, second = out.getvalue().splitlines()
    assert re.fullmatch(r"starting Spark: \d+\.\d s", first), first
    assert re.fullmatch(r"rewrite: 3/3 tasks, \d+\.\d s", second), second
