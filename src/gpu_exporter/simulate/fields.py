"""``nvmlDeviceGetFieldValues``: every entry gets its own return code and the call succeeds. Field
ids that stand for a device call read that call's key and obey its ``delay.F``, ``lost_after`` and
``error.F`` (so a scenario written for single calls means the same read as fields);
``gpuN.fields.unknown = id,...`` are ids this driver does not know (``INVALID_ARGUMENT``).

Field ids are ``NVML_FI_DEV_*`` of ``nvml.h``.
"""

from __future__ import annotations

import ctypes
import time
from typing import Any

from gpu_exporter.simulate import abi, errors
from gpu_exporter.simulate.call import Call, device
from gpu_exporter.simulate.device import ABSURD_TEMPERATURE
from gpu_exporter.simulate.fields_only import DBL, only_value
from gpu_exporter.simulate.link_fields import link_value
from gpu_exporter.simulate.samples import energy_mj

UINT, ULL = 1, 3  # NVML_VALUE_TYPE_UNSIGNED_INT, _UNSIGNED_LONG_LONG

#: field id → (key, the call it stands for, 0/1 flag, unsigned int value)
CALL_FIELDS: dict[int, tuple[str, str, bool, bool]] = {
    185: ("power.usage", "nvmlDeviceGetPowerUsage", False, True),  # POWER_AVERAGE
    186: ("power.usage", "nvmlDeviceGetPowerUsage", False, True),  # POWER_INSTANT
    187: ("power.min_limit", "nvmlDeviceGetPowerManagementLimitConstraints", False, True),
    188: ("power.max_limit", "nvmlDeviceGetPowerManagementLimitConstraints", False, True),
    189: ("power.default_limit", "nvmlDeviceGetPowerManagementDefaultLimit", False, True),
    190: ("power.enforced_limit", "nvmlDeviceGetEnforcedPowerLimit", False, True),  # POWER_CURRENT_LIMIT
    192: ("power.limit", "nvmlDeviceGetPowerManagementLimit", False, True),  # POWER_REQUESTED_LIMIT
    83: ("energy", "nvmlDeviceGetTotalEnergyConsumption", False, False),  # TOTAL_ENERGY_CONSUMPTION
    191: ("energy", "nvmlDeviceGetTotalEnergyConsumption", False, False),  # ENERGY
    94: ("pcie.replay_counter", "nvmlDeviceGetPcieReplayCounter", False, False),
    1: ("ecc.mode", "nvmlDeviceGetEccMode", True, True),  # ECC_CURRENT
    3: ("ecc.volatile.corrected", "nvmlDeviceGetTotalEccErrors", False, False),  # ECC_SBE_VOL_TOTAL
    4: ("ecc.volatile.uncorrected", "nvmlDeviceGetTotalEccErrors", False, False),
    5: ("ecc.aggregate.corrected", "nvmlDeviceGetTotalEccErrors", False, False),
    6: ("ecc.aggregate.uncorrected", "nvmlDeviceGetTotalEccErrors", False, False),
    29: ("retired_pages.single_bit", "nvmlDeviceGetRetiredPages", False, False),  # RETIRED_SBE
    30: ("retired_pages.double_bit", "nvmlDeviceGetRetiredPages", False, False),
    31: ("retired_pages.pending", "nvmlDeviceGetRetiredPagesPendingStatus", True, False),
    74: ("violation.power", "nvmlDeviceGetViolationStatus", False, False),  # PERF_POLICY_POWER
    75: ("violation.thermal", "nvmlDeviceGetViolationStatus", False, False),
    76: ("violation.sync_boost", "nvmlDeviceGetViolationStatus", False, False),
    77: ("violation.board_limit", "nvmlDeviceGetViolationStatus", False, False),
    78: ("violation.low_util", "nvmlDeviceGetViolationStatus", False, False),
    79: ("violation.reliability", "nvmlDeviceGetViolationStatus", False, False),
    80: ("violation.app_clocks", "nvmlDeviceGetViolationStatus", False, False),  # PERF_POLICY_TOTAL_APP_CLOCKS
    81: ("violation.base_clocks", "nvmlDeviceGetViolationStatus", False, False),
}
# ECC errors by location (ECC_SBE_VOL_L1 ... ECC_DBE_AGG_CBU, 7-28): volatile L1, L2, DEV, REG, TEX as
# SBE/DBE pairs from 7, the uncorrected volatile CBU 17, the aggregate ones from 18, uncorrected CBU 28.
_LOCATIONS = ("l1_cache", "l2_cache", "device_memory", "register_file", "texture_memory")
CALL_FIELDS.update(
    {
        first + 2 * i + offset: (f"ecc.{counter}.{kind}.{location}", "nvmlDeviceGetMemoryErrorCounter", False, False)
        for first, counter in ((7, "volatile"), (18, "aggregate"))
        for i, location in enumerate(_LOCATIONS)
        for offset, kind in ((0, "corrected"), (1, "uncorrected"))
    }
)
CALL_FIELDS.update(
    {first + 10: (f"ecc.{counter}.uncorrected.cbu", "nvmlDeviceGetMemoryErrorCounter", False, False)
     for first, counter in ((7, "volatile"), (18, "aggregate"))}
)  # fmt: skip
MEMORY_TEMP, LINK_COUNT, GET_STATE, ECC_PENDING = 82, 91, 165, 2
REMAPPED = {142: 0, 143: 1, 144: 2, 145: 3}  # COR, UNC, PENDING, FAILURE
THROUGHPUT = {138: "tx", 140: "tx", 139: "rx", 141: "rx"}  # DATA_TX, RAW_TX, DATA_RX, RAW_RX (no overhead)
#: per-lane NVLink error fields: (L0 id, L6 id, TOTAL id, key)
NVLINK_RUNS = (
    (32, 96, 38, "crc_flit_errors"),
    (39, 102, 45, "crc_errors"),
    (46, 108, 52, "replay_errors"),
    (53, 114, 59, "recovery_errors"),
)


