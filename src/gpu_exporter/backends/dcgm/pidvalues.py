"""DCGM's vocabulary for processes on a GPU, and the translation of one window of it into each
process's raw values (no pydcgm here: the adapter and the test double hand over these shapes).

What DCGM keeps (read in NVIDIA/DCGM at 3.3.9, 4.4.2 and 4.6.0: ``dcgmlib/src/DcgmCacheManager.cpp``,
``DcgmHostEngineHandler.cpp``, ``dcgm_fields_internal.hpp``, ``dcgm_structs.h``), once
``dcgmWatchPidFields`` watches a group's GPUs:

- fields 220 (graphics) and 221 (compute pids), binary: at every engine update with processes on the
  GPU, one ``dcgmRunningProcess_t`` sample per process (version, pid, memoryUsed in bytes, or
  DCGM_INT64_NOT_SUPPORTED), all stamped with that update's time; no sample when none runs. The
  latest value is one process only, so they are read as samples since a time (``dcgmGetValuesSince``);
- field 211 (SM utilization samples), double: every sample ``nvmlDeviceGetProcessUtilization``
  returned at an update (NVML: one per running process), the pid kept beside it where the public
  API does not show it;
- job statistics (``dcgmJobStartStats`` / ``dcgmJobGetStats``): per GPU, the pids seen between the
  job's start and now, each with ``smUtil`` and ``memUtil`` = the sum of that pid's samples divided
  by the number of all samples in the window, every pid's together (``GetUniquePidUtilLists`` with
  no pid filter), in percent. At most 16 pids per GPU and kind (DCGM_MAX_PID_INFO_NUM).

A process's SM ratio over the window is therefore ``smUtil × samples / updates``: ``samples`` the
field-211 samples of the window, ``updates`` the engine updates in it that listed processes (one
sample per process per update). Where the job names a pid the lists do not (it ended), it has no
memory; a listed pid the job does not name has no utilization (absent, never 0).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpu_exporter.backends.dcgm.values import INT64_BLANK

#: Field ids (dcgm_fields_internal.hpp; the same number in every release from 3.3 to 4.6).
FI_MEM_COPY_UTIL_SAMPLES = 210
FI_GPU_UTIL_SAMPLES = 211
FI_GRAPHICS_PIDS = 220
FI_COMPUTE_PIDS = 221
#: What the processes' field group holds: the two lists and the SM samples (their count).
PROCESS_FIELDS = (FI_GPU_UTIL_SAMPLES, FI_GRAPHICS_PIDS, FI_COMPUTE_PIDS)
#: dcgmRunningProcess_t.memoryUsed when NVML could not say (DCGM_INT64_NOT_SUPPORTED).
MEMORY_NOT_SUPPORTED = INT64_BLANK + 2
#: dcgmGpuUsageInfo_t holds at most this many compute and as many graphics pids (DCGM_MAX_PID_INFO_NUM).
MAX_PIDS_PER_GPU = 16


@dataclass(frozen=True)
class RunningProcess:
    """One ``dcgmRunningProcess_t`` sample of field 220 or 221: engine time ``ts`` (µs), the pid and
    the memory it held (bytes; None where DCGM stored NOT_SUPPORTED)."""

    gpu_id: int
    ts: int
    pid: int
    memory: int | None
    graphics: bool = False


@dataclass(frozen=True)
class PidUtilization:
    """One pid of a job's ``computePids`` / ``graphicsPids`` on a GPU: DCGM's smUtil and memUtil
    (percent, each divided by all samples of the window; see the module's description)."""

    gpu_id: int
    pid: int
    sm: float
    mem: float


@dataclass(frozen=True)
class ProcessValues:
    """A process's raw values for one window: memory in bytes, utilization in percent (0-100)."""

    memory: float | None
    sm: float | None
    mem: float | None


def newest_lists(samples: Iterable[RunningProcess]) -> dict[int, tuple[int, dict[int, RunningProcess]]]:
    """Per GPU id: the newest update's time and its processes by pid (a pid listed twice, compute and
    graphics, keeps the larger memory)."""
    newest: dict[int, int] = {}
    chosen: list[RunningProcess] = list(samples)
    for sample in chosen:
        newest[sample.gpu_id] = max(newest.get(sample.gpu_id, sample.ts), sample.ts)
    lists: dict[int, tuple[int, dict[int, RunningProcess]]] = {gpu: (ts, {}) for gpu, ts in newest.items()}
    for sample in chosen:
        ts, by_pid = lists[sample.gpu_id]
        if sample.ts != ts:
            continue
        known = by_pid.get(sample.pid)
        if known is None or (known.memory or 0) < (sample.memory or 0):
            by_pid[sample.pid] = sample
    return lists


def updates(samples: Iterable[RunningProcess]) -> dict[int, int]:
    """Per GPU id: how many engine updates listed processes (distinct sample times)."""
    times: dict[int, set[int]] = {}
    for sample in samples:
        times.setdefault(sample.gpu_id, set()).add(sample.ts)
    return {gpu: len(stamps) for gpu, stamps in times.items()}


def translate(
    running: Sequence[RunningProcess],
    util_samples: Mapping[int, int],
    utilization: Sequence[PidUtilization],
) -> dict[int, dict[int, ProcessValues]]:
    """Per GPU id, per pid: the window's values. ``running``: the list samples since the last read;
    ``util_samples``: per GPU, the field-211 samples in the same window; ``utilization``: the job's
    per-pid answers for the window. The processes are those of the newest list (running now)."""
    lists = newest_lists(running)
    per_update = updates(running)
    jobs: dict[tuple[int, int], PidUtilization] = {(u.gpu_id, u.pid): u for u in utilization}
    out: dict[int, dict[int, ProcessValues]] = {}
    for gpu, (_, by_pid) in lists.items():
        count, listed = util_samples.get(gpu, 0), per_update.get(gpu, 0)
        factor = count / listed if listed else None
        own: dict[int, ProcessValues] = {}
        for pid, sample in sorted(by_pid.items()):
            job = jobs.get((gpu, pid))
            memory = None if sample.memory is None else float(sample.memory)
            if job is None or factor is None:
                own[pid] = ProcessValues(memory, None, None)
                continue
            own[pid] = ProcessValues(memory, min(job.sm * factor, 100.0), min(job.mem * factor, 100.0))
        out[gpu] = own
    return out
