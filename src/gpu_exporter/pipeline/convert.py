"""Raw vendor values → base units: each row's source scale (or flag bit), plausibility, and the
unsupported memo fed with what the vendor answered."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from gpu_exporter.backends.base import RawReading
from gpu_exporter.catalogue import BY_KEY
from gpu_exporter.model import Entity
from gpu_exporter.pipeline.memo import UnsupportedMemo
from gpu_exporter.sanity import drop_inconsistent, plausible

log = logging.getLogger(__name__)


@dataclass
class Converted:
    """Base-unit values by entity and row key, the raw vendor value behind each (so another unit can
    be derived exactly, without reversing a scale), and dropped values counted by metric name."""

    values: dict[Entity, dict[str, float]] = field(default_factory=dict)
    raw: dict[Entity, dict[str, float]] = field(default_factory=dict)
    invalid: dict[str, int] = field(default_factory=dict)


def convert(reading: RawReading, backend: str, memo: UnsupportedMemo) -> Converted:
    """Convert one read; every answered pair is reported to ``memo``, every unsupported one too."""
    out = Converted()
    for entity, raws in reading.raw.items():
        values: dict[str, float] = {}
        kept: dict[str, float] = {}
        for key, raw in raws.items():
            spec = BY_KEY[key]
            source = spec.source(backend)
            if source is None:
                continue
            memo.answered(entity.uid, key)
            value = source.value(raw)
            if plausible(spec, raw, value):
                values[key], kept[key] = value, raw
            else:
                out.invalid[spec.name] = out.invalid.get(spec.name, 0) + 1
                log.debug("%s %s: implausible raw value %r dropped", entity.uid, key, raw)
        drop_inconsistent(values, out.invalid)
        out.values[entity] = values
        out.raw[entity] = {key: raw for key, raw in kept.items() if key in values}
    for entity, key, what in reading.unsupported:
        memo.unsupported(entity.uid, key, what)
    return out
