"""DCGM's numeric vocabulary and the decoding of raw field values, in gpu-exporter's own code.

Nothing here imports pydcgm: the numbers are DCGM's stable C constants (``dcgm_structs.h``,
``dcgm_fields.h``, ``dcgmvalue.py``, identical from DCGM 3.3 to 4.6), so the real adapter and the
test fake hand the backend the same raw shapes and the same decoder turns blank sentinels into
absence.
"""

from __future__ import annotations

from dataclasses import dataclass

# Entity groups (DCGM_FE_*).
FE_NONE = 0
FE_GPU = 1
FE_VGPU = 2
FE_SWITCH = 3
FE_GPU_I = 4  # MIG GPU instance
FE_GPU_CI = 5  # MIG compute instance
FE_LINK = 6  # NVLink port of a GPU or an NVSwitch

# Status codes (DCGM_ST_*) the exporter tells apart.
ST_OK = 0
ST_BADPARAM = -1
ST_NOT_SUPPORTED = -6
ST_INIT_ERROR = -7
ST_TIMEOUT = -11
ST_VER_MISMATCH = -12  # DCGM_ST_VER_MISMATCH: "API version mismatch" (dcgm_structs)
ST_NO_DATA = -14
ST_STALE_DATA = -15
ST_NOT_WATCHED = -16
ST_NO_PERMISSION = -17
ST_GPU_IS_LOST = -18
ST_CONNECTION_NOT_VALID = -21
ST_GPU_NOT_SUPPORTED = -22
ST_MAX_LIMIT = -24
ST_LIBRARY_NOT_FOUND = -25
ST_DUPLICATE_KEY = -26
ST_REQUIRES_ROOT = -29
ST_FIELD_UNSUPPORTED_BY_API = -32
ST_MODULE_NOT_LOADED = -33
ST_IN_USE = -34
ST_GROUP_IS_EMPTY = -35
ST_PROFILING_NOT_SUPPORTED = -36
ST_PROFILING_LIBRARY_ERROR = -37
ST_PROFILING_MULTI_PASS = -38
ST_PAUSED = -54
ST_NVML_NOT_LOADED = -56

#: Status code → the ``kind`` label of gpu_exporter_sample_errors_total (DCGM_ST_ name, lower case).
STATUS_KINDS: dict[int, str] = {
    ST_BADPARAM: "badparam",
    -3: "generic_error",
    -4: "memory",
    ST_NOT_SUPPORTED: "not_supported",
    ST_INIT_ERROR: "init_error",
    -8: "nvml_error",
    ST_TIMEOUT: "timeout",
    ST_VER_MISMATCH: "ver_mismatch",
    -13: "unknown_field",
    ST_NO_DATA: "no_data",
    ST_STALE_DATA: "stale_data",
    ST_NOT_WATCHED: "not_watched",
    ST_NO_PERMISSION: "no_permission",
    ST_GPU_IS_LOST: "gpu_is_lost",
    -19: "reset_required",
    ST_CONNECTION_NOT_VALID: "connection_not_valid",
    ST_GPU_NOT_SUPPORTED: "gpu_not_supported",
    ST_MAX_LIMIT: "max_limit",
    ST_DUPLICATE_KEY: "duplicate_key",
    ST_REQUIRES_ROOT: "requires_root",
    ST_FIELD_UNSUPPORTED_BY_API: "field_unsupported_by_api",
    ST_MODULE_NOT_LOADED: "module_not_loaded",
    ST_IN_USE: "in_use",
    ST_PROFILING_NOT_SUPPORTED: "profiling_not_supported",
    ST_PROFILING_LIBRARY_ERROR: "profiling_library_error",
    ST_PROFILING_MULTI_PASS: "profiling_multi_pass",
    -57: "nvml_driver_timeout",
    ST_PAUSED: "paused",
    ST_NVML_NOT_LOADED: "nvml_not_loaded",
}

# Field types (DCGM_FT_*), as the one-character codes of c_dcgmFieldValue_v1.fieldType.
FT_INT64 = "i"
FT_DOUBLE = "d"
FT_STRING = "s"
FT_TIMESTAMP = "t"
FT_BINARY = "b"

# Blank sentinels (dcgmvalue.py). Each type has four: blank, +1 not found, +2 not supported,
# +3 not permissioned; a value at or above the first is no value at all.
INT32_BLANK = 0x7FFFFFF0
INT64_BLANK = 0x7FFFFFFFFFFFFFF0
FP64_BLANK = 140737488355328.0  # 2**47
STR_BLANKS: dict[str, str] = {
    "<<<NULL>>>": "blank",
    "<<<NOT_FOUND>>>": "not_found",
    "<<<NOT_SUPPORTED>>>": "not_supported",
    "<<<NOT_PERM>>>": "not_permissioned",
}
_OFFSETS = ("blank", "not_found", "not_supported", "not_permissioned")

