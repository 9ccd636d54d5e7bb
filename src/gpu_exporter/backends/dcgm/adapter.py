"""The narrow adapter: the only code that imports DCGM's Python bindings ("pydcgm").

The bindings are plain modules installed with DCGM (not on PyPI), imported lazily by
:func:`load_adapter` from, in order: ``$DCGM_PYTHON_PATH`` (one or more folders), DCGM 4.x's
``/usr/share/datacenter-gpu-manager-4/bindings/python3``, DCGM 3.x's
``/usr/local/dcgm/bindings/python3``, then ``sys.path``. Only ``dcgm_structs`` (library loading,
structs, ``DCGMError``) and ``dcgm_agent`` (the C API, one Python function per C function) are
used; the higher-level ``pydcgm`` classes keep process-wide state and destructors we do not want.

:class:`DcgmAdapter` is the whole surface the backend sees: plain Python values, DCGM's raw codes
and blank sentinels untouched (decoding is :mod:`gpu_exporter.backends.dcgm.values`' job), and
typed errors. ``tests/dcgmfake.py`` implements the same protocol in memory; the contract tests run
against both.
"""

from __future__ import annotations

import ctypes
import importlib
import logging
import os
import threading
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from gpu_exporter.backends.dcgm.errors import (
    DcgmConnectionLost,
    DcgmError,
    DcgmModuleNotLoaded,
    DcgmNoPermission,
    DcgmNotSupported,
    DcgmProfilingInUse,
    DcgmUnavailable,
    dcgm_error,
)
from gpu_exporter.backends.dcgm.incidents import HealthResponse, Incident
from gpu_exporter.backends.dcgm.loader import (
    DCGM3_BINDINGS,
    DCGM4_BINDINGS,
    ENV_PATH,
    candidate_dirs,
    import_bindings,
    library_dirs,
    library_file,
    library_problem,
)
from gpu_exporter.backends.dcgm.pidcalls import PidCalls
from gpu_exporter.backends.dcgm.protocol import GPU_STATUSES, DcgmAdapter, Refused
from gpu_exporter.backends.dcgm.releases import KNOWN, NEWEST, Version, known_ids, parse_version
from gpu_exporter.backends.dcgm.values import (
    FE_GPU,
    FE_GPU_CI,
    FE_LINK,
    FE_SWITCH,
    GROUP_MAX_ENTITIES_3,
    LINK_STATE_NOT_SUPPORTED,
    REFUSED_STATUSES,
    ST_BADPARAM,
    ST_CONNECTION_NOT_VALID,
    ST_NOT_WATCHED,
    Entity,
    FieldValue,
    link_entity_id,
)

log = logging.getLogger(__name__)

__all__ = [
    "DcgmAdapter", "DcgmConnectionLost", "DcgmError", "DcgmModuleNotLoaded", "DcgmNoPermission", "DcgmNotSupported",
    "DcgmProfilingInUse", "DcgmUnavailable", "Refused", "PydcgmAdapter", "dcgm_error", "load_adapter",
    "DCGM3_BINDINGS", "DCGM4_BINDINGS", "ENV_PATH", "candidate_dirs", "library_dirs", "library_file",
    "library_problem",
]  # fmt: skip

#: DCGM_OPERATION_MODE_AUTO: the engine samples watched fields on its own schedule.
_OPERATION_MODE_AUTO = 1
#: DCGM_GROUP_EMPTY: a group we fill with the entities we choose.
_GROUP_EMPTY = 1
#: dcgmGroupAddEntity's answer when the group is full (DCGM_ST_MAX_LIMIT).
_ST_MAX_LIMIT = -24
#: dcgmGetEntityGroupEntities flag: only entities in status OK (a lost, unsupported, detached or
#: inaccessible GPU is left out; ``DcgmCacheManager::GetGpuIds(activeOnly)``).
_ONLY_SUPPORTED = 1


def load_adapter() -> PydcgmAdapter:
    """Import the bindings (see the module docstring for the search order); raises
    :class:`DcgmUnavailable` when none can be imported. Loads nothing native yet."""
    tried = []
    for folder in candidate_dirs():
        if not os.path.isfile(os.path.join(folder, "dcgm_agent.py")):
            tried.append(folder)
            continue
        try:
            structs, agent = import_bindings(folder)
        except Exception as err:  # any failure inside vendor modules means "unusable", said once
            raise DcgmUnavailable(
                "bindings_broken", f"the DCGM Python bindings in {folder} failed to import: {err!r}"
            ) from err
        return PydcgmAdapter(structs, agent, folder)
    try:
        structs, agent = import_bindings(None)
    except ImportError as err:
        listed = ", ".join(tried)
        raise DcgmUnavailable(
            "bindings_not_found", f"pydcgm (dcgm_agent.py) not found in {listed} or on sys.path"
        ) from err
    return PydcgmAdapter(structs, agent, "sys.path")


