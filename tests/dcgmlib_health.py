"""The stand-in libdcgm's health-watch functions (see tests/dcgmlib_standin.py for the library's rules).
Every ``api_*`` method is one C function, taking the ctypes arguments as the bindings pass them and
returning a DCGM status."""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any

from tests.dcgmlib_groups import ST_CONNECTION_NOT_VALID, ST_NOT_CONFIGURED, ST_OK, ST_VER_MISMATCH, Group, _int, _obj

if TYPE_CHECKING:
    from tests.dcgmlib_standin import StandInLibrary


class HealthCalls:
    """The health module's C functions (``dcgmHealthSet``, ``_v2``, ``dcgmHealthGet``,
    ``dcgmHealthCheck``): DcgmApi.cpp's ``helperHealthSet`` (a params struct of another version is
    VER_MISMATCH), ``tsapiEngineHealthCheck`` (a response of another version than the library's, v4 on
    3.x and v5 on 4.x, is VER_MISMATCH), ``DcgmModuleHealth`` (an unknown group is NOT_CONFIGURED);
    what a check finds is the engine's (``FakeDcgm.health_answer``)."""

    def _health_group(self: StandInLibrary, handle: Any, group_id: Any) -> Group | int:
        if not self._connected(handle):
            return ST_CONNECTION_NOT_VALID
        group = self.groups.get(_int(group_id))
        return ST_NOT_CONFIGURED if group is None else group

    def api_dcgmHealthSet(self: StandInLibrary, handle: Any, group_id: Any, systems: Any) -> int:
        group = self._health_group(handle, group_id)  # the legacy call: 30 s, kept 10 minutes
        if isinstance(group, int):
            return group
        self.engine.health_systems[group.name] = _int(systems) & 0xFFFFFFFF
        return ST_OK

    def api_dcgmHealthSet_v2(self: StandInLibrary, handle: Any, params: Any) -> int:
        params = _obj(params)
        if params.version != getattr(self.structs, "dcgmHealthSetParams_version2", None):
            return ST_VER_MISMATCH
        group = self._health_group(handle, params.groupId)
        if isinstance(group, int):
            return group
        self.engine.health_systems[group.name] = int(params.systems) & 0xFFFFFFFF
        return ST_OK

    def api_dcgmHealthGet(self: StandInLibrary, handle: Any, group_id: Any, systems: Any) -> int:
        group = self._health_group(handle, group_id)
        if isinstance(group, int):
            return group
        _obj(systems).value = ctypes.c_int32(self.engine.health_systems.get(group.name, 0)).value
        return ST_OK

    def api_dcgmHealthCheck(self: StandInLibrary, handle: Any, group_id: Any, response: Any) -> int:
        response = _obj(response)
        version = "dcgmHealthResponse_version4" if self.release < (4, 0, 0) else "dcgmHealthResponse_version5"
        if response.version != getattr(self.structs, version, None):
            return ST_VER_MISMATCH
        group = self._health_group(handle, group_id)
        if isinstance(group, int):
            return group
        answer = self.engine.health_answer(group.name, group.entities)
        incidents = answer.incidents[: len(response.incidents)]
        response.overallHealth, response.incidentCount = answer.overall, len(incidents)
        for out, incident in zip(response.incidents, incidents, strict=False):
            out.system, out.health = incident.system, incident.result
            out.error.code, out.error.msg = incident.code, incident.message.encode()[:1023]
            out.entityInfo.entityGroupId, out.entityInfo.entityId = incident.group, incident.entity
        return ST_OK
