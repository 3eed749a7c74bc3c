"""Progress of long work on stderr: a live bar on a terminal (rich), one line per finished step
otherwise (log files, Airflow task logs), nothing with ``-q``.

Steps are opened by the code doing the work (``with progress.step("rewrite", total=n) as s:
s.advance()``); Spark steps are fed from Spark's status tracker instead
(:mod:`compactor.spark.progress`). The mode is set once per process by the command line
(:func:`configure`); a library caller that never configures it gets no output.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TextIO

from compactor.human import human_bytes

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

#: In lines mode, a step still running after this long prints a line this often.
HEARTBEAT_S = 60.0
#: The bar's fixed scale (a fraction in thousandths).
BAR_SCALE = 1000


class Mode(StrEnum):
    AUTO = "auto"  # BAR on a terminal, LINES otherwise
    BAR = "bar"
    LINES = "lines"
    OFF = "off"


@dataclass
class Step:
    """One step's counters (``done`` of ``total`` units; ``total_bytes`` spread over them)."""

    name: str
    total: int | None = None
    unit: str = "tasks"
    total_bytes: int | None = None
    done: int = 0
    started: float = field(default_factory=time.monotonic)
    _reporter: Reporter | None = None

    def advance(self, n: int = 1) -> None:
        self.update(self.done + n)

    def update(self, done: int, total: int | None = None) -> None:
        self.done = done
        if total is not None:
            self.total = total
        if self._reporter is not None:
            self._reporter.refresh(self)

    @property
    def bytes_done(self) -> int | None:
        """``total_bytes`` in proportion to the units done (tasks are about the same size)."""
        if self.total_bytes is None or not self.total:
            return None
        return self.total_bytes * min(self.done, self.total) // self.total

    def line(self) -> str:
        """``rewrite: 12/12 tasks, 71.0 MB, 3.2 s``; a step without units (``starting
        Spark``) only says its time."""
        elapsed = f"{time.monotonic() - self.started:.1f} s"
        if not self.unit:
            return f"{self.name}: {elapsed}"
        count = f"{self.done}/{self.total}" if self.total is not None else f"{self.done}"
        size = f", {human_bytes(self.bytes_done)}" if self.bytes_done is not None else ""
        return f"{self.name}: {count} {self.unit}{size}, {elapsed}"

    def shown_fraction(self, before: float) -> float:
        """The bar's fraction: done/total, never less than ``before`` (what it showed): a
        Spark step's total grows as its later jobs submit their stages, and a bar must not
        move back."""
        if not self.total:
            return before
        return max(before, min(1.0, self.done / self.total))


class Reporter:
    """Renders steps in one mode on one stream."""

    def __init__(self, mode: Mode, stream: TextIO, prefix: str = "") -> None:
        if mode == Mode.AUTO:
            mode = Mode.BAR if stream.isatty() else Mode.LINES
        self.mode = mode
        self.stream = stream
        self.prefix = prefix
        self._lock = threading.Lock()
        self._bar: Progress | None = None
        self._tasks: dict[int, TaskID] = {}
        self._shown: dict[int, float] = {}
        self._last_line: dict[int, float] = {}

    def _progress(self) -> Progress:
        if self._bar is None:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            # the bar runs on a fixed scale of BAR_SCALE that only moves forward
            # (Step.shown_fraction); the count column shows the step's own numbers
            self._bar = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(),
                TextColumn("{task.fields[count]}{task.fields[unit]}{task.fields[size]}"),
                TimeElapsedColumn(), TextColumn("{task.fields[eta]}"),
                TimeRemainingColumn(), console=Console(file=self.stream), transient=True)
            self._bar.start()
        return self._bar

    def begin(self, step: Step) -> None:
        with self._lock:
            if self.mode == Mode.BAR:
                # no total until the step knows one (the bar pulses; no ETA)
                self._tasks[id(step)] = self._progress().add_task(
                    self.prefix + step.name, total=None, **self._fields(step))
                self._shown[id(step)] = 0.0
            self._last_line[id(step)] = step.started

    @staticmethod
    def _fields(step: Step) -> dict[str, Any]:
        known = step.total is not None
        return {"count": f"{step.done}/{step.total} " if known and step.unit else "",
                "unit": step.unit if known else "",
                "size": (f", {human_bytes(step.bytes_done)}" if step.bytes_done is not None
                         else ""),
                "eta": "ETA" if known else ""}

    def refresh(self, step: Step) -> None:
        with self._lock:
            if self.mode == Mode.BAR and id(step) in self._tasks:
                if step.total:
                    shown = self._shown[id(step)] = step.shown_fraction(self._shown[id(step)])
                    self._progress().update(self._tasks[id(step)], total=BAR_SCALE,
                                            completed=shown * BAR_SCALE, **self._fields(step))
                else:
                    self._progress().update(self._tasks[id(step)], **self._fields(step))
            elif self.mode == Mode.LINES:
                now = time.monotonic()
                if now - self._last_line.get(id(step), now) >= HEARTBEAT_S:
                    self._last_line[id(step)] = now
                    self._write(step.line() + " (running)")

    def end(self, step: Step) -> None:
        with self._lock:
            task = self._tasks.pop(id(step), None)
            shown = step.shown_fraction(self._shown.pop(id(step), 0.0))
            self._last_line.pop(id(step), None)
            if self._bar is not None and task is not None:
                # drawn once as it ended (a step shorter than a redraw would never show
                # its count), then replaced by its line
                if step.total:
                    self._bar.update(task, total=BAR_SCALE, completed=shown * BAR_SCALE,
                                     **self._fields(step))
                self._bar.refresh()
                self._bar.remove_task(task)
                if not self._tasks:
                    self._bar.stop()
                    self._bar = None
            if self.mode in (Mode.LINES, Mode.BAR):
                # a finished step stays on screen as a line in both modes
                self._write(step.line())

    def _write(self, text: str) -> None:
        if self._bar is not None:
            self._bar.console.print(self.prefix + text, markup=False, highlight=False)
        else:
            self.stream.write(self.prefix + text + "\n")
            self.stream.flush()


_reporter: Reporter | None = None


def configure(mode: Mode | str, stream: TextIO | None = None, *, prefix: str = "") -> None:
    """Set the process's progress output (the command line does, once)."""
    global _reporter
    mode = Mode(mode)
    _reporter = None if mode == Mode.OFF else Reporter(mode, stream or sys.stderr, prefix)


def enabled() -> bool:
    return _reporter is not None


@contextmanager
def step(name: str, *, total: int | None = None, unit: str = "tasks",
         total_bytes: int | None = None) -> Iterator[Step]:
    """A step of work; its counters are shown while it runs and its line when it ends (also
    when it fails: the line says how far it got)."""
    s = Step(name=name, total=total, unit=unit, total_bytes=total_bytes, _reporter=_reporter)
    if _reporter is not None:
        _reporter.begin(s)
    try:
        yield s
    finally:
        if _reporter is not None:
            _reporter.end(s)
