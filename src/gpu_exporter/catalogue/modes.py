"""GPU rows of the modes collector: persistence, compute, MIG and virtualization modes (near-static
settings an administrator changes) and the GPU's NVLink fabric registration (state, clique, health:
set when the fabric manager trains the NVSwitch fabric); all read about once a minute."""

from __future__ import annotations

from gpu_exporter.catalogue.spec import (
    FULL,
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
        detail=FULL,
    ),
    _gauge(
        "gpu_auto_boost_enabled", "",
        "1 when auto-boosted clocks are on (the driver raises clocks above base when power and thermals allow; "
        "most data-centre GPUs since Volta do not support the setting)", "modes",
        NvmlSource("nvmlDeviceGetAutoBoostedClocksEnabled"), DcgmSource(120), "DCGM_FI_DEV_AUTOBOOST", maximum=1,
        every=STATIC,
        detail=FULL,
    ),
    _gauge(
        "gpu_compute_mode", "",
        "Compute mode, NVML's number: 0 default (many contexts), 2 prohibited (no contexts), 3 exclusive process "
        "(one context)", "modes", NvmlSource("nvmlDeviceGetComputeMode"), DcgmSource(65), "DCGM_FI_DEV_COMPUTE_MODE",
        maximum=3, every=STATIC,
        detail=FULL,
    ),
    _gauge(
        "gpu_mig_mode_enabled", "", "1 when MIG mode is on (current mode)", "modes",
        NvmlSource("nvmlDeviceGetMigMode", "current"), DcgmSource(67), "DCGM_FI_DEV_MIG_MODE", maximum=1,
        every=STATIC,
        detail=FULL,
    ),
    _gauge(
        "gpu_virtualization_mode", "",
        "Virtualization mode, NVML's number: 0 none (bare metal), 1 pass-through to a VM, 2 vGPU guest, 3 vGPU host, "
        "4 vSGA host", "modes", NvmlSource("nvmlDeviceGetVirtualizationMode"), DcgmSource(500),
        "DCGM_FI_DEV_VIRTUAL_MODE", maximum=4, every=STATIC,
        detail=FULL,
    ),
    _gauge(
        "gpu_vgpu_licensed", "",
        "1 when the GPU's vGPU software licence is held (nvmlDeviceGetGridLicensableFeatures: the vGPU "
        "feature's state); 0 when it is not, or when the GPU does not support vGPU licensing (a bare-metal "
        "GPU)", "modes", NvmlSource("nvmlDeviceGetGridLicensableFeatures_v4"), DcgmSource(526),
        "DCGM_FI_DEV_VGPU_LICENSE_STATUS", maximum=1, every=STATIC,
        detail=FULL,
    ),
    # NVLink fabric registration (NVSwitch systems: HGX/DGX with the fabric manager, GB200 NVL72); GPUs
    # outside any fabric have none of these. One nvmlDeviceGetGpuFabricInfoV call serves all four.
    _gauge(
        "gpu_fabric_state", "",
        "NVLink fabric registration of the GPU (NVSwitch systems), DCGM's numbers: 1 not started, 2 in "
        "progress, 3 completed, 4 completed with an error; until 3, jobs that use NVLink between GPUs fail",
        "modes", NvmlSource("nvmlDeviceGetGpuFabricInfoV", "state"), DcgmSource(170),
        "DCGM_FI_DEV_FABRIC_MANAGER_STATUS", maximum=6, every=STATIC,
    ),
    _gauge(
        "gpu_fabric_clique_id", "",
        "Fabric clique the GPU belongs to: GPUs of one clique reach each other over NVLink (an id, not a "
        "quantity)", "modes", NvmlSource("nvmlDeviceGetGpuFabricInfoV", "clique_id"), DcgmSource(173),
        "DCGM_FI_DEV_FABRIC_CLIQUE_ID", every=STATIC,
        detail=FULL,
    ),
    _gauge(
        "gpu_fabric_health_mask", "",
        "NVML's fabric health bit fields: 2 bits each from bit 0 for degraded bandwidth, route recovery, route "
        "unhealthy and access-timeout recovery (1 true, 2 false); 4 bits from bit 8 for a configuration error; "
        "2 bits from bit 12 for partition assigned and from bit 14 for the fabric manager connection",
        "modes", NvmlSource("nvmlDeviceGetGpuFabricInfoV", "health_mask"), DcgmSource(174),
        "DCGM_FI_DEV_FABRIC_HEALTH_MASK", every=STATIC,
        detail=FULL,
    ),
    _gauge(
        "gpu_fabric_health", "",
        "Fabric health summary, NVML's number: 1 healthy, 2 unhealthy, 3 limited capacity", "modes",
        NvmlSource("nvmlDeviceGetGpuFabricInfoV", "health_summary"), DcgmSource(175),
        "DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY", maximum=3, every=STATIC,
    ),
)  # fmt: skip
