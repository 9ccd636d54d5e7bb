"""Where a GPU sits in an NVLink-switch system (as the test fake's ``platform.c``): its fabric
registration, ``nvmlDeviceGetGpuFabricInfoV`` (v2 or v3 struct), from ``gpuN.fabric.state``,
``.status``, ``.clique_id``, ``.health_mask``, ``.health_summary``; and its placement,
``nvmlDeviceGetPlatformInfo`` (v2 struct), from ``gpuN.platform.chassis_serial``, ``.slot``,
``.tray``, ``.host_id``, ``.peer_type``, ``.module_id``, ``.ib_guid``. Without ``fabric.state`` (resp.
``platform.chassis_serial``) the call is ``NOT_SUPPORTED``; the other keys default to 0."""

from __future__ import annotations

import ctypes
from typing import Any

from gpu_exporter.simulate import abi, errors
from gpu_exporter.simulate.call import Call, device

FABRIC_INFO_V2 = 0x02000024  # nvmlGpuFabricInfo_v2: sizeof(nvmlGpuFabricInfo_v2_t) | 2 << 24
FABRIC_INFO_V3 = 0x03000028  # nvmlGpuFabricInfo_v3
PLATFORM_INFO_V2 = 0x0200002C  # nvmlPlatformInfo_v2
_SERIAL_BYTES = 15  # chassisSerialNumber[16], NUL-terminated


def _zero(c: Call, key: str) -> int:
    value = c.u64(key)
    return 0 if value is None else value


@device("nvmlDeviceGetGpuFabricInfoV")
def fabric(c: Call, out: Any) -> int:
    info = abi.target(out)
    if info is None:
        return errors.INVALID_ARGUMENT
    if info.version not in (FABRIC_INFO_V2, FABRIC_INFO_V3):
        return errors.ARGUMENT_VERSION_MISMATCH
    state = c.u64("fabric.state")
    if state is None:
        return errors.NOT_SUPPORTED
    for i in range(len(info.clusterUuid)):
        info.clusterUuid[i] = 0
    info.state = state
    info.status = _zero(c, "fabric.status")
    info.cliqueId = _zero(c, "fabric.clique_id") & 0xFFFFFFFF
    info.healthMask = _zero(c, "fabric.health_mask") & 0xFFFFFFFF
    if info.version == FABRIC_INFO_V3:
        info.healthSummary = _zero(c, "fabric.health_summary") & 0xFF
    return errors.SUCCESS


@device("nvmlDeviceGetPlatformInfo")
def placement(c: Call, out: Any) -> int:
    info = abi.target(out)
    if info is None:
        return errors.INVALID_ARGUMENT
    if info.version != PLATFORM_INFO_V2:
        return errors.ARGUMENT_VERSION_MISMATCH
    serial = c.text("platform.chassis_serial")
    if serial is None:
        return errors.NOT_SUPPORTED
    # platform.ib_guid: the first 8 bytes, little-endian (the rest 0); written to memory, as the
    # c_char array member would stop at a zero byte
    guid = (_zero(c, "platform.ib_guid") & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "little") + bytes(8)
    ctypes.memmove(ctypes.addressof(info) + type(info).ibGuid.offset, guid, 16)
    info.chassisSerialNumber = serial.encode("ascii", "replace")[:_SERIAL_BYTES]
    for field, key in (
        ("slotNumber", "platform.slot"),
        ("trayIndex", "platform.tray"),
        ("hostId", "platform.host_id"),
        ("peerType", "platform.peer_type"),
        ("moduleId", "platform.module_id"),
    ):
        setattr(info, field, bytes([_zero(c, key) & 0xFF]))
    return errors.SUCCESS
