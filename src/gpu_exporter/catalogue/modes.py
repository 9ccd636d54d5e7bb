"""GPU rows of the modes collector: persistence, compute, MIG and virtualization modes (near-static
settings an administrator changes; read about once a minute)."""

from __future__ import annotations

from gpu_exporter.catalogue.spec import (
    STATIC,
    DcgmSource,
    MetricSpec,
    NvmlSource,
)
from gpu_exporter.catalogue.spec import (
    gauge as _gauge,
)

ROWS: tuple[MetricSpec, ...] = (
    _gauge(
        "gpu_persistence_mode_enabled", "", "1 when persistence mode is on (the driver stays loaded without clients)",
        "modes", NvmlSource("nvmlDeviceGetPersistenceMode"), DcgmSource(66), "DCGM_FI_DEV_PERSISTENCE_MODE",
        maximum=1, every=STATIC,
    ),
    _gauge(
        "gpu_compute_mode", "",
        "Compute mode, NVML's number: 0 default (many contexts), 2 prohibited (no contexts), 3 exclusive process "
        "(one context)", "modes", NvmlSource("nvmlDeviceGetComputeMode"), DcgmSource(65), "DCGM_FI_DEV_COMPUTE_MODE",
        maximum=3, every=STATIC,
    ),
    _gauge(
        "gpu_mig_mode_enabled", "", "1 when MIG mode is on (current mode)", "modes",
        NvmlSource("nvmlDeviceGetMigMode", "current"), DcgmSource(67), "DCGM_FI_DEV_MIG_MODE", maximum=1,
        every=STATIC,
    ),
    _gauge(
        "gpu_virtualization_mode", "",
        "Virtualization mode, NVML's number: 0 none (bare metal), 1 pass-through to a VM, 2 vGPU guest, 3 vGPU host, "
        "4 vSGA host", "modes", NvmlSource("nvmlDeviceGetVirtualizationMode"), DcgmSource(500),
        "DCGM_FI_DEV_VIRTUAL_MODE", maximum=4, every=STATIC,
    ),
)  # fmt: skip
