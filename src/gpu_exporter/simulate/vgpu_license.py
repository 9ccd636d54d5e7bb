"""The vGPU software licence (as the test fake's ``vgpu_license.c``): ``nvmlDeviceGetGridLicensableFeatures_v4``
fills ``nvmlGridLicensableFeatures_t`` from ``gpuN.vgpu_license.supported`` (default 0: a bare-metal GPU,
licensing not supported and no features listed) and, where supported, ``gpuN.vgpu_license.state``: one
feature of code ``NVML_GRID_LICENSE_FEATURE_CODE_VGPU`` with that ``featureState`` (non-zero: licensed);
without it no vGPU feature is listed; ``gpuN.vgpu_license.rtx_state`` lists an NVIDIA RTX feature before it."""

from __future__ import annotations

import ctypes
from typing import Any

from gpu_exporter.simulate import abi, errors
from gpu_exporter.simulate.call import Call, device

#: Listed in this order where their key is present: NVML_GRID_LICENSE_FEATURE_CODE_NVIDIA_RTX, then _VGPU.
LISTED = (("vgpu_license.rtx_state", 2), ("vgpu_license.state", 1))


@device("nvmlDeviceGetGridLicensableFeatures_v4")
def licensable_features(c: Call, out: Any) -> int:
    info = abi.target(out)
    if info is None:
        return errors.INVALID_ARGUMENT
    ctypes.memset(ctypes.addressof(info), 0, ctypes.sizeof(info))
    supported = c.u64("vgpu_license.supported") or 0
    info.isGridLicenseSupported = 1 if supported else 0
    if not supported:
        return errors.SUCCESS
    for key, code in LISTED:
        state = c.u64(key)
        if state is None:
            continue
        feature = info.gridLicensableFeatures[info.licensableFeaturesCount]
        feature.featureCode = code
        feature.featureState = state & 0xFFFFFFFF
        feature.featureEnabled = 1
        info.licensableFeaturesCount += 1
    return errors.SUCCESS
