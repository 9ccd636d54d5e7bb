"""Processes on a GPU through NVML: the compute and graphics process lists
(``nvmlDeviceGetComputeRunningProcesses`` / ``nvmlDeviceGetGraphicsRunningProcesses``: pid, memory
held, MIG instance), the per-process utilization samples (``nvmlDeviceGetProcessUtilization``:
SM, memory, encoder and decoder percent, averaged over the samples newer than the last read) and,
where accounting mode is on, each listed process's accounting statistics
(``nvmlDeviceGetAccountingStats``: the most memory it has held since it started).

Raw values only: memory in bytes, utilization in percent. A process NVML lists in a MIG instance
(GPU and compute instance ids) is attached to that instance's entity."""

from __future__ import annotations

import ctypes
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import pynvml

from gpu_exporter import model
from gpu_exporter.backends.base import RawReading, Request
from gpu_exporter.backends.nvml.readers import ERROR_KINDS, Handle
from gpu_exporter.catalogue import MetricSpec
from gpu_exporter.model import Entity

log = logging.getLogger(__name__)

_UNSUPPORTED = (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound, pynvml.NVMLLibraryMismatchError)
#: nvmlProcessInfo_t's instance ids when the process is not in a MIG instance.
_NO_INSTANCE = 0xFFFFFFFF
_LISTS = (
    ("nvmlDeviceGetComputeRunningProcesses", pynvml.nvmlDeviceGetComputeRunningProcesses),
    ("nvmlDeviceGetGraphicsRunningProcesses", pynvml.nvmlDeviceGetGraphicsRunningProcesses),
)
_UTILIZATION = {"sm": "smUtil", "mem": "memUtil", "enc": "encUtil", "dec": "decUtil"}
_ACCOUNTING = "nvmlDeviceGetAccountingStats"
#: nvmlAccountingStats_t's fields by selector (nvml.h).
_ACCOUNTED = {"max_memory_usage": "maxMemoryUsage"}
#: What the driver means by NOT_SUPPORTED here (nvml.h: the device lacks the feature, or accounting mode is off).
_ACCOUNTING_OFF = f"{_ACCOUNTING} is not supported (accounting mode off, or not on this GPU: as root, nvidia-smi -am 1)"


_FIRST_CAPACITY = 8
_TRIES = 4


class _SizedCall:
    """A list call of NVML's two-call pattern made once per read: pynvml's wrappers always ask for
    the size first (two calls whenever a process runs); this passes a buffer of the size the last
    answer needed, and calls again only when NVML says INSUFFICIENT_SIZE."""

    def __init__(self) -> None:
        self._capacity = _FIRST_CAPACITY  # grows, never shrinks; a plain int (GIL-atomic)

    def __call__(self, struct: Any, call: Callable[[Any, Any], int]) -> list[Any]:
        """``call(array, byref(count))`` → nvmlReturn; the filled entries, or raises the NVMLError."""
        for _ in range(_TRIES):
            capacity = self._capacity
            count = ctypes.c_uint(capacity)
            array = (struct * capacity)()
            ret = call(array, ctypes.byref(count))
            if ret == pynvml.NVML_ERROR_INSUFFICIENT_SIZE:
                self._capacity = max(self._capacity, int(count.value) * 2 + 5)  # room for new processes
                continue
            if ret != pynvml.NVML_SUCCESS:
                raise pynvml.NVMLError(ret)
            return list(array[: count.value])
        raise pynvml.NVMLError(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)


