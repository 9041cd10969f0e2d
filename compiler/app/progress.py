"""A build's progress on stderr, as `tessera compile` shows it (docs/cli.md).

On a terminal one status line is redrawn in place: the stage, a bar and ``done/total``. Anywhere
else (a pipe, a log file, CI) each stage gets one plain line when it ends, with its time, in the
manner of ninja's ``[5/10] step``. Quiet shows nothing. Stdout is left to the command's result.

A ``ProgressBar`` is the ``progress(stage, done, total)`` callable of tessera.build: called as a
step starts, ``stage`` names what runs now and ``done`` of its ``total`` steps are finished. A
stage ends when another begins, its last step then done: a pass is step ``done + 1`` of the
pipeline, and the kernels end with all of them rendered.
"""

from __future__ import annotations

import os
import sys
import time

BAR_WIDTH = 24
REDRAW_SECONDS = 0.05  # a redraw per kernel would cost more than rendering a small kernel


class ProgressBar:
    def __init__(self, mode: str | None = None, stream=None):
        """``mode``: "tty" (redrawn in place), "plain" (a line per stage) or "quiet"; by default "tty"
        when ``stream`` (stderr) is a terminal, else "plain"."""
        self.stream = stream or sys.stderr
        if mode is None:
            mode = "tty" if _is_terminal(self.stream) else "plain"
        if mode not in ("tty", "plain", "quiet"):
            raise ValueError(f"unknown progress mode {mode!r}")
        self.mode = mode
        self.started = time.perf_counter()
        self.stage: str | None = None
        self.stage_started = self.started
        self.done = self.total = 0
        self._drawn_at = 0.0
        self._line_shown = False

    def __call__(self, stage: str, done: int, total: int) -> None:
        now = time.perf_counter()
        new_stage = stage != self.stage
        if new_stage:
            self._end_stage(now)
            self.stage, self.stage_started = stage, now
        self.done, self.total = done, total
        if self.mode == "tty" and (new_stage or done + 1 >= total or now - self._drawn_at >= REDRAW_SECONDS):
            self._draw(now)

    def close(self) -> None:
        """End the last stage: its plain line, or the terminal's status line cleared."""
        self._end_stage(time.perf_counter())
        self.stage = None
        if self._line_shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._line_shown = False

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _end_stage(self, now: float) -> None:
        if self.stage is None or self.mode != "plain":
            return
        count = f"[{self.done + 1}/{self.total}] " if self.total > 1 else ""
        self.stream.write(f"{count}{self.stage} ({now - self.stage_started:.1f} s)\n")
        self.stream.flush()

    def _draw(self, now: float) -> None:
        if self.total > 1:
            filled = BAR_WIDTH * min(self.done, self.total) // self.total
            line = f"{self.stage} [{'#' * filled}{'-' * (BAR_WIDTH - filled)}] {self.done}/{self.total}"
        else:
            line = f"{self.stage} ..."
        line = f"{line}  {now - self.started:.0f} s"
        width = _columns(self.stream) - 1  # writing the last column wraps the line on some terminals
        self.stream.write("\r" + line[:width] + "\x1b[K")
        self.stream.flush()
        self._drawn_at, self._line_shown = now, True


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _columns(stream) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):
        return 80