def _unknown(c: Call, field_id: int) -> bool:
    listed = c.text("fields.unknown") or ""
    for item in listed.split(","):
        try:
            if int(item.strip(), 0) == field_id:
                return True
        except ValueError:
            break
    return False


def _nvlink_error(field_id: int) -> tuple[str, int] | None:
    """(key, link) of a per-lane NVLink error field; link -1 for the _TOTAL field."""
    for l0, l6, total, key in NVLINK_RUNS:
        if l0 <= field_id < l0 + 6:
            return key, field_id - l0
        if l6 <= field_id < l6 + 6:
            return key, field_id - l6 + 6
        if field_id == total:
            return key, -1
    return None


def _link_total(c: Call, key: str) -> int | None:
    values = [c.u64(f"nvlink.{link}.{key}") for link in sorted(c.s.gpus[c.gpu].links)] if c.gpu in c.s.gpus else []
    present = [value for value in values if value is not None]
    return sum(present) if present else None


def _remapped(c: Call, which: int) -> int | None:
    correctable, uncorrectable = c.u64("remapped_rows.correctable"), c.u64("remapped_rows.uncorrectable")
    if correctable is None or uncorrectable is None:
        return None
    values = (correctable, uncorrectable, c.u64("remapped_rows.pending") or 0, c.u64("remapped_rows.failure") or 0)
    return values[which] & 0xFFFFFFFF


