"""Workers: each job off the sampler's thread, so a call that hangs stalls only that job.

One worker per GPU reads the GPU and everything under it (on the read pool's threads, see
:mod:`gpu_exporter.sampling.readpool`), one fabric worker reads the NVSwitches and one control worker opens,
re-enumerates and closes the backend (each on a daemon thread of its own): no vendor call runs on
the sampler's thread. The sampler triggers every idle worker once per cycle and waits a bounded
time; a worker still inside a call is simply not triggered again until it returns, and its last
result ages.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from gpu_exporter.backends.base import DeviceLost

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class Result(Generic[T]):
    """A finished job of sampling cycle ``cycle``: ``finished_at`` monotonic seconds, ``seconds``
    how long it took, ``value`` None when it failed (``error`` says why; ``lost`` when the job
    raised DeviceLost)."""

    cycle: int
    finished_at: float
    seconds: float
    value: T | None
    error: str = ""
    lost: bool = False
    reason: str = ""  # DeviceLost's reason word when lost


class Runs(Protocol):
    """Where a worker's job runs when the worker has no thread of its own (a :class:`ReadPool`)."""

    def submit(self, worker: Worker[Any]) -> None: ...


class Worker(Generic[T]):
    """Runs ``job(cycle)`` whenever :meth:`trigger` is called: on its own daemon thread, or, given
    ``runs``, on a thread of that pool (GPU reads: a few threads take them in turn, so a cycle
    does not wake one thread per GPU; a hung read still holds only its own)."""

    def __init__(
        self,
        name: str,
        job: Callable[[int], T],
        done: threading.Condition,
        clock: Callable[[], float] = time.monotonic,
        runs: Runs | None = None,
    ) -> None:
        self.job = job
        self.name = name
        self._done = done
        self._clock = clock
        self._runs = runs
        self._wake = threading.Event()
        self._stopping = False
        self._cycle = 0
        self.busy_since: float | None = None
        self.result: Result[T] | None = None
        if runs is None:
            self._thread = threading.Thread(target=self._run, name=name, daemon=True)
            self._thread.start()

    def trigger(self, cycle: int) -> bool:
        """Start the job for ``cycle``; False (and nothing started) while the previous one runs."""
        with self._done:
            if self.busy_since is not None:
                return False
            self._cycle = cycle
            self.busy_since = self._clock()
        if self._runs is not None:
            self._runs.submit(self)
        else:
            self._wake.set()
        return True

    def stop(self) -> None:
        """Ask the thread to end; a thread stuck in a driver call ends when the call returns."""
        self._stopping = True
        self._wake.set()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stopping:
                return
            self.execute()
            with self._done:
                self._done.notify_all()

    def execute(self) -> None:
        """Run the job of the triggered cycle and post its result (a stopped worker's is dropped);
        the caller tells the waiters."""
        if self._stopping:
            with self._done:
                self.busy_since = None
            return
        started = self.busy_since if self.busy_since is not None else self._clock()
        cycle = self._cycle
        value: T | None = None
        error, lost, reason = "", False, ""
        try:
            value = self.job(cycle)
        except DeviceLost as err:
            error, lost, reason = str(err), True, err.reason
        except Exception as err:
            log.exception("%s failed", self.name)
            error = repr(err)
        finished = self._clock()
        with self._done:
            self.result = Result(cycle, finished, finished - started, value, error, lost, reason)
            self.busy_since = None
