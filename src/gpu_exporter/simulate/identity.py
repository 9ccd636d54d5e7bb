"""Identity entry points read once at discovery beyond names and bus ids: brand, inforom versions,
CUDA compute capability, GPM support, and the P2P status between two GPUs (as the test fake's ``identity.c``).
Each reads one ``gpuN.<key>``; an absent key is ``NOT_SUPPORTED``."""

from __future__ import annotations

from typing import Any

from gpu_exporter.simulate import abi, errors
from gpu_exporter.simulate.call import Call, device

_INFOROM_KEYS = {0: "inforom.oem", 1: "inforom.ecc", 2: "inforom.power"}  # NVML_INFOROM_OEM, _ECC, _POWER
_P2P_CAPS_INDEX_NVLINK = 2
_GPM_SUPPORT_VERSION = 1  # NVML_GPM_SUPPORT_VERSION


def _string(c: Call, key: str, buf: Any, length: Any) -> int:
    value = c.text(key)
    return errors.NOT_SUPPORTED if value is None else abi.put_string(buf, length, value)


@device("nvmlDeviceGetBrand")
def brand(c: Call, out: Any) -> int:
    """``gpuN.brand``: the ``nvmlBrandType_t`` number."""
    return c.out(out, "brand")


@device("nvmlDeviceGetInforomVersion")
def inforom(c: Call, kind: Any, buf: Any, length: Any) -> int:
    """``gpuN.inforom.oem``, ``.ecc``, ``.power`` by inforom object."""
    key = _INFOROM_KEYS.get(abi.number(kind))
    return errors.INVALID_ARGUMENT if key is None else _string(c, key, buf, length)


@device("nvmlDeviceGetInforomImageVersion")
def inforom_image(c: Call, buf: Any, length: Any) -> int:
    return _string(c, "inforom.image", buf, length)


@device("nvmlDeviceGetCudaComputeCapability")
def compute_capability(c: Call, major: Any, minor: Any) -> int:
    """``gpuN.compute_capability.major`` and ``.minor`` (both needed)."""
    return c.out_pair(major, "compute_capability.major", minor, "compute_capability.minor")


@device("nvmlGpmQueryDeviceSupport")
def gpm_support(c: Call, out: Any) -> int:
    """``gpuN.gpm_supported`` (0/1): isSupportedDevice of a version-1 ``nvmlGpmSupport_t``."""
    support = abi.target(out)
    if support is None:
        return errors.INVALID_ARGUMENT
    if support.version != _GPM_SUPPORT_VERSION:
        return errors.ARGUMENT_VERSION_MISMATCH
    value = c.u64("gpm_supported")
    if value is None:
        return errors.NOT_SUPPORTED
    support.isSupportedDevice = int(value != 0)
    return errors.SUCCESS


@device("nvmlDeviceGetP2PStatus")
def p2p_status(c: Call, other: Any, index: Any, out: Any) -> int:
    """``gpuN.p2p.M.nvlink``: GPU N's ``nvmlGpuP2PStatus_t`` towards GPU M over NVLink; the other
    capability indexes are NOT_SUPPORTED."""
    if abi.target(out) is None:
        return errors.INVALID_ARGUMENT
    peer, peer_mig = c.lib.decode(abi.address(other))
    if peer < 0 or peer_mig >= 0 or peer == c.gpu:
        return errors.INVALID_ARGUMENT
    if not c.lib.present(c.s, peer, c.t):
        return errors.GPU_IS_LOST
    if abi.number(index) != _P2P_CAPS_INDEX_NVLINK:
        return errors.NOT_SUPPORTED
    return c.out(out, f"p2p.{peer}.nvlink")