# Field ids the backend uses besides the catalogue's (DCGM_FI_*; numbers, never names, which
# DCGM renamed in 4.6).
FI_DRIVER_VERSION = 1
FI_NVML_VERSION = 2
FI_CUDA_DRIVER_VERSION = 5
FI_NAME = 50
FI_NVML_INDEX = 52
FI_SERIAL = 53
FI_UUID = 54
FI_MINOR_NUMBER = 55
FI_PCI_BUS_ID = 57
FI_MIG_MODE = 67
FI_MIG_MAX_SLICES = 69  # DCGM_FI_DEV_MIG_MAX_SLICES: the GPU's MIG slices while MIG is on, else 0
FI_VBIOS_VERSION = 85
FI_BRAND = 51
FI_INFOROM_OEM = 56
FI_PCI_COMBINED_ID = 58
FI_PCI_SUBSYS_ID = 59
FI_COMPUTE_CAPABILITY = 63  # major << 16 | minor
FI_INFOROM_ECC = 80
FI_INFOROM_POWER = 81
FI_INFOROM_IMAGE = 82
FI_GPM_SUPPORT = 94  # DCGM_FI_DEV_GPM_SUPPORT: 1 or 0, as DCGM found it at its start
FI_CC_MODE = 74  # DCGM_FI_DEV_CC_MODE: the system's confidential-compute feature, 0 off, 1 on
FI_INFINIBAND_GUID = 571  # DCGM_FI_DEV_PLATFORM_INFINIBAND_GUID: text, 0x and 16 hex digits
FI_CHASSIS_SERIAL = 572  # DCGM_FI_DEV_PLATFORM_CHASSIS_SERIAL_NUMBER; 573-577: slot, tray, host, peer type, module
FI_PLACEMENT: tuple[int, ...] = (573, 574, 575, 576, 577)
FI_XID_ERRORS = 230
#: The profiling (DCP) fields: DCGM's profiling module's range (fields from 1100 on are not profiling:
#: Grace CPU, C2C, clock-event durations, power smoothing, ...).
FI_FIRST_PROFILING = 1001
FI_LAST_PROFILING = 1099
IDENTITY_FIELDS: tuple[int, ...] = (
    FI_DRIVER_VERSION,
    FI_NVML_VERSION,
    FI_CUDA_DRIVER_VERSION,
    FI_NAME,
    FI_NVML_INDEX,
    FI_SERIAL,
    FI_UUID,
    FI_MINOR_NUMBER,
    FI_PCI_BUS_ID,
    FI_MIG_MODE,
    FI_MIG_MAX_SLICES,
    FI_VBIOS_VERSION,
    FI_BRAND,
    FI_INFOROM_OEM,
    FI_PCI_COMBINED_ID,
    FI_PCI_SUBSYS_ID,
    FI_COMPUTE_CAPABILITY,
    FI_INFOROM_ECC,
    FI_INFOROM_POWER,
    FI_INFOROM_IMAGE,
    FI_INFINIBAND_GUID,
    FI_CHASSIS_SERIAL,
    *FI_PLACEMENT,
    FI_GPM_SUPPORT,
    FI_CC_MODE,
)
#: Most field ids one dcgmEntitiesGetLatestValues call accepts (DCGM_MAX_FIELD_IDS_PER_FIELD_GROUP).
MAX_FIELDS_PER_GROUP = 128
#: Most field ids one field group may hold: dcgmFieldGroupCreate refuses ``numFieldIds >=
#: DCGM_MAX_FIELD_IDS_PER_FIELD_GROUP`` with DCGM_ST_BADPARAM (DcgmApi.cpp, 3.3 to 4.6), so 127.
MAX_IDS_PER_FIELD_GROUP = 127
#: Most entities one entity group (and one dcgmEntitiesGetLatestValues call) may hold: DCGM 3.x's
#: DCGM_GROUP_MAX_ENTITIES; DCGM 4.x raised it to 1024 (DCGM_GROUP_MAX_ENTITIES_V2).
GROUP_MAX_ENTITIES_3 = 64
GROUP_MAX_ENTITIES_4 = 1024
#: What dcgmGroupAddEntity returns for an entity the engine lists but will not group: a GPU in
#: status Lost (DCGM_ST_GPU_IS_LOST), Unsupported (DCGM_ST_GPU_NOT_SUPPORTED), or any other status
#: but OK, such as Detached (DCGM_ST_BADPARAM).
REFUSED_STATUSES = frozenset({ST_GPU_IS_LOST, ST_GPU_NOT_SUPPORTED, ST_BADPARAM})

