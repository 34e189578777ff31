"""Logging through the host. Inside a component lines go to the host's structured log, tagged
with the policy (the host bounds their number and length per call); natively, in unit tests,
they go to stderr.

Inside the component `print` reaches the policy log too (the host turns stdout into info
lines), but without a level; log through here to say how much a line matters.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Callable

__all__ = ["Level", "info", "log", "warn"]


class Level(enum.Enum):
    """Log severity; the names match the contract's `level` enum."""

    TRACE = "Trace"
    """Very detailed."""
    DEBUG = "Debug"
    """Detailed."""
    INFO = "Info"
    """Normal."""
    WARN = "Warn"
    """Something looks wrong."""
    ERROR = "Error"
    """Something is wrong."""


def _stderr(level: Level, message: str) -> None:
    print(f"[{level.value}] {message}", file=sys.stderr)


# Where lines go: stderr until the export glue, created inside the component, points it at
# the host's `log` import.
_sink: Callable[[Level, str], None] = _stderr


def _route(sink: Callable[[Level, str], None] | None) -> None:
    """Send lines to `sink` (the host's `log`), or back to stderr with `None`."""
    global _sink
    _sink = sink if sink is not None else _stderr


def log(level: Level, message: str) -> None:
    """Write one log line."""
    _sink(level, message)


def info(message: str) -> None:
    """Log at info level."""
    log(Level.INFO, message)


def warn(message: str) -> None:
    """Log at warn level."""
    log(Level.WARN, message)
