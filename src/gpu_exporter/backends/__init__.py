"""GPU backends. Vendor libraries are imported only inside their own backend module."""

from __future__ import annotations

from gpu_exporter.backends.base import Backend


def select(name: str) -> tuple[Backend, str]:
    """The backend for ``--backend`` and the reason it was chosen (for gpu_exporter_backend_info)."""
    from gpu_exporter.backends.nvml import NvmlBackend  # imported here: nothing happens at import time

    if name == "nvml":
        return NvmlBackend(), "requested"
    return NvmlBackend(), "auto: DCGM backend not available in this build"
