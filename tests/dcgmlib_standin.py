"""A stand-in for ``libdcgm.so``, so that NVIDIA's real, unmodified DCGM Python bindings (3.3.9, 4.4.2,
4.6.0) run without DCGM installed.

The bindings reach the library only through ``dcgm_structs.dcgmLib``: every API call is
``fn = dcgmFP("dcgmX"); ret = fn(handle, byref(struct), ...)``, and a name the library does not export
raises DCGM_ST_FUNCTION_NOT_FOUND. :func:`install` sets ``dcgmLib`` to a :class:`StandInLibrary`, whose
attributes are the C functions of one release, each taking the ctypes arguments exactly as that
release's bindings pass them (``byref(x)._obj`` is the struct, ``c_void_p`` the handles and group ids)
and returning a DCGM status. Values go back through the bindings' own structs and callback type.

The engine behind it is ``tests/dcgmfake.py``'s :class:`FakeDcgm` (entities, entity status, values,
watches, link states, profiling support). This module keeps the rules of the C library and of the
host engine's group managers, read in NVIDIA/DCGM at each release tag (``dcgmlib/src/DcgmApi.cpp``,
``DcgmGroupManager.inl``, ``DcgmFieldGroup.cpp``, ``dcgmlib/dcgmlib.linux_def``):

- exports: ``dcgmConnect_v3`` from 4.5, ``dcgmGetNvLinkP2PStatus`` from 4.4; ``dcgmGetGpuStatus`` is
  exported by every release (3.x declares it in ``dcgm_test_apis.h``; its bindings have no wrapper);
  no release exports ``dcgmErrorString`` (the bindings then print "DCGM Error with code N");
- struct versions (a wrong one is DCGM_ST_VER_MISMATCH): :data:`VERSIONS`;
- handles and connections: a call on a handle that is not connected is DCGM_ST_CONNECTION_NOT_VALID;
  groups and field groups created on a connection go with it;
- entity groups: ids 0 and 1 are the engine's default groups, at most 64 groups (MAX_LIMIT), an unknown
  id is NOT_CONFIGURED, an entity the engine does not list or one already in the group is BADPARAM,
  a group holds 64 (3.x) or 1024 (4.x) entities, then MAX_LIMIT;
- field groups: 1 to 127 ids (``numFieldIds >= DCGM_MAX_FIELD_IDS_PER_FIELD_GROUP`` is BADPARAM), any
  id the release does not know rejects the whole group with BADPARAM (``AddFieldGroup`` looks each one
  up with ``DcgmFieldGetById``), at most 64 field groups (MAX_LIMIT), a name in use is DUPLICATE_KEY;
- ``dcgmEntitiesGetLatestValues``: more entities than a group holds, or more than 128 field ids, is
  BADPARAM (the client library checks before it sends);
- ``DcgmFieldGetById``: NULL for an id the release does not know
  (``gpu_exporter.backends.dcgm.releases``), else a filled ``c_dcgm_field_meta_t``;
- ``dcgmVersionInfo``: ``version:X.Y.Z;arch:...`` (DcgmBuildInfo's ``key:value;`` format);
- health watches: :class:`HealthCalls` (a stalling ``dcgmHealthCheck`` waits before taking the
  library's lock, so it holds up no other call).

Engine rules (what a lost GPU reads, timestamps, link entity ids per release, entity status) are the
fake's; this module asks it, through its adapter-level methods and its state.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from gpu_exporter.backends.dcgm.errors import DcgmError
from gpu_exporter.backends.dcgm.releases import Version, known_ids, parse_version
from gpu_exporter.backends.dcgm.values import (
    FE_GPU,
    FE_GPU_CI,
    FE_GPU_I,
    FE_SWITCH,
    ST_BADPARAM,
    ST_GPU_IS_LOST,
    ST_GPU_NOT_SUPPORTED,
    FieldValue,
)
from tests.dcgmfake import DOUBLE_FIELDS, FakeDcgm
from tests.dcgmlib_groups import ST_NO_DATA, ST_NOT_CONFIGURED, FieldGroup, Group, GroupCalls
from tests.dcgmlib_health import HealthCalls
from tests.dcgmlib_pids import PidLibraryCalls

ST_OK = 0
ST_VER_MISMATCH = -12
ST_CONNECTION_NOT_VALID = -21
ST_INSUFFICIENT_SIZE = -31

#: DcgmEntityStatus_t (dcgm_structs.h): Ok 1, Unsupported 2, Lost 4, Detached 7.
ENTITY_OK, ENTITY_UNSUPPORTED, ENTITY_LOST, ENTITY_DETACHED = 1, 2, 4, 7
#: The status dcgmGroupAddEntity answers (the fake's ``entity_status``) → the entity's DcgmEntityStatus_t.
_STATUS_OF_REFUSAL = {
    ST_GPU_IS_LOST: ENTITY_LOST,
    ST_GPU_NOT_SUPPORTED: ENTITY_UNSUPPORTED,
    ST_BADPARAM: ENTITY_DETACHED,
}
DCGM_GEGE_FLAG_ONLY_SUPPORTED = 1
DEFAULT_GROUPS = {0: ("DCGM_ALL_SUPPORTED_GPUS", FE_GPU), 1: ("DCGM_ALL_SUPPORTED_NVSWITCHES", FE_SWITCH)}
#: Field ids whose values are strings (the identity fields the backend reads) and those without an entity.
STRING_FIELDS = frozenset({1, 2, 3, 50, 51, 53, 54, 56, 57, 80, 81, 82, 85, 571, 572})
GLOBAL_FIELDS = frozenset({1, 2, 3, 4, 5, 6})

#: C function → struct-version constant names (of that release's dcgm_structs) the library accepts.
VERSIONS: dict[str, dict[Version, tuple[str, ...]]] = {
    "dcgmGetNvLinkLinkStatus": {
        (3, 3, 9): ("dcgmNvLinkStatus_version3",),
        (4, 4, 2): ("dcgmNvLinkStatus_version4",),
        (4, 6, 0): ("dcgmNvLinkStatus_version4", "dcgmNvLinkStatus_version5"),
    },
    "dcgmGroupGetInfo": {(3, 3, 9): ("c_dcgmGroupInfo_version2",), (4, 0, 0): ("c_dcgmGroupInfo_version3",)},
    "dcgmConnect_v2": {(3, 3, 9): ("c_dcgmConnectV2Params_version1", "c_dcgmConnectV2Params_version2")},
    "dcgmConnect_v3": {(4, 5, 0): ("c_dcgmConnectV3Params_version1",)},
    "dcgmGetNvLinkP2PStatus": {(4, 4, 0): ("dcgmNvLinkP2PStatus_version1",)},
    "dcgmGetGpuInstanceHierarchy": {(3, 3, 9): ("c_dcgmMigHierarchy_version2",)},
    "dcgmFieldGroupGetAll": {(3, 3, 9): ("dcgmAllFieldGroup_version1",)},
    "dcgmProfGetSupportedMetricGroups": {(3, 3, 9): ("dcgmProfGetMetricGroups_version3",)},
    "dcgmVersionInfo": {(3, 3, 9): ("dcgmVersionInfo_version2",)},
}
#: C functions and the first release that exports them (the rest: every release from 3.3.9).
SINCE: dict[str, Version] = {"dcgmConnect_v3": (4, 5, 0), "dcgmGetNvLinkP2PStatus": (4, 4, 0)}


def _int(arg: Any) -> int:
    """A handle, group id or number as the bindings pass it (c_void_p, c_int64, int; None is 0)."""
    value = getattr(arg, "value", arg)
    return int(value or 0)


def _obj(arg: Any) -> Any:
    """The object behind ``byref(x)`` (or ``x`` itself)."""
    return getattr(arg, "_obj", arg)


class CFunction:
    """One exported function: callable, and with the ``restype``/``argtypes`` ctypes lets callers set."""

    def __init__(self, name: str, body: Callable[..., Any]) -> None:
        self.__name__ = name
        self.body = body
        self.restype: Any = ctypes.c_int
        self.argtypes: Any = None

    def __call__(self, *args: Any) -> Any:
        return self.body(*args)


class StandInLibrary(PidLibraryCalls, GroupCalls, HealthCalls):
    """libdcgm of one release over one :class:`FakeDcgm` engine."""

    def __init__(self, structs: ModuleType, agent_callback: Any, engine: FakeDcgm, release: Version) -> None:
        self.structs = structs
        self.callback_type = agent_callback
        self.engine = engine
        self.release = release
        self.known = known_ids(release)
        self.lock = threading.RLock()
        self.handles: set[int] = set()
        self.next_handle = 0x1000
        self.groups: dict[int, Group] = {gid: Group(name) for gid, (name, _) in DEFAULT_GROUPS.items()}
        self.next_group = 2
        self.field_groups: dict[int, FieldGroup] = {}
        self.next_field_group = 1
        self.watched: dict[tuple[int, int], str] = {}  # (group, field group) → the fake's watch name
        self.metas: dict[int, Any] = {}
        self.calls: list[str] = []
        self.before_call: Callable[[], None] | None = None  # e.g. the launcher's scenario refresh
        self.trace: str | None = None  # a file to append "time function status" to, per call
        for method in dir(self):  # the functions this release exports become attributes; the rest stay missing
            name = method.removeprefix("api_")
            if method.startswith("api_") and self.release >= SINCE.get(name, (0, 0, 0)):
                setattr(self, name, CFunction(name, self._traced(name, getattr(self, method))))

    def _traced(self, name: str, body: Callable[..., int]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            if name == "dcgmHealthCheck":  # a stalling check holds up only itself (the engine's health
                self.engine.health_wait()  # module answers on a thread of its own), never the library
            with self.lock:
                self.calls.append(name)
                if self.before_call is not None:
                    self.before_call()
                try:
                    answer = body(*args)
                except DcgmError as err:  # the engine's refusal, as the C function's status
                    answer = int(err.code)
                if self.trace is not None:
                    with open(self.trace, "a", encoding="utf-8") as out:
                        out.write(f"{time.time():.3f} {name} {answer if isinstance(answer, int) else 'ptr'}\n")
                return answer

        return call

    # helpers -----------------------------------------------------------------------------
    def _accepts(self, function: str, version: int) -> bool:
        table = VERSIONS[function]
        names = next(names for since, names in sorted(table.items(), reverse=True) if since <= self.release)
        return version in {getattr(self.structs, name) for name in names if hasattr(self.structs, name)}

    def _connected(self, handle: Any) -> bool:
        return _int(handle) in self.handles and self.engine.connected and not self.engine.down

    def _new_handle(self, out: Any) -> int:
        self.next_handle += 1
        self.handles.add(self.next_handle)
        _obj(out).value = self.next_handle
        for name in sorted(self.engine.stale):  # left by an earlier run: an entity group and a field group
            if not any(g.name == name for g in self.groups.values()):
                self.groups[self._group_id()] = Group(name)
                self.field_groups[self._field_group_id()] = FieldGroup(name, (150,))
        return ST_OK

    def _group_id(self) -> int:
        self.next_group += 1
        return self.next_group - 1

    def _field_group_id(self) -> int:
        self.next_field_group += 1
        return self.next_field_group - 1

    def _drop_connection(self, handle: int) -> None:
        self.handles.discard(handle)
        for key in [key for key in self.watched if self.groups[key[0]].owner == handle]:
            self.engine.unwatch(self.watched.pop(key))
        self.groups = {gid: g for gid, g in self.groups.items() if g.owner != handle}
        self.field_groups = {fid: g for fid, g in self.field_groups.items() if g.owner != handle}

    def group_limit(self) -> int:
        """Entities per group and per latest-values call: DCGM_GROUP_MAX_ENTITIES (64) on 3.x, _V2 (1024) on 4.x."""
        return 64 if self.release < (4, 0, 0) else 1024

    def entity_keys(self) -> set[tuple[int, int]]:
        return {entity.key for entity in self.engine.entities()}

    def entity_status(self, gpu_id: int) -> int:
        """DcgmEntityStatus_t of GPU ``gpu_id``: the engine's refusal status for it, as
        ``DcgmGroupInfo::AddEntityToGroup`` derives one from the other (no refusal: OK)."""
        if not any(e.key == (FE_GPU, gpu_id) for e in self.engine.entity_list):
            return 0  # DcgmEntityStatusUnknown
        refusal = self.engine.entity_status.get((FE_GPU, gpu_id))
        return ENTITY_OK if refusal is None else _STATUS_OF_REFUSAL.get(refusal, ENTITY_DETACHED)

    def engine_known(self) -> frozenset[int]:
        """The ids the engine's own field table holds (its release's), which may differ from the
        library's (:attr:`known`) when a standalone engine of another release answers."""
        version = getattr(self.engine, "version", None)
        return known_ids(version) if version is not None else self.known

    def _fill_v1(self, values: Sequence[FieldValue]) -> Any:
        array = (self.structs.c_dcgmFieldValue_v1 * max(len(values), 1))()
        for out, value in zip(array, values, strict=False):
            out.version = self.structs.dcgmFieldValue_version1
            self._fill_value(out, value)
        return array

    @staticmethod
    def _fill_value(out: Any, value: FieldValue) -> None:
        out.fieldId, out.fieldType, out.status, out.ts = value.field_id, ord(value.field_type), value.status, value.ts
        if value.field_type == "s":
            out.value.str = str(value.value or "").encode()[:255]
        elif value.field_type == "d":
            out.value.dbl = float(value.value or 0.0)
        else:
            out.value.i64 = int(value.value or 0)

    def _enumerate(self, values: Sequence[FieldValue], callback: Any, user_data: Any) -> None:
        """Call the bindings' callback once per entity, with that entity's samples, as the C library does."""
        by_entity: dict[tuple[int, int], list[FieldValue]] = {}
        for value in values:
            by_entity.setdefault((value.group, value.entity), []).append(value)
        address = id(getattr(user_data, "value", user_data))
        for (group, entity), samples in by_entity.items():
            callback(group, entity, self._fill_v1(samples), len(samples), address)

    def _watch_name(self, group_id: int, field_group_id: int) -> str | int:
        """The fake's watch name for (group, field group), or the status why there is none."""
        group, fields = self.groups.get(group_id), self.field_groups.get(field_group_id)
        if group is None:
            return ST_NOT_CONFIGURED
        if fields is None:
            return ST_NO_DATA
        return group.name if group.name == fields.name else f"{group.name}|{fields.name}"

    # connection --------------------------------------------------------------------------
    def api_dcgmInit(self, *_: Any) -> int:
        return ST_OK

    def api_dcgmShutdown(self) -> int:
        return ST_OK

    def api_dcgmStartEmbedded(self, mode: Any, out: Any) -> int:
        self.engine.connect(None, 0)
        return self._new_handle(out)

    def api_dcgmStopEmbedded(self, handle: Any) -> int:
        if _int(handle) not in self.handles:
            return ST_BADPARAM
        self._drop_connection(_int(handle))
        self.engine.disconnect()
        return ST_OK

    def api_dcgmConnect_v2(self, address: bytes, params: Any, out: Any) -> int:
        if not self._accepts("dcgmConnect_v2", _obj(params).version):
            return ST_VER_MISMATCH
        self.engine.connect(address.decode(), int(_obj(params).timeoutMs))
        return self._new_handle(out)

    def api_dcgmConnect_v3(self, address: bytes, params: Any, out: Any) -> int:
        if not self._accepts("dcgmConnect_v3", _obj(params).version):
            return ST_VER_MISMATCH
        text = address.decode()
        self.engine.connect(text.split("://", 1)[1] if "://" in text else text, int(_obj(params).timeoutMs))
        return self._new_handle(out)

    def api_dcgmDisconnect(self, handle: Any) -> int:
        if _int(handle) not in self.handles:
            return ST_BADPARAM
        self._drop_connection(_int(handle))
        self.engine.disconnect()
        return ST_OK

    def api_dcgmVersionInfo(self, info: Any) -> int:
        info = _obj(info)
        if not self._accepts("dcgmVersionInfo", info.version):
            return ST_VER_MISMATCH
        major, minor, patch = self.release
        info.rawBuildInfoString = (
            f"version:{major}.{minor}.{patch};arch:x86_64;buildtype:Release;buildid:0;commit:standin;"
            f"branch:rel_dcgm_{major}_{minor};builddate:2025-01-01;buildplatform:Linux x86_64;"
        ).encode()
        return ST_OK

    def api_DcgmFieldsInit(self) -> int:
        return ST_OK

    def api_DcgmFieldGetById(self, field_id: Any) -> Any:
        """A pointer to the field's meta, or NULL for an id this release does not know."""
        import dcgm_fields  # the same release's, imported with dcgm_structs

        number = _int(field_id)
        pointer_type = ctypes.POINTER(dcgm_fields.c_dcgm_field_meta_t)
        if number not in self.known:
            return pointer_type()
        if number not in self.metas:
            meta = dcgm_fields.c_dcgm_field_meta_t()
            meta.fieldId = number
            kind = "s" if number in STRING_FIELDS else "d" if number in DOUBLE_FIELDS else "i"
            meta.fieldType = kind.encode()
            meta.size = 8
            meta.tag = f"field_{number}".encode()
            meta.entityLevel = 0 if number in GLOBAL_FIELDS else FE_GPU
            self.metas[number] = meta
        return ctypes.pointer(self.metas[number])

    # discovery ---------------------------------------------------------------------------
    def api_dcgmGetEntityGroupEntities(self, handle: Any, group: Any, out: Any, count: Any, flags: Any) -> int:
        if not self._connected(handle):
            return ST_CONNECTION_NOT_VALID
        ids = [e.id for e in self.engine.entities() if e.group == _int(group)]
        if _int(group) == FE_GPU and _int(flags) & DCGM_GEGE_FLAG_ONLY_SUPPORTED:
            ids = [gpu for gpu in ids if self.entity_status(gpu) == ENTITY_OK]
        capacity = _obj(count).value
        _obj(count).value = len(ids)
        if len(ids) > capacity:
            return ST_INSUFFICIENT_SIZE
        for index, entity in enumerate(ids):
            out[index] = entity
        return ST_OK

    def api_dcgmGetGpuStatus(self, handle: Any, gpu_id: Any, status: Any) -> int:
        if not self._connected(handle):
            return ST_CONNECTION_NOT_VALID
        _obj(status).value = self.entity_status(_int(gpu_id))
        return ST_OK

    def api_dcgmGetGpuInstanceHierarchy(self, handle: Any, hierarchy: Any) -> int:
        hierarchy = _obj(hierarchy)
        if not self._accepts("dcgmGetGpuInstanceHierarchy", hierarchy.version):
            return ST_VER_MISMATCH
        if not self._connected(handle):
            return ST_CONNECTION_NOT_VALID
        migs = [e for e in self.engine.entities() if e.group in (FE_GPU_I, FE_GPU_CI)]
        hierarchy.count = len(migs)
        for item, entity in zip(hierarchy.entityList, migs, strict=False):
            item.entity.entityGroupId, item.entity.entityId = entity.group, entity.id
            assert entity.parent is not None
            item.parent.entityGroupId, item.parent.entityId = entity.parent
            item.info.nvmlInstanceId = entity.gpu_instance or 0
            item.info.nvmlComputeInstanceId = entity.compute_instance or 0
        return ST_OK

    def api_dcgmGetNvLinkLinkStatus(self, handle: Any, status: Any) -> int:
        status = _obj(status)
        if not self._accepts("dcgmGetNvLinkLinkStatus", status.version):
            return ST_VER_MISMATCH
        if not self._connected(handle):
            return ST_CONNECTION_NOT_VALID
        states = self.engine.link_states()
        entities = self.engine.entities()
        for owners, count, group in (("gpus", "numGpus", FE_GPU), ("nvSwitches", "numNvSwitches", FE_SWITCH)):
            ids = [e.id for e in entities if e.group == group]
            array = getattr(status, owners)
            setattr(status, count, min(len(ids), len(array)))
            for out, owner in zip(array, ids, strict=False):
                out.entityId = owner
                for port in range(len(out.linkState)):
                    out.linkState[port] = states.get((group, owner, port), 0)  # 0: not supported
        return ST_OK

    def api_dcgmGetNvLinkP2PStatus(self, handle: Any, status: Any) -> int:
        status = _obj(status)
        if not self._accepts("dcgmGetNvLinkP2PStatus", status.version):
            return ST_VER_MISMATCH
        if not self._connected(handle):
            return ST_CONNECTION_NOT_VALID
        p2p = self.engine.p2p_status()
        gpus = [e.id for e in self.engine.entities() if e.group == FE_GPU]
        status.numGpus = len(gpus)
        for out, gpu in zip(status.gpus, gpus, strict=False):
            out.entityId = gpu
            # CreateNvlinkP2PStatus: one entry per GPU the engine has (itself: not supported, 5); the
            # entries past them stay as the caller left them (zeros, which read as OK).
            for peer in range(min(len(gpus), len(out.linkStatus))):
                out.linkStatus[peer] = 5 if peer == gpu else p2p.get(gpu, {}).get(peer, 6)  # 6: unknown
        return ST_OK


def release_of(structs: ModuleType) -> Version:
    """The release whose bindings ``structs`` is, from its folder's name (``v4.4.2``)."""
    folder = os.path.basename(os.path.dirname(os.path.abspath(structs.__file__ or "")))
    parsed = parse_version(folder.lstrip("v"))
    if parsed is None:
        raise ValueError(f"{structs.__file__}: name the bindings' folder after their release (v4.4.2)")
    return parsed


def install(structs: ModuleType, engine: FakeDcgm, release: Version | None = None) -> StandInLibrary:
    """Make ``structs`` (a release's real ``dcgm_structs``, imported) use a stand-in over ``engine`` as its
    libdcgm: ``_dcgmInit`` then finds the library loaded and never calls CDLL."""
    import dcgm_agent  # the same release's, beside it

    library = StandInLibrary(
        structs, dcgm_agent.dcgmFieldValueEntityEnumeration_f, engine, release or release_of(structs)
    )
    with structs.libLoadLock:
        structs.dcgmLib = library
        structs._dcgmGetFunctionPointer_cache.clear()  # function pointers of an earlier library
    return library