class ProcessReader:
    """Remembers, per GPU, the timestamp of the newest utilization sample already averaged."""

    def __init__(self) -> None:
        self._last_seen: dict[str, int] = {}  # GPU uuid → µs timestamp of the newest sample read
        self._compute_call = _SizedCall()
        self._utilization_call = _SizedCall()

    def compute_processes(self, handle: Handle) -> list[Any]:
        """``nvmlDeviceGetComputeRunningProcesses_v3`` in one call (pynvml's objects: pid,
        usedGpuMemory (None when not available), gpuInstanceId, computeInstanceId). Without the
        ``_v3`` symbol, pynvml's own wrapper answers (its NVMLLibraryMismatchError)."""
        try:
            function = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetComputeRunningProcesses_v3")
        except pynvml.NVMLError_FunctionNotFound:
            return list(pynvml.nvmlDeviceGetComputeRunningProcesses(handle))
        try:
            answer = self._compute_call(
                pynvml.c_nvmlProcessInfo_v3_t, lambda array, count: function(handle, count, array)
            )
        except pynvml.NVMLError_FunctionNotFound:
            # As pynvml reports it (NVMLLibraryMismatchError), so the log names what an operator knows.
            return list(pynvml.nvmlDeviceGetComputeRunningProcesses(handle))
        infos = []
        for raw in answer:
            info = pynvml.nvmlStructToFriendlyObject(raw)
            if info.usedGpuMemory == pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value:
                info.usedGpuMemory = None
            infos.append(info)
        return infos

    def _utilization_samples(self, handle: Handle, since: int) -> list[Any]:
        """``nvmlDeviceGetProcessUtilization`` in one call; NOT_FOUND (no sample since) raises."""
        function = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetProcessUtilization")
        stamp = ctypes.c_ulonglong(since)
        return self._utilization_call(
            pynvml.c_nvmlProcessUtilizationSample_t, lambda array, count: function(handle, array, count, stamp)
        )

    def read(
        self,
        reading: RawReading,
        gpu: Entity,
        handle: Handle,
        instances: dict[tuple[int, int], Entity],
        specs: Sequence[MetricSpec],
        request: Request,
        compute: Callable[[Handle], Any] | None = None,
    ) -> None:
        """Add one entity per process (on ``gpu`` or the MIG instance in ``instances`` by (GPU
        instance, compute instance) ids) with the raw values of ``specs``. ``compute`` lists the
        compute processes (the backend passes the list it already read for the process count)."""
        started = time.perf_counter()
        calls = {"nvmlDeviceGetProcessUtilization", _ACCOUNTING}
        lists = [s for s in specs if s.nvml is not None and s.nvml.call not in calls]
        util = [s for s in specs if s.nvml is not None and s.nvml.call == "nvmlDeviceGetProcessUtilization"]
        accounted = [s for s in specs if s.nvml is not None and s.nvml.call == _ACCOUNTING]
        processes: dict[int, tuple[Entity, float | None]] = {}
        if lists and all(request.asks(gpu.uid, s.key) for s in lists):
            for call, function in _LISTS:
                try:
                    lister = (compute or self.compute_processes) if call == _LISTS[0][0] else function
                    infos = lister(handle)
                except pynvml.NVMLError_GpuIsLost:
                    raise
                except _UNSUPPORTED as err:
                    if call.startswith("nvmlDeviceGetCompute"):
                        what = (
                            "not supported"
                            if isinstance(err, pynvml.NVMLError_NotSupported)
                            else f"unavailable ({err!r})"
                        )
                        reading.unsupported.extend((gpu, s.key, f"{call} is {what}") for s in lists)
                    continue
                except pynvml.NVMLError as err:
                    reading.failed(ERROR_KINDS.get(err.value, "unknown"), "processes")
                    continue
                for info in infos:
                    instance = (
                        int(getattr(info, "gpuInstanceId", _NO_INSTANCE)),
                        int(getattr(info, "computeInstanceId", _NO_INSTANCE)),
                    )
                    parent = instances.get(instance, gpu)
                    memory = info.usedGpuMemory
                    known = processes.get(int(info.pid))
                    if known is not None and known[1] is not None and (memory is None or known[1] >= memory):
                        continue
                    processes[int(info.pid)] = (parent, None if memory is None else float(memory))
        samples = self._utilization(reading, gpu, handle, util, request) if util and processes else {}
        stats = self._accounting(reading, gpu, handle, accounted, request, processes) if accounted else {}
        for pid, (parent, memory) in sorted(processes.items()):
            values = reading.raw.setdefault(model.process(parent, pid), {})
            for spec in lists:
                assert spec.nvml is not None
                if spec.nvml.selector == "count":
                    values[spec.key] = 1.0
                elif spec.nvml.selector == "used_memory" and memory is not None:
                    values[spec.key] = memory
            for spec in util:
                assert spec.nvml is not None
                averaged = samples.get(pid, {}).get(spec.nvml.selector)
                if averaged is not None:
                    values[spec.key] = averaged
            for spec in accounted:
                assert spec.nvml is not None
                kept = stats.get(pid, {}).get(spec.nvml.selector)
                if kept is not None:
                    values[spec.key] = kept
        reading.spent("processes", time.perf_counter() - started)

    @staticmethod
    def _accounting(
        reading: RawReading,
        gpu: Entity,
        handle: Handle,
        specs: Sequence[MetricSpec],
        request: Request,
        processes: dict[int, tuple[Entity, float | None]],
    ) -> dict[int, dict[str, float]]:
        """Per listed pid, its accounting statistics (``nvmlDeviceGetAccountingStats``), one call per
        process. NOT_SUPPORTED (accounting mode off, or a GPU without it) makes the rows unsupported for the
        memo's minute and ends the read; NOT_FOUND (a pid the driver has not accounted yet) leaves that
        process without them; a field the driver marks NVML_VALUE_NOT_AVAILABLE is absent."""
        if not processes or not all(request.asks(gpu.uid, s.key) for s in specs):
            return {}
        stats: dict[int, dict[str, float]] = {}
        for pid in sorted(processes):
            try:
                answer = pynvml.nvmlDeviceGetAccountingStats(handle, pid)
            except pynvml.NVMLError_GpuIsLost:
                raise
            except pynvml.NVMLError_NotFound:
                continue
            except _UNSUPPORTED as err:
                off = isinstance(err, pynvml.NVMLError_NotSupported)
                what = _ACCOUNTING_OFF if off else f"{_ACCOUNTING} is unavailable ({err!r})"
                reading.unsupported.extend((gpu, s.key, what) for s in specs)
                return {}
            except pynvml.NVMLError as err:
                reading.failed(ERROR_KINDS.get(err.value, "unknown"), "processes")
                return stats
            own = stats.setdefault(pid, {})
            for selector, name in _ACCOUNTED.items():
                raw = getattr(answer, name)  # pynvml gives None for NVML_VALUE_NOT_AVAILABLE
                if raw is not None and int(raw) != pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value:
                    own[selector] = float(raw)
        return stats

    def _utilization(
        self, reading: RawReading, gpu: Entity, handle: Handle, specs: Sequence[MetricSpec], request: Request
    ) -> dict[int, dict[str, float]]:
        """Per pid, each utilization averaged over the samples newer than the last read."""
        if not all(request.asks(gpu.uid, s.key) for s in specs):
            return {}
        try:
            samples = self._utilization_samples(handle, self._last_seen.get(gpu.uid, 0))
        except pynvml.NVMLError_GpuIsLost:
            raise
        except pynvml.NVMLError_NotFound:
            return {}  # no sample since the last read
        except _UNSUPPORTED as err:
            what = "not supported" if isinstance(err, pynvml.NVMLError_NotSupported) else f"unavailable ({err!r})"
            reading.unsupported.extend((gpu, s.key, f"nvmlDeviceGetProcessUtilization is {what}") for s in specs)
            return {}
        except pynvml.NVMLError as err:
            reading.failed(ERROR_KINDS.get(err.value, "unknown"), "processes")
            return {}
        sums: dict[int, dict[str, float]] = {}
        counts: dict[int, int] = {}
        newest = self._last_seen.get(gpu.uid, 0)
        for sample in samples:
            pid = int(sample.pid)
            newest = max(newest, int(sample.timeStamp))
            counts[pid] = counts.get(pid, 0) + 1
            own = sums.setdefault(pid, {})
            for selector, field in _UTILIZATION.items():
                own[selector] = own.get(selector, 0.0) + float(getattr(sample, field))
        self._last_seen[gpu.uid] = newest
        return {pid: {k: v / counts[pid] for k, v in own.items()} for pid, own in sums.items()}


def supported_process_calls() -> frozenset[tuple[str, str]]:
    """Every (call, selector) this reader answers per process; a test checks the catalogue against it."""
    lists = {("nvmlDeviceGetComputeRunningProcesses", selector) for selector in ("count", "used_memory")}
    utilization = {("nvmlDeviceGetProcessUtilization", selector) for selector in _UTILIZATION}
    return frozenset(lists | utilization | {(_ACCOUNTING, selector) for selector in _ACCOUNTED})
