"""What every backend gives the sampler, in the project's own vocabulary.

Vendor errors never leave a backend: it raises :class:`BackendUnavailable` when the library or
driver cannot be used at all and :class:`DeviceLost` when one GPU stops answering; anything that
fails for a single value becomes an absent sample plus an error count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gpu_exporter.catalogue import MetricSpec


class BackendUnavailable(Exception):
    """The vendor library or driver cannot be used; ``reason`` is a short machine-readable word
    (``library_not_found``, ``driver_not_loaded``, ...) and the message says what to do."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class DeviceLost(Exception):
    """A GPU stopped answering (NVML_ERROR_GPU_IS_LOST or the device vanished)."""


@dataclass(frozen=True)
class MigIdentity:
    """A MIG device: its parent GPU's index and the instance ids NVML reports for it."""

    gpu_instance: int
    compute_instance: int
    profile: str
    uuid: str
    name: str


@dataclass(frozen=True)
class DeviceIdentity:
    """Static facts about one physical GPU, read once at discovery. Empty string = not reported."""

    index: int
    uuid: str
    name: str = ""
    pci_bus_id: str = ""
    serial: str = ""
    vbios_version: str = ""
    board_part_number: str = ""
    minor_number: str = ""
    mig_mode: str = ""
    migs: tuple[MigIdentity, ...] = ()
    nvlinks: tuple[int, ...] = ()  # NVLink numbers the GPU reports a state for


@dataclass(frozen=True)
class HostIdentity:
    """Facts about the driver stack, read once per backend open."""

    driver_version: str = ""
    cuda_version: str = ""
    nvml_version: str = ""


@dataclass
class DeviceReading:
    """One device's values from one sampling pass, in base units, keyed by metric name.

    Keys are catalogue keys (:attr:`MetricSpec.key`). A metric missing from ``values`` had no
    sample (unsupported, failed, invalid or skipped): absence is never written as 0. ``errors``
    counts failed vendor calls by kind and ``invalid`` implausible values by metric, for
    self-metrics.
    """

    values: dict[str, float] = field(default_factory=dict)
    mig_values: dict[int, dict[str, float]] = field(default_factory=dict)
    link_values: dict[int, dict[str, float]] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    invalid: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class SwitchReading:
    """One NVSwitch as the last cycle saw it (DCGM only): ``switch`` is DCGM's switch id, ``ports``
    the NVLink ports the switch reports a state for, ``values`` and ``port_values`` samples in base
    units keyed like :class:`DeviceReading`'s."""

    switch: int
    pci_bus_id: str = ""
    physical_id: str = ""
    ports: tuple[int, ...] = ()
    values: dict[str, float] = field(default_factory=dict)
    port_values: dict[int, dict[str, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class XidTally:
    """Events counted for one GPU since start: Xid codes, ECC events by type, the last Xid and its
    time, and the recent Xids as (Unix seconds, code), oldest first, for windowed counts."""

    xid: dict[int, int] = field(default_factory=dict)
    ecc: dict[str, int] = field(default_factory=dict)
    last_xid_at: float | None = None
    last_xid: int | None = None
    recent: tuple[tuple[float, int], ...] = ()


class Backend(Protocol):
    """A source of GPU samples. Methods run on sampler threads, never on the event loop."""

    name: str

    def open(self, watch_events: bool) -> tuple[HostIdentity, Sequence[DeviceIdentity]]:
        """Initialise the vendor library, discover GPUs and (optionally) start listening for Xid
        events; raises BackendUnavailable."""

    def discover(self) -> Sequence[DeviceIdentity]:
        """Enumerate GPUs again (after a loss, or to notice added and vanished GPUs); raises
        BackendUnavailable when the library stopped working altogether."""

    def read(self, device: DeviceIdentity, specs: Sequence[MetricSpec], cycle: int) -> DeviceReading:
        """Read every spec for one device (and its MIG devices); raises DeviceLost."""

    def events(self) -> dict[str, XidTally]:
        """Event counts so far, by GPU uuid (empty when events are not watched)."""

    def switches(self) -> tuple[SwitchReading, ...]:
        """NVSwitches as the latest cycle read them; empty when not watched, stale or unknown to the
        backend. Never calls the vendor library (it runs on the sampler's thread)."""

    def close(self) -> None:
        """Release the vendor library; safe to call when not open."""


def tally(counts: dict[str, int], key: str) -> None:
    """Add one to ``counts[key]`` (errors by kind, invalid values by metric)."""
    counts[key] = counts.get(key, 0) + 1
