"""Per-device entry points of NVML's accounting statistics (nvml.h, group nvmlAccountingStats), as the
C fake answers them (tests/fakenvml/workload.c).

``gpuN.accounting_mode`` (0 or 1; absent: the GPU does not support accounting). While the mode is off
or unsupported the stats calls answer NOT_SUPPORTED (nvml.h: "doesn't support this feature or
accounting mode is disabled"); a pid with no stats is NOT_FOUND. Only the GPU's running processes are
accounted (no terminated ones): ``maxMemoryUsage`` is ``gpuN.process.K.max_memory``, else the memory the
process holds now, else NVML_VALUE_NOT_AVAILABLE; ``gpuUtilization`` and ``memoryUtilization`` are its
``sm_util`` and ``mem_util``; ``time`` is 0 while it runs, ``isRunning`` 1, ``startTime`` 0."""

from __future__ import annotations

from typing import Any

from gpu_exporter.simulate import abi, errors
from gpu_exporter.simulate.call import Call, device
from gpu_exporter.simulate.workload import processes

#: The processes nvidia-smi -q reports as "Accounting Mode Buffer Size" on data-centre GPUs.
BUFFER_SIZE = 4000


def _on(c: Call) -> bool:
    return bool(c.u64("accounting_mode") or 0)


@device("nvmlDeviceGetAccountingMode")
def mode(c: Call, out: Any) -> int:
    return c.flag(out, "accounting_mode")


@device("nvmlDeviceGetAccountingBufferSize")
def buffer_size(c: Call, out: Any) -> int:
    if abi.target(out) is None:
        return errors.INVALID_ARGUMENT
    return abi.put(out, BUFFER_SIZE) if _on(c) else errors.NOT_SUPPORTED


@device("nvmlDeviceGetAccountingPids")
def pids(c: Call, count: Any, out: Any) -> int:
    """Two-call pattern: too small a count (or no array) gets INSUFFICIENT_SIZE and the number needed."""
    if abi.target(count) is None:
        return errors.INVALID_ARGUMENT
    if not _on(c):
        return errors.NOT_SUPPORTED
    found, array = processes(c, "all"), abi.target(out)
    if abi.target(count).value < len(found) or (found and array is None):
        abi.put(count, len(found))
        return errors.INSUFFICIENT_SIZE
    for i, process in enumerate(found):
        array[i] = process.pid
    return abi.put(count, len(found))


@device("nvmlDeviceGetAccountingStats")
def stats(c: Call, pid: Any, out: Any) -> int:
    answer = abi.target(out)
    if answer is None:
        return errors.INVALID_ARGUMENT
    if not _on(c):
        return errors.NOT_SUPPORTED
    wanted = abi.number(pid)
    for process in processes(c, "all"):
        if process.pid != wanted:
            continue
        peak = c.u64(f"process.{process.k}.max_memory")
        answer.gpuUtilization = c.u64(f"process.{process.k}.sm_util") or 0
        answer.memoryUtilization = c.u64(f"process.{process.k}.mem_util") or 0
        answer.maxMemoryUsage = process.used_memory if peak is None else peak
        answer.time, answer.startTime, answer.isRunning = 0, 0, 1
        return errors.SUCCESS
    return errors.NOT_FOUND
