"""GPU backends. Vendor libraries are imported only inside their own backend module."""

from __future__ import annotations

import logging

from gpu_exporter.backends.base import Backend, BackendUnavailable
from gpu_exporter.config import Settings

log = logging.getLogger(__name__)


def select(settings: Settings) -> tuple[Backend, str]:
    """The backend for ``--backend`` and the reason it was chosen (for gpu_exporter_backend_info);
    raises BackendUnavailable when the requested backend cannot be used at all.

    ``auto`` uses DCGM when its bindings import, a host engine answers (``--dcgm.address``, else
    the local standalone engine, else an embedded one) and it sees at least one GPU; otherwise
    NVML, with the reason DCGM was passed over logged once and kept for gpu_exporter_backend_info.
    """
    # Imported here: nothing happens at import time, and pynvml/pydcgm load only when chosen.
    from gpu_exporter.backends.nvml import NvmlBackend

    name = settings.backend
    if name == "nvml":
        return NvmlBackend(), "requested"
    from gpu_exporter.backends.dcgm import DcgmBackend, DcgmUnusable
    from gpu_exporter.backends.dcgm.adapter import load_adapter
    from gpu_exporter.catalogue import enabled_specs, enabled_switch_specs

    backend = DcgmBackend(
        load_adapter,
        enabled_specs(settings.collectors),
        settings.collect_interval,
        settings.dcgm_address,
        switch_specs=enabled_switch_specs(settings.collectors),
    )
    try:
        mode, gpus = backend.probe()
    except DcgmUnusable as err:
        if name == "dcgm":
            raise BackendUnavailable(err.reason, f"--backend dcgm: DCGM cannot be used: {err}") from err
        reason = f"auto: DCGM not available ({err.summary})"
        log.info("not using DCGM: %s; falling back to NVML", err)
        return NvmlBackend(), reason
    if name == "dcgm":
        return backend, f"requested ({mode})"
    if gpus == 0:
        backend.close()
        reason = f"auto: DCGM ({mode}) sees no GPU"
        log.info("not using DCGM: the host engine (%s) sees no GPU; falling back to NVML", mode)
        return NvmlBackend(), reason
    return backend, f"auto: DCGM {mode}"
