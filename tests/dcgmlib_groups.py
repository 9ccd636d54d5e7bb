"""The stand-in libdcgm's entity groups, field groups, watches and reads (see tests/dcgmlib_standin.py
for the rules and where they come from). Every ``api_*`` method is one C function, taking the ctypes
arguments as the bindings pass them and returning a DCGM status."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpu_exporter.backends.dcgm.values import FE_GPU, ST_BADPARAM, FieldValue

if TYPE_CHECKING:
    from tests.dcgmlib_standin import StandInLibrary

ST_OK = 0
ST_NOT_CONFIGURED = -5
ST_NO_DATA = -14
ST_NOT_WATCHED = -16
ST_CONNECTION_NOT_VALID = -21
ST_MAX_LIMIT = -24
ST_DUPLICATE_KEY = -26
ST_VER_MISMATCH = -12
#: DCGM_GROUP_DEFAULT, DCGM_GROUP_EMPTY, DCGM_GROUP_DEFAULT_NVSWITCHES.
GROUP_DEFAULT, GROUP_EMPTY, GROUP_DEFAULT_NVSWITCHES = 0, 1, 2
MAX_GROUPS = 64
MAX_FIELD_GROUPS = 64
MAX_FIELD_IDS = 128
MAX_STR_LENGTH = 256


def _int(arg: Any) -> int:
    """A handle, group id or number as the bindings pass it (c_void_p, c_int64, int; None is 0)."""
    value = getattr(arg, "value", arg)
    return int(value or 0)


def _obj(arg: Any) -> Any:
    """The object behind ``byref(x)`` (or ``x`` itself)."""
    return getattr(arg, "_obj", arg)


def _text(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


@dataclass
class Group:
    name: str
    entities: list[tuple[int, int]] = field(default_factory=list)
    owner: int | None = None  # the connection that made it (None: the engine's own, or left by an earlier run)


@dataclass
class FieldGroup:
    name: str
    field_ids: tuple[int, ...]
    owner: int | None = None


class GroupCalls:
    """Mixed into :class:`~tests.dcgmlib_standin.StandInLibrary`."""

    # entity groups -----------------------------------------------------------------------
    def api_dcgmGroupCreate(self: StandInLibrary, handle: Any, kind: Any, name: Any, out: Any) -> int:
        if not self._connected(handle):
            return ST_CONNECTION_NOT_VALID
        label = _text(name)
        if not label or len(label) >= MAX_STR_LENGTH:
            return ST_BADPARAM
        if len(self.groups) >= MAX_GROUPS:
            return ST_MAX_LIMIT
        group = Group(label, owner=_int(handle))
        if _int(kind) == GROUP_DEFAULT:
            group.entities = [(FE_GPU, gpu) for gpu in self._ok_gpus()]
        elif _int(kind) != GROUP_EMPTY:
            return ST_BADPARAM
        group_id = self._group_id()
        self.groups[group_id] = group
        _obj(out).value = group_id
        return ST_OK

    def _ok_gpus(self: StandInLibrary) -> list[int]:
        return [e.id for e in self.engine.entity_list if e.group == FE_GPU and self.entity_status(e.id) == 1]

    def api_dcgmGroupDestroy(self: StandInLibrary, handle: Any, group_id: Any) -> int:
        if not self._connected(handle):
            return ST_CONNECTION_NOT_VALID
        number = _int(group_id)
        if number not in self.groups or number in (0, 1):
            return ST_NOT_CONFIGURED
        for key in [key for key in self.watched if key[0] == number]:
            self.engine.unwatch(self.watched.pop(key))
        self.engine.stale.discard(self.groups.pop(number).name)
        return ST_OK

    def api_dcgmGroupAddEntity(self: StandInLibrary, handle: Any, group_id: Any, entity_group: Any, entity: Any) -> int:
        if not self._connected(handle):
            return ST_CONNECTION_NOT_VALID
        group = self.groups.get(_int(group_id))
        if group is None:
            return ST_NOT_CONFIGURED
        key = (_int(entity_group), _int(entity))
        if key not in self.entity_keys():
            return ST_BADPARAM  # DcgmEntityStatusUnknown
        refusal = self.engine.refusal(key)
        if refusal is not None:
            return int(refusal)
        if key in group.entities:
            return ST_BADPARAM
        if len(group.entities) >= self.engine.group_limit:  # the engine's (its release's) limit
            return ST_MAX_LIMIT
        group.entities.append(key)
        return ST_OK

    def api_dcgmGroupGetAllIds(self: StandInLibrary, handle: Any, out: Any, count: Any) -> int:
        if not self._connected(handle):
            return ST_CONNECTION_NOT_VALID
        ids = sorted(self.groups)
        for index, group_id in enumerate(ids):
            out[index] = group_id
        _obj(count).value = len(ids)
        return ST_OK

    def api_dcgmGroupGetInfo(self: StandInLibrary, handle: Any, group_id: Any, info: Any) -> int:
        info = _obj(info)
        if not self._accepts("dcgmGroupGetInfo", info.version):
            return ST_VER_MISMATCH
        if not self._connected(handle):
            return ST_CONNECTION_NOT_VALID
        group = self.groups.get(_int(group_id))
        if group is None:
            return ST_NOT_CONFIGURED
        entities = group.entities
        if _int(group_id) in (0, 1):  # the default groups follow the engine's entities
            entities = [(FE_GPU, gpu) for gpu in self._ok_gpus()] if _int(group_id) == 0 else []
        info.groupName = group.name.encode()
        info.count = len(entities)
        for out, (entity_group, entity) in zip(info.entityList, entities, strict=False):
            out.entityGroupId, out.entityId = entity_group, entity
        return ST_OK

    # field groups ------------------------------------------------------------------------
    def api_dcgmFieldGroupCreate(self: StandInLibrary, handle: Any, count: Any, ids: Any, name: Any, out: Any) -> int:
        number = _int(count)
        label = _text(name)
        if number < 1 or number >= MAX_FIELD_IDS or not label or len(label) >= MAX_STR_LENGTH:
            return ST_BADPARAM
        if not self._connected(handle):
            return ST_CONNECTION_NOT_VALID
        field_ids = tuple(int(x) for x in _obj(ids)[:number])
        if any(field_id not in self.engine_known() for field_id in field_ids):
            return ST_BADPARAM  # AddFieldGroup: DcgmFieldGetById is NULL for one of them
        if len(self.field_groups) >= MAX_FIELD_GROUPS:
            return ST_MAX_LIMIT
        if any(group.name == label for group in self.field_groups.values()):
            return ST_DUPLICATE_KEY
        field_group_id = self._field_group_id()
        self.field_groups[field_group_id] = FieldGroup(label, field_ids, owner=_int(handle))
        _obj(out).value = field_group_id
        return ST_OK

    def api_dcgmFieldGroupDestroy(self: StandInLibrary, handle: Any, field_group_id: Any) -> int:
        if not self._connected(handle):
            return ST_CONNECTION_NOT_VALID
        number = _int(field_group_id)
        if number not in self.field_groups:
            return ST_NO_DATA
        for key in [key for key in self.watched if key[1] == number]:  # the engine unwatches its fields
            self.engine.unwatch(self.watched.pop(key))
        self.engine.stale.discard(self.field_groups.pop(number).name)
        return ST_OK

    def api_dcgmFieldGroupGetAll(self: StandInLibrary, handle: Any, every: Any) -> int:
        every = _obj(every)
        if not self._accepts("dcgmFieldGroupGetAll", every.version):
            return ST_VER_MISMATCH
        if not self._connected(handle):
            return ST_CONNECTION_NOT_VALID
        every.numFieldGroups = len(self.field_groups)
        for out, (field_group_id, group) in zip(every.fieldGroups, sorted(self.field_groups.items()), strict=False):
            out.version = getattr(self.structs, "dcgmFieldGroupInfo_version1", 0)
            out.fieldGroupId = field_group_id
            out.fieldGroupName = group.name.encode()
            out.numFieldIds = len(group.field_ids)
            for index, field_id in enumerate(group.field_ids):
                out.fieldIds[index] = field_id
        return ST_OK

    # watches -----------------------------------------------------------------------------
    def api_dcgmWatchFields(
        self: StandInLibrary, handle: Any, group_id: Any, field_group_id: Any, every_us: Any, keep_s: Any, keep: Any
    ) -> int:
        if not self._connected(handle):
            return ST_CONNECTION_NOT_VALID
        name = self._watch_name(_int(group_id), _int(field_group_id))
        if isinstance(name, int):
            return name
        group, fields = self.groups[_int(group_id)], self.field_groups[_int(field_group_id)]
        if (_int(group_id), _int(field_group_id)) in self.watched:
            self.engine.unwatch(name)  # watching again updates the watch
        self.engine.watch(
            name, list(group.entities), list(fields.field_ids), _int(every_us), float(getattr(keep_s, "value", keep_s))
        )
        self.watched[(_int(group_id), _int(field_group_id))] = name
        return ST_OK

    def api_dcgmUnwatchFields(self: StandInLibrary, handle: Any, group_id: Any, field_group_id: Any) -> int:
        if not self._connected(handle):
            return ST_CONNECTION_NOT_VALID
        name = self._watch_name(_int(group_id), _int(field_group_id))
        if isinstance(name, int):
            return name
        if self.watched.pop((_int(group_id), _int(field_group_id)), None) is not None:
            self.engine.unwatch(name)
        return ST_OK

    def api_dcgmUpdateAllFields(self: StandInLibrary, handle: Any, wait: Any) -> int:
        if not self._connected(handle):
            return ST_CONNECTION_NOT_VALID
        self.engine.update_all()
        return ST_OK

    # reads -------------------------------------------------------------------------------
    def _group_values(self: StandInLibrary, group_id: int, field_group_id: int) -> list[FieldValue] | int:
        name = self._watch_name(group_id, field_group_id)
        if isinstance(name, int):
            return name
        if (group_id, field_group_id) in self.watched:
            return self.engine.latest(name)
        # not watched: each value says so (the engine's own answer for unwatched pairs)
        group, fields = self.groups[group_id], self.field_groups[field_group_id]
        if not group.entities:
            return []
        return self.engine.latest_of(list(group.entities), list(fields.field_ids))

    def api_dcgmGetLatestValues_v2(
        self: StandInLibrary, handle: Any, group_id: Any, field_group_id: Any, callback: Any, user_data: Any
    ) -> int:
        if not self._connected(handle):
            return ST_CONNECTION_NOT_VALID
        values = self._group_values(_int(group_id), _int(field_group_id))
        if isinstance(values, int):
            return values
        self._enumerate(values, callback, user_data)
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
        if not self._connected(handle):
            return ST_CONNECTION_NOT_VALID
        name = self._watch_name(_int(group_id), _int(field_group_id))
        if isinstance(name, int):
            return name
        if (_int(group_id), _int(field_group_id)) not in self.watched:
            _obj(next_since).value = _int(since)
            return ST_OK
        values, after = self.engine.since(name, _int(since))
        self._enumerate(values, callback, user_data)
        _obj(next_since).value = after
        return ST_OK

    def api_dcgmEntitiesGetLatestValues(
        self: StandInLibrary, handle: Any, pairs: Any, count: Any, ids: Any, id_count: Any, flags: Any, out: Any
    ) -> int:
        entities, fields = _int(count), _int(id_count)
        if entities < 1 or fields < 1 or entities > self.group_limit() or fields > MAX_FIELD_IDS:
            return ST_BADPARAM  # the client library's own check, before anything is sent
        if not self._connected(handle):
            return ST_CONNECTION_NOT_VALID
        keys = [(int(pair.entityGroupId), int(pair.entityId)) for pair in pairs[:entities]]
        values = self.engine.latest_of(keys, [int(x) for x in ids[:fields]])
        for slot, value in zip(out, values, strict=False):
            slot.version = self.structs.dcgmFieldValue_version2
            slot.entityGroupId, slot.entityId = value.group, value.entity
            self._fill_value(slot, value)
        return ST_OK

    # profiling ---------------------------------------------------------------------------
    def api_dcgmProfGetSupportedMetricGroups(self: StandInLibrary, handle: Any, groups: Any) -> int:
        groups = _obj(groups)
        if not self._accepts("dcgmProfGetSupportedMetricGroups", groups.version):
            return ST_VER_MISMATCH
        if not self._connected(handle):
            return ST_CONNECTION_NOT_VALID
        fields = sorted(self.engine.profiling_fields(int(groups.gpuId)))
        per_group = len(groups.metricGroups[0].fieldIds)
        chunks = [fields[i : i + per_group] for i in range(0, len(fields), per_group)]
        groups.numMetricGroups = len(chunks)
        for major, (out, chunk) in enumerate(zip(groups.metricGroups, chunks, strict=False)):
            out.majorId, out.minorId, out.numFieldIds = major, 0, len(chunk)
            for index, field_id in enumerate(chunk):
                out.fieldIds[index] = field_id
        return ST_OK
