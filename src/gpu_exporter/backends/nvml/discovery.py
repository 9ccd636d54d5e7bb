"""Finding what NVML sees: ``nvmlInit`` with a hint a human can act on when it fails, the host's
versions, and each GPU's identity (names, PCI ids, brand, inforom versions, compute capability,
platform placement),
NVLinks, MIG devices with their handles, and the NVLink P2P status between GPUs. All read once per
discovery, never per interval."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from ctypes import addressof, byref, string_at
from dataclasses import replace
from pathlib import Path
from typing import Any

import pynvml

from gpu_exporter.backends.base import BackendUnavailable, DeviceIdentity, HostIdentity, MigIdentity
from gpu_exporter.backends.nvml.readers import MAX_LINKS, Handle, text

#: NVML brand number (nvmlBrandType_t) → the name DCGM stores in field 51 (DCGM_FI_DEV_BRAND); a
#: number not listed is "Unknown", as DCGM writes it.
BRANDS: dict[int, str] = {
    0: "Unknown",
    1: "Quadro",
    2: "Tesla",
    3: "NVS",
    4: "Grid",
    5: "GeForce",
    6: "Titan",
    7: "NVIDIA Virtual Applications",
    8: "NVIDIA Virtual PC",
    9: "NVIDIA Virtual Compute Server",
    10: "NVIDIA RTX Virtual Workstation",
    11: "NVIDIA vGaming",
    12: "Quadro RTX",
    13: "NVIDIA RTX",
    14: "NVIDIA",
    15: "GeForce RTX",
    16: "Titan RTX",
}

# Init failures → (reason, what went wrong, what the operator should do on a host).
_INIT_HINTS: dict[int, tuple[str, str, str]] = {
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND: (
        "library_not_found",
        "libnvidia-ml.so.1 not found",
        "install the NVIDIA driver, or in a container run with the NVIDIA container toolkit (docker --gpus all, "
        "or runtimeClassName: nvidia on Kubernetes)",
    ),
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED: (
        "driver_not_loaded",
        "the NVIDIA kernel driver is not loaded",
        "check 'lsmod | grep nvidia' and dmesg, then load it (modprobe nvidia) or reinstall the driver",
    ),
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH: (
        "version_mismatch",
        "libnvidia-ml.so.1 and the loaded kernel module are different driver versions (usually after a driver upgrade)",
        "reboot, or reload the nvidia kernel modules",
    ),
    pynvml.NVML_ERROR_NO_PERMISSION: (
        "no_permission",
        "no permission to open /dev/nvidia*",
        "run as root or as a member of the group owning /dev/nvidiactl; in a container, expose the devices "
        "(docker --gpus all, or the NVIDIA device plugin)",
    ),
}
#: The fix, in place of the host's, in a container that was given no NVIDIA device nodes.
CONTAINER_FIX = (
    "this looks like a container without /dev/nvidia* device nodes: run it with the NVIDIA container toolkit "
    "(docker --gpus all) or, on Kubernetes, request nvidia.com/gpu or use runtimeClassName: nvidia"
)


def _in_container_without_devices() -> bool:
    """True inside a container (Docker, Podman, Kubernetes) that was given no NVIDIA device nodes."""
    in_container = (
        Path("/.dockerenv").exists() or Path("/run/.containerenv").exists() or "KUBERNETES_SERVICE_HOST" in os.environ
    )
    return in_container and not Path("/dev/nvidiactl").exists()


def init() -> None:
    """``nvmlInit``; raises BackendUnavailable with the reason and a message "what went wrong: the fix"
    (one fix: a container's where the container lacks the devices, else the host's)."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        reason, what, fix = _INIT_HINTS.get(err.value, ("init_failed", f"nvmlInit failed ({err})", ""))
        if reason in ("library_not_found", "driver_not_loaded", "no_permission") and _in_container_without_devices():
            fix = CONTAINER_FIX
        raise BackendUnavailable(reason, f"{what}: {fix}" if fix else what) from err


def _system(call: Callable[[], Any]) -> str:
    try:
        return text(call())
    except pynvml.NVMLError:
        return ""


def _cuda_version() -> str:
    try:
        version = int(pynvml.nvmlSystemGetCudaDriverVersion())
    except pynvml.NVMLError:
        return ""
    return f"{version // 1000}.{version % 1000 // 10}"


def host_identity() -> HostIdentity:
    """The driver stack's versions (empty where NVML does not say)."""
    return HostIdentity(
        driver_version=_system(pynvml.nvmlSystemGetDriverVersion),
        cuda_version=_cuda_version(),
        nvml_version=_system(pynvml.nvmlSystemGetNVMLVersion),
    )


