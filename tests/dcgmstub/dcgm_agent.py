"""Test stub of DCGM's ``dcgm_agent`` (signatures transcribed from DCGM 4.6.0's bindings) over a tiny
in-memory engine, ``ENGINE``: one GPU (id 0) with four fields, a second GPU (id 1) with one MIG GPU
instance and compute instance, and an NVSwitch with two ports up. Errors raise DCGMError(status),
values reach the caller through the real ctypes callback type, as libdcgm delivers them.

Host engine rules it follows: ``ENGINE["status"]`` (GPU id → "lost", "unsupported" or "detached":
dcgmGetEntityGroupEntities with flags 0 still lists the GPU, dcgmGroupAddEntity refuses it and its
MIG instances with DCGM_ST_GPU_IS_LOST, DCGM_ST_GPU_NOT_SUPPORTED or DCGM_ST_BADPARAM); a group
holds at most ``ENGINE["max_entities"]`` entities (DCGM_ST_MAX_LIMIT beyond, also for
dcgmEntitiesGetLatestValues); ``ENGINE["prof_status"]`` (GPU id → the status
dcgmProfGetSupportedMetricGroups fails with, e.g. DCGM_ST_MODULE_NOT_LOADED); ``ENGINE["release"]``
(which field ids dcgmFieldGroupCreate accepts: one unknown id refuses the group with DCGM_ST_BADPARAM;
what dcgmVersionInfo says; dcgmGetGpuStatus exists from 4.0); ``ENGINE["lost"]`` (GPU ids lost at run
time: still listed, their values the type's blank with status OK); ``ENGINE["aged"]`` (entity → the µs
its samples stopped being updated at; the others carry the time of the read)."""

import time
from ctypes import CFUNCTYPE, POINTER, c_int32, c_uint32, c_void_p

import dcgm_structs as s

from gpu_exporter.backends.dcgm.releases import known_ids, parse_version

dcgmFieldValueEntityEnumeration_f = CFUNCTYPE(
    c_int32, c_uint32, c_uint32, POINTER(s.c_dcgmFieldValue_v1), c_int32, c_void_p
)
ENGINE = {
    "values": {
        (1, 0): {150: ("i", 55), 155: ("d", 250.5), 252: ("i", 1024), 54: ("s", b"GPU-x")},
        (1, 1): {150: ("i", 40), 54: ("s", b"GPU-y")},
        (5, 4): {252: ("i", 12)},
    },
    "xids": [(1_700_000_000_000_001, 1, 0, 79)],
    "handles": set(),
    "groups": {},  # id -> [name, entities]
    "field_groups": {},  # id -> [name, fields]
    "watched": set(),
    "next_id": 10,
    "status": {},  # GPU id -> "lost" | "unsupported" | "detached"
    "max_entities": s.DCGM_GROUP_MAX_ENTITIES_V2,
    "prof_status": {1: -36},  # GPU id -> DCGM_ST_* of dcgmProfGetSupportedMetricGroups
    "release": "4.6.0",
    "lost": set(),  # GPU ids lost at run time
    "aged": {},  # entity -> µs its samples stopped at
    "jobs": {},  # job id -> group id (no process runs on the stub's GPUs: every job lists none)
}
_BLANKS = {"i": 0x7FFFFFFFFFFFFFF0, "d": 140737488355328.0, "s": b"<<<NULL>>>"}
_STATUS_WORDS = {"lost": 4, "unsupported": 2, "detached": 7}
_REFUSALS = {"lost": s.DCGM_ST_GPU_IS_LOST, "unsupported": s.DCGM_ST_GPU_NOT_SUPPORTED, "detached": s.DCGM_ST_BADPARAM}
_PARENTS = {(4, 3): (1, 1), (5, 4): (4, 3)}


def _gpu_of(entity):
    while entity in _PARENTS:
        entity = _PARENTS[entity]
    return entity[1] if entity[0] == 1 else None


