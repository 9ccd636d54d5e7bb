"""Xid counts from DCGM field 230: every recorded value counts once, on the GPU that owns the
entity it was recorded on (DCGM records a MIG-attributed Xid on the GPU or compute instance)."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gpu_exporter.backends.base import XidTally
from gpu_exporter.backends.dcgm.values import FI_XID_ERRORS, FieldValue, decode

log = logging.getLogger(__name__)

#: Recent Xids kept per GPU (for windowed counts), like the NVML event listener.
RECENT_SECONDS = 3600.0
_RECENT_MAX = 1000


@dataclass
class _Counts:
    xid: dict[int, int] = field(default_factory=dict)
    last_xid_at: float | None = None
    last_xid: int | None = None
    recent: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=_RECENT_MAX))


class XidCounter:
    """Counts by GPU uuid since start; kept across reconnects, so the counters never reset."""

    def __init__(self) -> None:
        self._counts: dict[str, _Counts] = {}

    def count(self, samples: Iterable[FieldValue], owner: Mapping[tuple[int, int], str]) -> None:
        """Add every non-blank field-230 sample, oldest first; time = the sample's engine timestamp."""
        for gpu in set(owner.values()):
            self._counts.setdefault(gpu, _Counts())
        for sample in sorted(samples, key=lambda s: s.ts):
            code = decode(sample)
            uuid = owner.get((sample.group, sample.entity))
            if sample.field_id != FI_XID_ERRORS or uuid is None or not isinstance(code, int):
                continue
            counts = self._counts.setdefault(uuid, _Counts())
            at = sample.ts / 1e6
            counts.xid[code] = counts.xid.get(code, 0) + 1
            counts.last_xid_at, counts.last_xid = at, code
            counts.recent.append((at, code))
            while counts.recent and counts.recent[0][0] < at - RECENT_SECONDS:
                counts.recent.popleft()
            log.warning("%s: Xid %d", uuid, code)

    def tallies(self, present: Iterable[str]) -> dict[str, XidTally]:
        """Copies of the counts of the GPUs in ``present`` and of any GPU that ever had an Xid."""
        wanted = set(present)
        return {
            uuid: XidTally(xid=dict(c.xid), last_xid_at=c.last_xid_at, last_xid=c.last_xid, recent=tuple(c.recent))
            for uuid, c in self._counts.items()
            if uuid in wanted or c.xid
        }