def _text(raw: object) -> str:
    if isinstance(raw, bytes):
        return raw.split(b"\0", 1)[0].decode("utf-8", "replace")
    return str(raw)


def _field_value(group: int, entity: int, raw: Any) -> FieldValue:
    """A ``c_dcgmFieldValue_v1`` (entity passed separately) as plain Python values."""
    field_type = chr(raw.fieldType)
    value: int | float | str | None
    if field_type in ("i", "t"):
        value = int(raw.value.i64)
    elif field_type == "d":
        value = float(raw.value.dbl)
    elif field_type == "s":
        value = _text(raw.value.str)
    else:
        value = None
    return FieldValue(int(group), int(entity), int(raw.fieldId), field_type, int(raw.status), int(raw.ts), value)


def _collect(group: int, entity: int, values: Any, count: int, user_data: Any) -> int:
    """``dcgmFieldValueEntityEnumeration_f``: DCGM calls it once per entity with that entity's
    samples; they are appended to the list passed as user data."""
    try:
        sink = ctypes.cast(user_data, ctypes.py_object).value
        for index in range(count):
            sink.append(_field_value(group, entity, values[index]))
    except Exception:  # an exception must not unwind through C; it is logged instead
        log.exception("decoding DCGM field values failed")
    return 0


class PydcgmAdapter(PidCalls):
    """:class:`DcgmAdapter` over the real bindings (``dcgm_agent`` calls, DCGM 3.3 to 4.6); the
    process calls are :class:`~gpu_exporter.backends.dcgm.pidcalls.PidCalls`'."""

    def __init__(self, structs: ModuleType, agent: ModuleType, source: str) -> None:
        self._structs = structs
        self._agent = agent
        self.source = source
        self._handle: Any = None
        self._embedded = False
        self._groups: dict[str, tuple[Any, Any]] = {}  # name → (group id, field group id)
        self._lock = threading.Lock()
        self._library_loaded = False
        self._release: Version | None = None
        # 4.x bindings name the 1024-entity limit ..._V2 (3.x: DCGM_GROUP_MAX_ENTITIES, 64).
        limit = getattr(structs, "DCGM_GROUP_MAX_ENTITIES_V2", None) or getattr(structs, "DCGM_GROUP_MAX_ENTITIES", 0)
        self.group_limit = int(limit) if isinstance(limit, int) and limit > 0 else GROUP_MAX_ENTITIES_3
        # Kept on the instance: DCGM calls it during dcgmGetLatestValues_v2 / dcgmGetValuesSince_v2.
        self._callback = agent.dcgmFieldValueEntityEnumeration_f(_collect)

    # connection ------------------------------------------------------------------------------
    def _load_library(self) -> None:
        """``dcgm_structs._dcgmInit`` (finds libdcgm.so.4 or .so.3), then ``dcgmInit``, once. The
        bindings turn every loader failure into DCGM_ST_LIBRARY_NOT_FOUND; the error says which file
        they look for, where, and why an existing file did not load (see :func:`library_problem`)."""
        if self._library_loaded:
            return
        try:
            self._structs._dcgmInit()
        except self._structs.DCGMError as err:
            reason, detail = library_problem(getattr(self._structs, "__file__", None) or "")
            raise DcgmUnavailable(reason, f"{detail} ({err}); bindings from {self.source}") from err
        try:
            self._agent.dcgmInit()
        except self._structs.DCGMError as err:
            raise DcgmUnavailable("init_failed", f"dcgmInit failed: {err}; bindings from {self.source}") from err
        self._library_loaded = True
        self._release = self._library_release()

    def _library_release(self) -> Version | None:
        """The library's release from ``dcgmVersionInfo`` (``version:4.4.2;...``), else the bindings'
        generation (3.x bindings name the 64-entity limit only; a 3.x engine is taken as 3.3.5)."""
        try:
            info = self._agent.dcgmVersionInfo()
            found = parse_version(_text(info.rawBuildInfoString))
        except Exception as err:  # noqa: BLE001 - a missing function or a failed call: the bindings decide
            log.debug("dcgmVersionInfo: %r", err)
            found = None
        if found is not None:
            return found
        return NEWEST if self.group_limit > GROUP_MAX_ENTITIES_3 else min(KNOWN)

    @property
    def release(self) -> str:
        return ".".join(map(str, self._release)) if self._release is not None else ""

    def _legacy_links(self) -> bool:
        """DCGM 3.x packs a link entity id as GPU/switch id in bits 16-31 (4.3 and later: 24-31)."""
        return self._release is not None and self._release < (4, 0, 0)

    def connect(self, address: str | None, timeout_ms: int) -> None:
        self._load_library()
        self.disconnect()
        agent, structs = self._agent, self._structs
        try:
            if address is None:
                handle = agent.dcgmStartEmbedded(_OPERATION_MODE_AUTO)
            elif hasattr(agent, "dcgmConnect_v3") and hasattr(structs, "c_dcgmConnectV3Params_v1"):
                # DCGM 4.5 and later: a connection string with a scheme.
                params = structs.c_dcgmConnectV3Params_v1()
                params.persistAfterDisconnect = 0
                params.timeoutMs = timeout_ms
                handle = agent.dcgmConnect_v3(b"tcp://" + address.encode(), params)
            else:
                # DCGM 3.x to 4.4: HOST:PORT and a flag for unix sockets.
                params = structs.c_dcgmConnectV2Params_v2()
                params.persistAfterDisconnect = 0
                params.timeoutMs = timeout_ms
                params.addressIsUnixSocket = 0
                handle = agent.dcgmConnect_v2(address.encode(), params)
        except structs.DCGMError as err:
            where = "starting an embedded host engine" if address is None else f"connecting to {address}"
            raise dcgm_error(int(err.value), f"{where}: {err}") from err
        with self._lock:
            self._handle, self._embedded = handle, address is None
            self._groups.clear()

    def disconnect(self) -> None:
        with self._lock:
            handle, self._handle = self._handle, None
            self._groups.clear()
        if handle is None:
            return
        try:
            if self._embedded:
                self._agent.dcgmStopEmbedded(handle)
            else:
                self._agent.dcgmDisconnect(handle)
        except self._structs.DCGMError as err:
            log.debug("disconnecting from DCGM: %s", err)

    def _call(self, function: str, *args: Any) -> Any:
        """``dcgm_agent.<function>(handle, *args)``, with DCGMError turned into a typed error."""
        handle = self._handle
        if handle is None:
            raise DcgmConnectionLost(ST_CONNECTION_NOT_VALID, f"{function}: not connected to DCGM")
        try:
            return getattr(self._agent, function)(handle, *args)
        except self._structs.DCGMError as err:
            raise dcgm_error(int(err.value), f"{function}: {err}") from err

    def _optional(self, function: str, *args: Any) -> Any:
        """Like :meth:`_call`, but None when the feature is missing (no NVSwitch module, no MIG)."""
        try:
            return self._call(function, *args)
        except DcgmConnectionLost:
            raise
        except DcgmError as err:
            log.debug("%s", err)
            return None

    # discovery -------------------------------------------------------------------------------
    def entities(self) -> list[Entity]:
        found = [Entity(FE_GPU, int(gpu)) for gpu in self._call("dcgmGetEntityGroupEntities", FE_GPU, 0)]
        hierarchy = self._optional("dcgmGetGpuInstanceHierarchy")
        for index in range(int(hierarchy.count) if hierarchy is not None else 0):
            item = hierarchy.entityList[index]
            group = int(item.entity.entityGroupId)
            found.append(
                Entity(
                    group,
                    int(item.entity.entityId),
                    (int(item.parent.entityGroupId), int(item.parent.entityId)),
                    gpu_instance=int(item.info.nvmlInstanceId),
                    compute_instance=int(item.info.nvmlComputeInstanceId) if group == FE_GPU_CI else None,
                )
            )
        switches = self._optional("dcgmGetEntityGroupEntities", FE_SWITCH, 0) or []
        found += [Entity(FE_SWITCH, int(switch)) for switch in switches]
        try:
            states = self.link_states()
        except DcgmConnectionLost:
            raise
        except DcgmError as err:
            log.debug("%s", err)  # no NVLink status: no link entities
            states = {}
        for group, parent, port in states:
            entity_id = link_entity_id(group, parent, port, legacy=self._legacy_links())
            found.append(Entity(FE_LINK, entity_id, (group, parent), link=port))
        return found

    def link_states(self) -> dict[tuple[int, int, int], int]:
        status = self._call("dcgmGetNvLinkLinkStatus")
        states: dict[tuple[int, int, int], int] = {}
        # The struct's version differs by release (18 links per GPU up to 4.5, 36 in 4.6); len() adapts.
        owner_lists = ((status.gpus, status.numGpus, FE_GPU), (status.nvSwitches, status.numNvSwitches, FE_SWITCH))
        for owners, count, group in owner_lists:
            for owner in owners[: int(count)]:
                for port, state in enumerate(owner.linkState):
                    if int(state) != LINK_STATE_NOT_SUPPORTED:
                        states[(group, int(owner.entityId), port)] = int(state)
        return states

    def p2p_status(self) -> dict[int, dict[int, int]]:
        if not hasattr(self._agent, "dcgmGetNvLinkP2PStatus"):  # bindings of a release without the call
            return {}
        status = self._structs.c_dcgmNvLinkP2PStatus_v1()
        self._call("dcgmGetNvLinkP2PStatus", status)
        return {
            int(gpu.entityId): dict(enumerate(int(s) for s in gpu.linkStatus))
            for gpu in status.gpus[: int(status.numGpus)]
        }

    def known_fields(self, field_ids: Sequence[int]) -> frozenset[int]:
        """The ids of ``field_ids`` the library's field table holds (``DcgmFieldGetById`` per id: a
        NULL answer is an id this release does not know); without that call, the ids the reported
        release knows (:mod:`.releases`)."""
        try:
            fields = importlib.import_module("dcgm_fields")
            return frozenset(int(f) for f in field_ids if fields.DcgmFieldGetById(int(f)) is not None)
        except Exception as err:  # noqa: BLE001 - bindings without the module, or a library without the call
            log.debug("DcgmFieldGetById: %r; using DCGM %s's field table", err, self.release or "3.3")
        return frozenset(int(f) for f in field_ids) & known_ids(self._release or min(KNOWN))

    def gpu_status(self, gpu_id: int) -> str:
        """``dcgmGetGpuStatus`` (DCGM 4.x) as a word of :data:`GPU_STATUSES`; on 3.x, which has no
        such call, ``ok`` when the GPU is among the supported (status OK) GPUs, else ``inactive``."""
        if hasattr(self._agent, "dcgmGetGpuStatus"):
            try:
                return GPU_STATUSES.get(int(self._call("dcgmGetGpuStatus", gpu_id)), "unknown")
            except DcgmConnectionLost:
                raise
            except DcgmError as err:
                if err.code != -20:  # DCGM_ST_FUNCTION_NOT_FOUND: a library older than its bindings
                    raise
        active = {int(gpu) for gpu in self._call("dcgmGetEntityGroupEntities", FE_GPU, _ONLY_SUPPORTED)}
        return "ok" if gpu_id in active else "inactive"

    # groups and watches ----------------------------------------------------------------------
    def remove_stale(self, prefix: str) -> int:
        removed = 0
        ours = set(self._groups)
        for group_id in self._call("dcgmGroupGetAllIds"):
            info = self._optional("dcgmGroupGetInfo", ctypes.c_void_p(group_id))
            name = _text(info.groupName) if info is not None else ""
            if name.startswith(prefix) and name not in ours:
                self._optional("dcgmGroupDestroy", ctypes.c_void_p(group_id))
                removed += 1
        every = self._call("dcgmFieldGroupGetAll")
        for index in range(int(every.numFieldGroups)):
            field_group = every.fieldGroups[index]
            name = _text(field_group.fieldGroupName)
            if name.startswith(prefix) and name not in ours:
                self._optional("dcgmFieldGroupDestroy", ctypes.c_void_p(field_group.fieldGroupId))
                removed += 1
        return removed

    def watch(
        self,
        name: str,
        entities: Sequence[tuple[int, int]],
        field_ids: Sequence[int],
        update_us: int,
        keep_age_s: float,
    ) -> Refused:
        if len(entities) > self.group_limit:
            raise DcgmError(
                _ST_MAX_LIMIT, f"{name}: {len(entities)} entities; a group holds at most {self.group_limit}"
            )
        label = name.encode()
        group = self._call("dcgmGroupCreate", _GROUP_EMPTY, label)
        field_group = None
        refused: Refused = {}
        try:
            for entity_group, entity_id in entities:
                try:
                    self._call("dcgmGroupAddEntity", group, entity_group, entity_id)
                except DcgmError as err:
                    if err.code not in REFUSED_STATUSES:
                        raise
                    refused[(entity_group, entity_id)] = err.code
            if len(refused) == len(entities):
                self._optional("dcgmGroupDestroy", group)
                return refused
            field_group = self._call("dcgmFieldGroupCreate", [int(field) for field in field_ids], label)
            self._call("dcgmWatchFields", group, field_group, int(update_us), float(keep_age_s), 0)
        except DcgmError:
            if field_group is not None:
                self._optional("dcgmFieldGroupDestroy", field_group)
            self._optional("dcgmGroupDestroy", group)
            raise
        with self._lock:
            self._groups[name] = (group, field_group)
        return refused

    def unwatch(self, name: str) -> None:
        with self._lock:
            ids = self._groups.pop(name, None)
        if ids is None:
            return
        group, field_group = ids
        self._optional("dcgmUnwatchFields", group, field_group)
        self._optional("dcgmFieldGroupDestroy", field_group)
        self._optional("dcgmGroupDestroy", group)

    def _ids(self, name: str) -> tuple[Any, Any]:
        ids = self._groups.get(name)
        if ids is None:
            raise DcgmError(ST_NOT_WATCHED, f"no watched group named {name!r}")
        return ids

    def update_all(self) -> None:
        self._call("dcgmUpdateAllFields", 1)

    # reads -----------------------------------------------------------------------------------
    def latest(self, name: str) -> list[FieldValue]:
        group, field_group = self._ids(name)
        sink: list[FieldValue] = []
        self._call("dcgmGetLatestValues_v2", group, field_group, self._callback, sink)
        return sink

    def latest_of(self, entities: Sequence[tuple[int, int]], field_ids: Sequence[int]) -> list[FieldValue]:
        if len(entities) > self.group_limit:  # the engine's own answer (dcgmEntitiesGetLatestValues)
            raise DcgmError(ST_BADPARAM, f"dcgmEntitiesGetLatestValues: {len(entities)} entities, at most "
                            f"{self.group_limit}")  # fmt: skip
        pairs = [self._structs.c_dcgmGroupEntityPair_t(int(group), int(entity)) for group, entity in entities]
        raw = self._call("dcgmEntitiesGetLatestValues", pairs, [int(field) for field in field_ids], 0)
        return [_field_value(int(value.entityGroupId), int(value.entityId), value) for value in raw]

    def since(self, name: str, since_us: int) -> tuple[list[FieldValue], int]:
        group, field_group = self._ids(name)
        sink: list[FieldValue] = []
        next_since = self._call("dcgmGetValuesSince_v2", group, field_group, int(since_us), self._callback, sink)
        return sink, int(next_since)

    def profiling_fields(self, gpu_id: int) -> frozenset[int]:
        groups = self._call("dcgmProfGetSupportedMetricGroups", gpu_id)
        fields: set[int] = set()
        for index in range(int(groups.numMetricGroups)):
            metric_group = groups.metricGroups[index]
            fields.update(int(metric_group.fieldIds[i]) for i in range(int(metric_group.numFieldIds)))
        return frozenset(fields)

    # health watches --------------------------------------------------------------------------
    def _health_call(self, function: str, *args: Any) -> Any:
        """:meth:`_call`, with bindings that lack the function answering DCGM_ST_FUNCTION_NOT_FOUND."""
        if not hasattr(self._agent, function):
            raise dcgm_error(-20, f"{function}: not in the DCGM bindings from {self.source}")
        return self._call(function, *args)

    def health_set(self, name: str, systems: int, update_us: int, keep_age_s: float) -> None:
        group, _ = self._ids(name)
        self._health_call("dcgmHealthSet_v2", group, int(systems), int(update_us), float(keep_age_s))

    def health_get(self, name: str) -> int:
        group, _ = self._ids(name)
        return int(self._health_call("dcgmHealthGet", group)) & 0xFFFFFFFF  # a c_int32: ALL reads as -1

    def health_check(self, name: str) -> HealthResponse:
        group, _ = self._ids(name)
        raw = self._health_call("dcgmHealthCheck", group)  # the bindings' default version is their release's
        count = min(int(raw.incidentCount), len(raw.incidents))
        incidents = tuple(
            Incident(
                int(item.system) & 0xFFFFFFFF,
                int(item.health),
                int(item.error.code),
                _text(item.error.msg),
                int(item.entityInfo.entityGroupId),
                int(item.entityInfo.entityId),
            )
            for item in raw.incidents[:count]
        )
        return HealthResponse(int(raw.overallHealth), incidents)
