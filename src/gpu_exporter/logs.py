"""Logging setup: one line per record, as logfmt-style text or JSON, on standard error.

Repeated warnings and errors, and info records marked :data:`LIMITED`, are aggregated so that no
client, file, signal or fault can flood the log: of the records
sharing a logger and a message template, the first :data:`BURST` in each :data:`WINDOW` seconds are
printed; the rest are counted and reported in one line ("… N more like it …") by the next printed
record of that kind or by :func:`flush_repeats`, which the server calls periodically.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from typing import Any

#: ``extra`` for an info or debug record that an outside party can repeat at will (a signal, a
#: server's answer): aggregated as warnings are.
LIMITED = {"limited": True}
#: Records of one kind printed per window before the rest are only counted.
BURST = 10
#: Seconds in a window of :class:`RepeatFilter`.
WINDOW = 60.0

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.exc_info:
            message += "\n" + self.formatException(record.exc_info)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        return (
            f"ts={stamp}.{int(record.msecs):03d}Z level={record.levelname.lower()} logger={record.name} msg={message!r}"
        )


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


class RepeatFilter(logging.Filter):
    """Lets the first :data:`BURST` records of a (logger, template) through per window, counts the rest."""

    def __init__(self, burst: int = BURST, window: float = WINDOW) -> None:
        super().__init__()
        self.burst = burst
        self.window = window
        self._lock = threading.Lock()
        self._kinds: dict[tuple[str, str], list[Any]] = {}  # → [window start, printed, suppressed]

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "_summary", False):
            return True
        if record.levelno < logging.WARNING and not getattr(record, "limited", False):
            return True
        key = (record.name, str(record.msg))
        now = time.monotonic()
        with self._lock:
            state = self._kinds.get(key)
            if state is None or now - state[0] >= self.window:
                suppressed = state[2] if state is not None else 0
                self._kinds[key] = [now, 1, 0]
                if len(self._kinds) > 4096:
                    self._kinds.clear()
                if suppressed:
                    record.msg = f"{record.msg} (and {suppressed} more like it in the last {self.window:g}s)"
                return True
            if state[1] < self.burst:
                state[1] += 1
                return True
            state[2] += 1
            return False

    def due(self, force: bool = False) -> list[tuple[str, str, int]]:
        """(logger, template, count) for kinds whose window ended with records suppressed; resets them."""
        now = time.monotonic()
        result = []
        with self._lock:
            for key, state in self._kinds.items():
                if state[2] and (force or now - state[0] >= self.window):
                    result.append((key[0], key[1], state[2]))
                    state[0], state[1], state[2] = now, self.burst, 0
        return result


_FILTER = RepeatFilter()


def flush_repeats(force: bool = False) -> None:
    """Log one summary line per kind of message that was suppressed (every kind when ``force``)."""
    for name, template, count in _FILTER.due(force):
        logging.getLogger(name).warning(
            "%d more log lines like %r were suppressed", count, template[:120], extra={"_summary": True}
        )


def setup(level: str, fmt: str) -> None:
    """Route every logger through one stderr handler in the chosen format, repeats aggregated."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if fmt == "json" else _TextFormatter())
    handler.addFilter(_FILTER)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(_LEVELS[level])
