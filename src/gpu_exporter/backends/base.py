"""What every backend gives the sampler, in the project's own vocabulary.

Vendor errors never leave a backend: it raises :class:`BackendUnavailable` when the library or
driver cannot be used at all and :class:`DeviceLost` when one GPU stops answering; anything that
fails for a single value becomes an absent sample plus an error count.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gpu_exporter.catalogue import MetricSpec
from gpu_exporter.model import Entity


class BackendUnavailable(Exception):
    """The vendor library or driver cannot be used; ``reason`` is a short machine-readable word
    (``library_not_found``, ``driver_not_loaded``, ...) and the message says what to do."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class DeviceLost(Exception):
    """A GPU stopped answering (NVML_ERROR_GPU_IS_LOST or the device vanished). ``reason`` is a short
    word for ``gpu_exporter_device_down{reason}``: ``lost``, ``not_enumerated``, ``refused`` (DCGM will
    not group it), ``connection_lost``."""

    def __init__(self, message: str, reason: str = "lost") -> None:
        super().__init__(message)
        self.reason = reason


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
    """Static facts about one physical GPU, read once at discovery. Empty string or None = not reported."""

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
    brand: str = ""  # DCGM's brand name (field 51: "Tesla", "NVIDIA", ...) for NVML's brand number
    inforom_image_version: str = ""  # nvmlDeviceGetInforomImageVersion, DCGM field 82
    inforom_oem_version: str = ""  # nvmlDeviceGetInforomVersion(OEM), DCGM field 56
    inforom_ecc_version: str = ""  # nvmlDeviceGetInforomVersion(ECC), DCGM field 80
    inforom_power_version: str = ""  # nvmlDeviceGetInforomVersion(POWER), DCGM field 81
    pci_device_id: int | None = None  # nvmlPciInfo_t pciDeviceId: device id << 16 | vendor id (DCGM 58)
    pci_subsystem_id: int | None = None  # nvmlPciInfo_t pciSubSystemId (DCGM 59)
    compute_capability: tuple[int, int] | None = None  # CUDA (major, minor), DCGM 63 packs major << 16 | minor
    #: (peer GPU index, NVML P2P status over NVLink: nvmlGpuP2PStatus_t, 0 OK) for each peer that answered.
    p2p_nvlink: tuple[tuple[int, int], ...] = ()
    #: Where the GPU sits in a rack-scale NVLink system (nvmlDeviceGetPlatformInfo, DCGM 572-577): the
    #: chassis serial number, and (slot, tray, host id, peer type, module id); empty/None where not reported.
    chassis_serial: str = ""
    placement: tuple[int, int, int, int, int] | None = None
    #: The platform's InfiniBand GUID (nvmlDeviceGetPlatformInfo ibGuid, DCGM 571) as DCGM prints it:
    #: ``0x`` and 16 hex digits of its first 8 bytes read as a little-endian number; empty where not
    #: reported (no platform info, or an all-zero GUID).
    infiniband_guid: str = ""
    #: Whether the GPU supports GPM (GPU performance monitoring) metrics: nvmlGpmQueryDeviceSupport's
    #: isSupportedDevice, DCGM 94; NVML's "not supported" (or no such function) means no; None unread.
    gpm_supported: bool | None = None
    #: The system's confidential-compute feature (nvmlSystemGetConfComputeState's ccFeature: 0 off,
    #: 1 on), the same for every GPU, DCGM 74; None where NVML does not report it.
    cc_mode: int | None = None
    #: MIG slots of the GPU while MIG is on (nvmlDeviceGetMaxMigDeviceCount; 0 while MIG is off), DCGM 69
    #: (DCGM takes the larger of it and the GPU-instance profiles' largest slice count: the same, 7, on
    #: A100 and H100); None where the MIG mode cannot be read.
    mig_max_slices: int | None = None
    #: A stand-in for a GPU the backend lists but could not identify (DCGM refused it before the
    #: exporter ever read its UUID): once the real GPU is identified it takes the stand-in's place.
    placeholder: bool = False


@dataclass(frozen=True)
class HostIdentity:
    """Facts about the driver stack, read once per backend open."""

    driver_version: str = ""
    cuda_version: str = ""
    nvml_version: str = ""


@dataclass(frozen=True)
class Request:
    """What one read should fetch: the cycle number, the rows due in it (the plan's choice: right
    cadence, a source on this backend) and ``asks(entity uid, row key)``, False for a pair the
    unsupported memo says not to ask now."""

    cycle: int
    specs: tuple[MetricSpec, ...]
    asks: Callable[[str, str], bool] = field(default=lambda uid, key: True)
    #: Row keys whose driver samples the pipeline integrates (the derivations' inputs): a backend with
    #: sample buffers hands over only these rows' samples (of the others, the latest is the value);
    #: None: every row's.
    sampled: frozenset[str] | None = None


