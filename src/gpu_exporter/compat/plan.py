"""The dcgm-exporter plan: a counters list (dcgm-exporter's CSV) resolved once against the catalogue's
compatibility columns into a :class:`CompatPlan`. Each row becomes a value item (a catalogue metric ×
its ``compat_scale``), a label field, the last-Xid gauge or one of dcgm-exporter's windowed counts;
rows the active backend cannot supply are logged once and skipped. Also the collectors a counters
list turns on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from gpu_exporter.backends.base import DeviceIdentity, HostIdentity
from gpu_exporter.catalogue import BY_KEY, METRICS, ONE, DcgmSource, MetricSpec, key_of
from gpu_exporter.catalogue.keys import CLOCK_EVENT_ACTIVE, NVLINK_UP
from gpu_exporter.compat.clock_totals import ClockEventTotals
from gpu_exporter.compat.counters import Counter
from gpu_exporter.compat.field_names import FIELD_IDS, field_id
from gpu_exporter.compat.fields import (
    BANDWIDTH_KEYS,
    COMPOSED,
    ENCODED_FIELDS,
    FB_USED_RATIO,
    FB_USED_RATIO_KEYS,
    HOST_VALUES,
    IDENTITY_VALUES,
    LINK_BANDWIDTHS,
    LINK_ENTITY_FIELDS,
    RATE_FIELDS,
    NvlinkBandwidth,
    decimal_label,
    not_served_reason,
)
from gpu_exporter.compat.flags import DcgmOptions
from gpu_exporter.compat.health import HEALTH_STATUS
from gpu_exporter.compat.releases import BY_NAME
from gpu_exporter.sampling.consumers import Memory
from gpu_exporter.sampling.events import RECENT_SECONDS

log = logging.getLogger(__name__)

#: Label fields by DCGM field id (a CSV may use any spelling of the field's name).
LABEL_FIELDS: dict[int, Callable[[HostIdentity, DeviceIdentity], str]] = {
    1: lambda host, _dev: host.driver_version,
    2: lambda host, _dev: host.nvml_version,
    50: lambda _host, dev: dev.name,
    53: lambda _host, dev: dev.serial,
    54: lambda _host, dev: dev.uuid,
    57: lambda _host, dev: dev.pci_bus_id,
    55: lambda _host, dev: dev.minor_number,
    85: lambda _host, dev: dev.vbios_version,
    51: lambda _host, dev: dev.brand,
    56: lambda _host, dev: dev.inforom_oem_version,
    80: lambda _host, dev: dev.inforom_ecc_version,
    81: lambda _host, dev: dev.inforom_power_version,
    82: lambda _host, dev: dev.inforom_image_version,
    571: lambda _host, dev: dev.infiniband_guid,
    572: lambda _host, dev: dev.chassis_serial,
}
LABEL_FIELDS.update({number: decimal_label(value) for number, value in IDENTITY_VALUES.items()})
LABEL_FIELDS[5] = lambda host, _dev: str(HOST_VALUES[5](host, 0) or "")  # the CUDA driver version's number
_XID_FIELD = 230
_XID_COUNT = 9001
_XID_TOTAL = 9005  # dcgm-exporter 4.8.3's cumulative Xid count
_XID_FIELDS = (_XID_FIELD, _XID_COUNT, _XID_TOTAL)
_CLOCK_COUNT = 9002
_CLOCK_TOTAL = 9006  # dcgm-exporter 4.8.3's cumulative, edge-counted clock events
_CLOCK_FIELDS = (_CLOCK_COUNT, _CLOCK_TOTAL)
#: A row of the clock_events collector, which DCGM_EXP_CLOCK_EVENTS_COUNT counts from: enabled with it.
_POWER_CAP_EVENT = key_of(CLOCK_EVENT_ACTIVE, (("reason", "power_cap"),))
_P2P_STATUS = 9004


@dataclass(frozen=True)
class _Item:
    """One family to render: its counters row and, for a value row, the catalogue row behind it
    with the factor from the backend's raw unit to dcgm-exporter's (``raw_scale``)."""

    counter: Counter
    field_id: int
    spec: MetricSpec | None = None
    backend_scale: Fraction = ONE
    bit: bool = False  # the backend reads a flag of a bitmask: the raw value is the whole mask


@dataclass(frozen=True)
class CompatPlan:
    """What to render, resolved once: value and special items in CSV order, and label fields."""

    items: tuple[_Item, ...]
    label_fields: tuple[tuple[str, int], ...]
    hostname: str
    hostname_label: str
    options: DcgmOptions = DcgmOptions()
    release: str = "4.8.2"  # the dcgm-exporter profile (:mod:`.releases`), said in gpu_exporter_build_info
    bandwidth: NvlinkBandwidth = field(default_factory=NvlinkBandwidth, compare=False)  # state across frames
    clock_totals: ClockEventTotals = field(default_factory=ClockEventTotals, compare=False)  # likewise

    @property
    def clock_window_seconds(self) -> float:
        """How long the sampler must remember clock-event samples for DCGM_EXP_CLOCK_EVENTS_COUNT;
        0 when the counters list does not ask for it."""
        asked = any(item.field_id in _CLOCK_FIELDS for item in self.items)
        return self.options.clock_window_ms / 1000 if asked else 0.0

    @property
    def memory(self) -> Memory:
        """What the sampler keeps for this plan beyond current values: the raw vendor values (units are
        scaled once from them), clock-event samples for DCGM_EXP_CLOCK_EVENTS_COUNT and recent Xids for
        DCGM_EXP_XID_ERRORS_COUNT."""
        return Memory(raw=True, clock_events_seconds=self.clock_window_seconds, xids_seconds=RECENT_SECONDS)


def plan(
    counters: Sequence[Counter],
    specs: Sequence[MetricSpec],
    backend: str,
    watch_events: bool,
    hostname: str,
    hostname_label: str,
    options: DcgmOptions | None = None,
    release: str = "4.8.2",
) -> CompatPlan:
    """Resolve counters against the enabled catalogue rows by DCGM field id (any spelling of a
    field's name, the name as written being the metric name, as dcgm-exporter keeps it); log each
    row that cannot be served, once."""
    enabled = {FIELD_IDS[spec.compat_name]: spec for spec in specs if spec.compat_name}
    known = {FIELD_IDS[spec.compat_name]: spec for spec in METRICS if spec.compat_name}
    items: list[_Item] = []
    labels: list[tuple[str, int]] = []
    seen: set[str] = set()
    skipped: list[str] = []
    ids = BY_NAME[release].ids if release in BY_NAME else {}
    for counter in counters:
        if counter.field in seen:
            log.warning("counters line %d: %s is listed twice; the first row is used", counter.line, counter.field)
            continue
        seen.add(counter.field)
        number = ids.get(counter.field) or field_id(counter.field)
        assert number is not None  # counters.parse accepts known names only
        reason = ""
        if counter.type == "label":
            if number in LABEL_FIELDS:
                labels.append((counter.field, number))
            else:
                reason = "gpu-exporter has no value for this label field"
        else:
            item, reason = _value_item(counter, number, specs, backend, watch_events, enabled, known)
            if item is not None:
                items.append(item)
        if reason:
            skipped.append(f"line {counter.line}: {counter.field} skipped: {reason}")
    if skipped:  # one start-up line, every row it cannot serve with its reason
        log.warning(
            "counters file: %d of %d rows cannot be served, the rest are: %s", len(skipped), len(counters),
            " | ".join(skipped),
        )  # fmt: skip
    options = options or DcgmOptions()
    hostname = options.remote_host or hostname
    return CompatPlan(tuple(items), tuple(sorted(labels)), hostname, hostname_label, options, release)


#: A value row resolved: the item to render, or None and why the row is skipped.
Resolved = tuple[_Item | None, str]


def _value_item(
    counter: Counter,
    number: int,
    specs: Sequence[MetricSpec],
    backend: str,
    watch_events: bool,
    enabled: dict[int, MetricSpec],
    known: dict[int, MetricSpec],
) -> Resolved:
    """A value row (not ``label``): dcgm-exporter's own fields first, then the fields computed from
    other rows, then the catalogue's rows."""
    resolved = _exporter_field(counter, number, specs, backend, watch_events)
    if resolved is None:
        resolved = _computed_field(counter, number, specs, backend, known)
    if resolved is None:
        resolved = _catalogue_field(counter, number, backend, enabled, known)
    return resolved


def _exporter_field(
    counter: Counter, number: int, specs: Sequence[MetricSpec], backend: str, watch_events: bool
) -> Resolved | None:
    """The last-Xid gauge and Xid count, the identity values, P2P status, the framebuffer-used ratio
    and the clock-event count; None for any other field."""
    if number in _XID_FIELDS:
        if watch_events:
            return _Item(counter, number), ""
        return None, "the xid collector is disabled"
    if number in IDENTITY_VALUES or number in HOST_VALUES or number in (_P2P_STATUS, HEALTH_STATUS):
        return _Item(counter, number), ""
    if number == FB_USED_RATIO:
        if {spec.key for spec in specs if _supplied(spec, backend)} >= FB_USED_RATIO_KEYS:
            return _Item(counter, number), ""
        return None, "the memory collector is disabled"
    if number in _CLOCK_FIELDS:
        if _POWER_CAP_EVENT in {spec.key for spec in specs}:
            return _Item(counter, number), ""
        return None, "the clock_events collector is disabled"
    return None


def _computed_field(
    counter: Counter, number: int, specs: Sequence[MetricSpec], backend: str, known: dict[int, MetricSpec]
) -> Resolved | None:
    """Fields read from or computed from other rows: NVML's raw encoded bit error rate, DCGM's
    link-entity fields, NVLink throughput and the composed fields (those two unless the catalogue
    has the field); None for any other field."""
    if number in ENCODED_FIELDS:  # NVML's raw encoded bit error rate behind a decoded row
        if ENCODED_FIELDS[number] in {spec.key for spec in specs if _supplied(spec, backend)}:
            return _Item(counter, number), ""
        return None, f"the row it is read from ({ENCODED_FIELDS[number]}) is not enabled on the {backend} backend"
    if number in LINK_ENTITY_FIELDS or number in LINK_BANDWIDTHS:  # DCGM link-entity fields
        wanted = {LINK_ENTITY_FIELDS[number]} if number in LINK_ENTITY_FIELDS else set(BANDWIDTH_KEYS)
        if wanted | {NVLINK_UP} <= {spec.key for spec in specs if _supplied(spec, backend)}:
            return _Item(counter, number), ""
        return None, f"the per-link rows it is read from are not enabled on the {backend} backend"
    if number in RATE_FIELDS and number not in known:
        if set(BANDWIDTH_KEYS) <= {spec.key for spec in specs if _supplied(spec, backend)}:
            return _Item(counter, number), ""
        return None, f"the NVLink throughput counters it is computed from are not read on the {backend} backend"
    if number in COMPOSED and number not in known:
        if COMPOSED[number].keys <= {spec.key for spec in specs if _supplied(spec, backend)}:
            return _Item(counter, number), ""
        return None, f"the rows it is composed from are not enabled on the {backend} backend"
    return None


def _catalogue_field(
    counter: Counter, number: int, backend: str, enabled: dict[int, MetricSpec], known: dict[int, MetricSpec]
) -> Resolved:
    """A catalogue row by field id: served when enabled and supplied by ``backend`` (scaled from the
    backend's raw unit), else why not."""
    if number in enabled and _supplied(enabled[number], backend):
        spec = enabled[number]
        source = spec.source(backend)
        bit = (isinstance(source, DcgmSource) and bool(source.bit)) or bool(getattr(source, "ber", False))
        return _Item(counter, number, spec, source.scale if source is not None else ONE, bit), ""
    if number in known:
        spec = known[number]
        return None, (
            f"the {backend} backend cannot supply it"
            if not _supplied(spec, backend)
            else f"the {spec.collector} collector is disabled"
        )
    if number in LABEL_FIELDS:
        return None, "a text field: dcgm-exporter serves it as a label field (type label)"
    return None, not_served_reason(number) or "gpu-exporter cannot supply this field yet"


def needed_collectors(counters: Sequence[Counter], backend: str) -> frozenset[str]:
    """The collectors the counters' fields are read through on ``backend``: a field listed in the
    counters file turns on what it needs, as dcgm-exporter watches every field its CSV lists (e.g.
    DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL in its default counters needs the nvlink collector)."""
    known = {FIELD_IDS[spec.compat_name]: spec for spec in METRICS if spec.compat_name}
    needed: set[str] = set()
    for counter in counters:
        number = field_id(counter.field)
        if counter.type == "label" or number is None:
            continue
        if number in _XID_FIELDS:
            needed.add("xid")
            continue
        keys: tuple[str, ...] = ()
        if number == FB_USED_RATIO:
            keys = tuple(FB_USED_RATIO_KEYS)
        elif number in _CLOCK_FIELDS:
            keys = (_POWER_CAP_EVENT,)
        elif number in ENCODED_FIELDS:
            keys = (ENCODED_FIELDS[number],)
        elif number in LINK_ENTITY_FIELDS:
            keys = (LINK_ENTITY_FIELDS[number], NVLINK_UP)
        elif number in LINK_BANDWIDTHS:
            keys = (*BANDWIDTH_KEYS, NVLINK_UP)
        elif number in RATE_FIELDS and number not in known:
            keys = BANDWIDTH_KEYS
        elif number in COMPOSED and number not in known:
            keys = tuple(COMPOSED[number].keys)
        elif number in known:
            keys = (known[number].key,)
        specs = [BY_KEY[key] for key in keys if key in BY_KEY]
        if specs and all(_supplied(spec, backend) for spec in specs):
            needed.update(spec.collector for spec in specs)
    return frozenset(needed)


def _supplied(spec: MetricSpec, backend: str) -> bool:
    return spec.source(backend) is not None or spec.derive is not None
