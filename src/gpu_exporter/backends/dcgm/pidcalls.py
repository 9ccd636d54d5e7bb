"""The adapter's calls for processes on GPUs (mixed into
:class:`~gpu_exporter.backends.dcgm.adapter.PydcgmAdapter`): the pid watches, the pid lists and SM
samples since a time, and the job statistics that tie SM activity to pids
(:mod:`~gpu_exporter.backends.dcgm.pidvalues` says what each holds).

Calls, per the bindings (``dcgm_agent.py`` 3.3.9 to 4.6.0, the same signatures): ``dcgmWatchPidFields``
(group, update µs, keep seconds, keep samples), ``dcgmGetValuesSince_v2`` (a field group of
:data:`~gpu_exporter.backends.dcgm.pidvalues.PROCESS_FIELDS`), ``dcgmJobStartStats`` /
``dcgmJobGetStats`` (``c_dcgmJobInfo_v3``) / ``dcgmJobRemove`` (job ids of at most 63 bytes).
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from gpu_exporter.backends.dcgm.errors import DcgmError
from gpu_exporter.backends.dcgm.pidvalues import (
    FI_COMPUTE_PIDS,
    FI_GPU_UTIL_SAMPLES,
    FI_GRAPHICS_PIDS,
    PROCESS_FIELDS,
    PidUtilization,
    RunningProcess,
)
from gpu_exporter.backends.dcgm.values import FE_GPU, INT64_BLANK, ST_OK

log = logging.getLogger(__name__)

_BLOB = ord("b")  # DCGM_FT_BINARY
_FUNCTIONS = ("dcgmWatchPidFields", "dcgmJobStartStats", "dcgmJobGetStats", "dcgmJobRemove", "dcgmGetValuesSince_v2")


class _Sink:
    """What the values-since callback fills: the pid list samples and the SM samples per GPU."""

    def __init__(self) -> None:
        self.running: list[RunningProcess] = []
        self.samples: dict[int, int] = {}


def _decode(structs: ModuleType, group: int, entity: int, raw: Any, sink: _Sink) -> None:
    """One ``c_dcgmFieldValue_v1`` of the processes' field group into ``sink``."""
    if int(group) != FE_GPU or int(raw.status) != ST_OK:
        return
    field_id = int(raw.fieldId)
    if field_id == FI_GPU_UTIL_SAMPLES:
        sink.samples[int(entity)] = sink.samples.get(int(entity), 0) + 1
    elif field_id in (FI_GRAPHICS_PIDS, FI_COMPUTE_PIDS) and int(raw.fieldType) == _BLOB:
        process = structs.c_dcgmRunningProcess_t.from_buffer_copy(
            bytes(raw.value.blob)[: ctypes.sizeof(structs.c_dcgmRunningProcess_t)]
        )
        memory = int(process.memoryUsed)
        sink.running.append(
            RunningProcess(
                int(entity), int(raw.ts), int(process.pid), None if memory >= INT64_BLANK else memory,
                graphics=field_id == FI_GRAPHICS_PIDS,
            )
        )  # fmt: skip


class PidCalls:
    """The process calls over the real bindings; the host class provides ``_call``, ``_optional``,
    ``_groups``, ``_lock``, ``_structs`` and ``_agent`` (as :class:`PydcgmAdapter` does)."""

    _structs: ModuleType
    _agent: ModuleType
    _groups: dict[str, tuple[Any, Any]]
    _lock: threading.Lock

    def _call(self, function: str, *args: Any) -> Any:
        raise NotImplementedError

    def _optional(self, function: str, *args: Any) -> Any:
        raise NotImplementedError

    def watch(
        self,
        name: str,
        entities: Sequence[tuple[int, int]],
        field_ids: Sequence[int],
        update_us: int,
        keep_age_s: float,
    ) -> dict[tuple[int, int], int]:
        raise NotImplementedError

    def unwatch(self, name: str) -> None:
        raise NotImplementedError

    def watch_processes(self, name: str, gpu_ids: Sequence[int], update_us: int, keep_age_s: float) -> None:
        """An entity group ``name`` of these GPUs (refused ones left out) with the engine's pid
        watches on it (``dcgmWatchPidFields``), and a field group ``name`` of the pid lists and SM
        samples watched at the same rate, for :meth:`process_samples`. Bindings without one of the
        calls: DCGM_ST_NOT_SUPPORTED, nothing created."""
        missing = [f for f in _FUNCTIONS if not hasattr(self._agent, f)]
        if missing:
            raise DcgmError(-6, f"the DCGM bindings have no {', '.join(missing)}")
        gpus = [(FE_GPU, int(gpu)) for gpu in gpu_ids]
        if len(self.watch(name, gpus, list(PROCESS_FIELDS), update_us, keep_age_s)) == len(gpus):
            raise DcgmError(-35, f"{name}: no GPU the engine would group")  # DCGM_ST_GROUP_IS_EMPTY
        group, _ = self._groups[name]
        try:
            self._call("dcgmWatchPidFields", group, int(update_us), float(keep_age_s), 0)
        except DcgmError:
            self.unwatch(name)
            raise

    def process_samples(self, name: str, since_us: int) -> tuple[list[RunningProcess], dict[int, int], int]:
        """The pid list samples of ``name``'s GPUs since ``since_us`` (engine µs), the number of SM
        samples per GPU id in the same span, and the time to pass next."""
        ids = self._groups.get(name)
        if ids is None:
            raise DcgmError(-16, f"no watched group named {name!r}")  # DCGM_ST_NOT_WATCHED
        sink = _Sink()
        structs = self._structs

        def collect(group: int, entity: int, values: Any, count: int, user_data: Any) -> int:
            try:
                for index in range(count):
                    _decode(structs, group, entity, values[index], sink)
            except Exception:  # an exception must not unwind through C; it is logged instead
                log.exception("decoding DCGM process values failed")
            return 0

        callback = self._agent.dcgmFieldValueEntityEnumeration_f(collect)
        next_since = self._call("dcgmGetValuesSince_v2", ids[0], ids[1], int(since_us), callback, None)
        return sink.running, sink.samples, int(next_since)

    def start_job(self, name: str, job_id: str) -> None:
        """``dcgmJobStartStats`` on group ``name``: the engine records the start of job ``job_id``."""
        ids = self._groups.get(name)
        if ids is None:
            raise DcgmError(-16, f"no watched group named {name!r}")
        self._call("dcgmJobStartStats", ids[0], job_id.encode())

    def job_processes(self, job_id: str) -> list[PidUtilization]:
        """``dcgmJobGetStats``: every GPU's compute and graphics pids of the job's window so far."""
        info = self._call("dcgmJobGetStats", job_id.encode())
        found: list[PidUtilization] = []
        for gpu in info.gpus[: max(int(info.numGpus), 0)]:
            for count, pids in ((gpu.numComputePids, gpu.computePids), (gpu.numGraphicsPids, gpu.graphicsPids)):
                for item in pids[: max(min(int(count), len(pids)), 0)]:
                    found.append(PidUtilization(int(gpu.gpuId), int(item.pid), float(item.smUtil), float(item.memUtil)))
        return found

    def remove_job(self, job_id: str) -> None:
        """``dcgmJobRemove``; a job the engine does not know (DCGM_ST_NO_DATA) is ignored."""
        try:
            self._call("dcgmJobRemove", job_id.encode())
        except DcgmError as err:
            if err.code != -14:
                raise
