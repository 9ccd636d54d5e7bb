"""Xid and ECC event tallies per GPU UUID, owned by the pipeline so that they survive anything a
backend does: an event listener rebuilt, a reconnect, other GPUs leaving or joining. Counts only
grow until the exporter restarts."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from gpu_exporter.backends.base import Event

log = logging.getLogger(__name__)

#: The longest time recent Xids are kept per GPU for windowed counts (dcgm-exporter's
#: DCGM_EXP_XID_ERRORS_COUNT).
RECENT_SECONDS = 3600.0
_RECENT_MAX = 1000


@dataclass(frozen=True)
class XidTally:
    """Events counted for one GPU since start: Xid codes, ECC events by type, the last Xid and its
    time, and the recent Xids as (Unix seconds, code), oldest first, for windowed counts."""

    xid: dict[int, int] = field(default_factory=dict)
    ecc: dict[str, int] = field(default_factory=dict)
    last_xid_at: float | None = None
    last_xid: int | None = None
    recent: tuple[tuple[float, int], ...] = ()


@dataclass
class _Counts:
    xid: dict[int, int] = field(default_factory=dict)
    ecc: dict[str, int] = field(default_factory=dict)
    last_xid_at: float | None = None
    last_xid: int | None = None
    recent: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=_RECENT_MAX))


class EventTallies:
    """Counts by GPU UUID; only the sampler thread touches it."""

    def __init__(self, recent_seconds: float = RECENT_SECONDS) -> None:
        """``recent_seconds``: how long each Xid is kept with its time for windowed counts (at most
        :data:`RECENT_SECONDS`; 0 keeps none: only dcgm-exporter's names count over a window)."""
        self._recent = min(recent_seconds, RECENT_SECONDS)
        self._counts: dict[str, _Counts] = {}
        self._frozen: dict[str, XidTally] = {}

    def add(self, events: Iterable[Event]) -> None:
        """Count each event once."""
        for event in events:
            counts = self._counts.setdefault(event.uuid, _Counts())
            self._frozen.pop(event.uuid, None)
            if event.xid is not None:
                counts.xid[event.xid] = counts.xid.get(event.xid, 0) + 1
                counts.last_xid_at, counts.last_xid = event.at, event.xid
                if self._recent > 0:
                    counts.recent.append((event.at, event.xid))
                while counts.recent and counts.recent[0][0] < event.at - self._recent:
                    counts.recent.popleft()
                log.warning("%s: Xid %d", event.uuid, event.xid)
            if event.ecc is not None:
                counts.ecc[event.ecc] = counts.ecc.get(event.ecc, 0) + 1

    def tally(self, uuid: str) -> XidTally:
        """The counts of one GPU (zero counts for a GPU that had no event)."""
        frozen = self._frozen.get(uuid)
        if frozen is None:
            c = self._counts.get(uuid)
            frozen = (
                XidTally()
                if c is None
                else XidTally(dict(c.xid), dict(c.ecc), c.last_xid_at, c.last_xid, tuple(c.recent))
            )
            self._frozen[uuid] = frozen
        return frozen
