"""Finding what NVML sees: ``nvmlInit`` with a hint a human can act on when it fails, the host's
versions, and each GPU's identity, NVLinks and MIG devices with their handles."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml

from gpu_exporter.backends.base import BackendUnavailable, DeviceIdentity, HostIdentity, MigIdentity
from gpu_exporter.backends.nvml.readers import MAX_LINKS, Handle, text

# Init failures → (reason, what the operator should do).
_INIT_HINTS: dict[int, tuple[str, str]] = {
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND: (
        "library_not_found",
        "libnvidia-ml.so.1 not found: install the NVIDIA driver, or in a container run with the NVIDIA "
        "container toolkit (docker --gpus all, or runtimeClassName: nvidia on Kubernetes)",
    ),
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED: (
        "driver_not_loaded",
        "the NVIDIA kernel driver is not loaded: check 'lsmod | grep nvidia' and dmesg, then load it "
        "(modprobe nvidia) or reinstall the driver",
    ),
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH: (
        "version_mismatch",
        "libnvidia-ml.so.1 and the loaded kernel module are different driver versions (usually after a "
        "driver upgrade): reboot, or reload the nvidia kernel modules",
    ),
    pynvml.NVML_ERROR_NO_PERMISSION: (
        "no_permission",
        "no permission to open /dev/nvidia*: run as root or as a member of the group owning /dev/nvidiactl; "
        "in a container, expose the devices (docker --gpus all, or the NVIDIA device plugin)",
    ),
}


def _in_container_without_devices() -> bool:
    """True inside a container (Docker, Podman, Kubernetes) that was given no NVIDIA device nodes."""
    in_container = (
        Path("/.dockerenv").exists() or Path("/run/.containerenv").exists() or "KUBERNETES_SERVICE_HOST" in os.environ
    )
    return in_container and not Path("/dev/nvidiactl").exists()


def init() -> None:
    """``nvmlInit``; raises BackendUnavailable with the reason and the fix."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        reason, hint = _INIT_HINTS.get(err.value, ("init_failed", f"nvmlInit failed: {err}"))
        if reason in ("library_not_found", "driver_not_loaded", "no_permission") and _in_container_without_devices():
            hint += (
                "; this looks like a container without /dev/nvidia* device nodes: run it with the NVIDIA "
                "container toolkit (docker --gpus all) or, on Kubernetes, request nvidia.com/gpu or use "
                "runtimeClassName: nvidia"
            )
        raise BackendUnavailable(reason, hint) from err


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


def open_gpu(index: int, handles: dict[str, Handle], mig_handles: dict[tuple[str, int], Handle]) -> DeviceIdentity:
    """Open GPU ``index``: its handle (and its MIG devices' handles) into the maps, its identity back."""
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    uuid = text(pynvml.nvmlDeviceGetUUID(handle))
    handles[uuid] = handle

    def identity(call: Callable[[Handle], Any]) -> str:
        try:
            return text(call(handle))
        except pynvml.NVMLError:
            return ""

    mig_mode, migs = _migs(uuid, handle, mig_handles)
    return DeviceIdentity(
        index=index,
        uuid=uuid,
        name=identity(pynvml.nvmlDeviceGetName),
        pci_bus_id=identity(lambda h: pynvml.nvmlDeviceGetPciInfo(h).busId),
        serial=identity(pynvml.nvmlDeviceGetSerial),
        vbios_version=identity(pynvml.nvmlDeviceGetVbiosVersion),
        board_part_number=identity(pynvml.nvmlDeviceGetBoardPartNumber),
        minor_number=identity(pynvml.nvmlDeviceGetMinorNumber),
        mig_mode=mig_mode,
        migs=migs,
        nvlinks=_links(handle),
    )


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


def _migs(uuid: str, handle: Handle, mig_handles: dict[tuple[str, int], Handle]) -> tuple[str, tuple[MigIdentity, ...]]:
    """``nvmlDeviceGetMigMode`` then each ``nvmlDeviceGetMigDeviceHandleByIndex`` slot."""
    try:
        current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
    except (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError):
        return "", ()
    if current != pynvml.NVML_DEVICE_MIG_ENABLE:
        return "disabled", ()
    migs: list[MigIdentity] = []
    for slot in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except pynvml.NVMLError_NotFound:
            continue
        name = text(pynvml.nvmlDeviceGetName(mig))
        # Drivers name MIG devices "<GPU name> MIG <profile>", e.g. "NVIDIA A100-SXM4-40GB MIG 1g.5gb".
        profile = name.rpartition(" MIG ")[2] if " MIG " in name else ""
        mig_handles[(uuid, len(migs))] = mig
        migs.append(
            MigIdentity(
                gpu_instance=int(pynvml.nvmlDeviceGetGpuInstanceId(mig)),
                compute_instance=int(pynvml.nvmlDeviceGetComputeInstanceId(mig)),
                profile=profile,
                uuid=text(pynvml.nvmlDeviceGetUUID(mig)),
                name=name,
            )
        )
    return "enabled", tuple(migs)