def open_gpu(
    index: int,
    handles: dict[str, Handle],
    mig_handles: dict[tuple[str, int], Handle],
    known: DeviceIdentity | None = None,
    compat_identity: bool = True,
) -> DeviceIdentity:
    """Open GPU ``index``: its handle (and its MIG devices' handles) into the maps, its identity back.
    A GPU ``known`` from the last enumeration (same UUID) keeps its identity, which does not change
    while the driver runs: only its MIG mode and MIG devices are read again (they do, e.g. when a DRA
    driver creates an instance per claim), so enumerating again every 30 s costs a few calls per GPU,
    not the ~40 of a first look. The platform info (placement, chassis, InfiniBand GUID) is read only
    with ``compat_identity``: only dcgm-exporter's names show it."""
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    uuid = text(pynvml.nvmlDeviceGetUUID(handle))
    handles[uuid] = handle
    if known is not None and known.uuid == uuid:
        mig_mode, slots, migs = _migs(uuid, handle, mig_handles, {mig.uuid: mig for mig in known.migs})
        return replace(known, index=index, mig_mode=mig_mode, mig_max_slices=slots, migs=migs)

    def identity(call: Callable[[Handle], Any]) -> str:
        try:
            return text(call(handle))
        except pynvml.NVMLError:
            return ""

    def number(call: Callable[[Handle], Any]) -> Any:
        try:
            return call(handle)
        except (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError):
            return None

    mig_mode, slots, migs = _migs(uuid, handle, mig_handles)
    pci = number(pynvml.nvmlDeviceGetPciInfo)
    brand = number(pynvml.nvmlDeviceGetBrand)
    capability = number(pynvml.nvmlDeviceGetCudaComputeCapability)
    platform = number(_platform) if compat_identity else None
    return DeviceIdentity(
        index=index,
        uuid=uuid,
        name=identity(pynvml.nvmlDeviceGetName),
        pci_bus_id=text(pci.busId) if pci is not None else "",
        serial=identity(pynvml.nvmlDeviceGetSerial),
        vbios_version=identity(pynvml.nvmlDeviceGetVbiosVersion),
        board_part_number=identity(pynvml.nvmlDeviceGetBoardPartNumber),
        minor_number=identity(pynvml.nvmlDeviceGetMinorNumber),
        mig_mode=mig_mode,
        mig_max_slices=slots,
        migs=migs,
        nvlinks=_links(handle),
        brand=BRANDS.get(brand, "Unknown") if isinstance(brand, int) else "",
        inforom_image_version=identity(pynvml.nvmlDeviceGetInforomImageVersion),
        inforom_oem_version=identity(lambda h: pynvml.nvmlDeviceGetInforomVersion(h, pynvml.NVML_INFOROM_OEM)),
        inforom_ecc_version=identity(lambda h: pynvml.nvmlDeviceGetInforomVersion(h, pynvml.NVML_INFOROM_ECC)),
        inforom_power_version=identity(lambda h: pynvml.nvmlDeviceGetInforomVersion(h, pynvml.NVML_INFOROM_POWER)),
        pci_device_id=int(pci.pciDeviceId) if pci is not None else None,
        pci_subsystem_id=int(pci.pciSubSystemId) if pci is not None else None,
        compute_capability=(int(capability[0]), int(capability[1])) if capability is not None else None,
        chassis_serial=text(platform.chassisSerialNumber) if platform is not None else "",
        placement=_placement(platform) if platform is not None else None,
        infiniband_guid=_infiniband_guid(platform) if platform is not None else "",
        gpm_supported=_gpm_supported(handle),
    )


