"""The host engine's process statistics for ``tests/dcgmfake.py`` (and so for the stand-in library
under NVIDIA's bindings): pid watches, the pid lists and SM samples it caches, and job statistics,
as NVIDIA/DCGM's ``DcgmCacheManager.cpp`` and ``DcgmHostEngineHandler.cpp`` have them at 3.3.9,
4.4.2 and 4.6.0 (the rules below are the same in the three; the bindings' calls and struct
versions too):

- once a group's pid fields are watched, the engine updates every ``update_us`` (on its own clock):
  each update with processes on a GPU appends one list sample per process (field 221 compute, 220
  graphics: pid and memory) and one SM sample per process (field 211, ``nvmlDeviceGetProcessUtilization``
  answers one sample per running process), all stamped with the update's time; an update without
  processes appends nothing; samples older than the watch's keep age are dropped;
- ``dcgmJobStartStats`` records the time (a job id in use: DCGM_ST_DUPLICATE_KEY); ``dcgmJobGetStats``
  walks each GPU's samples from then to now: the unique pids of each list (at most 16 each), and per
  pid ``smUtil`` = the sum of its SM samples ÷ the number of all SM samples walked (every pid's), the
  walk stopping at the 16th pid (``GetUniquePidUtilLists``); an unknown job id is DCGM_ST_NO_DATA,
  as for ``dcgmJobRemove``.

Processes come from the scenario's ``gpuN.process.K.*`` keys (as the fake NVML's: ``pid``,
``used_memory`` in bytes, missing = NOT_SUPPORTED; ``sm_util`` and ``mem_util`` in percent, missing
= 0; ``graphics = 1`` for the graphics list) or from :meth:`PidEngine.run`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpu_exporter.backends.dcgm.errors import DcgmError, dcgm_error
from gpu_exporter.backends.dcgm.pidvalues import PidUtilization, RunningProcess
from gpu_exporter.backends.dcgm.values import ST_DUPLICATE_KEY, ST_NO_DATA, ST_NOT_WATCHED

MAX_PIDS = 16  # DCGM_MAX_PID_INFO_NUM


@dataclass(frozen=True)
class FakeProcess:
    pid: int
    memory: int | None  # bytes; None: NVML_VALUE_NOT_AVAILABLE (stored as DCGM_INT64_NOT_SUPPORTED)
    sm: float = 0.0  # percent
    mem: float = 0.0  # percent
    graphics: bool = False


@dataclass
class PidWatch:
    gpus: tuple[int, ...]
    update_us: int
    keep_us: int


@dataclass
class PidEngine:
    processes: dict[int, list[FakeProcess]] = field(default_factory=dict)  # GPU id → running now
    watches: dict[str, PidWatch] = field(default_factory=dict)
    cache: dict[int, list[tuple[int, FakeProcess]]] = field(default_factory=dict)  # GPU → (update µs, process)
    updated: dict[int, int] = field(default_factory=dict)  # GPU → the last update's time
    jobs: dict[str, tuple[str, int]] = field(default_factory=dict)  # job id → (group name, start µs)
    calls: list[str] = field(default_factory=list)

    def run(self, gpu: int, *processes: FakeProcess) -> None:
        """What runs on GPU ``gpu`` from now on (replacing what ran)."""
        self.processes[gpu] = list(processes)

    def advance(self, now_us: int) -> None:
        """The engine's updates up to ``now_us`` on every watched GPU."""
        for watch in self.watches.values():
            for gpu in watch.gpus:
                last = self.updated.get(gpu)
                step = watch.update_us
                first = now_us - now_us % step if last is None else last + step
                first = max(first, now_us - now_us % step - watch.keep_us)
                cache = self.cache.setdefault(gpu, [])
                for ts in range(first, now_us + 1, step):
                    cache.extend((ts, process) for process in self.processes.get(gpu, ()))
                    self.updated[gpu] = ts
                self.cache[gpu] = [(ts, p) for ts, p in cache if ts >= now_us - watch.keep_us]

    def watch(self, name: str, gpus: tuple[int, ...], update_us: int, keep_age_s: float) -> None:
        self.watches[name] = PidWatch(gpus, max(int(update_us), 1), int(keep_age_s * 1e6))

    def unwatch(self, name: str) -> None:
        self.watches.pop(name, None)

    def entries(self, name: str, since_us: int, now_us: int) -> list[tuple[int, int, FakeProcess]]:
        """(GPU, update µs, process) of every cached update of ``name``'s GPUs at or after ``since_us``."""
        watch = self.watches.get(name)
        if watch is None:
            raise DcgmError(ST_NOT_WATCHED, f"no watched group named {name!r}")
        self.advance(now_us)
        return [(gpu, ts, p) for gpu in watch.gpus for ts, p in self.cache.get(gpu, ()) if ts >= since_us]

    def samples(self, name: str, since_us: int, now_us: int) -> tuple[list[RunningProcess], dict[int, int], int]:
        """The list samples since ``since_us``, the SM samples per GPU (one per list sample), the next time."""
        self.calls.append("since")
        found = self.entries(name, since_us, now_us)
        running = [RunningProcess(gpu, ts, p.pid, p.memory, p.graphics) for gpu, ts, p in found]
        counts: dict[int, int] = {}
        for gpu, _, _ in found:
            counts[gpu] = counts.get(gpu, 0) + 1
        after = max((ts for _, ts, _ in found), default=since_us - 1) + 1
        return running, counts, max(after, since_us)

    def start_job(self, name: str, job_id: str, now_us: int) -> None:
        if name not in self.watches:
            raise dcgm_error(-5, f"dcgmJobStartStats: no group {name!r}")  # DCGM_ST_NOT_CONFIGURED
        if job_id in self.jobs:
            raise dcgm_error(ST_DUPLICATE_KEY, f"dcgmJobStartStats: duplicate job id {job_id}")
        self.calls.append("start")
        self.jobs[job_id] = (name, now_us)

    def job_lists(self, job_id: str, now_us: int) -> dict[int, tuple[list[PidUtilization], list[PidUtilization]]]:
        """Per GPU of the job's group: its compute and its graphics pids since the job started."""
        if job_id not in self.jobs:
            raise dcgm_error(ST_NO_DATA, f"dcgmJobGetStats: no job {job_id}")
        self.calls.append("stats")
        self.advance(now_us)
        name, start = self.jobs[job_id]
        watch = self.watches.get(name)
        found: dict[int, tuple[list[PidUtilization], list[PidUtilization]]] = {}
        for gpu in watch.gpus if watch is not None else ():
            window = [(ts, p) for ts, p in self.cache.get(gpu, ()) if start <= ts <= now_us]
            sums: dict[int, tuple[float, float]] = {}
            walked = 0
            for _, process in window:  # GetUniquePidUtilLists, no pid filter
                walked += 1
                sm, mem = sums.get(process.pid, (0.0, 0.0))
                sums[process.pid] = (sm + process.sm, mem + process.mem)
                if len(sums) >= MAX_PIDS:
                    break
            lists: tuple[list[PidUtilization], list[PidUtilization]] = ([], [])
            for graphics, out in zip((False, True), lists, strict=True):  # GetUniquePidLists, at most 16 each
                pids: list[int] = []
                for _, process in window:
                    if process.graphics == graphics and process.pid not in pids and len(pids) < MAX_PIDS:
                        pids.append(process.pid)
                for pid in pids:
                    sm, mem = sums.get(pid, (0.0, 0.0))
                    out.append(
                        PidUtilization(gpu, pid, sm / walked if walked else 0.0, mem / walked if walked else 0.0)
                    )
            found[gpu] = lists
        return found

    def job_processes(self, job_id: str, now_us: int) -> list[PidUtilization]:
        return [u for compute, graphics in self.job_lists(job_id, now_us).values() for u in (*compute, *graphics)]

    def remove_job(self, job_id: str) -> None:
        if self.jobs.pop(job_id, None) is None:
            raise dcgm_error(ST_NO_DATA, f"dcgmJobRemove: no job {job_id}")
        self.calls.append("remove")


def from_keys(own: dict[str, str]) -> list[FakeProcess]:
    """One GPU's ``process.K.*`` scenario keys (``own`` without the ``gpuN.`` prefix)."""
    slots = sorted({int(k.split(".")[1]) for k in own if k.startswith("process.") and k.split(".")[1].isdigit()})
    found = []
    for slot in slots:
        keys = {k.split(".", 2)[2]: v for k, v in own.items() if k.startswith(f"process.{slot}.")}
        if "pid" not in keys:
            continue
        found.append(
            FakeProcess(
                int(keys["pid"]),
                int(keys["used_memory"]) if "used_memory" in keys else None,
                float(keys.get("sm_util", "0")),
                float(keys.get("mem_util", "0")),
                keys.get("graphics", "0") not in ("0", ""),
            )
        )
    return found
