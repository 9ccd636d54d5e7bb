"""A pause asked of the running exporter (``gpu-exporter pause`` over its control socket): the exporter steps aside
for a while and comes back on its own.

``profiling`` stops the profiling collector's vendor calls (GPM samples on NVML, DCGM's profiling watches)
so another profiler can take the GPU's counters; ``full`` releases the vendor library altogether
(``nvmlShutdown``; DCGM's groups and watches removed and the connection closed) so a GPU reset, a MIG
change or a VFIO bind can proceed. Every pause ends on its own, :data:`DEFAULT_SECONDS` unless told, at
most :data:`MAX_SECONDS`, so a forgotten one cannot blind monitoring; ``resume`` ends it early. One pause
at a time: a new request replaces the current one. The sampler reads :meth:`Pauses.current` once per
cycle; the control socket and the node watcher set it from their own threads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

Scope = Literal["profiling", "full"]
SCOPES: tuple[Scope, ...] = ("profiling", "full")
#: How long a pause lasts unless its request says (seconds).
DEFAULT_SECONDS = 600.0
#: The longest pause that may be asked for (seconds): past it, monitoring comes back whatever happened.
MAX_SECONDS = 3600.0


@dataclass(frozen=True)
class Pause:
    """One pause: its scope, when it ends (monotonic seconds, and Unix time for people), who asked."""

    scope: Scope
    until: float
    until_wall: float
    source: str

    def describe(self) -> str:
        """``full pause until 2026-12-07T05:40:00Z (control socket)``."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.until_wall))
        return f"{self.scope} pause until {stamp} ({self.source})"


class Pauses:
    """The current pause, if any; thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()
        self._pause: Pause | None = None

    def request(self, scope: Scope, seconds: float, source: str) -> Pause:
        """Pause ``scope`` for ``seconds`` (0 < seconds <= MAX_SECONDS), replacing any current pause;
        raises ValueError naming what is allowed."""
        if scope not in SCOPES:
            raise ValueError(f"a pause is one of {', '.join(SCOPES)}, not {scope!r}")
        if not 0 < seconds <= MAX_SECONDS:
            raise ValueError(f"a pause lasts more than 0s and at most {MAX_SECONDS:g}s, not {seconds:g}s")
        pause = Pause(scope, self._clock() + seconds, self._wall() + seconds, source)
        with self._lock:
            self._pause = pause
        return pause

    def resume(self) -> Pause | None:
        """End the current pause now; the pause that was ended (None when there was none)."""
        with self._lock:
            ended, self._pause = self.current_locked(), None
        return ended

    def current(self) -> Pause | None:
        """The pause in force now (None once it has ended on its own)."""
        with self._lock:
            return self.current_locked()

    def current_locked(self) -> Pause | None:
        pause = self._pause
        if pause is not None and self._clock() >= pause.until:
            self._pause = pause = None
        return pause
