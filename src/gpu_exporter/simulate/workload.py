"""Per-device entry points about work on a GPU: running processes (``gpuN.process.K.*``) and their
utilisation samples, MIG devices (``gpuN.mig.K.*``) and NVLinks (``gpuN.nvlink.L.*``)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from gpu_exporter.simulate import abi, errors
from gpu_exporter.simulate.call import Call, device

NOT_AVAILABLE = 2**64 - 1  # NVML_VALUE_NOT_AVAILABLE as an unsigned long long
NO_INSTANCE = 0xFFFFFFFF  # not in a MIG instance


@dataclass(frozen=True)
class Process:
    k: int
    pid: int
    used_memory: int
    gpu_instance_id: int
    compute_instance_id: int


def processes(c: Call, kind: str) -> list[Process]:
    """The GPU's processes of ``kind`` (all, compute, graphics, none) in K order."""
    found: list[Process] = []
    keys = c.s.gpus.get(c.gpu)
    if kind == "none" or keys is None:
        return found
    for k in sorted(keys.processes):
        pid = c.u64(f"process.{k}.pid")
        if pid is None:
            continue
        graphics = bool(c.u64(f"process.{k}.graphics") or 0)
        if (kind == "compute" and graphics) or (kind == "graphics" and not graphics):
            continue
        memory = c.u64(f"process.{k}.used_memory")
        gi, ci = c.u64(f"process.{k}.gpu_instance_id"), c.u64(f"process.{k}.compute_instance_id")
        found.append(Process(
            k, pid & 0xFFFFFFFF, NOT_AVAILABLE if memory is None else memory,
            NO_INSTANCE if gi is None else gi & 0xFFFFFFFF, NO_INSTANCE if ci is None else ci & 0xFFFFFFFF,
        ))  # fmt: skip
    return found


def _running(c: Call, kind: str, count: Any, infos: Any, legacy: bool = False) -> int:
    """Two-call pattern: too small a count gets INSUFFICIENT_SIZE and the number needed."""
    if abi.target(count) is None:
        return errors.INVALID_ARGUMENT
    found, infos = processes(c, kind), abi.target(infos)
    if abi.target(count).value < len(found):
        abi.put(count, len(found))
        return errors.INSUFFICIENT_SIZE
    if found and infos is None:
        return errors.INVALID_ARGUMENT
    for i, process in enumerate(found):
        info = infos[i]
        info.pid, info.usedGpuMemory = process.pid, process.used_memory
        if not legacy:
            info.gpuInstanceId, info.computeInstanceId = process.gpu_instance_id, process.compute_instance_id
    return abi.put(count, len(found))


@device("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2")
def compute(c: Call, count: Any, infos: Any) -> int:
    return _running(c, "compute", count, infos)


@device("nvmlDeviceGetComputeRunningProcesses")
def compute_legacy(c: Call, count: Any, infos: Any) -> int:
    """The legacy symbol's struct has no instance ids."""
    return _running(c, "compute", count, infos, legacy=True)


@device("nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v2")
def graphics(c: Call, count: Any, infos: Any) -> int:
    return _running(c, "graphics", count, infos)


@device("nvmlDeviceGetMPSComputeRunningProcesses_v3", "nvmlDeviceGetMPSComputeRunningProcesses_v2")
def mps(c: Call, count: Any, infos: Any) -> int:
    return _running(c, "none", count, infos)


