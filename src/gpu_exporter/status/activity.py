"""SM activity beside GPU-Util on a card: GPU-Util counts time in which any kernel ran, so a GPU can show
100 % while most of its SMs sit idle; SM activity (DCGM's profiling, or GPM on NVML) says how many did the
work. A card gets the profiling ratios, a note saying why they are missing where they are, and, when the
GPU is busy but under-uses its SMs, a problem in words."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_exporter.backends.base import DeviceIdentity
from gpu_exporter.catalogue import keys
from gpu_exporter.sampling.snapshot import SelfStats

#: GPU-Util at or above this while SM activity stays below :data:`LOW_SM_ACTIVE`: busy but under-using
#: the SMs (the same thresholds as the GpuBusyButLowSmActivity alert).
BUSY_UTILIZATION = 0.8
LOW_SM_ACTIVE = 0.5
#: Card key → catalogue row.
RATIOS: dict[str, str] = {
    "sm_active_ratio": keys.SM_ACTIVE,
    "sm_occupancy_ratio": keys.SM_OCCUPANCY,
    "tensor_active_ratio": keys.TENSOR_ACTIVE,
    "dram_active_ratio": keys.DRAM_ACTIVE,
}


def activity(values: Mapping[str, float], identity: DeviceIdentity, stats: SelfStats) -> dict[str, Any]:
    """The card's profiling ratios (None where absent) and ``sm_active_note``: why SM activity is missing."""
    found: dict[str, Any] = {key: _get(values, row) for key, row in RATIOS.items()}
    found["sm_active_note"] = None if found["sm_active_ratio"] is not None else _why_missing(identity, stats)
    return found


def _get(values: Mapping[str, float], key: str) -> float | None:
    value = values.get(key)
    return None if value is None else float(value)


def _why_missing(identity: DeviceIdentity, stats: SelfStats) -> str:
    if "profiling" not in stats.collectors:
        return "not measured: the profiling collector is turned off (--no-collector.profiling)"
    if stats.backend == "nvml" and identity.gpm_supported is False:
        return "not measured: the driver offers no GPM on this GPU (Hopper or later needed)"
    if stats.errors.get("in_use") or stats.errors.get("profiling_in_use"):
        return "not measured: another profiler (Nsight, DCGM profiling) holds the counters; asked again with a backoff"
    if stats.errors.get("no_permission"):
        return "not measured: profiling counters are restricted to administrators on this host"
    return "not measured yet: the first interval is still running"


def busy_low_sm(card: Mapping[str, Any]) -> str | None:
    """The problem of a GPU busy by GPU-Util whose SMs are mostly idle, or None."""
    util, sm = card.get("utilization_ratio"), card.get("sm_active_ratio")
    if util is None or sm is None or util < BUSY_UTILIZATION or sm >= LOW_SM_ACTIVE:
        return None
    return (
        f"busy but under-using its SMs: GPU-Util {100 * util:.0f} %, SM activity {100 * sm:.0f} % "
        "(kernels that occupy few SMs, or a serial stage)"
    )
