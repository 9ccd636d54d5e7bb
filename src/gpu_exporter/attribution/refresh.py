"""What the attribution sources that ask someone on a cadence of their own (the kubelet's
pod-resources socket and its ``/pods`` API) share: a refresh thread, an immutable state published
whole and read without blocking, and failures that keep the last good answer for a bounded time,
are counted by kind and are logged once per change of state."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from gpu_exporter.logs import LIMITED


class Failure(Exception):
    """A request that failed for a reason of ``kind`` (one of the source's failure kinds)."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind


class SourceState(Protocol):
    """What every source's state dataclass carries beside its answer."""

    @property
    def up(self) -> bool: ...
    @property
    def calls(self) -> int: ...
    @property
    def failures(self) -> tuple[tuple[str, int], ...]: ...
    @property
    def fetched_at(self) -> float: ...
    @property
    def kept(self) -> bool: ...


S = TypeVar("S", bound=SourceState)
A = TypeVar("A")
T = TypeVar("T", covariant=True)


class Source(Protocol[T]):
    """What the attribution join needs of a source: its state now, and its lifecycle."""

    def current(self) -> T: ...
    def start(self) -> None: ...
    def stop(self) -> None: ...


def run_every(refresh: Callable[[], None], stop: threading.Event, clock: Callable[[], float], seconds: float) -> None:
    """Call ``refresh`` every ``seconds`` (measured from the start of each call) until ``stop`` is set."""
    while not stop.is_set():
        began = clock()
        refresh()
        stop.wait(max(0.0, began + seconds - clock()))


class Refresher(Generic[S, A]):
    """One source: a subclass says how to ask (:meth:`_prepare`, then :meth:`_ask`, which counts as a
    request), how an answer becomes a state (:meth:`_answered`) and how it is logged; ``field`` names
    the state's answer attribute and ``empty`` is the answer published when none is kept."""

    def __init__(
        self,
        logger: logging.Logger,
        source: str,
        field: str,
        empty: A,
        initial: S,
        refresh_seconds: float,
        max_age_seconds: float,
        timeout_seconds: float,
    ) -> None:
        self._log = logger
        self._source = source
        self._field = field
        self._empty = empty
        self._refresh = refresh_seconds
        self._max_age = max_age_seconds
        self._timeout = timeout_seconds
        self._clock: Callable[[], float] = time.monotonic
        # (state, monotonic time of its answer): replaced whole, so a reader never sees half of it.
        self._published: tuple[S, float] = (initial, 0.0)
        self._failures: dict[str, int] = {}
        self._logged = ""  # the state last logged: "up" or a failure kind
        self._refreshing = threading.Lock()  # one refresh at a time, should a caller also call refresh()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # what a source says -----------------------------------------------------------------------
    def _prepare(self) -> None:
        """Checks before a request is sent (raise :class:`Failure`: no request is counted)."""

    def _ask(self) -> A:
        """Send one request and parse its answer; raises :class:`Failure`."""
        raise NotImplementedError

    def _answered(self, answer: A, calls: int, failures: tuple[tuple[str, int], ...], fetched_at: float) -> S:
        raise NotImplementedError

    def _what(self) -> str:
        """The request in a few words, for log lines (``GET https://…``)."""
        raise NotImplementedError

    def _up_line(self, answer: A, again: str) -> str:
        """The log line when the source answers (again)."""
        raise NotImplementedError

    # the shared mechanism ---------------------------------------------------------------------
    def start(self) -> None:
        """Start the refresh thread (once); the first request is made at once."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._source.replace(" ", "-"), daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop the refresh thread, waiting at most one request timeout for it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self._timeout + 1.0)

    def current(self) -> S:
        """The latest state; an answer older than ``max_age_seconds`` that failures kept is left out."""
        state, answered = self._published
        if state.kept and self._clock() - answered > self._max_age:
            return self._with(state, **{self._field: self._empty, "kept": False})
        return state

    def refresh(self) -> None:
        """Ask once and publish the outcome (the thread calls this; never raises)."""
        with self._refreshing:
            self._refresh_once()

    def _refresh_once(self) -> None:
        state, answered = self._published
        calls = state.calls
        try:
            self._prepare()
            calls += 1
            answer = self._ask()
        except Failure as failure:
            self._failed(state, answered, calls, failure.kind, str(failure))
            return
        except Exception as exc:  # noqa: BLE001 - a refresh must not end the thread
            self._failed(state, answered, calls, "error", f"{type(exc).__name__}: {exc}")
            return
        failures = tuple(sorted(self._failures.items()))
        published = (self._answered(answer, calls, failures, time.time()), self._clock())
        # The line goes out before the state it describes, so whoever sees the state sees its line.
        if self._logged != "up":
            self._log.info("%s", self._up_line(answer, " again" if state.fetched_at else ""), extra=LIMITED)
            self._logged = "up"
        self._published = published

    def _failed(self, state: S, answered: float, calls: int, kind: str, detail: str) -> None:
        """Count the failure, keep the last good answer while younger than the max age, log a change."""
        self._failures[kind] = self._failures.get(kind, 0) + 1
        age = self._clock() - answered
        has_answer = bool(getattr(state, self._field))
        keep = has_answer and age <= self._max_age
        failures = tuple(sorted(self._failures.items()))
        answer = getattr(state, self._field) if keep else self._empty
        changed = {self._field: answer, "up": False, "error": kind, "calls": calls, "failures": failures, "kept": keep}
        if self._logged != kind:
            if keep:
                held = f"; keeping the last answer for up to {self._max_age:g} s"
            elif has_answer:
                held = f"; the last answer, {age:.0f} s old, is dropped"
            else:
                held = ""
            self._log.warning("%s: %s failed (%s: %s)%s", self._source, self._what(), kind, detail, held)
            self._logged = kind
        elif has_answer and not keep:
            self._log.warning("%s: dropped the last answer, %.0f s old (still failing: %s)", self._source, age, kind)
        self._published = (self._with(state, **changed), answered)

    @staticmethod
    def _with(state: S, **changes: Any) -> S:
        """``state`` (a frozen dataclass) with ``changes``."""
        return dataclasses.replace(state, **changes)  # type: ignore[type-var]  # S is a dataclass by contract

    def _run(self) -> None:
        run_every(self.refresh, self._stop, self._clock, self._refresh)
