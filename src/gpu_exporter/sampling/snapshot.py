"""The immutable result of one sampling cycle, with its exposition rendered on demand.

A scrape only reads the sampler's current :class:`Snapshot` reference and hands out its bytes,
encoded by the first scrape that asks for that format (:class:`Rendered`); the sampler publishes
a new snapshot with a single reference swap.
"""

from __future__ import annotations

import gzip
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from gpu_exporter import model
from gpu_exporter.backends.base import DeviceIdentity, HostIdentity
from gpu_exporter.model import Entity
from gpu_exporter.sampling.events import XidTally

# The logger keeps its name from before the package layout: log lines print it and users filter on it.
log = logging.getLogger("gpu_exporter.snapshot")

#: Values by entity, then catalogue key, in base units; entities in render order.
Samples = Mapping[Entity, Mapping[str, float]]


@dataclass(frozen=True)
class DeviceView:
    """What one cycle knows about one GPU and everything under it.

    ``up`` is False once the backend reported the GPU lost; ``samples`` lists the GPU's entities
    (the GPU first, then its NVLinks and MIG instances) with only the values young enough to be
    served as current; ``stalled`` says the device's last read has not returned within one interval
    (a hung call).
    """

    identity: DeviceIdentity
    up: bool
    samples: Samples = field(default_factory=dict)
    stalled: bool = False
    read_seconds: float | None = None
    raw: Samples = field(default_factory=dict)  # the vendor value behind each read sample
    down_reason: str = ""  # why a GPU that is not up is down (lost, vanished, refused, ...)

    @property
    def entity(self) -> Entity:
        return model.gpu(self.identity.index, self.identity.uuid)

    @property
    def values(self) -> Mapping[str, float]:
        """The whole GPU's values."""
        return self.samples.get(self.entity, {})


@dataclass(frozen=True)
class CollectorStatus:
    """One collector in the last cycle: whether every read it needed succeeded, and the seconds its
    vendor calls took, summed over devices (None where it has no reads of its own, as ``xid``)."""

    success: bool
    seconds: float | None = None


@dataclass(frozen=True)
class SourceStatus:
    """An attribution source with a cache of its own (the kubelet): whether its last request
    succeeded, requests made, failures by kind, and the Unix time of its last good answer."""

    up: bool
    requests: int = 0
    failures: Mapping[str, int] = field(default_factory=dict)
    last_success: float | None = None


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
    collectors: Mapping[str, CollectorStatus] = field(default_factory=dict)
    sources: Mapping[str, SourceStatus] = field(default_factory=dict)
    not_served: Mapping[str, int] = field(default_factory=dict)  # reason → vendor fields not asked


@dataclass(frozen=True)
class Frame:
    """Everything one cycle renders: host and device views, the fabric's entities (NVSwitches and
    ports), event counts by GPU uuid (None when the xid collector is off), clock-event samples by
    GPU uid (Unix seconds and the reasons active in that read, the last hour), the self-state and
    the cycle's wall time (Unix seconds)."""

    host: HostIdentity
    devices: tuple[DeviceView, ...]
    events: Mapping[str, XidTally] | None
    windows: Mapping[str, tuple[tuple[float, frozenset[str]], ...]]
    stats: SelfStats
    wall_time: float
    fabric: Samples = field(default_factory=dict)


#: Turns a snapshot into one exposition format, ``"text"`` (Prometheus text 0.0.4) or
#: ``"openmetrics"`` (OpenMetrics 1.0.0): the bytes, or None where the renderer has no such format.
Encoder = Callable[[str], bytes | None]
FORMATS = ("text", "openmetrics")
#: Fast compression: a body is compressed at most once per snapshot and may be served many times;
#: level 1 keeps most of the size benefit at a fraction of the CPU.
GZIP_LEVEL = 1


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000


class Rendered:
    """The exposition of one snapshot, encoded on demand: each encoding a scrape may ask for (text
    or OpenMetrics, plain or gzip) is made at most once, by the first caller that asks for it, and
    kept; concurrent callers wait for that one encoding (one lock per snapshot). A snapshot nobody
    asks for is never encoded. OpenMetrics is None where the names cannot be valid OpenMetrics, as
    in dcgm-exporter compatibility mode. ``encodings`` counts the encoder's calls."""

    def __init__(self, encoder: Encoder) -> None:
        self._encoder = encoder
        self._lock = threading.Lock()
        self._made: dict[tuple[str, bool], bytes | None] = {}
        self.encodings = 0

    @classmethod
    def of(cls, text: bytes, openmetrics: bytes | None = None) -> Rendered:
        """Fixed bytes (encoded already)."""
        return cls({"text": text, "openmetrics": openmetrics}.get)

    def ready(self, name: str, gzipped: bool) -> bool:
        """True when this encoding is made already (getting it costs nothing)."""
        return (name, gzipped) in self._made

    def get(self, name: str, gzipped: bool = False) -> bytes | None:
        """The bytes of format ``name`` (one of :data:`FORMATS`), gzip-compressed if asked."""
        key = (name, gzipped)
        if key in self._made:
            return self._made[key]
        with self._lock:
            if (name, False) not in self._made:
                started = time.perf_counter()
                self.encodings += 1
                plain = self._made[(name, False)] = self._encoder(name)
                if plain is not None:
                    log.debug("encoded %s for a snapshot: %d bytes in %.2f ms", name, len(plain), _ms(started))
            if key not in self._made:
                started = time.perf_counter()
                plain = self._made[(name, False)]
                self._made[key] = None if plain is None else gzip.compress(plain, GZIP_LEVEL, mtime=0)
                if plain is not None:
                    log.debug(
                        "compressed %s for a snapshot: %d bytes in %.2f ms",
                        name,
                        len(self._made[key] or b""),
                        _ms(started),
                    )
            return self._made[key]

    @property
    def text(self) -> bytes:
        return self.get("text") or b""

    @property
    def text_gzip(self) -> bytes:
        return self.get("text", True) or b""

    @property
    def openmetrics(self) -> bytes | None:
        return self.get("openmetrics")

    @property
    def openmetrics_gzip(self) -> bytes | None:
        return self.get("openmetrics", True)


@dataclass(frozen=True)
class Snapshot:
    """One sampling cycle: ``taken_at`` is monotonic seconds, ``host`` and ``devices`` what was seen,
    ``events`` the pipeline's Xid and ECC event tallies by GPU uuid (None when the xid collector is
    off), so readers such as the status page need not parse the exposition."""

    taken_at: float
    host: HostIdentity
    devices: tuple[DeviceView, ...]
    stats: SelfStats
    rendered: Rendered
    events: Mapping[str, XidTally] | None = None

    @property
    def sampled_gpus(self) -> int:
        """GPUs that are up and have at least one current value."""
        return sum(1 for device in self.devices if device.up and device.values)
