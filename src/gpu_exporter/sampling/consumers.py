"""What the sampler needs from the rooms above it, as small protocols and values: it imports none of
them (:mod:`gpu_exporter.assemble` supplies the concrete ones)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from gpu_exporter.backends.base import DeviceIdentity, RawReading
from gpu_exporter.sampling.snapshot import SourceStatus


class Attribution(Protocol):
    """Who is on each GPU (:class:`gpu_exporter.attribution.join.Attributor`)."""

    def apply(self, reading: RawReading, device: DeviceIdentity) -> None:
        """Label the reading's process entities and add the GPU's allocations (on the read's thread)."""

    def sources(self) -> Mapping[str, SourceStatus]:
        """The state of each attribution source, for the self-metrics and the status page."""


@dataclass(frozen=True)
class Memory:
    """What a renderer needs kept beyond current values: the raw vendor value behind each converted
    one (``raw``), clock-event samples and Xids for this many seconds. Native names need none of it;
    dcgm-exporter's names need all three (its exact units and windowed counts)."""

    raw: bool = False
    clock_events_seconds: float = 0.0
    xids_seconds: float = 0.0


#: What gpu-exporter's own names need kept.
NATIVE = Memory()
