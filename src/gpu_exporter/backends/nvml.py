"""The NVML backend: the only module that imports ``pynvml`` (nvidia-ml-py).

It initialises NVML once, discovers GPUs and MIG devices, and reads the catalogue's NVML sources.
NVML's vocabulary stops here: ``NVMLError_NotSupported`` and a missing symbol become an absent
sample remembered per (device, call) and logged once; ``NVMLError_GpuIsLost`` becomes
:class:`DeviceLost`; ``NVMLLibraryMismatchError`` (not an ``NVMLError``!) is treated like a
missing function; init failures become :class:`BackendUnavailable` with a hint a human can act on.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pynvml

from gpu_exporter.backends.base import (
    BackendUnavailable,
    DeviceIdentity,
    DeviceLost,
    DeviceReading,
    HostIdentity,
    MigIdentity,
    count_error,
)
from gpu_exporter.catalogue import MetricSpec, NvmlSource, scaled

log = logging.getLogger(__name__)

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

_THRESHOLDS = {
    "slowdown": pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,
    "shutdown": pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN,
    "max_operating": pynvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX,
}
_CLOCKS = {"sm": pynvml.NVML_CLOCK_SM, "memory": pynvml.NVML_CLOCK_MEM}
_PCIE_COUNTERS = {"tx": pynvml.NVML_PCIE_UTIL_TX_BYTES, "rx": pynvml.NVML_PCIE_UTIL_RX_BYTES}
_FIELD_IDS = {"memory_temperature": pynvml.NVML_FI_DEV_MEMORY_TEMP}
_PSTATE_UNKNOWN = 32

# NVML error codes → the ``kind`` label of gpu_exporter_sample_errors_total.
_ERROR_KINDS: dict[int, str] = {
    getattr(pynvml, name): name.removeprefix("NVML_ERROR_").lower()
    for name in dir(pynvml)
    if name.startswith("NVML_ERROR_") and isinstance(getattr(pynvml, name), int)
}

Handle = Any  # a ctypes pointer owned by pynvml
Raw = dict[str, float | None]


def _text(value: object) -> str:
    """pynvml returns identity strings as str or bytes depending on the call and version."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _field_value(entry: Any) -> float:
    """Decode one ``nvmlFieldValue_t`` union by its ``valueType``; raise its ``nvmlReturn``."""
    if entry.nvmlReturn != pynvml.NVML_SUCCESS:
        raise pynvml.NVMLError(entry.nvmlReturn)
    member = {
        pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
        pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
        pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
        pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
        pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
        pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
        pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
    }.get(entry.valueType, "ullVal")
    return float(getattr(entry.value, member))


def _memory(handle: Handle) -> Raw:
    """``nvmlDeviceGetMemoryInfo_v2`` (bytes; ``used`` excludes reserved), else v1 without reserved."""
    try:
        info = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
        return {"total": info.total, "used": info.used, "free": info.free, "reserved": info.reserved}
    except (pynvml.NVMLError_FunctionNotFound, pynvml.NVMLError_ArgumentVersionMismatch):
        # Drivers before R510: v1 only, whose ``used`` includes the reserved memory.
        info = pynvml.nvmlDeviceGetMemoryInfo(handle)
        return {"total": info.total, "used": info.used, "free": info.free, "reserved": None}


def _bar1(handle: Handle) -> Raw:
    info = pynvml.nvmlDeviceGetBAR1MemoryInfo(handle)
    return {"total": info.bar1Total, "used": info.bar1Used}


def _utilization(handle: Handle) -> Raw:
    rates = pynvml.nvmlDeviceGetUtilizationRates(handle)
    return {"gpu": rates.gpu, "memory": rates.memory}


def _pstate(handle: Handle) -> Raw:
    state = pynvml.nvmlDeviceGetPerformanceState(handle)
    return {"": None if state == _PSTATE_UNKNOWN else state}


def _single(call: Callable[[Handle], Any]) -> Callable[[Handle], Raw]:
    return lambda handle: {"": call(handle)}


