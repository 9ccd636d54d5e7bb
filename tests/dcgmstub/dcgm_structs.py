"""Test stub of DCGM's ``dcgm_structs`` (interface transcribed from DCGM 4.6.0's bindings): only the
names, structs and error behaviour gpu_exporter's adapter uses, so that the real adapter's
marshalling (ctypes structs, the value callback) runs in CI. Not DCGM; no library is loaded."""

import os
import platform
from ctypes import (
    CDLL,
    Structure,
    Union,
    c_byte,
    c_char,
    c_double,
    c_int,
    c_int64,
    c_short,
    c_uint,
    c_uint16,
    c_uint32,
    c_ushort,
    c_void_p,
)

DCGM_ST_BADPARAM = -1
DCGM_ST_GPU_IS_LOST = -18
DCGM_ST_CONNECTION_NOT_VALID = -21
DCGM_ST_GPU_NOT_SUPPORTED = -22
DCGM_ST_MAX_LIMIT = -24
DCGM_ST_LIBRARY_NOT_FOUND = -25
DCGM_ST_MODULE_NOT_LOADED = -33
DCGM_MAX_STR_LENGTH = 256
# The 4.x name (1024); 3.x bindings call it DCGM_GROUP_MAX_ENTITIES (64). The stub engine enforces it.
DCGM_GROUP_MAX_ENTITIES_V2 = 1024
#: Off: the stub pretends the library loaded. On: _dcgmInit searches for libdcgm.so.4 as the 4.x
#: loader does (given folder, each LD_LIBRARY_PATH folder, /usr/lib/<machine>-linux-gnu, /usr/lib64)
#: and answers DCGM_ST_LIBRARY_NOT_FOUND for a missing file and for one that does not load alike.
SEARCH_LIBRARY = False


class DCGMError(Exception):
    def __init__(self, value):
        super().__init__(f"DCGM error {value}")
        self.value = value


def _dcgmInit(libDcgmPath=None):
    if not SEARCH_LIBRARY:
        return None
    folders = [libDcgmPath] if libDcgmPath else []
    folders += [part for part in os.environ.get("LD_LIBRARY_PATH", "").split(":") if part]
    folders += [f"/usr/lib/{platform.machine()}-linux-gnu", "/usr/lib64"]
    for folder in folders:
        path = os.path.join(folder, "libdcgm.so.4")
        if os.path.isfile(path):
            try:
                CDLL(path)
                return None
            except OSError:
                continue
    raise DCGMError(DCGM_ST_LIBRARY_NOT_FOUND)


class c_dcgmConnectV3Params_v1(Structure):
    _fields_ = [("version", c_uint), ("persistAfterDisconnect", c_uint), ("timeoutMs", c_uint)]


class c_dcgmConnectV2Params_v2(Structure):
    _fields_ = [
        ("version", c_uint),
        ("persistAfterDisconnect", c_uint),
        ("timeoutMs", c_uint),
        ("addressIsUnixSocket", c_uint),
    ]


class c_dcgmGroupEntityPair_t(Structure):
    _fields_ = [("entityGroupId", c_uint32), ("entityId", c_uint32)]


class c_dcgmMigEntityInfo_t(Structure):
    _fields_ = [
        ("gpuUuid", c_char * 128),
        ("nvmlGpuIndex", c_uint),
        ("nvmlInstanceId", c_uint),
        ("nvmlComputeInstanceId", c_uint),
        ("nvmlMigProfileId", c_uint),
        ("nvmlProfileSlices", c_uint),
    ]


class c_dcgmMigHierarchyInfo_v2(Structure):
    _fields_ = [
        ("entity", c_dcgmGroupEntityPair_t),
        ("parent", c_dcgmGroupEntityPair_t),
        ("info", c_dcgmMigEntityInfo_t),
    ]


class c_dcgmMigHierarchy_v2(Structure):
    _fields_ = [("version", c_uint), ("count", c_uint), ("entityList", c_dcgmMigHierarchyInfo_v2 * 16)]


class c_dcgmFieldValue_v1_value(Union):
    _fields_ = [("i64", c_int64), ("dbl", c_double), ("str", c_char * DCGM_MAX_STR_LENGTH), ("blob", c_byte * 4096)]


class c_dcgmFieldValue_v1(Structure):
    _fields_ = [
        ("version", c_uint),
        ("fieldId", c_ushort),
        ("fieldType", c_short),
        ("status", c_int),
        ("ts", c_int64),
        ("value", c_dcgmFieldValue_v1_value),
    ]


class c_dcgmFieldValue_v2(Structure):
    _fields_ = [
        ("version", c_uint),
        ("entityGroupId", c_uint),
        ("entityId", c_uint),
        ("fieldId", c_ushort),
        ("fieldType", c_short),
        ("status", c_int),
        ("unused", c_uint),
        ("ts", c_int64),
        ("value", c_dcgmFieldValue_v1_value),
    ]


class c_dcgmNvLinkGpuLinkStatus_v4(Structure):
    _fields_ = [("entityId", c_uint32), ("linkState", c_uint32 * 36)]


class c_dcgmNvLinkNvSwitchLinkStatus_v2(Structure):
    _fields_ = [("entityId", c_uint32), ("linkState", c_uint32 * 256)]


class c_dcgmNvLinkStatus_v5(Structure):
    _fields_ = [
        ("version", c_uint32),
        ("numGpus", c_uint32),
        ("gpus", c_dcgmNvLinkGpuLinkStatus_v4 * 32),
        ("numNvSwitches", c_uint32),
        ("nvSwitches", c_dcgmNvLinkNvSwitchLinkStatus_v2 * 12),
    ]


class c_dcgmGroupInfo_v3(Structure):
    _fields_ = [("version", c_uint), ("count", c_uint), ("groupName", c_char * DCGM_MAX_STR_LENGTH)]


class c_dcgmFieldGroupInfo_v1(Structure):
    _fields_ = [
        ("version", c_uint32),
        ("numFieldIds", c_uint32),
        ("fieldGroupId", c_void_p),
        ("fieldGroupName", c_char * DCGM_MAX_STR_LENGTH),
        ("fieldIds", c_uint16 * 128),
    ]


class c_dcgmAllFieldGroup_v1(Structure):
    _fields_ = [("version", c_uint32), ("numFieldGroups", c_uint32), ("fieldGroups", c_dcgmFieldGroupInfo_v1 * 64)]


class c_dcgmProfMetricGroupInfo_v2(Structure):
    _fields_ = [("majorId", c_ushort), ("minorId", c_ushort), ("numFieldIds", c_uint32), ("fieldIds", c_ushort * 64)]


class c_dcgmProfGetMetricGroups_v3(Structure):
    _fields_ = [
        ("version", c_uint32),
        ("unused", c_uint32),
        ("gpuId", c_uint32),
        ("numMetricGroups", c_uint32),
        ("metricGroups", c_dcgmProfMetricGroupInfo_v2 * 10),
    ]


class c_dcgmVersionInfo_v2(Structure):
    _fields_ = [("version", c_uint32), ("rawBuildInfoString", c_char * (DCGM_MAX_STR_LENGTH * 2))]