@device("nvmlDeviceGetProcessUtilization")
def process_utilization(c: Call, samples: Any, count: Any, last_seen: Any) -> int:
    """One sample per process, stamped now (µs since 1970); NOT_FOUND when none is newer than
    ``lastSeenTimeStamp``."""
    if abi.target(count) is None:
        return errors.INVALID_ARGUMENT
    now, samples = time.time_ns() // 1000, abi.target(samples)
    found = processes(c, "all") if abi.number(last_seen) < now else []
    if not found:
        abi.put(count, 0)
        return errors.NOT_FOUND
    if samples is None or abi.target(count).value < len(found):
        abi.put(count, len(found))
        return errors.INSUFFICIENT_SIZE
    for i, process in enumerate(found):
        sample = samples[i]
        sample.pid, sample.timeStamp = process.pid, now
        sample.smUtil = c.u64(f"process.{process.k}.sm_util") or 0
        sample.memUtil = c.u64(f"process.{process.k}.mem_util") or 0
        sample.encUtil = c.u64(f"process.{process.k}.enc_util") or 0
        sample.decUtil = c.u64(f"process.{process.k}.dec_util") or 0
    return abi.put(count, len(found))


@device("nvmlDeviceGetMigMode")
def mig_mode(c: Call, current: Any, pending: Any) -> int:
    if abi.target(current) is None or abi.target(pending) is None:
        return errors.INVALID_ARGUMENT
    mode = c.u64("mig.mode")
    if mode is None:
        return errors.NOT_SUPPORTED
    abi.put(current, mode)
    return abi.put(pending, mode)


@device("nvmlDeviceGetMaxMigDeviceCount")
def max_mig(c: Call, out: Any) -> int:
    if abi.target(out) is None:
        return errors.INVALID_ARGUMENT
    return abi.put(out, 7 if c.u64("mig.mode") == 1 else 0)


@device("nvmlDeviceGetMigDeviceHandleByIndex")
def mig_handle(c: Call, index: Any, out: Any) -> int:
    if out is None:
        return errors.INVALID_ARGUMENT
    number = abi.number(index)
    keys = c.s.gpus.get(c.gpu)
    if keys is None or number not in keys.mig:
        return errors.NOT_FOUND
    abi.put_pointer(out, c.lib.handle(c.gpu, number))
    return errors.SUCCESS


@device("nvmlDeviceIsMigDeviceHandle", mig_ok=True)
def is_mig(c: Call, out: Any) -> int:
    return abi.put(out, 1 if c.mig >= 0 else 0)


@device("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", mig_ok=True)
def parent_handle(c: Call, out: Any) -> int:
    if out is None or c.mig < 0:
        return errors.INVALID_ARGUMENT
    abi.put_pointer(out, c.lib.handle(c.gpu))
    return errors.SUCCESS


def _instance(c: Call, which: str, out: Any) -> int:
    if abi.target(out) is None or c.mig < 0:
        return errors.INVALID_ARGUMENT
    return c.out(out, f"mig.{c.mig}.{which}")


@device("nvmlDeviceGetGpuInstanceId", mig_ok=True)
def gpu_instance(c: Call, out: Any) -> int:
    return _instance(c, "gpu_instance_id", out)


@device("nvmlDeviceGetComputeInstanceId", mig_ok=True)
def compute_instance(c: Call, out: Any) -> int:
    return _instance(c, "compute_instance_id", out)


@device("nvmlDeviceGetNvLinkState")
def nvlink_state(c: Call, link: Any, out: Any) -> int:
    number = abi.number(link)
    if abi.target(out) is None or number >= 36:
        return errors.INVALID_ARGUMENT
    state = c.u64(f"nvlink.{number}.state")
    return errors.NOT_SUPPORTED if state is None else abi.put(out, 1 if state else 0)


#: DL_REPLAY, DL_RECOVERY, DL_CRC_FLIT, DL_CRC_DATA
NVLINK_COUNTERS = {0: "replay_errors", 1: "recovery_errors", 2: "crc_flit_errors", 3: "crc_errors"}


@device("nvmlDeviceGetNvLinkErrorCounter")
def nvlink_errors(c: Call, link: Any, counter: Any, out: Any) -> int:
    number = abi.number(link)
    if abi.target(out) is None or number >= 36:
        return errors.INVALID_ARGUMENT
    key = NVLINK_COUNTERS.get(abi.number(counter))
    return errors.NOT_SUPPORTED if key is None else c.out(out, f"nvlink.{number}.{key}")
