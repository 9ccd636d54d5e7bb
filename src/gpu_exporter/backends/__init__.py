"""GPU backends. Vendor libraries are imported only inside their own backend module."""

from __future__ import annotations

from gpu_exporter.backends.base import Backend, BackendUnavailable
from gpu_exporter.config import Settings


def select(settings: Settings) -> tuple[Backend, str]:
    """The backend for ``--backend`` and the reason it was chosen (for gpu_exporter_backend_info);
    raises BackendUnavailable when the requested backend cannot be used at all."""
    name = settings.backend
    from gpu_exporter.backends.nvml import NvmlBackend  # imported here: nothing happens at import time

    if name == "nvml":
        return NvmlBackend(), "requested"
    # TODO(issue 4): the DCGM backend; until then auto means NVML and dcgm is refused at start.
    if name == "dcgm":
        raise BackendUnavailable("dcgm_not_built", "--backend=dcgm: the DCGM backend is not part of this build yet")
    return NvmlBackend(), "auto: DCGM backend not available in this build"
