"""What each allocation of a GPU (or MIG instance) used since the exporter started, from the ledger
rows (:mod:`gpu_exporter.sampling.ledger`): the status JSON's ``usage`` per card, and its lines in
``gpu-exporter snapshot``'s text view.

Each entry: ``allocation`` (as the card's ``allocations`` name it), ``gpu_seconds`` (allocated GPU
time), ``busy_seconds``, ``energy_joules``, ``memory_used_bytes`` (its processes' memory at the
last read) and ``memory_peak_bytes`` (the most one of its processes has held since it started, from
NVML accounting; ``None`` where accounting mode is off); a value the exporter does not know is
``None``. A GPU card's ``unattributed`` says the busy time and energy no allocation accounts for."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_exporter.catalogue import ALL_METRICS, Share
from gpu_exporter.model import Entity
from gpu_exporter.sampling.snapshot import DeviceView

_KEYS: dict[str, str] = {spec.derive.part: spec.key for spec in ALL_METRICS if isinstance(spec.derive, Share)}
_FIELDS = {
    "gpu_seconds": "allocated",
    "busy_seconds": "busy",
    "energy_joules": "energy",
    "memory_used_bytes": "memory",
    "memory_peak_bytes": "memory_peak",
}


def allocation_name(entity: Entity) -> str:
    """``namespace/pod/container`` for a pod's container, ``job ID`` for a Slurm or HPC job."""
    labels = dict(entity.labels)
    if entity.kind == "pod":
        return f"{labels.get('namespace', '')}/{labels.get('pod', '')}/{labels.get('container', '')}"
    return f"job {labels.get('slurm_job') or labels.get('hpc_job') or ''}"


def usage(device: DeviceView, parent: Entity) -> list[dict[str, Any]]:
    """The ledger of each allocation of ``parent`` (a GPU or MIG instance), in the read's order."""
    rows = []
    for entity, values in device.samples.items():
        if entity.kind not in ("pod", "job") or dict(entity.info).get("parent") != parent.uid:
            continue
        row: dict[str, Any] = {"allocation": allocation_name(entity)}
        row.update({field: _get(values, part) for field, part in _FIELDS.items()})
        rows.append(row)
    return rows


def unattributed(values: Mapping[str, float]) -> dict[str, float | None]:
    """A GPU's busy time and energy that no allocation accounts for (``None`` where not known)."""
    return {"busy_seconds": _get(values, "unattributed_busy"), "energy_joules": _get(values, "unattributed_energy")}


def _get(values: Mapping[str, float], part: str) -> float | None:
    key = _KEYS.get(part)
    return values.get(key) if key is not None else None


def line(row: Mapping[str, Any]) -> str:
    """One allocation's usage as text: ``job 77: 12 GPU-s, busy 7.3 s, 4.1 kJ, 8192 MiB`` (``, peak 9000 MiB``
    where NVML accounting gives the peak; the memory is at the last read otherwise)."""

    def number(value: float | None, scale: float, unit: str) -> str:
        return "?" if value is None else f"{value / scale:.1f} {unit}"

    memory, peak = row["memory_used_bytes"], row.get("memory_peak_bytes")
    return (
        f"{row['allocation']}: {number(row['gpu_seconds'], 1, 'GPU-s')}, busy {number(row['busy_seconds'], 1, 's')}, "
        f"{number(row['energy_joules'], 1000, 'kJ')}, {'?' if memory is None else f'{memory / 1024**2:.0f} MiB'}"
        + ("" if peak is None else f", peak {peak / 1024**2:.0f} MiB")
    )