def _first(call: Callable[[Handle], Sequence[Any]]) -> Callable[[Handle], Raw]:
    """Encoder/decoder utilisation return ``[percent, sampling period µs]``."""
    return lambda handle: {"": call(handle)[0]}


# Calls that return several values at once: read once per device per cycle, every selector served.
_STRUCT_READERS: dict[str, Callable[[Handle], Raw]] = {
    "nvmlDeviceGetMemoryInfo": _memory,
    "nvmlDeviceGetBAR1MemoryInfo": _bar1,
    "nvmlDeviceGetUtilizationRates": _utilization,
    "nvmlDeviceGetEncoderUtilization": _first(pynvml.nvmlDeviceGetEncoderUtilization),
    "nvmlDeviceGetDecoderUtilization": _first(pynvml.nvmlDeviceGetDecoderUtilization),
    "nvmlDeviceGetFanSpeed": _single(pynvml.nvmlDeviceGetFanSpeed),
    "nvmlDeviceGetPowerUsage": _single(pynvml.nvmlDeviceGetPowerUsage),
    "nvmlDeviceGetEnforcedPowerLimit": _single(pynvml.nvmlDeviceGetEnforcedPowerLimit),
    "nvmlDeviceGetPowerManagementDefaultLimit": _single(pynvml.nvmlDeviceGetPowerManagementDefaultLimit),
    "nvmlDeviceGetTotalEnergyConsumption": _single(pynvml.nvmlDeviceGetTotalEnergyConsumption),
    "nvmlDeviceGetPerformanceState": _pstate,
    "nvmlDeviceGetCurrPcieLinkGeneration": _single(pynvml.nvmlDeviceGetCurrPcieLinkGeneration),
    "nvmlDeviceGetMaxPcieLinkGeneration": _single(pynvml.nvmlDeviceGetMaxPcieLinkGeneration),
    "nvmlDeviceGetCurrPcieLinkWidth": _single(pynvml.nvmlDeviceGetCurrPcieLinkWidth),
    "nvmlDeviceGetMaxPcieLinkWidth": _single(pynvml.nvmlDeviceGetMaxPcieLinkWidth),
    "nvmlDeviceGetPcieReplayCounter": _single(pynvml.nvmlDeviceGetPcieReplayCounter),
}

# Calls that take the selector as an argument: one NVML call per (call, selector).
_ARG_READERS: dict[str, Callable[[Handle, str], float]] = {
    "nvmlDeviceGetTemperature": lambda h, _s: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
    "nvmlDeviceGetTemperatureThreshold": lambda h, s: pynvml.nvmlDeviceGetTemperatureThreshold(h, _THRESHOLDS[s]),
    "nvmlDeviceGetFieldValues": lambda h, s: _field_value(pynvml.nvmlDeviceGetFieldValues(h, [_FIELD_IDS[s]])[0]),
    "nvmlDeviceGetClockInfo": lambda h, s: pynvml.nvmlDeviceGetClockInfo(h, _CLOCKS[s]),
    "nvmlDeviceGetMaxClockInfo": lambda h, s: pynvml.nvmlDeviceGetMaxClockInfo(h, _CLOCKS[s]),
    "nvmlDeviceGetPcieThroughput": lambda h, s: pynvml.nvmlDeviceGetPcieThroughput(h, _PCIE_COUNTERS[s]),
}


def supported_calls() -> frozenset[tuple[str, str]]:
    """Every (call, selector) this backend can read; a test checks the catalogue against it."""
    selectors: dict[str, tuple[str, ...]] = {
        "nvmlDeviceGetTemperature": ("gpu",),
        "nvmlDeviceGetTemperatureThreshold": tuple(_THRESHOLDS),
        "nvmlDeviceGetFieldValues": tuple(_FIELD_IDS),
        "nvmlDeviceGetClockInfo": tuple(_CLOCKS),
        "nvmlDeviceGetMaxClockInfo": tuple(_CLOCKS),
        "nvmlDeviceGetPcieThroughput": tuple(_PCIE_COUNTERS),
        "nvmlDeviceGetMemoryInfo": ("total", "used", "free", "reserved"),
        "nvmlDeviceGetBAR1MemoryInfo": ("total", "used"),
        "nvmlDeviceGetUtilizationRates": ("gpu", "memory"),
    }
    return frozenset(
        (call, selector) for call in (*_STRUCT_READERS, *_ARG_READERS) for selector in selectors.get(call, ("",))
    )


