"""Raw vendor values → base units: each row's source scale (or flag bit), plausibility, and the
unsupported memo fed with what the vendor answered."""

from __future__ import annotations

import logging
import math
import sys
from dataclasses import dataclass, field

from gpu_exporter.backends.base import RawReading
from gpu_exporter.catalogue import BY_KEY, SAMPLE_MEANS
from gpu_exporter.catalogue.spec import Source
from gpu_exporter.model import Entity
from gpu_exporter.sampling.memo import UnsupportedMemo
from gpu_exporter.sampling.sanity import SENTINELS, drop_inconsistent

log = logging.getLogger(__name__)


@dataclass
class Converted:
    """Base-unit values by entity and row key, the raw vendor value behind each (so another unit can
    be derived exactly, without reversing a scale), and dropped values counted by metric name."""

    values: dict[Entity, dict[str, float]] = field(default_factory=dict)
    raw: dict[Entity, dict[str, float]] = field(default_factory=dict)
    invalid: dict[str, int] = field(default_factory=dict)
    samples: dict[Entity, dict[str, tuple[tuple[float, float], ...]]] = field(default_factory=dict)


#: Per backend, per row key: (metric name, plausible minimum and bound (the largest float where the row has
#: none, so that NaN and infinities fail the bound too), scale numerator and denominator, or the source itself
#: where its value is no plain scale: a DCGM flag bit, NVML's encoded bit error rate), or None where the
#: backend has no source for the row; built once per (backend, key) from the catalogue.
_Row = tuple[str, float, float, int, int, Source | None]
_ROWS: dict[str, dict[str, _Row | None]] = {}


def _row(backend: str, key: str) -> _Row | None:
    rows = _ROWS.setdefault(backend, {})
    if key not in rows:
        spec = BY_KEY[key]
        source = spec.source(backend)
        if source is None:
            rows[key] = None
        else:
            special = source if getattr(source, "bit", 0) or getattr(source, "ber", False) else None
            scale = source.scale
            bound = sys.float_info.max if spec.bound is None else spec.bound
            rows[key] = (spec.name, spec.minimum, bound, scale.numerator, scale.denominator, special)
    return rows[key]


def convert(reading: RawReading, backend: str, memo: UnsupportedMemo, keep_raw: bool = True) -> Converted:
    """Convert one read; every answered pair is reported to ``memo``, every unsupported one too; the raw
    vendor value behind each kept value is kept too when ``keep_raw`` (only dcgm-exporter's names need it).
    A :data:`~gpu_exporter.catalogue.SAMPLE_MEANS` row with new driver samples takes their mean as its value
    (its raw value stays the vendor's newest sample, which dcgm-exporter's names render).

    Each value is ``raw × scale`` as :func:`~gpu_exporter.catalogue.spec.scaled` computes it (the
    numerator, then the denominator), kept when the raw value is no driver sentinel and the value lies
    within the row's ``minimum`` and ``bound`` (so is finite, bound or not); otherwise it is counted as
    invalid."""
    out = Converted()
    rows = _ROWS.get(backend) or {}
    remembered = memo.remembers_any()
    for entity, raws in reading.raw.items():
        values: dict[str, float] = {}
        kept: dict[str, float] = {}
        uid = entity.uid
        for key, raw in raws.items():
            row = rows[key] if key in rows else _row(backend, key)
            if row is None:
                continue
            if remembered:
                memo.answered(uid, key, group(entity))
            name, minimum, bound, numerator, denominator, special = row
            value = raw * numerator / denominator if special is None else special.value(raw)
            if raw not in SENTINELS and minimum <= value <= bound:  # False for NaN and infinities
                values[key], kept[key] = value, raw
            else:
                out.invalid[name] = out.invalid.get(name, 0) + 1
                log.debug("%s %s: implausible raw value %r dropped", uid, key, raw)
        drop_inconsistent(values, out.invalid)
        out.values[entity] = values
        if keep_raw:
            out.raw[entity] = (
                kept if len(kept) == len(values) else {key: raw for key, raw in kept.items() if key in values}
            )
    for entity, series in reading.samples.items():
        out.samples[entity] = {key: _samples(backend, key, samples) for key, samples in series.items()}
        values = out.values.get(entity, {})
        for key in SAMPLE_MEANS.intersection(series):
            mean = _mean(backend, key, series[key])
            if key in values and mean is not None:  # no new sample: the newest stays
                values[key] = mean
    for entity, key, what in reading.unsupported:
        memo.unsupported(entity.uid, key, what, group(entity))
    return out


def _samples(backend: str, key: str, samples: tuple[tuple[float, float], ...]) -> tuple[tuple[float, float], ...]:
    """Driver samples of one row in base units; implausible ones dropped (the row's value counts them)."""
    row = _row(backend, key)
    if row is None:
        return ()
    _name, minimum, bound, numerator, denominator, _special = row
    top = math.inf if bound is None else bound
    scaled = [(t, raw * numerator / denominator) for t, raw in samples if raw not in SENTINELS]
    return tuple(sample for sample in scaled if minimum <= sample[1] <= top)


def _mean(backend: str, key: str, samples: tuple[tuple[float, float], ...]) -> float | None:
    """The mean of the plausible driver samples of one row in base units (averaged raw, then scaled once, so
    equal samples give exactly their value); None without one."""
    row = _row(backend, key)
    if row is None:
        return None
    _name, minimum, bound, numerator, denominator, _special = row
    raws = [raw for _t, raw in samples if raw not in SENTINELS and minimum <= raw * numerator / denominator <= bound]
    return math.fsum(raws) / len(raws) * numerator / denominator if raws else None


def group(entity: Entity) -> str:
    """How the log names the device an entity belongs to: ``GPU 0 (GPU-…)``, ``NVSwitch 1``."""
    labels = dict(entity.labels)
    if "uuid" in labels:
        return f"GPU {labels.get('gpu', '?')} ({labels['uuid']})"
    if "nvswitch" in labels:
        return f"NVSwitch {labels['nvswitch']}"
    return entity.uid
