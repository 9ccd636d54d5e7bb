"""The immutable result of one sampling cycle, with its exposition already rendered.

A scrape only reads the sampler's current :class:`Snapshot` reference and hands out its bytes;
the sampler publishes a new one with a single reference swap, so no lock is needed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpu_exporter.backends.base import DeviceIdentity, HostIdentity, SwitchReading, XidTally


@dataclass(frozen=True)
class DeviceView:
    """What one cycle knows about one GPU.

    ``up`` is False once NVML reported the GPU lost; ``values`` (base units, keyed by metric name)
    holds only samples young enough to be served as current; ``stalled`` says the device's last
    read has not returned within one interval (a hung call).
    """

    identity: DeviceIdentity
    up: bool
    values: Mapping[str, float]
    mig_values: Mapping[int, Mapping[str, float]] = field(default_factory=dict)
    link_values: Mapping[int, Mapping[str, float]] = field(default_factory=dict)
    stalled: bool = False
    read_seconds: float | None = None


@dataclass(frozen=True)
class SelfStats:
    """The exporter's own state for ``gpu_exporter_*`` self-metrics."""

    version: str
    backend: str
    backend_up: bool
    backend_reason: str
    interval_seconds: float
    cycle_seconds: float | None = None
    last_success_timestamp: float | None = None
    errors: Mapping[str, int] = field(default_factory=dict)
    invalid: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Frame:
    """Everything one cycle renders: host and device views, event counts by GPU uuid (None when
    the xid collector is off), clock-event activations by uuid and reason (Unix seconds, recent
    ones only), the self-state, the cycle's wall time (Unix seconds), and the NVSwitches the backend
    read (DCGM only)."""

    host: HostIdentity
    devices: tuple[DeviceView, ...]
    events: Mapping[str, XidTally] | None
    clock_activations: Mapping[str, Mapping[str, tuple[float, ...]]]
    stats: SelfStats
    wall_time: float
    switches: tuple[SwitchReading, ...] = ()


@dataclass(frozen=True)
class Rendered:
    """The exposition of one snapshot in each encoding a scrape may ask for (OpenMetrics is None
    where the names cannot be valid OpenMetrics, as in dcgm-exporter compatibility mode)."""

    text: bytes
    text_gzip: bytes
    openmetrics: bytes | None = None
    openmetrics_gzip: bytes | None = None


@dataclass(frozen=True)
class Snapshot:
    """One sampling cycle: ``taken_at`` is monotonic seconds, ``host`` and ``devices`` what was seen."""

    taken_at: float
    host: HostIdentity
    devices: tuple[DeviceView, ...]
    stats: SelfStats
    rendered: Rendered

    @property
    def sampled_gpus(self) -> int:
        """GPUs that are up and have at least one current value."""
        return sum(1 for device in self.devices if device.up and device.values)
