"""Console notes: what a person running a command should see that is not a problem — a one-time model
conversion, eval rows left out by split hygiene, a checkpoint written. Logged at INFO on the ``skyrl.note``
logger (a library caller sees them by enabling INFO logging); the ``skyrl`` CLI prints them to stderr as plain
lines (:func:`show_notes`), never as ``WARNING``."""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

NOTE_LOGGER = "skyrl.note"


def note(message: str, *args: Any) -> None:
    """Log ``message % args`` as a console note."""
    logging.getLogger(NOTE_LOGGER).info(message, *args)


def show_notes(stream: TextIO | None = None) -> None:
    """Print notes to ``stream`` (default: stderr at the time of each note) as plain lines, once per process:
    calling again replaces the handler rather than adding a second."""
    logger = logging.getLogger(NOTE_LOGGER)
    for handler in [h for h in logger.handlers if getattr(h, "_skyrl_note", False)]:
        logger.removeHandler(handler)
    handler = _StderrHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler._skyrl_note = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


class _StderrHandler(logging.StreamHandler):
    """A StreamHandler that looks sys.stderr up at each record (test runners and rich swap it)."""

    def __init__(self, stream: TextIO | None) -> None:
        super().__init__(stream or sys.stderr)
        self._fixed = stream

    def emit(self, record: logging.LogRecord) -> None:
        if self._fixed is None:
            self.stream = sys.stderr
        super().emit(record)
