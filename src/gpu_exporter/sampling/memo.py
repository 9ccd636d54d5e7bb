"""The one memo of (entity, row) pairs a backend reported unsupported.

A pair the vendor called unsupported is not asked again for ``retry_seconds`` (a minute), and is
asked again at once after a rediscovery, so a call that failed that way during a driver hiccup comes
back by itself. Each change is logged once, and once per GPU and cycle: :meth:`UnsupportedMemo.report`
(the sampler calls it after each cycle; at collect intervals up to 10 s a GPU's first report waits one
cycle, so that what GPM learns at its second read joins it) writes one short line per GPU saying how
many values turned unsupported, and at debug level which (the rows absent from /metrics, with how many
links or instances) and the driver's words; and one line per GPU naming those that answer again. Re-asking is
silent. :meth:`UnsupportedMemo.lacking` names what a GPU lacks now, for the status page.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

#: How long an unsupported (entity, row) pair is left alone before it is asked again.
RETRY_SECONDS = 60.0
#: The longest collect interval at which a GPU's first report waits for the next cycle (seconds): longer,
#: and the line would come that much later, so what GPM learns at the second read gets a line of its own.
HOLD_FIRST_MAX_INTERVAL = 10.0


class UnsupportedMemo:
    """Thread-safe: workers ask it, the sampler feeds it."""

    def __init__(
        self,
        retry_seconds: float = RETRY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        hold_first: bool = False,
    ) -> None:
        """``hold_first``: a GPU's first report waits for the next report (the sampler asks for it when its
        next cycle comes within :data:`HOLD_FIRST_MAX_INTERVAL`)."""
        self._hold_first = hold_first
        self._retry = retry_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._until: dict[tuple[str, str], float] = {}  # (uid, key) → monotonic time to ask again
        self._what: dict[tuple[str, str], str] = {}  # (uid, key) → vendor call, while logged unsupported
        self._lacks: dict[str, dict[tuple[str, str], None]] = {}  # group → its unsupported pairs, in order met
        self._lacking: dict[str, tuple[str, ...]] = {}  # group → lacking()'s answer, until the group changes
        # GPU (or switch) → row → (entities, the vendor's words): changes not yet reported
        self._off: dict[str, dict[str, tuple[set[str], set[str]]]] = {}
        self._on: dict[str, dict[str, tuple[set[str], set[str]]]] = {}
        self._met: set[str] = set()  # groups whose first report is made or held

    def asks(self, uid: str, key: str) -> bool:
        """Whether to ask the vendor for row ``key`` of entity ``uid`` now."""
        if not self._until:
            return True
        until = self._until.get((uid, key))
        return until is None or self._clock() >= until

    def unsupported(self, uid: str, key: str, what: str, group: str = "") -> None:
        """The vendor said ``what`` for this pair (e.g. "nvmlDeviceGetFanSpeed is not supported");
        ``group`` names the GPU it belongs to in the log (default: the entity)."""
        with self._lock:
            self._until[(uid, key)] = self._clock() + self._retry
            if (uid, key) not in self._what:
                entities, words = self._off.setdefault(group or uid, {}).setdefault(key, (set(), set()))
                entities.add(uid)
                words.add(what)
                self._lacks.setdefault(group or uid, {})[(uid, key)] = None
                self._lacking.pop(group or uid, None)
            self._what[(uid, key)] = what

    def remembers_any(self) -> bool:
        """True while any pair is remembered as unsupported (else :meth:`answered` has nothing to do)."""
        return bool(self._what)

    def answered(self, uid: str, key: str, group: str = "") -> None:
        """The pair gave a value: forget it, and say so if it had been logged as unsupported."""
        if (uid, key) not in self._what:
            return
        with self._lock:
            what = self._what.pop((uid, key), None)
            self._until.pop((uid, key), None)
            if what is not None:
                entities, words = self._on.setdefault(group or uid, {}).setdefault(key, (set(), set()))
                entities.add(uid)
                words.add(what)
                self._lacks.get(group or uid, {}).pop((uid, key), None)
                self._lacking.pop(group or uid, None)

    def lacking(self, group: str) -> tuple[str, ...]:
        """The families ``group`` (a GPU, as the log names it) lacks now, in the order first met, each with
        how many of its series are missing where more than one (``gpu_nvlink_errors_total (4 series)``)."""
        found = self._lacking.get(group)
        if found is not None:
            return found
        with self._lock:
            rows: dict[str, tuple[set[str], set[str]]] = {}
            for uid, key in self._lacks.get(group, {}):
                rows.setdefault(key, (set(), set()))[0].add(uid)
            found = self._lacking[group] = _families(rows)
        return found

    def report(self) -> None:
        """Log what changed since the last report: one line per GPU for the values that turned
        unsupported, one for those that answer again."""
        with self._lock:
            off, on, self._off, self._on = self._off, self._on, {}, {}
            for group in [group for group in off if self._hold_first and group not in self._met]:
                # A GPU's first report waits for the next one, so what its backend learns only at its second
                # read (GPM computes between two samples) joins the same line: one line per GPU at start.
                self._met.add(group)
                self._off[group] = off.pop(group)
                if group in on:
                    self._on[group] = on.pop(group)
        for group, rows in off.items():
            log.info(
                "%s: %d value(s) not supported here, absent from /metrics (not 0; named on the status page and at "
                "--log.level=debug)", group, len(_families(rows)),
            )  # fmt: skip
            log.debug(
                "%s: not supported here: %s; asked again every %.0fs and when the devices change (the driver's "
                "answers: %s)", group, _names(rows), self._retry, _words(rows),
            )  # fmt: skip
        for group, rows in on.items():
            log.info("%s: answers again: %s (was: %s)", group, _names(rows), _words(rows))

    def rediscovered(self) -> None:
        """Ask every pair again in the next read (what was logged stays logged): the devices changed."""
        with self._lock:
            self._until.clear()


def _families(rows: dict[str, tuple[set[str], set[str]]]) -> tuple[str, ...]:
    """The families missing, in the order first met, each with how many of its series (rows × links
    or instances) are missing when more than one."""
    counts: dict[str, int] = {}
    for key, (entities, _) in rows.items():
        family = key.partition("{")[0]
        counts[family] = counts.get(family, 0) + len(entities)
    return tuple(name if n == 1 else f"{name} ({n} series)" for name, n in counts.items())


def _names(rows: dict[str, tuple[set[str], set[str]]]) -> str:
    return ", ".join(_families(rows))


def _words(rows: dict[str, tuple[set[str], set[str]]]) -> str:
    return "; ".join(sorted({word for _, words in rows.values() for word in words}))
