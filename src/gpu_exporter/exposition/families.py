"""Turn one cycle's frame into Prometheus metric families, in one loop over catalogue rows and
entities.

Pure functions: no vendor calls, no clocks. Families come out in catalogue order (identity first,
self-metrics last). A row's sample for an entity carries the entity's labels, then the row's
variant labels; names, types, units and help all come from the catalogue.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Mapping, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.samples import Sample

from gpu_exporter import model
from gpu_exporter.backends.base import DeviceIdentity, HostIdentity
from gpu_exporter.catalogue import PRECREATED_XIDS, SELF_METRICS, FixedMetric, MetricSpec, fixed
from gpu_exporter.model import Entity
from gpu_exporter.sampling.events import XidTally
from gpu_exporter.sampling.health import ACTIONS, Health
from gpu_exporter.sampling.pause import SCOPES as PAUSE_SCOPES
from gpu_exporter.sampling.snapshot import DeviceView, Samples, SelfStats


def _family(name: str, kind: str, unit: str, help_text: str) -> Metric:
    cls = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
    return cls(name, help_text, unit=unit)


def _fixed(metric: FixedMetric) -> Metric:
    return _family(metric.name, metric.kind, metric.unit, metric.help)


def _add(family: Metric, labels: dict[str, str], value: float) -> None:
    """Append a sample with exactly these labels (a whole-GPU sample of a MIG-capable metric has
    no MIG labels at all, rather than empty ones)."""
    suffix = "_total" if family.type == "counter" else ""
    family.samples.append(Sample(family.name + suffix, labels, value))


def _labelled(metric: FixedMetric, values: Sequence[str], value: float, family: Metric) -> None:
    _add(family, dict(zip(metric.labels, values, strict=True)), value)


def entity_families(specs: Sequence[MetricSpec], groups: Sequence[Samples], info: Mapping[str, Metric]) -> list[Metric]:
    """One family per row of ``specs``: for each group of entities (one GPU and what is under it, or
    one NVSwitch and its ports), each row in table order, then each entity of a kind the row
    describes that has a value. ``info`` families get one sample per entity of their kind."""
    by_name = {spec.name: _family(spec.name, spec.kind, spec.unit, spec.help) for spec in specs}
    for entities in groups:
        for entity in entities:
            metric = fixed.INFO_OF.get(entity.kind)
            name = "" if metric is None else metric.name
            if name in info:
                _add(info[name], dict(entity.labels + entity.info), 1)
        for spec in specs:
            family = by_name[spec.name]
            name = family.name + ("_total" if family.type == "counter" else "")
            samples, key, kinds, variant = family.samples, spec.key, spec.entities, spec.variant
            for entity, values in entities.items():
                if entity.kind in kinds:
                    value = values.get(key)
                    if value is not None:
                        samples.append(Sample(name, _labels(entity, variant), value))
    return list(by_name.values())


#: Label dicts by (entity, variant labels), shared by every snapshot's samples (never mutated: the
#: encoder only reads them), in two generations: a render finds a label dict in the young one, or
#: moves it there from the old one; every :data:`_ROTATE_EVERY` renders the young becomes the old and
#: the old is dropped. So it holds what the last few renders used, not every entity process churn
#: ever made (a fixed 100,000-entry cap kept the entities themselves alive: ~100 MB under churn).
_LABELS: dict[tuple[Entity, tuple[tuple[str, str], ...]], dict[str, str]] = {}
_OLD_LABELS: dict[tuple[Entity, tuple[tuple[str, str], ...]], dict[str, str]] = {}
_ROTATE_EVERY = 4
_renders = [0]


def _rotate() -> None:
    """Start a new generation every :data:`_ROTATE_EVERY` renders (called as a render starts)."""
    _renders[0] += 1
    if _renders[0] % _ROTATE_EVERY == 0:
        _OLD_LABELS.clear()
        _OLD_LABELS.update(_LABELS)
        _LABELS.clear()


def _labels(entity: Entity, variant: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """``entity``'s labels then ``variant``'s, as one dict (a sample's labels)."""
    key = (entity, variant)
    labels = _LABELS.get(key)
    if labels is None:
        labels = _OLD_LABELS.get(key)
        if labels is None:
            labels = dict(entity.labels + variant)
        _LABELS[key] = labels
    return labels


def device_families(
    specs: Sequence[MetricSpec],
    host: HostIdentity,
    devices: Sequence[DeviceView],
    events: Mapping[str, XidTally] | None = None,
    *,
    precreate_xids: bool = True,
) -> list[Metric]:
    """``gpu_info``, ``gpu_up``, ``gpu_mig_info``, one family per GPU-rooted row, and the event
    counters when ``events`` is given (Xid collector enabled); ``precreate_xids``: see
    :func:`event_families`."""
    _rotate()
    info, up, mig_info = _fixed(fixed.GPU_INFO), _fixed(fixed.GPU_UP), _fixed(fixed.MIG_INFO)
    rows = [spec for spec in specs if spec.root == "gpu"]
    for device in devices:
        ident = device.identity
        base = dict(device.entity.labels)
        identity = (ident.name, ident.pci_bus_id, ident.serial, host.driver_version, host.cuda_version,
                    ident.vbios_version, ident.board_part_number, ident.minor_number, ident.mig_mode,
                    *_more_identity(ident))  # fmt: skip
        _labelled(fixed.GPU_INFO, (*base.values(), *identity), 1, info)
        _add(up, base, 1 if device.up else 0)
    families = [
        info,
        up,
        mig_info,
        *entity_families(rows, [d.samples for d in devices], {fixed.MIG_INFO.name: mig_info}),
    ]
    if events is not None:
        families.extend(event_families(devices, events, precreate=precreate_xids))
    return families


def _more_identity(ident: DeviceIdentity) -> tuple[str, ...]:
    """``gpu_info``'s brand, compute capability (``9.0``), PCI device and subsystem ids (``0x233010DE``,
    as nvidia-smi prints them) and inforom versions; empty where the backend did not report them."""
    capability = ident.compute_capability
    return (
        ident.brand,
        f"{capability[0]}.{capability[1]}" if capability is not None else "",
        f"0x{ident.pci_device_id:08X}" if ident.pci_device_id is not None else "",
        f"0x{ident.pci_subsystem_id:08X}" if ident.pci_subsystem_id is not None else "",
        ident.inforom_image_version,
        ident.inforom_oem_version,
        ident.inforom_ecc_version,
        ident.inforom_power_version,
    )


def fabric_families(specs: Sequence[MetricSpec], fabric: Samples) -> list[Metric]:
    """``gpu_nvswitch_info`` and one family per fabric-rooted row (NVSwitches and their ports)."""
    info = _fixed(fixed.NVSWITCH_INFO)
    groups: dict[str, dict[Entity, Mapping[str, float]]] = {}
    for entity, values in fabric.items():  # one group per switch: the switch, then its ports
        groups.setdefault(dict(entity.labels).get("nvswitch", ""), {})[entity] = values
    rows = [spec for spec in specs if spec.root == "fabric"]
    return [info, *entity_families(rows, list(groups.values()), {fixed.NVSWITCH_INFO.name: info})]


def event_families(
    devices: Sequence[DeviceView], events: Mapping[str, XidTally], *, precreate: bool = True
) -> list[Metric]:
    """The Xid total of every code (from 0, so the first Xid after start is an increase, not a new
    series), the Xid counters by code (the codes seen; with ``precreate``, also the Xid table's
    alerting subset at 0), the last Xid time, and ECC event counters, for every GPU the sampler still
    lists: a lost GPU keeps them (its Xid 79 arrives just before the loss, and a series gone by the next
    scrape is never stored) until it has been out of the driver's list for the vanished retention; the
    counts are kept by UUID, so a GPU that comes back carries on from them."""
    total, xids = _fixed(fixed.XID_ERRORS_ALL_CODES), _fixed(fixed.XID_ERRORS)
    last, ecc = _fixed(fixed.XID_LAST_TIMESTAMP), _fixed(fixed.ECC_ERROR_EVENTS)
    precreated = set(PRECREATED_XIDS) if precreate else set()
    for device in devices:
        base = dict(device.entity.labels)
        tally = events.get(device.identity.uuid, XidTally())
        _add(total, base, sum(tally.xid.values()))
        for code in sorted(precreated | set(tally.xid)):
            _add(xids, {**base, "xid": str(code)}, tally.xid.get(code, 0))
        if tally.last_xid_at is not None:
            _add(last, base, tally.last_xid_at)
        for kind in ("single_bit", "double_bit"):
            _add(ecc, {**base, "type": kind}, tally.ecc.get(kind, 0))
    return [total, xids, last, ecc]


def health_families(health: Health, *, subsystems: bool = True) -> list[Metric]:
    """The health model's status per GPU, over all subsystems (``subsystem="all"``) and, with
    ``subsystems`` (full detail), per judged subsystem; and its recommended action per GPU (none
    before the backend first answered: nothing was judged)."""
    status, action = _fixed(fixed.HEALTH_STATUS), _fixed(fixed.HEALTH_ACTION)
    if not health.known:
        return [status, action]
    for gpu in health.gpus:
        base = dict(model.gpu(gpu.index, gpu.uuid).labels)
        for subsystem in gpu.checked if subsystems else ():
            finding = gpu.status_of(subsystem)
            _add(status, {**base, "subsystem": subsystem}, 0 if finding is None else finding.status)
        _add(status, {**base, "subsystem": "all"}, gpu.status)
        _add(action, base, ACTIONS.index(gpu.action))
    return [status, action]


def self_families(stats: SelfStats, devices: Sequence[DeviceView], health: Health | None = None) -> list[Metric]:
    """``gpu_exporter_*``: build, backend, cycle timing and health, errors by kind, per-device reads,
    the GPUs present and expected (from ``health``), and each collector's success and duration in the
    last cycle."""
    families = {metric: _fixed(metric) for metric in SELF_METRICS}
    _add(families[fixed.BUILD_INFO], {"version": stats.version, "python_version": platform.python_version()}, 1)
    backend = {"backend": stats.backend, "reason": stats.backend_reason}
    if stats.pause is not None and stats.pause.scope == "full" and not stats.backend_up:
        backend["until"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stats.pause.until_wall))
    _add(families[fixed.BACKEND_INFO], backend, 1)
    _add(families[fixed.BACKEND_UP], {}, 1 if stats.backend_up else 0)
    for scope in PAUSE_SCOPES:
        _add(families[fixed.PAUSED], {"scope": scope}, 1 if stats.pause and stats.pause.scope == scope else 0)
    if stats.pause is not None:
        _add(families[fixed.PAUSE_END], {"scope": stats.pause.scope}, stats.pause.until_wall)
    _add(families[fixed.COLLECT_INTERVAL], {}, stats.interval_seconds)
    if stats.cycle_seconds is not None:
        _add(families[fixed.SAMPLE_DURATION], {}, stats.cycle_seconds)
    if stats.last_success_timestamp is not None:
        _add(families[fixed.LAST_SAMPLE_TIMESTAMP], {}, stats.last_success_timestamp)
    for kind in sorted(stats.errors):
        _add(families[fixed.SAMPLE_ERRORS], {"kind": kind}, stats.errors[kind])
    for name in sorted(stats.invalid):
        _add(families[fixed.INVALID_VALUES], {"field": name}, stats.invalid[name])
    for device in devices:
        labels = dict(device.entity.labels)
        if device.read_seconds is not None:
            _add(families[fixed.DEVICE_READ_DURATION], labels, device.read_seconds)
        _add(families[fixed.DEVICE_STALLED], labels, 1 if device.stalled else 0)
        if not device.up:
            _add(families[fixed.DEVICE_DOWN], {**labels, "reason": device.down_reason or "lost"}, 1)
    if health is not None and health.known:
        _add(families[fixed.GPUS_PRESENT], {}, health.present)
    if health is not None and health.expected is not None:
        _add(families[fixed.GPUS_EXPECTED], {}, health.expected)
    for reason, count in sorted(stats.not_served.items()):
        _add(families[fixed.FIELDS_NOT_SERVED], {"reason": reason}, count)
    for name, source in stats.sources.items():
        _add(families[fixed.SOURCE_UP], {"source": name}, 1 if source.up else 0)
        _add(families[fixed.SOURCE_REQUESTS], {"source": name}, source.requests)
        for kind in sorted(source.failures):
            _add(families[fixed.SOURCE_FAILURES], {"source": name, "kind": kind}, source.failures[kind])
        if source.last_success is not None:
            _add(families[fixed.SOURCE_LAST_SUCCESS], {"source": name}, source.last_success)
    for name, status in stats.collectors.items():
        _add(families[fixed.COLLECTOR_SUCCESS], {"collector": name}, 1 if status.success else 0)
        if status.seconds is not None:
            _add(families[fixed.COLLECTOR_DURATION], {"collector": name}, status.seconds)
    return list(families.values())
