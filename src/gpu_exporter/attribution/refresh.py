"""What the attribution sources that ask someone on a cadence of their own (the kubelet's
pod-resources socket and its ``/pods`` API) share: the refresh loop, and how a failure keeps the last
good answer for a bounded time and is logged once per change of state."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable


def run_every(refresh: Callable[[], None], stop: threading.Event, clock: Callable[[], float], seconds: float) -> None:
    """Call ``refresh`` every ``seconds`` (measured from the start of each call) until ``stop`` is set."""
    while not stop.is_set():
        began = clock()
        refresh()
        stop.wait(max(0.0, began + seconds - clock()))


def keeps(has_answer: bool, age: float, max_age: float) -> bool:
    """Whether a failure keeps the last good answer (one ``age`` seconds old) published."""
    return has_answer and age <= max_age


def log_failure(
    logger: logging.Logger, source: str, what: str, kind: str, detail: str, logged: str, has_answer: bool,
    keep: bool, age: float, max_age: float,
) -> str:  # fmt: skip
    """Log a failed request on the source's ``logger``, once per change of state; returns the state
    now logged (``kind``)."""
    if logged != kind:
        if keep:
            held = f"; keeping the last answer for up to {max_age:g} s"
        elif has_answer:
            held = f"; the last answer, {age:.0f} s old, is dropped"
        else:
            held = ""
        logger.warning("%s: %s failed (%s: %s)%s", source, what, kind, detail, held)
    elif has_answer and not keep:
        logger.warning("%s: dropped the last answer, %.0f s old (still failing: %s)", source, age, kind)
    return kind
