"""DCGM's health watches in its own vocabulary: the ``dcgmHealthSystems_t`` bits, which of them each
release's health module watches on a GPU, the ``dcgmHealthResponse`` version each release answers, and
one incident as the adapter hands it over.

Sources, NVIDIA/DCGM at tags v3.3.9, v4.4.2 and v4.6.0: ``dcgmlib/dcgm_structs.h``
(``dcgmHealthSystems_t``, ``dcgmHealthWatchResults_t``, ``dcgmIncidentInfo_t``, ``dcgmHealthResponse_v4``
/ ``_v5``), ``dcgmlib/src/DcgmApi.cpp`` (``tsapiEngineHealthCheck``: a response of another version than
the library's ``dcgmHealthResponse_version`` is DCGM_ST_VER_MISMATCH) and
``modules/health/DcgmHealthWatch.cpp`` (``SetWatches`` and ``MonitorWatchesForGpu``: the systems handled
for a GPU entity; every other bit is accepted and ignored).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpu_exporter.backends.dcgm.releases import Version

#: dcgmHealthSystems_t bit → the health model's subsystem name (DCGM_HEALTH_WATCH_PCIE ... _DRIVER).
SYSTEM_NAMES: dict[int, str] = {
    0x1: "pcie", 0x2: "nvlink", 0x4: "pmu", 0x8: "mcu", 0x10: "mem", 0x20: "sm", 0x40: "inforom",
    0x80: "thermal", 0x100: "power", 0x200: "driver",
}  # fmt: skip
#: DCGM_HEALTH_WATCH_ALL: also the system of an incident about the whole GPU (4.4 and later: the
#: "devastating" Xids, ``MonitorDevastatingXids``), named ``all`` in the model.
SYSTEM_ALL = 0xFFFFFFFF
#: DCGM_HEALTH_WATCH_NVSWITCH_NONFATAL, _FATAL (every release) and _CONNECTX (4.6): not GPU systems.
SYSTEM_OTHER: dict[int, str] = {0x400: "nvswitch_nonfatal", 0x800: "nvswitch_fatal", 0x1000: "connectx"}
#: dcgmHealthWatchResults_t: PASS 0, WARN 10, FAIL 20.
RESULT_PASS, RESULT_WARN, RESULT_FAIL = 0, 10, 20

#: The systems each release's health module watches and judges on a GPU (``SetWatches`` /
#: ``MonitorWatchesForGpu``), from the first release of a line; PMU, MCU and SM are declared but no
#: release here watches them; DRIVER (the GPU recovery action, DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION)
#: is watched from 4.6.
GPU_SYSTEMS: dict[Version, int] = {
    (3, 3, 0): 0x1 | 0x2 | 0x10 | 0x40 | 0x80 | 0x100,
    (4, 6, 0): 0x1 | 0x2 | 0x10 | 0x40 | 0x80 | 0x100 | 0x200,
}
#: The ``dcgmHealthResponse`` version each release's library answers (3.x: v4, at most 64 incidents;
#: 4.x: v5, at most 1024).
RESPONSE_VERSION: dict[Version, int] = {(3, 3, 0): 4, (4, 0, 0): 5}


def _of(table: dict[Version, int], release: Version) -> int:
    return next(value for since, value in sorted(table.items(), reverse=True) if since <= release)


def gpu_systems(release: Version) -> int:
    """The dcgmHealthSystems_t mask the exporter sets on its GPU group for ``release``."""
    return _of(GPU_SYSTEMS, release)


def response_version(release: Version) -> int:
    return _of(RESPONSE_VERSION, release)


def system_names(mask: int) -> tuple[str, ...]:
    """The subsystem names of the bits in ``mask``, in DCGM's bit order."""
    return tuple(name for bit, name in SYSTEM_NAMES.items() if mask & bit)


@dataclass(frozen=True)
class Incident:
    """One ``dcgmIncidentInfo_t``: the system, the result (WARN 10 or FAIL 20), the ``dcgmError_t``
    code (``DCGM_FR_*``) and message, and the entity it is about."""

    system: int
    result: int
    code: int
    message: str
    group: int
    entity: int


@dataclass(frozen=True)
class HealthResponse:
    """``dcgmHealthCheck``'s answer: the host's overall result and the incidents."""

    overall: int
    incidents: tuple[Incident, ...]
