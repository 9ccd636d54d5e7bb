"""One thread per GPU, so a GPU whose driver calls hang stalls only itself.

The sampler triggers every idle worker once per cycle and waits a bounded time; a worker still
inside a call is simply not triggered again until it returns, and its last result ages.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpu_exporter.backends.base import Backend, DeviceIdentity, DeviceLost, DeviceReading
from gpu_exporter.catalogue import MetricSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Result:
    """A finished read of sampling cycle ``cycle``: ``finished_at`` monotonic seconds, ``seconds``
    how long the read took, ``reading`` None when the GPU was lost (``error`` says why)."""

    cycle: int
    finished_at: float
    seconds: float
    reading: DeviceReading | None
    error: str = ""


class DeviceWorker:
    """Reads one GPU on its own daemon thread whenever :meth:`trigger` is called."""

    def __init__(
        self,
        backend: Backend,
        device: DeviceIdentity,
        specs: Sequence[MetricSpec],
        done: threading.Condition,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.device = device
        self._backend = backend
        self._specs = specs
        self._done = done
        self._clock = clock
        self._wake = threading.Event()
        self._stopping = False
        self._cycle = 0
        self.busy_since: float | None = None
        self.result: Result | None = None
        self._thread = threading.Thread(target=self._run, name=f"gpu{device.index}-reader", daemon=True)
        self._thread.start()

    def trigger(self, cycle: int) -> bool:
        """Start a read for ``cycle``; False (and nothing started) while the previous read is running."""
        with self._done:
            if self.busy_since is not None:
                return False
            self._cycle = cycle
            self.busy_since = self._clock()
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
            started = self.busy_since if self.busy_since is not None else self._clock()
            cycle = self._cycle
            try:
                reading: DeviceReading | None = self._backend.read(self.device, self._specs, cycle)
                error = ""
            except DeviceLost as err:
                reading, error = None, str(err)
            except Exception as err:
                log.exception("reading GPU %d failed", self.device.index)
                reading, error = DeviceReading(errors={"exception": 1}), repr(err)
            finished = self._clock()
            with self._done:
                self.result = Result(cycle, finished, finished - started, reading, error)
                self.busy_since = None
                self._done.notify_all()
