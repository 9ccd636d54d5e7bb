"""The per-GPU cardinality limit on process series: beyond ``limit`` processes on one GPU or MIG
instance, the ones holding the least memory are folded into one ``pid="other"`` series whose values
are the sums (memory held, utilization shares, and ``gpu_processes``: how many it stands for)."""

from __future__ import annotations

from gpu_exporter.backends.base import RawReading
from gpu_exporter.catalogue.keys import PROCESS_MEMORY_USED
from gpu_exporter.model import Entity, other_process

_MEMORY = PROCESS_MEMORY_USED
#: Process series kept per GPU or MIG instance unless configured (--collector.processes.max-per-gpu).
MAX_PROCESSES = 16


def fold(reading: RawReading, limit: int) -> None:
    """Keep at most ``limit`` process entities per parent in ``reading`` (raw values), folding the rest."""
    by_parent: dict[str, list[Entity]] = {}
    for entity in reading.raw:
        if entity.kind == "process":
            by_parent.setdefault(dict(entity.info).get("parent", ""), []).append(entity)
    if all(len(entities) <= limit for entities in by_parent.values()):
        return
    folded: dict[Entity, Entity] = {}  # folded process → its parent's "other" entity
    for entities in by_parent.values():
        if len(entities) <= limit:
            continue
        ranked = sorted(entities, key=lambda e: (-reading.raw[e].get(_MEMORY, 0.0), e.uid))
        for entity in ranked[limit:]:
            folded[entity] = other_process(entity)
    out: dict[Entity, dict[str, float]] = {}
    for entity, values in reading.raw.items():
        other = folded.get(entity)
        if other is None:
            out[entity] = values
            continue
        sums = out.setdefault(other, {})
        for key, value in values.items():
            sums[key] = sums.get(key, 0.0) + value
    reading.raw = out
