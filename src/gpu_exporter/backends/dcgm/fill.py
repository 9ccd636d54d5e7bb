"""DCGM samples → raw values of a :class:`~gpu_exporter.backends.base.RawReading`, in DCGM's own
vocabulary translated: blank sentinels and "no data yet" are absent, "not supported" is reported
to the pipeline's memo, other statuses are counted by kind."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from gpu_exporter.backends.base import RawReading
from gpu_exporter.backends.dcgm.errors import DcgmConnectionLost, DcgmError
from gpu_exporter.backends.dcgm.fields import is_call, is_profiling, split
from gpu_exporter.backends.dcgm.protocol import DcgmAdapter
from gpu_exporter.backends.dcgm.values import (
    LINK_STATE_UP,
    MAX_FIELDS_PER_GROUP,
    ST_IN_USE,
    ST_NO_PERMISSION,
    ST_NOT_SUPPORTED,
    ST_PROFILING_LIBRARY_ERROR,
    ST_REQUIRES_ROOT,
    Blank,
    FieldValue,
    decode,
    is_stale,
)
from gpu_exporter.catalogue import MetricSpec
from gpu_exporter.model import Entity

#: Absences that are not errors: no sample yet, or nothing to report.
_QUIET = frozenset({"blank", "not_found", "no_data", "not_watched", "stale_data"})
_UNSUPPORTED = frozenset({"not_supported", "field_unsupported_by_api", "gpu_not_supported"})
_PROFILING_IN_USE_STATUSES = frozenset({ST_PROFILING_LIBRARY_ERROR, ST_IN_USE})
_NO_PERMISSION_STATUSES = frozenset({ST_NO_PERMISSION, ST_REQUIRES_ROOT})
Samples = Mapping[int, FieldValue]


def fill(
    reading: RawReading,
    entity: Entity,
    samples: Samples,
    specs: Iterable[MetricSpec],
    asks: Callable[[str, str], bool] | None = None,
    link_state: int | None = None,
) -> None:
    """Put the raw value of each spec into ``reading`` for ``entity``: fields from ``samples``
    (keyed by each spec's ``field_id``), link-state specs from ``link_state`` (1 up, 0 down or
    disabled; absent when unknown)."""
    out = reading.raw.setdefault(entity, {})
    for spec in specs:
        source = spec.dcgm
        assert source is not None
        if asks is not None and not asks(entity.uid, spec.key):
            continue
        if source.call:
            if link_state is not None:
                out[spec.key] = 1.0 if link_state == LINK_STATE_UP else 0.0
            continue
        sample = samples.get(source.field_id)
        if sample is None:
            continue
        decoded = decode(sample)
        if isinstance(decoded, Blank):
            _absent(reading, entity, spec, sample.field_id, decoded)
        elif not isinstance(decoded, str):
            out[spec.key] = float(decoded)


def _absent(reading: RawReading, entity: Entity, spec: MetricSpec, field_id: int, blank: Blank) -> None:
    """Account for a sample of ``field_id`` (the field actually read: a per-link row reads one
    field per link) that has no value."""
    if blank.why in _QUIET:
        return
    if blank.why in _UNSUPPORTED or blank.status == ST_NOT_SUPPORTED:
        reading.unsupported.append((entity, spec.key, f"DCGM field {field_id} ({spec.name}) is not supported"))
    elif blank.status in _PROFILING_IN_USE_STATUSES and is_profiling(spec):
        reading.failed("profiling_in_use", spec.collector)
    elif blank.status in _NO_PERMISSION_STATUSES or blank.why == "not_permissioned":
        reading.failed("no_permission", spec.collector)
    else:
        reading.failed(blank.why, spec.collector)


def port_samples(samples: Samples, specs: Iterable[MetricSpec], port: int) -> dict[int, FieldValue]:
    """Link ``port``'s samples of per-link specs, keyed by each spec's ``field_id`` (link 0's field)."""
    out = {}
    for spec in specs:
        if spec.dcgm is not None and port < len(spec.dcgm.links) and spec.dcgm.links[port] in samples:
            out[spec.dcgm.field_id] = samples[spec.dcgm.links[port]]
    return out


def field_specs(specs: Sequence[MetricSpec]) -> list[MetricSpec]:
    """The specs that read a field (not a call)."""
    return [spec for spec in specs if not is_call(spec)]


def pci_bus_id(values: Mapping[int, int | float | str]) -> str:
    """``00000000:05:00.0`` from the NVSwitch PCI domain, bus, device and function fields (866-869)."""
    parts = [values.get(field_id) for field_id in (866, 867, 868, 869)]
    if not all(isinstance(part, int) for part in parts):
        return ""
    domain, bus, device, function = (int(part) for part in parts)  # type: ignore[arg-type]
    return f"{domain:08X}:{bus:02X}:{device:02X}.{function}"


Latest = dict[tuple[int, int], dict[int, FieldValue]]


def drop_stale(latest: Latest, fresh_after_us: int, reading: RawReading, specs: Sequence[MetricSpec]) -> Latest:
    """``latest`` without the values the engine stamped before ``fresh_after_us`` (it stopped
    updating them); each collector that lost a value counts one ``stale`` error."""
    collectors: dict[int, str] = {}
    for spec in specs:
        if spec.dcgm is not None:
            for field_id in (spec.dcgm.field_id, *spec.dcgm.links):
                collectors.setdefault(field_id, spec.collector)
    out: Latest = {}
    stale: set[str] = set()
    for key, samples in latest.items():
        kept = {}
        for field_id, sample in samples.items():
            if is_stale(sample, fresh_after_us):
                stale.add(collectors.get(field_id, "dcgm"))
            else:
                kept[field_id] = sample
        out[key] = kept
    for collector in sorted(stale):
        reading.failed("stale", collector)
    return out


def by_entity(samples: Sequence[FieldValue]) -> Latest:
    """Samples by (entity group, entity id), then field id."""
    out: Latest = {}
    for sample in samples:
        out.setdefault((sample.group, sample.entity), {})[sample.field_id] = sample
    return out


def fetch(
    adapter: DcgmAdapter,
    keys: list[tuple[int, int]],
    fields: list[int],
    reading: RawReading,
    specs: Sequence[MetricSpec],
) -> Latest:
    """``dcgmEntitiesGetLatestValues`` for ``keys`` × ``fields``, split to the engine's group limit of
    entities and 128 fields per call; the time is shared among the collectors by the number of rows
    each asked for. A failed call counts once per collector and leaves every value absent (a lost
    connection propagates)."""
    if not keys or not fields:
        return {}
    started = time.perf_counter()
    try:
        samples = [
            sample
            for part in split(keys, adapter.group_limit)
            for start in range(0, len(fields), MAX_FIELDS_PER_GROUP)
            for sample in adapter.latest_of(part, fields[start : start + MAX_FIELDS_PER_GROUP])
        ]
    except DcgmConnectionLost:
        raise
    except DcgmError as err:
        for collector in dict.fromkeys(spec.collector for spec in specs):
            reading.failed(err.kind, collector)
        return {}
    finally:
        seconds = time.perf_counter() - started
        for spec in specs:
            reading.spent(spec.collector, seconds / len(specs))
    return by_entity(samples)