_CONNECTION = s.DCGM_ST_CONNECTION_NOT_VALID


def _id(value):
    return value.value if isinstance(value, c_void_p) else value


def _check(handle):
    if _id(handle) not in ENGINE["handles"]:
        raise s.DCGMError(_CONNECTION)


def _now_us():
    """The engine stamps each sample with the time it sampled it (µs since the epoch)."""
    return int(time.time() * 1e6)


def _release():
    return parse_version(ENGINE["release"]) or (4, 6, 0)


def _value(entity, field):
    """(type, value, ts) of one watched field as the engine holds it."""
    kind, value = ENGINE["values"].get(entity, {}).get(field, ("i", 0x7FFFFFFFFFFFFFF0))
    if _gpu_of(entity) in ENGINE["lost"]:
        value = _BLANKS[kind]
    return kind, value, ENGINE["aged"].get(entity, _now_us())


def dcgmVersionInfo():
    info = s.c_dcgmVersionInfo_v2()
    info.rawBuildInfoString = f"version:{ENGINE['release']};arch:x86_64;buildtype:Release".encode()
    return info


def dcgmGetGpuStatus(handle, gpuId):
    _check(handle)
    if _release() < (4, 0, 0):
        raise s.DCGMError(-2)  # DCGM_ST_FUNCTION_NOT_FOUND: 3.x has no such call
    if gpuId in ENGINE["lost"]:
        return 4
    return _STATUS_WORDS.get(ENGINE["status"].get(gpuId), 1)


def _new_id():
    ENGINE["next_id"] += 1
    return ENGINE["next_id"]


def dcgmInit():
    return 0


def dcgmStartEmbedded(opMode):
    handle = _new_id()
    ENGINE["handles"].add(handle)
    return c_void_p(handle)


def dcgmConnect_v3(connection_string, connectParams):
    if connection_string != b"tcp://localhost:5555":
        raise s.DCGMError(_CONNECTION)
    return dcgmStartEmbedded(1)


def dcgmConnect_v2(ip_address, connectParams):
    # DCGM 3.x to 4.4: HOST:PORT, and a flag saying whether it is a unix socket path.
    if ip_address != b"localhost:5555" or connectParams.addressIsUnixSocket:
        raise s.DCGMError(_CONNECTION)
    return dcgmStartEmbedded(1)


def dcgmStopEmbedded(handle):
    ENGINE["handles"].discard(_id(handle))
    return 0


dcgmDisconnect = dcgmStopEmbedded


def dcgmGetEntityGroupEntities(handle, entityGroup, flags):
    _check(handle)
    listed = {1: [0, 1], 3: [0]}.get(entityGroup, [])
    if entityGroup == 1 and flags & 1:  # DCGM_GEGE_FLAG_ONLY_SUPPORTED: GPUs in status OK only
        lost_marks_status = _release() >= (4, 0, 0)  # 3.3's engine leaves a lost GPU in status OK
        return [g for g in listed if g not in ENGINE["status"] and not (lost_marks_status and g in ENGINE["lost"])]
    return listed


def dcgmGetGpuInstanceHierarchy(handle):
    _check(handle)
    hierarchy = s.c_dcgmMigHierarchy_v2()
    for index, (entity, parent, gi, ci) in enumerate((((4, 3), (1, 1), 1, 0), ((5, 4), (4, 3), 1, 0))):
        item = hierarchy.entityList[index]
        item.entity.entityGroupId, item.entity.entityId = entity
        item.parent.entityGroupId, item.parent.entityId = parent
        item.info.nvmlInstanceId, item.info.nvmlComputeInstanceId = gi, ci
    hierarchy.count = 2
    return hierarchy


def dcgmGetNvLinkLinkStatus(handle):
    _check(handle)
    status = s.c_dcgmNvLinkStatus_v5()
    status.numNvSwitches = 1
    status.nvSwitches[0].entityId = 0
    status.nvSwitches[0].linkState[0] = 3
    status.nvSwitches[0].linkState[3] = 3
    return status


