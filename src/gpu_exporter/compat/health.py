"""dcgm-exporter's ``DCGM_EXP_GPU_HEALTH_STATUS`` (its pseudo-field 9003) from the health model: per
GPU, one series per DCGM health-watch system and one for all of them (``health_watch`` ∈ PCIE, NVLINK,
PMU, MCU, MEM, SM, INFOROM, THERMAL, POWER, DRIVER, ALL), with ``health_error_code`` the ``DCGM_FR_*``
name of the worst incident (``DCGM_FR_OK`` while it passes), valued by DCGM's health result
(``DCGM_HEALTH_RESULT_PASS`` 0, ``_WARN`` 10, ``_FAIL`` 20; dcgm_structs.h). dcgm-exporter asks DCGM's
health watches (``dcgmHealthCheck``); here the same judgement comes from the health model on either
backend, so a system it judges nothing for (nothing read) has no series rather than a guessed pass.
"""

from __future__ import annotations

from gpu_exporter.sampling.health import GpuHealth, Health

#: dcgm-exporter's id of the pseudo-field (its exporter_counters.go).
HEALTH_STATUS = 9003
#: DCGM's health result values (dcgmHealthWatchResults_t) by the model's PASS, WARN, FAIL.
_RESULTS = (0.0, 10.0, 20.0)

Labels = list[tuple[str, str]]


def health_series(health: Health, uuid: str, base: Labels) -> list[tuple[Labels, float]]:
    """One GPU's series (none before the backend answered, or for a GPU the model did not judge);
    labels after ``base`` in dcgm-exporter's sorted order: ``health_error_code``, ``health_watch``."""
    gpu = next((gpu for gpu in health.gpus if gpu.uuid == uuid), None) if health.known else None
    if gpu is None:
        return []
    out = [_series(base, gpu, subsystem.upper(), subsystem) for subsystem in gpu.checked]
    out.append(_series(base, gpu, "ALL", None))
    return out


def _series(base: Labels, gpu: GpuHealth, watch: str, subsystem: str | None) -> tuple[Labels, float]:
    worst = gpu.status_of(subsystem) if subsystem is not None else gpu.worst
    code = "DCGM_FR_OK" if worst is None else worst.code
    status = 0 if worst is None else worst.status
    return [*base, ("health_error_code", code), ("health_watch", watch)], _RESULTS[status]
