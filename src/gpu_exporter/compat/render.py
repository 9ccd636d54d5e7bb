"""dcgm-exporter compatibility: the same frames rendered under dcgm-exporter's names, units and labels.

A :class:`CompatPlan` is built once from a counters list (dcgm-exporter's CSV) and the catalogue's
compatibility columns: each row becomes a value item (a catalogue metric × its ``compat_scale``),
a label field, the last-Xid gauge or one of dcgm-exporter's windowed counts; rows the active
backend cannot supply are logged once and skipped. Each frame is then rendered as Prometheus text
with dcgm-exporter's label order (``gpu``, ``UUID``, ``pci_bus_id``, ``device``, ``modelName``,
MIG's ``GPU_I_PROFILE`` and ``GPU_I_ID``, ``Hostname``, label fields, then per-metric labels).
Unlike dcgm-exporter, label values are escaped, floats printed exactly, and a missing value is
simply absent. Values are scaled once from the vendor's raw value into dcgm-exporter's unit (no
base-unit value is scaled back). The families go through the one encoder with the dcgm-exporter
naming profile (:mod:`gpu_exporter.exposition.naming`): labels in that order, integers without a fraction,
text format only (dcgm-exporter's counter names lack ``_total``, which OpenMetrics would require).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from prometheus_client.core import Metric
from prometheus_client.samples import Sample

from gpu_exporter.backends.base import DeviceIdentity, HostIdentity
from gpu_exporter.catalogue import BY_KEY, CLOCK_EVENT_REASONS, METRICS, ONE, DcgmSource, MetricSpec, key_of, scaled
from gpu_exporter.catalogue.keys import CLOCK_EVENT_ACTIVE, NVLINK_UP
from gpu_exporter.compat.counters import Counter
from gpu_exporter.compat.devices import monitored, unmatched_ids
from gpu_exporter.compat.field_names import FIELD_IDS, field_id
from gpu_exporter.compat.fields import (
    BANDWIDTH_FIELDS,
    BANDWIDTH_KEYS,
    COMPOSED,
    DOUBLE_IDS,
    ENCODED_FIELDS,
    FB_USED_RATIO,
    FB_USED_RATIO_KEYS,
    IDENTITY_VALUES,
    LINK_BANDWIDTHS,
    LINK_ENTITY_FIELDS,
    LINK_LABEL_FIELDS,
    P2P_STATUS_NAMES,
    NvlinkBandwidth,
    decimal_label,
    fb_used_ratio,
    link_entities,
)
from gpu_exporter.compat.flags import DcgmOptions
from gpu_exporter.compat.pods import attributed, first_wins, hpc_jobs
from gpu_exporter.compat.pods import pod_labels as _pods
from gpu_exporter.compat.xid import xid_text
from gpu_exporter.exposition.cache import Rendered
from gpu_exporter.exposition.encoder import encode_format, render_text
from gpu_exporter.exposition.families import self_families
from gpu_exporter.exposition.naming import DCGM_EXPORTER, DCGM_EXPORTER_SELF
from gpu_exporter.model import Entity
from gpu_exporter.sampling.consumers import Memory
from gpu_exporter.sampling.events import RECENT_SECONDS, XidTally
from gpu_exporter.sampling.snapshot import DeviceView, Frame

# The logger keeps its name from before the package layout: log lines print it and users filter on it.
log = logging.getLogger("gpu_exporter.compat")

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
_XID_FIELD = 230
_XID_COUNT = 9001
_CLOCK_COUNT = 9002
#: A row of the clock_events collector, which DCGM_EXP_CLOCK_EVENTS_COUNT counts from: enabled with it.
_POWER_CAP_EVENT = key_of(CLOCK_EVENT_ACTIVE, (("reason", "power_cap"),))
_P2P_STATUS = 9004
#: Framebuffer fields: quantities of the instance itself, never copied from the whole GPU.
_FRAMEBUFFER_IDS = frozenset(range(250, 256))
Labels = list[tuple[str, str]]


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
    bandwidth: NvlinkBandwidth = field(default_factory=NvlinkBandwidth, compare=False)  # state across frames

    @property
    def clock_window_seconds(self) -> float:
        """How long the sampler must remember clock-event samples for DCGM_EXP_CLOCK_EVENTS_COUNT;
        0 when the counters list does not ask for it."""
        asked = any(item.field_id == _CLOCK_COUNT for item in self.items)
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
) -> CompatPlan:
    """Resolve counters against the enabled catalogue rows by DCGM field id (any spelling of a
    field's name, the name as written being the metric name, as dcgm-exporter keeps it); log each
    row that cannot be served, once."""
    enabled = {FIELD_IDS[spec.compat_name]: spec for spec in specs if spec.compat_name}
    known = {FIELD_IDS[spec.compat_name]: spec for spec in METRICS if spec.compat_name}
    items: list[_Item] = []
    labels: list[tuple[str, int]] = []
    seen: set[str] = set()
    for counter in counters:
        if counter.field in seen:
            log.warning("counters line %d: %s is listed twice; the first row is used", counter.line, counter.field)
            continue
        seen.add(counter.field)
        number = field_id(counter.field)
        assert number is not None  # counters.parse accepts known names only
        reason = ""
        if counter.type == "label":
            if number in LABEL_FIELDS:
                labels.append((counter.field, number))
            else:
                reason = "gpu-exporter has no value for this label field"
        elif number in (_XID_FIELD, _XID_COUNT):
            if watch_events:
                items.append(_Item(counter, number))
            else:
                reason = "the xid collector is disabled"
        elif number in IDENTITY_VALUES or number == _P2P_STATUS:
            items.append(_Item(counter, number))
        elif number == FB_USED_RATIO:
            if {spec.key for spec in specs if _supplied(spec, backend)} >= FB_USED_RATIO_KEYS:
                items.append(_Item(counter, number))
            else:
                reason = "the memory collector is disabled"
        elif number == _CLOCK_COUNT:
            if _POWER_CAP_EVENT in {spec.key for spec in specs}:
                items.append(_Item(counter, number))
            else:
                reason = "the clock_events collector is disabled"
        elif number in ENCODED_FIELDS:  # NVML's raw encoded bit error rate behind a decoded row
            if ENCODED_FIELDS[number] in {spec.key for spec in specs if _supplied(spec, backend)}:
                items.append(_Item(counter, number))
            else:
                reason = f"the row it is read from ({ENCODED_FIELDS[number]}) is not enabled on the {backend} backend"
        elif number in LINK_ENTITY_FIELDS or number in LINK_BANDWIDTHS:  # DCGM link-entity fields
            wanted = {LINK_ENTITY_FIELDS[number]} if number in LINK_ENTITY_FIELDS else set(BANDWIDTH_KEYS)
            if wanted | {NVLINK_UP} <= {spec.key for spec in specs if _supplied(spec, backend)}:
                items.append(_Item(counter, number))
            else:
                reason = f"the per-link rows it is read from are not enabled on the {backend} backend"
        elif number in BANDWIDTH_FIELDS and number not in known:
            if set(BANDWIDTH_KEYS) <= {spec.key for spec in specs if _supplied(spec, backend)}:
                items.append(_Item(counter, number))
            else:
                reason = f"the NVLink throughput counters it is computed from are not read on the {backend} backend"
        elif number in COMPOSED and number not in known:
            if COMPOSED[number].keys <= {spec.key for spec in specs if _supplied(spec, backend)}:
                items.append(_Item(counter, number))
            else:
                reason = f"the rows it is composed from are not enabled on the {backend} backend"
        elif number in enabled and _supplied(enabled[number], backend):
            spec = enabled[number]
            source = spec.source(backend)
            bit = (isinstance(source, DcgmSource) and bool(source.bit)) or bool(getattr(source, "ber", False))
            items.append(_Item(counter, number, spec, source.scale if source is not None else ONE, bit))
        elif number in known:
            spec = known[number]
            reason = (
                f"the {backend} backend cannot supply it"
                if not _supplied(spec, backend)
                else f"the {spec.collector} collector is disabled"
            )
        elif number in LABEL_FIELDS:
            reason = "a text field: dcgm-exporter serves it as a label field (type label)"
        else:
            reason = "gpu-exporter cannot supply this field yet"
        if reason:
            log.warning("counters line %d: %s skipped: %s", counter.line, counter.field, reason)
    options = options or DcgmOptions()
    hostname = options.remote_host or hostname
    return CompatPlan(tuple(items), tuple(sorted(labels)), hostname, hostname_label, options)


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
        if number in (_XID_FIELD, _XID_COUNT):
            needed.add("xid")
            continue
        keys: tuple[str, ...] = ()
        if number == FB_USED_RATIO:
            keys = tuple(FB_USED_RATIO_KEYS)
        elif number == _CLOCK_COUNT:
            keys = (_POWER_CAP_EVENT,)
        elif number in ENCODED_FIELDS:
            keys = (ENCODED_FIELDS[number],)
        elif number in LINK_ENTITY_FIELDS:
            keys = (LINK_ENTITY_FIELDS[number], NVLINK_UP)
        elif number in LINK_BANDWIDTHS:
            keys = (*BANDWIDTH_KEYS, NVLINK_UP)
        elif number in BANDWIDTH_FIELDS and number not in known:
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


def compat_renderer(compat: CompatPlan) -> Callable[[Frame], Rendered]:
    """Render frames in dcgm-exporter's names (text format only), self-metrics appended natively,
    both through the one encoder with their naming profiles."""

    unchecked = [True]
    bandwidth = any(
        (item.field_id in BANDWIDTH_FIELDS or item.field_id in LINK_BANDWIDTHS) and item.spec is None
        for item in compat.items
    )

    def render_compat(frame: Frame) -> Rendered:
        if unchecked[0] and any(device.up for device in frame.devices):
            unchecked[0] = False
            for missing in unmatched_ids(compat.options.devices, frame):
                log.warning("-d: %s is not on this host; nothing is reported for it", missing)
        if bandwidth:  # once per frame, not per scrape: the rate between this frame's counters and the last's
            for device in frame.devices:
                if device.up:
                    compat.bandwidth.update(device.identity.uuid, device.entity, device.samples, frame.wall_time)

        def text() -> bytes:  # built when a scrape first asks for it
            families = [family for family in (_family(item, compat, frame) for item in compat.items) if family.samples]
            own = [family for family in self_families(frame.stats, frame.devices) if family.samples]
            return encode_format(families, "text", DCGM_EXPORTER) + encode_format(own, "text", DCGM_EXPORTER_SELF)

        return render_text(text)

    return render_compat


def _base(compat: CompatPlan, host: HostIdentity, device: DeviceIdentity, mig: Entity | None) -> Labels:
    """dcgm-exporter's leading labels: ``device`` is ``nvidia<gpu id>`` as it builds it, ``UUID``
    is ``uuid`` with ``-o``, ``Hostname`` is left out with ``-n``."""
    options = compat.options
    labels = [
        ("gpu", str(device.index)),
        ("uuid" if options.old_namespace else "UUID", device.uuid),
        ("pci_bus_id", device.pci_bus_id),
        ("device", f"nvidia{device.index}"),
        ("modelName", device.name.replace(" ", "-") if options.replace_blanks else device.name),
    ]
    if mig is not None:
        own = dict(mig.labels)
        labels += [("GPU_I_PROFILE", own["profile"]), ("GPU_I_ID", own["gpu_instance"])]
    if not options.no_hostname:
        labels.append((compat.hostname_label, compat.hostname))
    labels += [(name, LABEL_FIELDS[number](host, device)) for name, number in compat.label_fields]
    return labels


def _family(item: _Item, compat: CompatPlan, frame: Frame) -> Metric:
    counter = item.counter
    options = compat.options
    samples: list[tuple[Labels, float]] = []
    for device in frame.devices:
        if not device.up and item.field_id not in (_XID_FIELD, _XID_COUNT):
            continue  # a lost GPU keeps its Xid series (its Xid 79 comes just before the loss), no others
        pods, jobs = _pods(device, options), hpc_jobs(device)
        for uid, found in _device_samples(item, compat, frame, device):
            samples += attributed(found, pods.get(uid, []), jobs.get(uid, ()))
    family = Metric(counter.field, counter.help, counter.type)
    family.samples = [Sample(counter.field, first_wins(labels), value) for labels, value in samples]
    return family


def _device_samples(
    item: _Item, compat: CompatPlan, frame: Frame, device: DeviceView
) -> Iterable[tuple[str, list[tuple[Labels, float]]]]:
    """One GPU's series of ``item`` before attribution, with the uid of the GPU or MIG instance each
    belongs to (dcgm-exporter's transformations key a series by it: its pod and hpc_job labels)."""
    options = compat.options
    gpu_uid = device.entity.uid
    if item.field_id in LINK_ENTITY_FIELDS or item.field_id in LINK_BANDWIDTHS:  # every GPU's links, as
        yield gpu_uid, _links(item, compat, frame.host, device)  # dcgm-exporter's link collector (no -d)
        return
    if item.field_id == _P2P_STATUS:  # whole GPUs whatever -d says, as dcgm-exporter's P2P collector
        yield gpu_uid, _p2p(device.identity, _base(compat, frame.host, device.identity, None))
        return
    whole, instances = monitored(device, compat.options.devices)
    for target in ([None] if whole else []) + instances:
        base = _base(compat, frame.host, device.identity, target)
        uid = target.uid if target is not None else gpu_uid
        found: list[tuple[Labels, float]] = []
        if item.spec is not None:
            found += _values(item, device, target, base)
        elif item.field_id == _XID_FIELD and frame.events is not None:
            found.append(_last_xid(frame.events.get(device.identity.uuid, XidTally()), base))
        elif item.field_id == _XID_COUNT and frame.events is not None:
            tally = frame.events.get(device.identity.uuid, XidTally())
            found += _xid_counts(tally, base, frame.wall_time, options.xid_window_ms)
        elif item.field_id in BANDWIDTH_FIELDS:  # a GPU instance shows its GPU's value, as DCGM answers
            value = compat.bandwidth.value(device.identity.uuid, BANDWIDTH_FIELDS[item.field_id])
            if value is not None:
                found.append((base, value))
        elif item.field_id in ENCODED_FIELDS:  # the GPU's raw value (a GPU instance shows its GPU's)
            raw = device.raw.get(device.entity, {}).get(ENCODED_FIELDS[item.field_id])
            if raw is not None:
                found.append((base, float(math.trunc(raw))))
        elif item.field_id in COMPOSED:  # a GPU instance shows its GPU's value, as DCGM answers
            value = COMPOSED[item.field_id].value(device.samples, device.entity)
            if value is not None:
                found.append((base, value))
        elif item.field_id == FB_USED_RATIO:  # the instance's own memory, as every framebuffer field
            entity = target if target is not None else device.entity
            ratio = fb_used_ratio(device.samples.get(entity, {}))
            if ratio is not None:
                found.append((base, ratio))
        elif item.field_id in IDENTITY_VALUES:  # a GPU instance shows its GPU's, as DCGM answers
            identity = IDENTITY_VALUES[item.field_id](device.identity)
            if identity is not None:
                found.append((base, float(identity)))
        elif item.field_id == _CLOCK_COUNT:
            events = frame.windows.get(device.identity.uuid, ())
            found += _clock_counts(events, base, frame.wall_time, options.clock_window_ms)
        yield uid, found


def _p2p(device: DeviceIdentity, base: Labels) -> list[tuple[Labels, float]]:
    """dcgm-exporter's DCGM_EXP_P2P_STATUS: one series per peer GPU (``link_status`` then ``peer_gpu``
    after the label fields, as its sorted labels come out), valued by the status number."""
    return [
        ([*base, ("link_status", P2P_STATUS_NAMES[status] if status < 7 else "Unknown"), ("peer_gpu", str(peer))],
         float(status))
        for peer, status in sorted(device.p2p_nvlink)
    ]  # fmt: skip


def _links(item: _Item, compat: CompatPlan, host: HostIdentity, device: DeviceView) -> list[tuple[Labels, float]]:
    """dcgm-exporter's series of a GPU's NVLinks (DCGM link entities with a GPU parent): ``nvlink``,
    ``gpu``, ``gpu_uuid``, ``pci_bus_id``, ``device``, ``model_name`` (blanks kept), ``hostname`` (not
    with ``-n``), then the label fields DCGM serves for any entity; links that are up only. INT64 values."""
    dev = device.identity
    labels = [
        ("gpu", str(dev.index)), ("gpu_uuid", dev.uuid), ("pci_bus_id", dev.pci_bus_id),
        ("device", f"nvidia{dev.index}"), ("model_name", dev.name),
    ]  # fmt: skip
    if not compat.options.no_hostname:
        labels.append(("hostname", compat.hostname))
    labels += [(name, LABEL_FIELDS[n](host, dev)) for name, n in compat.label_fields if n in LINK_LABEL_FIELDS]
    out = []
    for link, entity in link_entities(device.samples, device.entity):
        if item.field_id in LINK_BANDWIDTHS:
            value = compat.bandwidth.value(dev.uuid, link, LINK_BANDWIDTHS[item.field_id])
        else:
            value = device.samples[entity].get(LINK_ENTITY_FIELDS[item.field_id])
        if value is not None:
            out.append(([("nvlink", str(link)), *labels], float(math.trunc(value))))
    return out


def _in_dcgm_unit(item: _Item, value: float, raw: float | None) -> float:
    """dcgm-exporter's unit and DCGM's type, scaled once from the vendor's raw value (raw × source
    scale × the profile's factor, one rounding: 55 % stays 55, not 55.00000000000001); a derived
    value has no raw value and is scaled from its base unit. A field DCGM types INT64 is truncated
    to a whole number (20480.0009765625 MiB is 20480, as DCGM reports it)."""
    assert item.spec is not None
    if raw is None or item.bit:
        result = scaled(value, item.spec.compat_scale)
    else:
        result = scaled(raw, item.backend_scale * item.spec.compat_scale)
    if item.field_id not in DOUBLE_IDS and math.isfinite(result):
        return float(math.trunc(result))
    return result


def _values(item: _Item, device: DeviceView, target: Entity | None, base: Labels) -> Iterable[tuple[Labels, float]]:
    """The item's value for the whole GPU (``target`` None) or for one GPU instance: the instance's
    own value where the catalogue has one per instance, else (as DCGM answers for a GPU instance)
    the whole GPU's; framebuffer fields only ever from the instance itself."""
    spec = item.spec
    assert spec is not None
    entity = device.entity
    if target is not None and "mig" in spec.entities:
        entity = target
    elif (target is not None and item.field_id in _FRAMEBUFFER_IDS) or "gpu" not in spec.entities:
        return
    value = device.samples.get(entity, {}).get(spec.key)
    if value is None:
        return
    yield base, _in_dcgm_unit(item, value, device.raw.get(entity, {}).get(spec.key))


def _last_xid(tally: XidTally, base: Labels) -> tuple[Labels, float]:
    """dcgm-exporter's last-value Xid gauge, with err_code and dcgm-exporter's own err_msg text."""
    code = tally.last_xid or 0
    return [*base, ("err_code", str(code)), ("err_msg", xid_text(code))], float(code)


def _xid_counts(tally: XidTally, base: Labels, now: float, window_ms: int) -> list[tuple[Labels, float]]:
    labels = [*base, ("window_size_in_ms", str(window_ms))]
    counts: dict[int, int] = {}
    for at, code in tally.recent:
        if at >= now - window_ms / 1000:
            counts[code] = counts.get(code, 0) + 1
    if not counts:  # as dcgm-exporter: one zero series without an xid label
        return [(labels, 0.0)]
    return [([*labels, ("xid", str(code))], float(count)) for code, count in sorted(counts.items())]


def clock_event_counts(
    samples: Sequence[tuple[float, frozenset[str]]], now: float, window_ms: int
) -> dict[str, int] | None:
    """dcgm-exporter's DCGM_EXP_CLOCK_EVENTS_COUNT for one GPU: per reason, the samples within the
    last ``window_ms`` milliseconds that had it active (reasons never active are absent); None when
    the window holds no sample at all."""
    since = now - window_ms / 1000
    counts: dict[str, int] = {}
    seen = False
    for at, active in samples:
        if at >= since:
            seen = True
            for reason in active:
                counts[reason] = counts.get(reason, 0) + 1
    return counts if seen else None


def _clock_counts(
    samples: Sequence[tuple[float, frozenset[str]]], base: Labels, now: float, window_ms: int
) -> list[tuple[Labels, float]]:
    """One series per reason seen in the window, valued by the number of samples with it active
    (``clock_event`` before ``window_size_in_ms``); as dcgm-exporter, none when samples exist but no
    reason was active, and one zero series without ``clock_event`` when the window has no sample."""
    window = ("window_size_in_ms", str(window_ms))
    counts = clock_event_counts(samples, now, window_ms)
    if counts is None:
        return [([*base, window], 0.0)]
    return [
        ([*base, ("clock_event", _CLOCK_EVENT_NAMES.get(reason, reason)), window], float(counts[reason]))
        for reason, _bit in CLOCK_EVENT_REASONS
        if counts.get(reason)
    ]


# dcgm-exporter's clock_event label values, where they differ from gpu-exporter's reason names.
_CLOCK_EVENT_NAMES = {"applications_clocks": "clocks_setting"}