def dcgmGroupCreate(handle, type, groupName):
    _check(handle)
    group = _new_id()
    ENGINE["groups"][group] = [groupName, []]
    return c_void_p(group)


def dcgmGroupAddEntity(handle, group_id, entityGroupId, entityId):
    # As the host engine: an entity whose GPU is not in status OK is refused, then a full group.
    _check(handle)
    status = ENGINE["status"].get(_gpu_of((entityGroupId, entityId)))
    if status is not None:
        raise s.DCGMError(_REFUSALS[status])
    members = ENGINE["groups"][_id(group_id)][1]
    if len(members) >= ENGINE["max_entities"]:
        raise s.DCGMError(s.DCGM_ST_MAX_LIMIT)
    members.append((entityGroupId, entityId))
    return 0


def dcgmGroupDestroy(handle, group_id):
    _check(handle)
    ENGINE["groups"].pop(_id(group_id))
    return 0


def dcgmGroupGetAllIds(handle):
    _check(handle)
    return list(ENGINE["groups"])


def dcgmGroupGetInfo(handle, group_id):
    _check(handle)
    info = s.c_dcgmGroupInfo_v3()
    info.groupName = ENGINE["groups"][_id(group_id)][0]
    return info


def dcgmFieldGroupCreate(handle, fieldIds, fieldGroupName):
    _check(handle)
    if any(name == fieldGroupName for name, _ in ENGINE["field_groups"].values()):
        raise s.DCGMError(-26)
    if not 0 < len(fieldIds) < 128 or set(fieldIds) - known_ids(
        _release()
    ):  # AddFieldGroup: one unknown id refuses the whole group
        raise s.DCGMError(s.DCGM_ST_BADPARAM)
    field_group = _new_id()
    ENGINE["field_groups"][field_group] = [fieldGroupName, list(fieldIds)]
    return c_void_p(field_group)


def dcgmFieldGroupDestroy(handle, fieldGroupId):
    _check(handle)
    ENGINE["field_groups"].pop(_id(fieldGroupId))
    return 0


def dcgmFieldGroupGetAll(handle):
    _check(handle)
    every = s.c_dcgmAllFieldGroup_v1()
    for index, (field_group, (name, _)) in enumerate(ENGINE["field_groups"].items()):
        every.fieldGroups[index].fieldGroupId = field_group
        every.fieldGroups[index].fieldGroupName = name
    every.numFieldGroups = len(ENGINE["field_groups"])
    return every


def dcgmWatchFields(handle, groupId, fieldGroupId, updateFreq, maxKeepAge, maxKeepSamples):
    _check(handle)
    assert isinstance(updateFreq, int) and isinstance(maxKeepAge, float)
    ENGINE["watched"].add((_id(groupId), _id(fieldGroupId)))
    return 0


def dcgmUnwatchFields(handle, groupId, fieldGroupId):
    _check(handle)
    ENGINE["watched"].discard((_id(groupId), _id(fieldGroupId)))
    return 0


def dcgmUpdateAllFields(handle, waitForUpdate):
    _check(handle)
    return 0


def _deliver(enumCB, userData, entities, fields, make):
    for entity in entities:
        rows = [row for row in (make(entity, field) for field in fields) if row is not None]
        array = (s.c_dcgmFieldValue_v1 * max(1, len(rows)))()
        for index, (field, kind, value, ts) in enumerate(rows):
            array[index].fieldId, array[index].fieldType, array[index].ts = field, ord(kind), ts
            setattr(array[index].value, {"i": "i64", "d": "dbl", "s": "str"}[kind], value)
        if rows:
            enumCB(entity[0], entity[1], array, len(rows), id(userData))  # libdcgm passes the PyObject* back


