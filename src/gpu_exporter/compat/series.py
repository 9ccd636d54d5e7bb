"""dcgm-exporter's series of one GPU for one plan item: its leading labels (``gpu``, ``UUID``,
``pci_bus_id``, ``device``, ``modelName``, MIG's ``GPU_I_PROFILE`` and ``GPU_I_ID``, ``Hostname``,
label fields, then per-metric labels), values scaled once from the vendor's raw value into
dcgm-exporter's unit, NVLink and P2P series, the last-Xid gauge and the windowed Xid and clock-event
counts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from gpu_exporter.backends.base import DeviceIdentity, HostIdentity
from gpu_exporter.catalogue import CLOCK_EVENT_REASONS, scaled
from gpu_exporter.compat.devices import monitored
from gpu_exporter.compat.fields import (
    BYTES_PER_SECOND_FIELDS,
    COMPOSED,
    DOUBLE_IDS,
    ENCODED_FIELDS,
    FB_USED_RATIO,
    HOST_VALUES,
    IDENTITY_VALUES,
    INSTANCE_OWN,
    LINK_BANDWIDTHS,
    LINK_ENTITY_FIELDS,
    LINK_LABEL_FIELDS,
    P2P_STATUS_NAMES,
    RATE_FIELDS,
    fb_used_ratio,
    link_entities,
)
from gpu_exporter.compat.health import HEALTH_STATUS, health_series
from gpu_exporter.compat.plan import (
    _CLOCK_COUNT,
    _CLOCK_TOTAL,
    _P2P_STATUS,
    _XID_COUNT,
    _XID_FIELD,
    _XID_TOTAL,
    LABEL_FIELDS,
    CompatPlan,
    _Item,
)
from gpu_exporter.compat.xid import xid_text
from gpu_exporter.model import Entity
from gpu_exporter.sampling.events import XidTally
from gpu_exporter.sampling.snapshot import DeviceView, Frame

#: Framebuffer fields: quantities of the instance itself, never copied from the whole GPU.
_FRAMEBUFFER_IDS = frozenset(range(250, 256))
Labels = list[tuple[str, str]]


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
    if item.field_id == HEALTH_STATUS:  # whole GPUs whatever -d says: DCGM's health watches judge GPUs
        yield (
            gpu_uid,
            health_series(frame.health, device.identity.uuid, _base(compat, frame.host, device.identity, None)),
        )
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
        elif item.field_id == _XID_TOTAL and frame.events is not None:
            found += _xid_totals(frame.events.get(device.identity.uuid, XidTally()), base)
        elif item.field_id in RATE_FIELDS:  # a GPU instance shows its GPU's value, as DCGM answers
            per_byte = item.field_id in BYTES_PER_SECOND_FIELDS
            value = compat.bandwidth.value(device.identity.uuid, RATE_FIELDS[item.field_id], per_byte=per_byte)
            if value is not None:
                found.append((base, value))
        elif item.field_id in ENCODED_FIELDS:  # the GPU's raw value (a GPU instance shows its GPU's)
            raw = device.raw.get(device.entity, {}).get(ENCODED_FIELDS[item.field_id])
            if raw is not None:
                found.append((base, float(math.trunc(raw))))
        elif item.field_id in COMPOSED:  # a GPU instance shows its GPU's value, as DCGM answers, but
            own = target is not None and item.field_id in INSTANCE_OWN  # its own memory in bytes
            value = COMPOSED[item.field_id].value(device.samples, target if own and target else device.entity)
            if value is not None:
                found.append((base, value))
        elif item.field_id == FB_USED_RATIO:  # the instance's own memory, as every framebuffer field
            entity = target if target is not None else device.entity
            ratio = fb_used_ratio(device.samples.get(entity, {}))
            if ratio is not None:
                found.append((base, ratio))
        elif item.field_id in HOST_VALUES:  # the host's value on every GPU and instance, as DCGM answers
            number = HOST_VALUES[item.field_id](frame.host, len(frame.devices))
            if number is not None:
                found.append((base, float(number)))
        elif item.field_id in IDENTITY_VALUES:  # a GPU instance shows its GPU's, as DCGM answers
            identity = IDENTITY_VALUES[item.field_id](device.identity)
            if identity is not None:
                found.append((base, float(identity)))
        elif item.field_id == _CLOCK_COUNT:
            events = frame.windows.get(device.identity.uuid, ())
            found += _clock_counts(events, base, frame.wall_time, options.clock_window_ms)
        elif item.field_id == _CLOCK_TOTAL:
            found += _clock_totals(compat.clock_totals.counts(device.identity.uuid), base)
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


def _xid_totals(tally: XidTally, base: Labels) -> list[tuple[Labels, float]]:
    """dcgm-exporter 4.8.3's DCGM_EXP_XID_ERRORS_TOTAL: Xids seen on the GPU since the exporter started,
    one series per code (``xid`` label), never going back; one zero series without ``xid`` before the
    first, as its windowed twin."""
    if not tally.xid:
        return [(base, 0.0)]
    return [([*base, ("xid", str(code))], float(count)) for code, count in sorted(tally.xid.items())]


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


def _clock_totals(counts: dict[str, int] | None, base: Labels) -> list[tuple[Labels, float]]:
    """DCGM_EXP_CLOCK_EVENTS_TOTAL: one series per reason that has been active (``clock_event``), valued by
    how often it became active since start; one zero series without ``clock_event`` before the first."""
    if not counts:
        return [] if counts is None else [(base, 0.0)]
    return [
        ([*base, ("clock_event", _CLOCK_EVENT_NAMES.get(reason, reason))], float(counts[reason]))
        for reason, _bit in CLOCK_EVENT_REASONS
        if counts.get(reason)
    ]


# dcgm-exporter's clock_event label values, where they differ from gpu-exporter's reason names.
_CLOCK_EVENT_NAMES = {"applications_clocks": "clocks_setting"}
