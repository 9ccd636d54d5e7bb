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
naming profile (:mod:`gpu_exporter.naming`): labels in that order, integers without a fraction,
text format only (dcgm-exporter's counter names lack ``_total``, which OpenMetrics would require).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from prometheus_client.core import Metric
from prometheus_client.samples import Sample

from gpu_exporter.backends.base import DeviceIdentity, HostIdentity
from gpu_exporter.catalogue import CLOCK_EVENT_REASONS, METRICS, ONE, XID_CODES, DcgmSource, MetricSpec, scaled
from gpu_exporter.counters import Counter
from gpu_exporter.exposition import encode, render_text
from gpu_exporter.families import self_families
from gpu_exporter.model import Entity
from gpu_exporter.naming import DCGM_EXPORTER, DCGM_EXPORTER_SELF
from gpu_exporter.pipeline.events import XidTally
from gpu_exporter.snapshot import DeviceView, Frame, Rendered

log = logging.getLogger(__name__)

#: dcgm-exporter's default window for its DCGM_EXP_*_COUNT pseudo-fields, in milliseconds.
WINDOW_MS = 300_000

_LABEL_FIELDS: dict[str, Callable[[HostIdentity, DeviceIdentity], str]] = {
    "DCGM_FI_DRIVER_VERSION": lambda host, _dev: host.driver_version,
    "DCGM_FI_NVML_VERSION": lambda host, _dev: host.nvml_version,
    "DCGM_FI_DEV_NAME": lambda _host, dev: dev.name,
    "DCGM_FI_DEV_SERIAL": lambda _host, dev: dev.serial,
    "DCGM_FI_DEV_UUID": lambda _host, dev: dev.uuid,
    "DCGM_FI_DEV_PCI_BUSID": lambda _host, dev: dev.pci_bus_id,
    "DCGM_FI_DEV_MINOR_NUMBER": lambda _host, dev: dev.minor_number,
    "DCGM_FI_DEV_VBIOS_VERSION": lambda _host, dev: dev.vbios_version,
}
_XID_FIELD = "DCGM_FI_DEV_XID_ERRORS"
_XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
_CLOCK_COUNT = "DCGM_EXP_CLOCK_EVENTS_COUNT"
Labels = list[tuple[str, str]]


@dataclass(frozen=True)
class _Item:
    """One family to render: its counters row and, for a value row, the catalogue row behind it
    with the factor from the backend's raw unit to dcgm-exporter's (``raw_scale``)."""

    counter: Counter
    spec: MetricSpec | None = None
    backend_scale: Fraction = ONE
    bit: bool = False  # the backend reads a flag of a bitmask: the raw value is the whole mask


@dataclass(frozen=True)
class CompatPlan:
    """What to render, resolved once: value and special items in CSV order, and label fields."""

    items: tuple[_Item, ...]
    label_fields: tuple[str, ...]
    hostname: str
    hostname_label: str


def plan(
    counters: Sequence[Counter],
    specs: Sequence[MetricSpec],
    backend: str,
    watch_events: bool,
    hostname: str,
    hostname_label: str,
) -> CompatPlan:
    """Resolve counters against the enabled catalogue rows; log each row that cannot be served, once."""
    enabled = {spec.compat_name: spec for spec in specs if spec.compat_name}
    known = {spec.compat_name: spec for spec in METRICS if spec.compat_name}
    items: list[_Item] = []
    labels: list[str] = []
    seen: set[str] = set()
    for counter in counters:
        if counter.field in seen:
            log.warning("counters line %d: %s is listed twice; the first row is used", counter.line, counter.field)
            continue
        seen.add(counter.field)
        reason = ""
        if counter.type == "label":
            if counter.field in _LABEL_FIELDS:
                labels.append(counter.field)
            else:
                reason = "gpu-exporter has no value for this label field"
        elif counter.field in (_XID_FIELD, _XID_COUNT):
            if watch_events:
                items.append(_Item(counter))
            else:
                reason = "the xid collector is disabled"
        elif counter.field == _CLOCK_COUNT:
            if "gpu_clock_event_active{reason=power_cap}" in {spec.key for spec in specs}:
                items.append(_Item(counter))
            else:
                reason = "the clock_events collector is disabled"
        elif counter.field in enabled and _supplied(enabled[counter.field], backend):
            spec = enabled[counter.field]
            source = spec.source(backend)
            bit = isinstance(source, DcgmSource) and bool(source.bit)
            items.append(_Item(counter, spec, source.scale if source is not None else ONE, bit))
        elif counter.field in known:
            spec = known[counter.field]
            reason = (
                f"the {backend} backend cannot supply it"
                if not _supplied(spec, backend)
                else f"the {spec.collector} collector is disabled"
            )
        else:
            reason = "gpu-exporter cannot supply this field yet"
        if reason:
            log.warning("counters line %d: %s skipped: %s", counter.line, counter.field, reason)
    return CompatPlan(tuple(items), tuple(sorted(labels)), hostname, hostname_label)


def _supplied(spec: MetricSpec, backend: str) -> bool:
    return spec.source(backend) is not None or spec.derive is not None


def compat_renderer(compat: CompatPlan) -> Callable[[Frame], Rendered]:
    """Render frames in dcgm-exporter's names (text format only), self-metrics appended natively,
    both through the one encoder with their naming profiles."""

    def render_compat(frame: Frame) -> Rendered:
        families = [family for family in (_family(item, compat, frame) for item in compat.items) if family.samples]
        own = [family for family in self_families(frame.stats, frame.devices) if family.samples]
        text = encode(families, DCGM_EXPORTER)[0] + encode(own, DCGM_EXPORTER_SELF)[0]
        return render_text(text)

    return render_compat


def _base(compat: CompatPlan, host: HostIdentity, device: DeviceIdentity, mig: Entity | None) -> Labels:
    labels = [
        ("gpu", str(device.index)),
        ("UUID", device.uuid),
        ("pci_bus_id", device.pci_bus_id),
        ("device", f"nvidia{device.minor_number or device.index}"),
        ("modelName", device.name),
    ]
    if mig is not None:
        own = dict(mig.labels)
        labels += [("GPU_I_PROFILE", own["profile"]), ("GPU_I_ID", own["gpu_instance"])]
    labels.append((compat.hostname_label, compat.hostname))
    labels += [(name, _LABEL_FIELDS[name](host, device)) for name in compat.label_fields]
    return labels


def _family(item: _Item, compat: CompatPlan, frame: Frame) -> Metric:
    counter = item.counter
    samples: list[tuple[Labels, float]] = []
    for device in frame.devices:
        if not device.up:
            continue
        base = _base(compat, frame.host, device.identity, None)
        if item.spec is not None:
            samples += _values(item, device, base, compat, frame.host)
        elif counter.field == _XID_FIELD and frame.events is not None:
            samples.append(_last_xid(frame.events.get(device.identity.uuid, XidTally()), base))
        elif counter.field == _XID_COUNT and frame.events is not None:
            samples += _xid_counts(frame.events.get(device.identity.uuid, XidTally()), base, frame.wall_time)
        elif counter.field == _CLOCK_COUNT:
            samples += _clock_counts(frame.windows.get(device.identity.uuid, {}), base, frame.wall_time)
    family = Metric(counter.field, counter.help, counter.type)
    family.samples = [Sample(counter.field, dict(labels), value) for labels, value in samples]
    return family


def _in_dcgm_unit(item: _Item, value: float, raw: float | None) -> float:
    """dcgm-exporter's unit, scaled once from the vendor's raw value (raw × source scale × the
    profile's factor, one rounding: 55 % stays 55, not 55.00000000000001); a derived value has no
    raw value and is scaled from its base unit."""
    assert item.spec is not None
    if raw is None or item.bit:
        return scaled(value, item.spec.compat_scale)
    return scaled(raw, item.backend_scale * item.spec.compat_scale)


def _values(
    item: _Item, device: DeviceView, base: Labels, compat: CompatPlan, host: HostIdentity
) -> Iterable[tuple[Labels, float]]:
    spec = item.spec
    assert spec is not None
    pods = _pods(device)
    for entity, values in device.samples.items():
        if entity.kind not in ("gpu", "mig") or entity.kind not in spec.entities:
            continue
        value = values.get(spec.key)
        if value is None:
            continue
        labels = base if entity.kind == "gpu" else _base(compat, host, device.identity, entity)
        yield labels + pods.get(entity.uid, []), _in_dcgm_unit(item, value, device.raw.get(entity, {}).get(spec.key))


def _pods(device: DeviceView) -> dict[str, Labels]:
    """dcgm-exporter's ``pod``, ``namespace`` and ``container`` labels (``--kubernetes``) for each GPU or
    MIG instance allocated to exactly one pod container. A device several pods share (time-slicing)
    gets none: copying its values to every pod would count them once per pod; the per-process series
    say who uses what."""
    by_parent: dict[str, list[dict[str, str]]] = {}
    for entity in device.samples:
        if entity.kind == "pod":
            by_parent.setdefault(dict(entity.info).get("parent", ""), []).append(dict(entity.labels))
    return {
        parent: [("pod", own[0]["pod"]), ("namespace", own[0]["namespace"]), ("container", own[0]["container"])]
        for parent, own in by_parent.items()
        if len(own) == 1
    }


def _last_xid(tally: XidTally, base: Labels) -> tuple[Labels, float]:
    """dcgm-exporter's last-value Xid gauge, with err_code and err_msg from the shared Xid table."""
    code = tally.last_xid or 0
    message = "No Error" if code == 0 else (XID_CODES[code].description if code in XID_CODES else "Unknown Error")
    return [*base, ("err_code", str(code)), ("err_msg", message)], float(code)


def _xid_counts(tally: XidTally, base: Labels, now: float) -> list[tuple[Labels, float]]:
    labels = [*base, ("window_size_in_ms", str(WINDOW_MS))]
    counts: dict[int, int] = {}
    for at, code in tally.recent:
        if at >= now - WINDOW_MS / 1000:
            counts[code] = counts.get(code, 0) + 1
    if not counts:  # as dcgm-exporter: one zero series without an xid label
        return [(labels, 0.0)]
    return [([*labels, ("xid", str(code))], float(count)) for code, count in sorted(counts.items())]


def _clock_counts(activations: Mapping[str, Sequence[float]], base: Labels, now: float) -> list[tuple[Labels, float]]:
    """Times each clock-event reason became active within the window, one series per reason."""
    labels = [*base, ("window_size_in_ms", str(WINDOW_MS))]
    return [
        (
            [*labels, ("clock_event", _CLOCK_EVENT_NAMES.get(reason, reason))],
            float(sum(1 for at in activations.get(reason, ()) if at >= now - WINDOW_MS / 1000)),
        )
        for reason, _bit in CLOCK_EVENT_REASONS
    ]


# dcgm-exporter's clock_event label values, where they differ from gpu-exporter's reason names.
_CLOCK_EVENT_NAMES = {"applications_clocks": "clocks_setting"}
