"""The stand-in libdcgm's process calls (mixed into :class:`~tests.dcgmlib_standin.StandInLibrary`):
``dcgmWatchPidFields``, ``dcgmGetValuesSince_v2`` on a group whose pid fields are watched (the pid
lists as ``dcgmRunningProcess_t`` blobs, field 211 as doubles), ``dcgmJobStartStats``,
``dcgmJobGetStats`` (``c_dcgmJobInfo_v3``: another version is DCGM_ST_VER_MISMATCH) and
``dcgmJobRemove``. The engine's rules are :mod:`tests.dcgmfake_pids`'; the C side's, read in
``dcgmlib/src/DcgmApi.cpp`` (3.3.9 to 4.6.0): job ids are C strings of at most 64 bytes, the calls
exist in every release and take the same arguments."""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any

from gpu_exporter.backends.dcgm.pidvalues import FI_COMPUTE_PIDS, FI_GPU_UTIL_SAMPLES, FI_GRAPHICS_PIDS
from gpu_exporter.backends.dcgm.values import FE_GPU, INT64_BLANK
from tests.dcgmlib_groups import ST_NOT_CONFIGURED, ST_OK, ST_VER_MISMATCH, _int, _obj, _text

if TYPE_CHECKING:
    from tests.dcgmlib_standin import StandInLibrary

ST_CONNECTION_NOT_VALID = -21


def _job(raw: Any) -> str:
    return _text(getattr(raw, "value", raw) or b"")


class PidLibraryCalls:
    """Mixed into :class:`~tests.dcgmlib_standin.StandInLibrary` (before GroupCalls)."""

    def api_dcgmWatchPidFields(
        self: StandInLibrary, handle: Any, group_id: Any, every_us: Any, keep_s: Any, keep: Any
    ) -> int:
        if not self._connected(handle):
            return ST_CONNECTION_NOT_VALID
        group = self.groups.get(_int(group_id))
        if group is None:
            return ST_NOT_CONFIGURED
        gpus = tuple(entity for kind, entity in group.entities if kind == FE_GPU)
        self.engine.pids.watch(group.name, gpus, _int(every_us), float(getattr(keep_s, "value", keep_s)))
        return ST_OK

    def api_dcgmGetValuesSince_v2(
        self: StandInLibrary,
        handle: Any,
        group_id: Any,
        field_group_id: Any,
        since: Any,
        next_since: Any,
        callback: Any,
        user_data: Any,
    ) -> int:
        group = self.groups.get(_int(group_id))
        fields = self.field_groups.get(_int(field_group_id))
        pid_group = group is not None and fields is not None and group.name in self.engine.pids.watches
        if not pid_group or not self._connected(handle) or FI_COMPUTE_PIDS not in fields.field_ids:  # type: ignore[union-attr]
            return super().api_dcgmGetValuesSince_v2(  # type: ignore[misc]
                handle, group_id, field_group_id, since, next_since, callback, user_data
            )
        assert group is not None
        found = self.engine.pids.entries(group.name, _int(since), self.engine.now_us())
        structs = self.structs
        address = id(getattr(user_data, "value", user_data))
        for gpu in sorted({g for g, _, _ in found}):
            own = [(ts, p) for g, ts, p in found if g == gpu]
            array = (structs.c_dcgmFieldValue_v1 * (2 * len(own)))()
            for index, (ts, sample) in enumerate(own):
                blob, util = array[2 * index], array[2 * index + 1]
                process = structs.c_dcgmRunningProcess_t()
                process.version = structs.dcgmRunningProcess_version1
                process.pid = sample.pid
                process.memoryUsed = INT64_BLANK + 2 if sample.memory is None else sample.memory
                raw = ctypes.string_at(ctypes.addressof(process), ctypes.sizeof(process))
                ctypes.memmove(ctypes.addressof(blob.value), raw, len(raw))
                blob.version, blob.status, blob.ts = structs.dcgmFieldValue_version1, ST_OK, ts
                blob.fieldId = FI_GRAPHICS_PIDS if sample.graphics else FI_COMPUTE_PIDS
                blob.fieldType = ord("b")
                util.version, util.status, util.ts = structs.dcgmFieldValue_version1, ST_OK, ts
                util.fieldId, util.fieldType = FI_GPU_UTIL_SAMPLES, ord("d")
                util.value.dbl = sample.sm
            callback(FE_GPU, gpu, array, len(array), address)
        after = max((ts for _, ts, _ in found), default=_int(since) - 1) + 1
        _obj(next_since).value = max(after, _int(since))
        return ST_OK

    def api_dcgmJobStartStats(self: StandInLibrary, handle: Any, group_id: Any, job_id: Any) -> int:
        if not self._connected(handle):
            return ST_CONNECTION_NOT_VALID
        group = self.groups.get(_int(group_id))
        if group is None:
            return ST_NOT_CONFIGURED
        if group.name not in self.engine.pids.watches:  # a job over a group without pid watches
            self.engine.pids.watch(group.name, (), 1_000_000, 0.0)
        self.engine.pids.start_job(group.name, _job(job_id), self.engine.now_us())
        return ST_OK

    def api_dcgmJobGetStats(self: StandInLibrary, handle: Any, job_id: Any, info: Any) -> int:
        if not self._connected(handle):
            return ST_CONNECTION_NOT_VALID
        out = _obj(info)
        if out.version != self.structs.dcgmJobInfo_version3:
            return ST_VER_MISMATCH
        lists = self.engine.pids.job_lists(_job(job_id), self.engine.now_us())
        out.numGpus = len(lists)
        for slot, (gpu, kinds) in enumerate(sorted(lists.items())):
            usage = out.gpus[slot]
            usage.gpuId = gpu
            for items, count_name, list_name in zip(
                kinds, ("numComputePids", "numGraphicsPids"), ("computePids", "graphicsPids"), strict=True
            ):
                setattr(usage, count_name, len(items))
                for index, item in enumerate(items):
                    entry = getattr(usage, list_name)[index]
                    entry.pid, entry.smUtil, entry.memUtil = item.pid, item.sm, item.mem
        return ST_OK

    def api_dcgmJobRemove(self: StandInLibrary, handle: Any, job_id: Any) -> int:
        if not self._connected(handle):
            return ST_CONNECTION_NOT_VALID
        self.engine.pids.remove_job(_job(job_id))
        return ST_OK
