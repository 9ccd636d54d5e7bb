"""The vGPU software licence of a GPU (DCGM 526, ``DCGM_FI_DEV_VGPU_LICENSE_STATUS``), read as DCGM does.

``nvmlDeviceGetGridLicensableFeatures_v4`` (nvml.h's ``nvmlDeviceGetGridLicensableFeatures``) fills
``nvmlGridLicensableFeatures_t``: ``isGridLicenseSupported`` and up to
``NVML_GRID_LICENSE_FEATURE_MAX_COUNT`` features, each with a ``featureCode`` and a ``featureState``
(non-zero: licensed). DCGM 4.6's cache manager stores 0 where licensing is not supported (a
bare-metal GPU), else 1 or 0 from the feature whose code is ``NVML_GRID_LICENSE_FEATURE_CODE_VGPU``,
and nothing when no such feature is listed or the call fails.
"""

from __future__ import annotations

from typing import Any

import pynvml

CALL = "nvmlDeviceGetGridLicensableFeatures_v4"


def vgpu_licensed(handle: Any) -> dict[str, float | None]:
    """``nvmlDeviceGetGridLicensableFeatures_v4``: 1 when the vGPU feature is licensed, 0 when it is not or
    the GPU does not support vGPU licensing (bare metal); absent when no vGPU feature is listed. NVML
    errors propagate as pynvml's exceptions (NOT_SUPPORTED is remembered by the caller's memo)."""
    features = pynvml.nvmlDeviceGetGridLicensableFeatures_v4(handle)
    if not features.isGridLicenseSupported:
        return {"": 0}
    count = min(int(features.licensableFeaturesCount), pynvml.NVML_GRID_LICENSE_FEATURE_MAX_COUNT)
    for feature in features.gridLicensableFeatures[:count]:
        if feature.featureCode == pynvml.NVML_GRID_LICENSE_FEATURE_CODE_VGPU:
            return {"": 1 if feature.featureState > 0 else 0}
    return {"": None}
