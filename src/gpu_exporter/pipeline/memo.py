"""The one memo of (entity, row) pairs a backend reported unsupported.

A pair the vendor called unsupported is not asked again for ``retry_seconds`` (a minute), and is
asked again at once after a rediscovery, so a call that failed that way during a driver hiccup comes
back by itself. Each change is logged once: when a pair first turns unsupported (once per entity
and vendor call, however many rows share the call) and when it answers again; re-asking is silent.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

#: How long an unsupported (entity, row) pair is left alone before it is asked again.
RETRY_SECONDS = 60.0


class UnsupportedMemo:
    """Thread-safe: workers ask it, the sampler feeds it."""

    def __init__(self, retry_seconds: float = RETRY_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self._retry = retry_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._until: dict[tuple[str, str], float] = {}  # (uid, key) → monotonic time to ask again
        self._what: dict[tuple[str, str], str] = {}  # (uid, key) → vendor call, while logged unsupported

    def asks(self, uid: str, key: str) -> bool:
        """Whether to ask the vendor for row ``key`` of entity ``uid`` now."""
        if not self._until:
            return True
        until = self._until.get((uid, key))
        return until is None or self._clock() >= until

    def unsupported(self, uid: str, key: str, what: str) -> None:
        """The vendor said ``what`` for this pair (e.g. "nvmlDeviceGetFanSpeed is not supported")."""
        with self._lock:
            self._until[(uid, key)] = self._clock() + self._retry
            first = (uid, what) not in {(u, w) for (u, _k), w in self._what.items()}
            self._what[(uid, key)] = what
        if first:
            log.info("%s: %s; asked again every %.0fs and when the devices change", uid, what, self._retry)

    def remembers_any(self) -> bool:
        """True while any pair is remembered as unsupported (else :meth:`answered` has nothing to do)."""
        return bool(self._what)

    def answered(self, uid: str, key: str) -> None:
        """The pair gave a value: forget it, and say so if it had been logged as unsupported."""
        if (uid, key) not in self._what:
            return
        with self._lock:
            what = self._what.pop((uid, key), None)
            self._until.pop((uid, key), None)
            last = what is not None and (uid, what) not in {(u, w) for (u, _k), w in self._what.items()}
        if last:
            log.info("%s: answers again (was: %s)", uid, what)

    def rediscovered(self) -> None:
        """Ask every pair again in the next read (what was logged stays logged): the devices changed."""
        with self._lock:
            self._until.clear()
