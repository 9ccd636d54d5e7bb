"""dcgm-exporter 4.8.3's DCGM_EXP_CLOCK_EVENTS_TOTAL: clock events per reason since the exporter
started, "edge-counted" (its shipped list's help: "Total clock events observed since exporter start
(edge-counted)"): a reason counts once each time it becomes active, however long it then stays active.

Kept across frames, fed once per frame with the GPU's clock-event samples (Unix seconds, the reasons
active in that read; :attr:`gpu_exporter.sampling.snapshot.Frame.windows`): only samples newer than
the last one seen count, so a frame seen twice, or samples still in the window, never count again.
"""

from __future__ import annotations

from collections.abc import Sequence


class ClockEventTotals:
    """Per GPU uuid: the time and active reasons of the last sample folded in, and the edge counts."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, frozenset[str]]] = {}
        self._counts: dict[str, dict[str, int]] = {}

    def update(self, uuid: str, samples: Sequence[tuple[float, frozenset[str]]]) -> None:
        """Fold in the samples of GPU ``uuid`` newer than the last one folded in (oldest first). A
        reason active in the first sample ever seen counts as one event."""
        last_at, active = self._last.get(uuid, (float("-inf"), frozenset()))
        counts = self._counts.setdefault(uuid, {})
        for at, now_active in samples:
            if at <= last_at:
                continue
            for reason in now_active - active:
                counts[reason] = counts.get(reason, 0) + 1
            last_at, active = at, now_active
        if last_at != float("-inf"):
            self._last[uuid] = (last_at, active)

    def counts(self, uuid: str) -> dict[str, int] | None:
        """Events per reason of GPU ``uuid`` (reasons never active are absent); None before its first sample."""
        return dict(self._counts[uuid]) if uuid in self._last else None
