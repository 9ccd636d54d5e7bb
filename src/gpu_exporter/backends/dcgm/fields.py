"""Which DCGM field ids a set of metric specs asks for: plain fields, per-link fields, every field
the backend may ask; profiling and call specs; entity lists split to the engine's group limit."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gpu_exporter.backends.dcgm.values import (
    FI_FIRST_PROFILING,
    FI_LAST_PROFILING,
    FI_XID_ERRORS,
    IDENTITY_FIELDS,
)
from gpu_exporter.catalogue import NVSWITCH_IDENTITY_FIELDS, MetricSpec


def is_profiling(spec: MetricSpec) -> bool:
    return spec.dcgm is not None and FI_FIRST_PROFILING <= spec.dcgm.field_id <= FI_LAST_PROFILING


def is_call(spec: MetricSpec) -> bool:
    return spec.dcgm is not None and bool(spec.dcgm.call)


def plain_fields(specs: Iterable[MetricSpec]) -> list[int]:
    """The field ids of ``specs`` that are plain fields (not per-link lists, not calls), sorted."""
    return sorted({s.dcgm.field_id for s in specs if s.dcgm is not None and not s.dcgm.call and not s.dcgm.links})


def link_fields(specs: Iterable[MetricSpec], ports: Iterable[int]) -> list[int]:
    """The per-link field ids of ``specs`` for these port numbers, sorted."""
    wanted = set(ports)
    return sorted({s.dcgm.links[p] for s in specs if s.dcgm is not None for p in wanted if p < len(s.dcgm.links)})


def wanted_fields(specs: Iterable[MetricSpec]) -> list[int]:
    """Every field id the backend may ask for ``specs``: their fields (each link's too), the identity
    fields of GPUs, MIG instances and NVSwitches, and the Xid field."""
    wanted = {*IDENTITY_FIELDS, *NVSWITCH_IDENTITY_FIELDS, FI_XID_ERRORS}
    for spec in specs:
        if spec.dcgm is not None and not spec.dcgm.call:
            wanted.add(spec.dcgm.field_id)
            wanted.update(spec.dcgm.links)
    return sorted(wanted)


def split(entities: Sequence[tuple[int, int]], limit: int) -> list[list[tuple[int, int]]]:
    """``entities`` in runs of at most ``limit`` (the engine's entity group limit)."""
    return [list(entities[i : i + limit]) for i in range(0, len(entities), max(1, limit))]