def _value(c: Call, entry: Any, is_absurd: bool) -> tuple[int, int, float]:
    """(return code, value type, value) of one entry."""
    field_id, scope = entry.fieldId, entry.scopeId
    if _unknown(c, field_id):
        return errors.INVALID_ARGUMENT, ULL, 0
    only = only_value(c, field_id, scope)
    if only is not None:
        return only
    linked = link_value(c, field_id, scope)
    if linked is not None:
        return linked
    if field_id in CALL_FIELDS:
        key, symbol, flag, uint = CALL_FIELDS[field_id]
        code = c.entry_fault(symbol)
        read = energy_mj if key == "energy" else lambda call: call.u64(key)  # energy: samples.py
        value = read(c) if code == errors.SUCCESS else None
        if code != errors.SUCCESS or value is None:
            return code or errors.NOT_SUPPORTED, ULL, 0
        value = int(value != 0) if flag else value
        return errors.SUCCESS, UINT if uint else ULL, value
    if field_id == ECC_PENDING:  # ecc.pending, else ecc.mode (no change pending), as the call
        code = c.entry_fault("nvmlDeviceGetEccMode")
        if code != errors.SUCCESS:
            return code, ULL, 0
        mode = c.u64("ecc.pending")
        mode = c.u64("ecc.mode") if mode is None else mode
        return (errors.NOT_SUPPORTED, ULL, 0) if mode is None else (errors.SUCCESS, UINT, int(mode != 0))
    if field_id == MEMORY_TEMP:
        value = ABSURD_TEMPERATURE if is_absurd else c.u64("temperature.memory")
        return (errors.NOT_SUPPORTED, UINT, 0) if value is None else (errors.SUCCESS, UINT, value)
    if field_id == LINK_COUNT:
        links = c.s.gpus[c.gpu].links if c.gpu in c.s.gpus else set()
        return (errors.SUCCESS, UINT, max(links) + 1) if links else (errors.NOT_SUPPORTED, ULL, 0)
    if field_id in REMAPPED:
        code = c.entry_fault("nvmlDeviceGetRemappedRows")
        value = _remapped(c, REMAPPED[field_id]) if code == errors.SUCCESS else None
        if code != errors.SUCCESS:
            return code, ULL, 0
        return (errors.NOT_SUPPORTED, ULL, 0) if value is None else (errors.SUCCESS, UINT, value)
    if field_id == GET_STATE:
        code = c.entry_fault("nvmlDeviceGetNvLinkState")
        if code != errors.SUCCESS:
            return code, ULL, 0
        state = c.u64(f"nvlink.{scope}.state") if scope < 36 else None
        if state is None:
            return errors.NOT_SUPPORTED, ULL, 0
        return errors.SUCCESS, UINT, state if state <= 3 else 1  # NVML_NVLINK_STATE_* 0-3, else ACTIVE
    if field_id in THROUGHPUT:
        value = c.u64(f"nvlink.{scope}.{THROUGHPUT[field_id]}") if scope < 36 else None
        return (errors.NOT_SUPPORTED, ULL, 0) if value is None else (errors.SUCCESS, ULL, value)
    lane = _nvlink_error(field_id)
    if lane is None:
        return errors.NOT_SUPPORTED, ULL, 0
    code = c.entry_fault("nvmlDeviceGetNvLinkErrorCounter")
    if code != errors.SUCCESS:
        return code, ULL, 0
    key, link = lane
    value = _link_total(c, key) if link < 0 else c.u64(f"nvlink.{link}.{key}")
    return (errors.NOT_SUPPORTED, ULL, 0) if value is None else (errors.SUCCESS, ULL, value)


@device("nvmlDeviceGetFieldValues")
def field_values(c: Call, count: Any, values: Any) -> int:
    number, values = abi.number(count), abi.target(values)
    if number < 0 or (number > 0 and values is None):
        return errors.INVALID_ARGUMENT
    is_absurd = bool(c.u64("absurd"))
    now = time.time_ns() // 1000
    for i in range(number):
        entry = values[i]
        entry.timestamp, entry.latencyUsec = now, 0
        ctypes.memset(ctypes.addressof(entry.value), 0, ctypes.sizeof(entry.value))
        code, kind, value = _value(c, entry, is_absurd)
        entry.valueType, entry.nvmlReturn = kind, code
        if code == errors.SUCCESS:
            if kind == DBL:
                entry.value.dVal = value
            elif kind == UINT:
                entry.value.uiVal = int(value) & 0xFFFFFFFF
            else:
                entry.value.ullVal = int(value)
    return errors.SUCCESS
