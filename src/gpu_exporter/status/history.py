"""A bounded in-memory trail of utilization, power and temperature per card, for sparklines.

:meth:`History.record` takes each new snapshot once (by its ``taken_at``); each card keeps at most
``points`` values of each series (``None`` where a cycle had no sample), and cards not seen for
that many snapshots are forgotten, so memory stays bounded whatever comes and goes.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from gpu_exporter.sampling.snapshot import Snapshot
from gpu_exporter.status.view import TRAIL, trail_values

SERIES = tuple(TRAIL)
#: Points kept per series: ten minutes at a 5 s interval; at most this many whatever the interval.
DEFAULT_POINTS = 120


class History:
    """Recent values by card uid; safe to record from one thread while others read."""

    def __init__(self, points: int = DEFAULT_POINTS) -> None:
        self.points = points
        self._lock = threading.Lock()
        self._series: dict[str, dict[str, deque[float | None]]] = {}
        self._last_seen: dict[str, int] = {}
        self._taken_at: float | None = None
        self._count = 0

    def record(self, snapshot: Snapshot) -> None:
        """Add the snapshot's values unless it was already recorded."""
        with self._lock:
            if snapshot.taken_at == self._taken_at:
                return
            self._taken_at = snapshot.taken_at
            self._count += 1
            for uid, values in trail_values(snapshot):
                trail = self._series.setdefault(uid, {name: deque(maxlen=self.points) for name in SERIES})
                for name, value in zip(SERIES, values, strict=True):
                    trail[name].append(value)
                self._last_seen[uid] = self._count
            for uid in [uid for uid, seen in self._last_seen.items() if self._count - seen >= self.points]:
                del self._series[uid], self._last_seen[uid]

    def of(self, uid: str) -> dict[str, list[float | None]]:
        """The card's series, oldest first (empty lists when it was never recorded)."""
        with self._lock:
            trail = self._series.get(uid)
            return {name: list(trail[name]) if trail else [] for name in SERIES}


class Recorder:
    """A daemon thread that records the sampler's latest snapshot every ``period`` seconds."""

    def __init__(self, history: History, latest: Callable[[], Snapshot], period: float) -> None:
        self._history = history
        self._latest = latest
        self._period = period
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="status-history", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._history.record(self._latest())
            self._stop.wait(self._period)