def _gpm_supported(handle: Handle) -> bool | None:
    """``nvmlGpmQueryDeviceSupport``'s isSupportedDevice (DCGM 94, which DCGM reads once as well).
    NOT_SUPPORTED, or a driver without the function, answers the question: no GPM. Any other error:
    unknown (None)."""
    try:
        return bool(pynvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
    except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
        return False
    except (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError):
        return None


def _platform(handle: Handle) -> Any:
    """``nvmlDeviceGetPlatformInfo`` (v2 struct): the GPU's chassis, slot, tray, host and module."""
    info = pynvml.c_nvmlPlatformInfo_v2_t()
    pynvml.nvmlDeviceGetPlatformInfo(handle, byref(info))
    return info


def _byte(value: object) -> int:
    """A one-byte ``unsigned char`` member, which pynvml declares ``c_char``: bytes or str of length
    0 or 1 (an empty one is 0)."""
    if isinstance(value, bytes | str):
        return ord(value[:1]) if value else 0
    return int(value) if isinstance(value, int) else 0


def _infiniband_guid(info: Any) -> str:
    """DCGM 571 from ``ibGuid`` (16 bytes; 8 used on Blackwell): its first 8 bytes as DCGM prints them,
    ``0x%016llx`` of a little-endian uint64; "" when all zero (nothing reported). Read from the struct's
    memory: pynvml declares the member ``c_char * 16``, which stops at the first zero byte."""
    raw = string_at(addressof(info) + type(info).ibGuid.offset, 8)
    guid = int.from_bytes(raw, "little")
    return f"0x{guid:016x}" if guid else ""


def _placement(info: Any) -> tuple[int, int, int, int, int]:
    """(slot, tray, host id, peer type, module id) of an ``nvmlPlatformInfo_v2_t``."""
    return (
        _byte(info.slotNumber), _byte(info.trayIndex), _byte(info.hostId), _byte(info.peerType),
        _byte(info.moduleId),
    )  # fmt: skip


def with_p2p(devices: Sequence[DeviceIdentity], handles: Mapping[str, Handle]) -> list[DeviceIdentity]:
    """Each GPU with ``nvmlDeviceGetP2PStatus(gpu, peer, NVML_P2P_CAPS_INDEX_NVLINK)`` for every other
    GPU (as DCGM asks for its P2P status, once per discovery: N × (N - 1) calls); a pair that fails
    is left out."""
    out = []
    for device in devices:
        peers = []
        for peer in devices:
            if peer.uuid == device.uuid or device.uuid not in handles or peer.uuid not in handles:
                continue
            try:
                status = pynvml.nvmlDeviceGetP2PStatus(
                    handles[device.uuid], handles[peer.uuid], pynvml.NVML_P2P_CAPS_INDEX_NVLINK
                )
            except (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError):
                continue
            peers.append((peer.index, int(status)))
        out.append(replace(device, p2p_nvlink=tuple(peers)))
    return out


def with_cc_mode(devices: Sequence[DeviceIdentity]) -> list[DeviceIdentity]:
    """Each GPU with the system's confidential-compute feature (``nvmlSystemGetConfComputeState``'s
    ccFeature, one call per discovery: it is the host's setting, which DCGM stores per GPU as 74);
    0 where NVML says not supported, left unset on any other error."""
    try:
        mode: int | None = int(pynvml.nvmlSystemGetConfComputeState().ccFeature)
    except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
        mode = 0  # no CC-capable GPU or driver: the feature is off (DCGM stores 0 as well)
    except (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError):
        mode = None
    if mode is None:
        return list(devices)
    return [replace(device, cc_mode=mode) for device in devices]


def _links(handle: Handle) -> tuple[int, ...]:
    """NVLinks for which ``nvmlDeviceGetNvLinkState`` answers (GPUs without NVLink: none)."""
    links = []
    for link in range(MAX_LINKS):
        try:
            pynvml.nvmlDeviceGetNvLinkState(handle, link)
        except pynvml.NVMLError_GpuIsLost:
            raise
        except pynvml.NVMLError:
            continue
        links.append(link)
    return tuple(links)


def _migs(
    uuid: str,
    handle: Handle,
    mig_handles: dict[tuple[str, int], Handle],
    known: Mapping[str, MigIdentity] | None = None,
) -> tuple[str, int | None, tuple[MigIdentity, ...]]:
    """``nvmlDeviceGetMigMode``, ``nvmlDeviceGetMaxMigDeviceCount`` (the MIG slots: DCGM 69, 0 while
    MIG is off, as DCGM has it) then each ``nvmlDeviceGetMigDeviceHandleByIndex`` slot; a MIG device
    ``known`` by its UUID keeps its identity (name, instance ids), the others are read."""
    try:
        current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
    except (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError):
        return "", None, ()
    if current != pynvml.NVML_DEVICE_MIG_ENABLE:
        return "disabled", 0, ()
    migs: list[MigIdentity] = []
    slots = int(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle))
    for slot in range(slots):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except pynvml.NVMLError_NotFound:
            continue
        mig_uuid = text(pynvml.nvmlDeviceGetUUID(mig))
        mig_handles[(uuid, len(migs))] = mig
        seen = known.get(mig_uuid) if known else None
        if seen is not None:
            migs.append(seen)
            continue
        name = text(pynvml.nvmlDeviceGetName(mig))
        # Drivers name MIG devices "<GPU name> MIG <profile>", e.g. "NVIDIA A100-SXM4-40GB MIG 1g.5gb".
        profile = name.rpartition(" MIG ")[2] if " MIG " in name else ""
        migs.append(
            MigIdentity(
                gpu_instance=int(pynvml.nvmlDeviceGetGpuInstanceId(mig)),
                compute_instance=int(pynvml.nvmlDeviceGetComputeInstanceId(mig)),
                profile=profile,
                uuid=mig_uuid,
                name=name,
            )
        )
    return "enabled", slots, tuple(migs)