#: NVLink link states (DcgmNvLinkLinkState*): a port that is not supported does not exist; disabled
#: and down ports exist but carry no traffic (NVML's nvmlDeviceGetNvLinkState says DISABLED for both).
LINK_STATE_NOT_SUPPORTED = 0
LINK_STATE_DISABLED = 1
LINK_STATE_DOWN = 2
LINK_STATE_UP = 3


@dataclass(frozen=True)
class Entity:
    """One DCGM entity. ``parent`` is the (group, id) of the GPU a GPU instance or link belongs
    to, the GPU instance of a compute instance, or the switch of a switch port. MIG entities carry
    NVML's instance ids (the ones nvidia-smi and the NVML backend show); links their port index."""

    group: int
    id: int
    parent: tuple[int, int] | None = None
    gpu_instance: int | None = None
    compute_instance: int | None = None
    link: int | None = None

    @property
    def key(self) -> tuple[int, int]:
        return (self.group, self.id)


@dataclass(frozen=True)
class FieldValue:
    """One raw sample as DCGM returns it: the entity, the field id, DCGM's type code, the status
    of the read, the sample time (µs since the epoch, host engine clock) and the raw value
    (int for ``i``/``t``, float for ``d``, str for ``s``, None for blobs)."""

    group: int
    entity: int
    field_id: int
    field_type: str
    status: int
    ts: int
    value: int | float | str | None


@dataclass(frozen=True)
class Blank:
    """Why a field value is no value: a blank sentinel (``blank``, ``not_found``,
    ``not_supported``, ``not_permissioned``), a non-zero status (its kind, e.g.
    ``not_watched``), or an unusable type (``binary``)."""

    why: str
    status: int = ST_OK


def decode(sample: FieldValue) -> int | float | str | Blank:
    """The value of ``sample``, or why it has none. Integers at or above the int64 blank and the
    four int32 sentinels (an int32 source kept in an int64 field) are blanks; so are doubles at or
    above 2**47 and strings of the form ``<<<...>>>``."""
    if sample.status != ST_OK:
        return Blank(STATUS_KINDS.get(sample.status, f"status_{-sample.status}"), sample.status)
    value = sample.value
    if sample.field_type in (FT_INT64, FT_TIMESTAMP) and isinstance(value, int):
        if value >= INT64_BLANK:
            return Blank(_OFFSETS[value - INT64_BLANK] if value - INT64_BLANK < 4 else "blank")
        if INT32_BLANK <= value < INT32_BLANK + 4:
            return Blank(_OFFSETS[value - INT32_BLANK])
        return value
    if sample.field_type == FT_DOUBLE and isinstance(value, float | int):
        number = float(value)
        if number >= FP64_BLANK:
            offset = number - FP64_BLANK
            return Blank(_OFFSETS[int(offset)] if offset in (0.0, 1.0, 2.0, 3.0) else "blank")
        return number
    if sample.field_type == FT_STRING and isinstance(value, str):
        if value.startswith("<<<") and ">>>" in value:
            return Blank(STR_BLANKS.get(value, "blank"))
        return value
    return Blank("binary" if sample.field_type == FT_BINARY else "bad_type")


def is_stale(sample: FieldValue, fresh_after_us: int) -> bool:
    """Whether the engine stamped ``sample`` (a read with status OK) before ``fresh_after_us``: it
    stopped updating that value. A sample without a time (0) is not judged."""
    return sample.status == ST_OK and 0 < sample.ts < fresh_after_us


def link_entity_id(parent_group: int, parent_id: int, port: int, legacy: bool = False) -> int:
    """The raw id of a link entity (``dcgm_link_t``): DCGM 4.3 and later pack the type in bits 0–7,
    the port index in 8–23 and the GPU or switch id in 24–31; DCGM 3.x (``legacy``) the type in
    0–7, the port index in 8–15 and the GPU or switch id in 16–31. The two agree for id 0 only."""
    if legacy:
        return (parent_id & 0xFFFF) << 16 | (port & 0xFF) << 8 | (parent_group & 0xFF)
    return (parent_id & 0xFF) << 24 | (port & 0xFFFF) << 8 | (parent_group & 0xFF)