class NvmlBackend:
    """GPU samples through NVML. ``open`` and ``read`` run on sampler threads (NVML is thread-safe)."""

    name = "nvml"

    def __init__(self) -> None:
        self._handles: dict[int, Handle] = {}
        self._mig_handles: dict[tuple[int, int], Handle] = {}
        self._skip: set[tuple[str, str, str]] = set()  # (uuid, call, selector) unsupported or missing
        self._logged: set[tuple[str, str]] = set()  # (uuid, call) already logged as unsupported
        self._memo_lock = threading.Lock()
        self._open = False

    def open(self) -> tuple[HostIdentity, Sequence[DeviceIdentity]]:
        """``nvmlInit`` then discovery: ``nvmlDeviceGetCount`` / ``GetHandleByIndex`` and MIG devices."""
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as err:
            reason, hint = _INIT_HINTS.get(err.value, ("init_failed", f"nvmlInit failed: {err}"))
            raise BackendUnavailable(reason, hint) from err
        self._open = True
        self._handles.clear()
        self._mig_handles.clear()
        with self._memo_lock:
            self._skip.clear()
            self._logged.clear()
        host = HostIdentity(
            driver_version=self._system(pynvml.nvmlSystemGetDriverVersion),
            cuda_version=self._cuda_version(),
            nvml_version=self._system(pynvml.nvmlSystemGetNVMLVersion),
        )
        try:
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as err:
            self.close()
            raise BackendUnavailable("device_count_failed", f"nvmlDeviceGetCount failed: {err}") from err
        devices = []
        for index in range(count):
            try:
                devices.append(self._discover(index))
            except pynvml.NVMLError as err:
                log.error("GPU %d could not be opened and is not monitored: %s", index, err)
        return host, devices

    def _system(self, call: Callable[[], Any]) -> str:
        try:
            return _text(call())
        except pynvml.NVMLError:
            return ""

    def _cuda_version(self) -> str:
        try:
            version = int(pynvml.nvmlSystemGetCudaDriverVersion())
        except pynvml.NVMLError:
            return ""
        return f"{version // 1000}.{version % 1000 // 10}"

    def _discover(self, index: int) -> DeviceIdentity:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        uuid = _text(pynvml.nvmlDeviceGetUUID(handle))
        self._handles[index] = handle

        def text(call: Callable[[Handle], Any]) -> str:
            try:
                return _text(call(handle))
            except pynvml.NVMLError:
                return ""

        mig_mode, migs = self._discover_migs(index, handle)
        return DeviceIdentity(
            index=index,
            uuid=uuid,
            name=text(pynvml.nvmlDeviceGetName),
            pci_bus_id=text(lambda h: pynvml.nvmlDeviceGetPciInfo(h).busId),
            serial=text(pynvml.nvmlDeviceGetSerial),
            vbios_version=text(pynvml.nvmlDeviceGetVbiosVersion),
            board_part_number=text(pynvml.nvmlDeviceGetBoardPartNumber),
            minor_number=text(pynvml.nvmlDeviceGetMinorNumber),
            mig_mode=mig_mode,
            migs=migs,
        )

    def _discover_migs(self, index: int, handle: Handle) -> tuple[str, tuple[MigIdentity, ...]]:
        """``nvmlDeviceGetMigMode`` then each ``nvmlDeviceGetMigDeviceHandleByIndex`` slot."""
        try:
            current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
        except (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError):
            return "", ()
        if current != pynvml.NVML_DEVICE_MIG_ENABLE:
            return "disabled", ()
        migs = []
        for slot in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
            try:
                mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except pynvml.NVMLError_NotFound:
                continue
            gpu_instance = int(pynvml.nvmlDeviceGetGpuInstanceId(mig))
            name = _text(pynvml.nvmlDeviceGetName(mig))
            # Drivers name MIG devices "<GPU name> MIG <profile>", e.g. "NVIDIA A100-SXM4-40GB MIG 1g.5gb".
            profile = name.rpartition(" MIG ")[2] if " MIG " in name else ""
            migs.append(
                MigIdentity(
                    gpu_instance=gpu_instance,
                    compute_instance=int(pynvml.nvmlDeviceGetComputeInstanceId(mig)),
                    profile=profile,
                    uuid=_text(pynvml.nvmlDeviceGetUUID(mig)),
                    name=name,
                )
            )
            self._mig_handles[(index, slot)] = mig
        return "enabled", tuple(migs)

    def read(self, device: DeviceIdentity, specs: Sequence[MetricSpec], cycle: int) -> DeviceReading:
        """Read every due spec of one GPU, then the per-instance specs of each of its MIG devices."""
        reading = DeviceReading()
        due = [spec for spec in specs if spec.nvml is not None and cycle % spec.every == 0]
        self._read_into(reading.values, self._handles[device.index], device.uuid, due, reading.errors)
        mig_specs = [spec for spec in due if spec.mig]
        for slot, mig in enumerate(device.migs):
            handle = self._mig_handles.get((device.index, slot))
            if handle is None:
                continue
            values: dict[str, float] = {}
            self._read_into(values, handle, mig.uuid, mig_specs, reading.errors)
            reading.mig_values[slot] = values
        return reading

    def _read_into(
        self, out: dict[str, float], handle: Handle, uuid: str, specs: Sequence[MetricSpec], errors: dict[str, int]
    ) -> None:
        structs: dict[str, Raw | Exception] = {}
        for spec in specs:
            source = spec.nvml
            assert source is not None  # filtered by read()
            raw = self._query(handle, uuid, source, structs, errors)
            if raw is not None:
                out[spec.name] = scaled(raw, source.scale)

    def _query(
        self, handle: Handle, uuid: str, source: NvmlSource, structs: dict[str, Raw | Exception], errors: dict[str, int]
    ) -> float | None:
        """One raw value, or None when absent. Raises DeviceLost when NVML says the GPU is lost."""
        key = (uuid, source.call, source.selector)
        if key in self._skip:
            return None
        try:
            if source.call in _STRUCT_READERS:
                if source.call not in structs:
                    try:
                        structs[source.call] = _STRUCT_READERS[source.call](handle)
                    except (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError) as err:
                        structs[source.call] = err
                result = structs[source.call]
                if isinstance(result, Exception):
                    raise result
                value = result.get(source.selector)
                return None if value is None else float(value)
            return float(_ARG_READERS[source.call](handle, source.selector))
        except pynvml.NVMLError_GpuIsLost as err:
            raise DeviceLost(f"{uuid}: {err}") from err
        except (
            pynvml.NVMLError_NotSupported,
            pynvml.NVMLError_FunctionNotFound,
            pynvml.NVMLLibraryMismatchError,
        ) as err:
            self._remember_unsupported(key, err)
            return None
        except pynvml.NVMLError as err:
            kind = _ERROR_KINDS.get(err.value, "unknown")
            count_error(errors, kind)
            log.debug("%s %s(%s) failed: %s", uuid, source.call, source.selector, err)
            return None

    def _remember_unsupported(self, key: tuple[str, str, str], err: Exception) -> None:
        uuid, call, _selector = key
        with self._memo_lock:
            self._skip.add(key)
            if (uuid, call) in self._logged:
                return
            self._logged.add((uuid, call))
        what = "not supported" if isinstance(err, pynvml.NVMLError_NotSupported) else f"unavailable ({err!r})"
        log.info("%s: %s is %s; not asked again until restart", uuid, call, what)

    def close(self) -> None:
        """``nvmlShutdown`` once per successful ``open``."""
        if not self._open:
            return
        self._open = False
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError as err:
            log.debug("nvmlShutdown failed: %s", err)