def dcgmGetLatestValues_v2(handle, groupId, fieldGroupId, enumCB, userData):
    _check(handle)
    entities, fields = ENGINE["groups"][_id(groupId)][1], ENGINE["field_groups"][_id(fieldGroupId)][1]

    def make(entity, field):
        kind, value, ts = _value(entity, field)
        return field, kind, value, ts

    _deliver(enumCB, userData, entities, fields, make)
    return 0


def dcgmEntitiesGetLatestValues(dcgmHandle, entities, fieldIds, flags):
    # As the bindings: one c_dcgmFieldValue_v2 per (entity, field), entity-major; pairs the engine does
    # not watch come back with DCGM_ST_NOT_WATCHED.
    _check(dcgmHandle)
    if len(entities) > ENGINE["max_entities"]:
        raise s.DCGMError(s.DCGM_ST_BADPARAM)  # as the engine: too many entities is a bad parameter
    watched = {
        (entity, field)
        for group_id, field_group_id in ENGINE["watched"]
        for entity in ENGINE["groups"][group_id][1]
        for field in ENGINE["field_groups"][field_group_id][1]
    }
    out = (s.c_dcgmFieldValue_v2 * (len(entities) * len(fieldIds)))()
    index = 0
    for pair in entities:
        entity = (int(pair.entityGroupId), int(pair.entityId))
        for field in fieldIds:
            value = out[index]
            kind, raw, ts = _value(entity, field)
            value.entityGroupId, value.entityId, value.fieldId, value.ts = entity[0], entity[1], field, ts
            if (entity, field) not in watched:
                value.status, kind, raw = -16, "i", 0x7FFFFFFFFFFFFFF0
            value.fieldType = ord(kind)
            setattr(value.value, {"i": "i64", "d": "dbl", "s": "str"}[kind], raw)
            index += 1
    return out


def dcgmGetValuesSince_v2(handle, groupId, fieldGroupId, sinceTimestamp, enumCB, userData):
    _check(handle)
    entities = ENGINE["groups"][_id(groupId)][1]
    found = [x for x in ENGINE["xids"] if x[0] >= sinceTimestamp and (x[1], x[2]) in entities]
    for ts, group, entity, code in found:
        _deliver(enumCB, userData, [(group, entity)], [230], lambda e, f, ts=ts, code=code: (230, "i", code, ts))
    return max([x[0] + 1 for x in found] + [sinceTimestamp])


def dcgmProfGetSupportedMetricGroups(handle, gpuId):
    _check(handle)
    if gpuId in ENGINE["prof_status"]:
        raise s.DCGMError(ENGINE["prof_status"][gpuId])
    groups = s.c_dcgmProfGetMetricGroups_v3()
    groups.numMetricGroups = 1
    groups.metricGroups[0].numFieldIds = 2
    groups.metricGroups[0].fieldIds[0], groups.metricGroups[0].fieldIds[1] = 1001, 1002
    return groups


def dcgmWatchPidFields(dcgm_handle, groupId, updateFreq, maxKeepAge, maxKeepSamples):
    _check(dcgm_handle)
    ENGINE["groups"][_id(groupId)]  # an unknown group: KeyError, as the others here
    return 0


def dcgmJobStartStats(dcgm_handle, groupId, jobid):
    _check(dcgm_handle)
    if jobid in ENGINE["jobs"]:
        raise s.DCGMError(-26)  # DCGM_ST_DUPLICATE_KEY
    ENGINE["jobs"][jobid] = _id(groupId)
    return 0


class _JobInfo:
    """The fields of c_dcgmJobInfo_v3 the adapter reads (the stub's structs do not define it)."""

    numGpus = 0
    gpus = ()


def dcgmJobGetStats(dcgm_handle, jobid):
    _check(dcgm_handle)
    if jobid not in ENGINE["jobs"]:
        raise s.DCGMError(-14)  # DCGM_ST_NO_DATA
    return _JobInfo()


def dcgmJobRemove(dcgm_handle, jobid):
    _check(dcgm_handle)
    if ENGINE["jobs"].pop(jobid, None) is None:
        raise s.DCGMError(-14)
    return 0
