"""The immutable result of one sampling cycle, with its exposition rendered on demand.

A scrape only reads the sampler's current :class:`Snapshot` reference and hands out its bytes,
encoded by the first scrape that asks for that format (:class:`Exposition`); the sampler publishes
a new snapshot with a single reference swap.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from gpu_exporter import model
from gpu_exporter.backends.base import DeviceIdentity, HostIdentity
from gpu_exporter.model import Entity
from gpu_exporter.sampling.events import XidTally
from gpu_exporter.sampling.health import Health
from gpu_exporter.sampling.pause import Pause

#: Values by entity, then catalogue key, in base units; entities in render order.
Samples = Mapping[Entity, Mapping[str, float]]


@dataclass(frozen=True)
class DeviceView:
    """What one cycle knows about one GPU and everything under it.

    ``up`` is False once the backend reported the GPU lost; ``samples`` lists the GPU's entities
    (the GPU first, then its NVLinks and MIG instances) with only the values young enough to be
    served as current; ``stalled`` says the device's last read has not returned within one interval
    (a hung call); ``unsupported`` names the values the vendor does not support on it (absent, not 0).
    """

    identity: DeviceIdentity
    up: bool
    samples: Samples = field(default_factory=dict)
    stalled: bool = False
    read_seconds: float | None = None
    raw: Samples = field(default_factory=dict)  # the vendor value behind each read sample
    down_reason: str = ""  # why a GPU that is not up is down (lost, vanished, refused, ...)
    unsupported: tuple[str, ...] = ()  # the families it lacks (the vendor said unsupported), as the memo names them

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
    backend_reason: str  # a word, for gpu_exporter_backend_info{reason}
    interval_seconds: float
    cycle_seconds: float | None = None
    last_success_timestamp: float | None = None
    errors: Mapping[str, int] = field(default_factory=dict)
    invalid: Mapping[str, int] = field(default_factory=dict)
    collectors: Mapping[str, CollectorStatus] = field(default_factory=dict)
    sources: Mapping[str, SourceStatus] = field(default_factory=dict)
    not_served: Mapping[str, int] = field(default_factory=dict)  # reason → vendor fields not asked
    backend_problem: str = ""  # why the backend is down, in words with the fix ("" while it is up)
    pause: Pause | None = None  # the pause asked of the exporter, while it lasts


@dataclass(frozen=True)
class Frame:
    """Everything one cycle renders: host and device views, the fabric's entities (NVSwitches and
    ports), event counts by GPU uuid (None when the xid collector is off), clock-event samples by
    GPU uid (Unix seconds and the reasons active in that read, the last hour), the self-state and
    the cycle's wall time (Unix seconds), and the health model's judgement of the cycle."""

    host: HostIdentity
    devices: tuple[DeviceView, ...]
    events: Mapping[str, XidTally] | None
    windows: Mapping[str, tuple[tuple[float, frozenset[str]], ...]]
    stats: SelfStats
    wall_time: float
    fabric: Samples = field(default_factory=dict)
    health: Health = field(default_factory=Health)


class Exposition(Protocol):
    """A snapshot's exposition, encoded on demand by the exposition room
    (:class:`gpu_exporter.exposition.cache.Rendered`): ``get`` the bytes of one format (``"text"`` or
    ``"openmetrics"``), gzip-compressed if asked, or None where there is no such format; ``ready``
    when getting them costs nothing; ``text`` the Prometheus text bytes."""

    def get(self, name: str, gzipped: bool = False) -> bytes | None: ...

    def ready(self, name: str, gzipped: bool) -> bool: ...

    @property
    def text(self) -> bytes: ...


#: Turns one cycle's frame into its exposition: the sampler calls it once per cycle, on its own thread,
#: and the exposition room supplies it (native or dcgm-exporter names).
Renderer = Callable[[Frame], Exposition]


@dataclass(frozen=True)
class Snapshot:
    """One sampling cycle: ``taken_at`` is monotonic seconds, ``host`` and ``devices`` what was seen,
    ``events`` the pipeline's Xid and ECC event tallies by GPU uuid (None when the xid collector is
    off), and ``health`` the health model's judgement, so readers such as the status page need not
    parse the exposition."""

    taken_at: float
    host: HostIdentity
    devices: tuple[DeviceView, ...]
    stats: SelfStats
    rendered: Exposition
    events: Mapping[str, XidTally] | None = None
    health: Health = field(default_factory=Health)

    @property
    def sampled_gpus(self) -> int:
        """GPUs that are up and have at least one current value."""
        return sum(1 for device in self.devices if device.up and device.values)