@dataclass
class RawReading:
    """One root's raw values from one read, in the vendor's units, keyed by entity then row key.

    ``raw`` lists every entity the read covers, in render order (an entity with no value still
    exists, and keeps its identity series). A row missing from an entity's dict had no sample.
    ``unsupported`` holds (entity, row key, what was asked in the vendor's words) for answers such
    as NOT_SUPPORTED; ``errors`` counts failed vendor calls by kind; ``collector_errors`` and
    ``collector_seconds`` the failures and the time spent per collector, for self-metrics.
    """

    raw: dict[Entity, dict[str, float]] = field(default_factory=dict)
    unsupported: list[tuple[Entity, str, str]] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    collector_errors: dict[str, int] = field(default_factory=dict)
    collector_seconds: dict[str, float] = field(default_factory=dict)
    #: The driver's own samples taken since the previous read, where the backend has them (NVML's
    #: ``nvmlDeviceGetSamples``): per entity and row key, (seconds on the driver's clock, raw value),
    #: oldest first; the row's value in ``raw`` is then the latest of them.
    samples: dict[Entity, dict[str, tuple[tuple[float, float], ...]]] = field(default_factory=dict)

    def failed(self, kind: str, collector: str) -> None:
        """Count one failed vendor call of ``collector`` with error ``kind``."""
        tally(self.errors, kind)
        tally(self.collector_errors, collector)

    def spent(self, collector: str, seconds: float) -> None:
        """Add ``seconds`` of vendor time to ``collector``."""
        self.collector_seconds[collector] = self.collector_seconds.get(collector, 0.0) + seconds


@dataclass(frozen=True)
class Event:
    """One driver event on GPU ``uuid`` at Unix time ``at``: an Xid (``xid``) or an ECC error event
    (``ecc``: ``single_bit`` or ``double_bit``)."""

    uuid: str
    at: float
    xid: int | None = None
    ecc: str | None = None


@dataclass(frozen=True)
class WatchIncident:
    """One problem the vendor's own health watches report on GPU ``uuid``, in the health model's words:
    the subsystem (a DCGM health-watch system, or ``all``), status (1 warn, 2 fail), the recommended
    action, the vendor's failure code (``DCGM_FR_*``) and its message."""

    uuid: str
    subsystem: str
    status: int
    action: str
    code: str
    message: str


@dataclass(frozen=True)
class WatchVerdict:
    """The last verdict of the vendor's health watches (DCGM's ``dcgmHealthCheck``): the subsystems
    they judge, the incidents, the Unix time of the verdict; ``known`` False when they cannot tell
    (not set, the check failed, stalled or its verdict is too old), ``why`` then says why."""

    subsystems: tuple[str, ...]
    incidents: tuple[WatchIncident, ...] = ()
    at: float | None = None
    known: bool = True
    why: str = ""


class Backend(Protocol):
    """A thin reader of one vendor library. Every method but :meth:`drain_events` and
    :meth:`events_healthy` runs on a worker thread of the sampler, never on the sampler's own."""

    name: str
    #: Seconds between reads when --collect-interval is not given: how often this backend needs point
    #: reads to see what a 15 s scrape needs (a backend that reads the driver's own sample buffers sees
    #: every sample however seldom it reads, within the buffers' length).
    default_interval: float

    def open(self, watch_events: bool) -> tuple[HostIdentity, Sequence[DeviceIdentity]]:
        """Initialise the vendor library, discover GPUs and (optionally) start listening for Xid
        events; raises BackendUnavailable."""

    def discover(self) -> Sequence[DeviceIdentity]:
        """Enumerate GPUs again (after a loss, or to notice added and vanished GPUs); raises
        BackendUnavailable when the library stopped working altogether."""

    def read(self, device: DeviceIdentity, request: Request) -> RawReading:
        """Raw values of the requested rows for one GPU and everything under it (MIG instances,
        NVLinks); raises DeviceLost."""

    def read_fabric(self, request: Request) -> RawReading:
        """Raw values of the requested NVSwitch and port rows (empty where the library cannot see
        switches); also where a backend fetches events that need a vendor call."""

    def drain_events(self) -> list[Event]:
        """Events queued since the last call, oldest first. Never blocks and takes no lock a read
        may hold: it runs on the sampler's thread."""

    def events_healthy(self) -> bool:
        """False while events cannot be received (no event set, the last fetch failed)."""

    def health_watch(self) -> WatchVerdict | None:
        """The last verdict of the library's own health watches, None where it has none (NVML). Never
        blocks and calls no vendor function: it runs on the sampler's thread."""

    def not_served(self) -> dict[str, int]:
        """Vendor fields the backend would read but cannot ask this library for, counted by reason."""

    def release_profiling(self, released: bool) -> None:
        """Release (True) the GPU's profiling counters for another profiler until restored (False): the
        profiling rows are not asked for meanwhile, and the backend drops what would otherwise hold the
        counters or carry a sample across the gap (GPM sample buffers, DCGM's profiling watches)."""

    def close(self) -> None:
        """Release the vendor library; safe to call when not open."""


def tally(counts: dict[str, int], key: str) -> None:
    """Add one to ``counts[key]`` (errors by kind, invalid values by metric)."""
    counts[key] = counts.get(key, 0) + 1
