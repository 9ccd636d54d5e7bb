"""Field values: every catalogue NVML source that NVML also offers as a field, read in one
``nvmlDeviceGetFieldValues`` call per handle per read.

Each entry carries its own ``nvmlReturn``, so one unsupported field never spoils the batch. Where a
field is of no use on this driver (the id is unknown: ``INVALID_ARGUMENT``; the function is missing;
the handle takes no field values, as MIG handles), the value is read with its own call from then on,
remembered per (entity, row). ``NOT_SUPPORTED`` on an entry is checked once against the single call
(some fields, such as the 1 s power average, exist on fewer GPUs than their call).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import pynvml

from gpu_exporter.backends.nvml.field_memory import decoded
from gpu_exporter.backends.nvml.link_fields import NVLINK5_FIELD_IDS
from gpu_exporter.backends.nvml.readers import FIELD_ONLY, FIELD_SCOPES, Handle
from gpu_exporter.catalogue import MetricSpec, NvmlSource
from gpu_exporter.model import Entity

# Device-level sources → field id. Units are the call's: mW, mJ, ns, counts, 0/1.
DEVICE_FIELDS: dict[tuple[str, str], int] = {
    **{("nvmlDeviceGetFieldValues", selector): field_id for selector, field_id in FIELD_ONLY.items()},
    # nvmlDeviceGetPowerUsage is the 1 s average on Ampere (except GA100) and newer; elsewhere the
    # field answers NOT_SUPPORTED and the call (instantaneous there) is used instead.
    ("nvmlDeviceGetPowerUsage", ""): pynvml.NVML_FI_DEV_POWER_AVERAGE,
    ("nvmlDeviceGetEnforcedPowerLimit", ""): pynvml.NVML_FI_DEV_POWER_CURRENT_LIMIT,
    ("nvmlDeviceGetPowerManagementDefaultLimit", ""): pynvml.NVML_FI_DEV_POWER_DEFAULT_LIMIT,
    ("nvmlDeviceGetPowerManagementLimit", ""): pynvml.NVML_FI_DEV_POWER_REQUESTED_LIMIT,
    ("nvmlDeviceGetPowerManagementLimitConstraints", "min"): pynvml.NVML_FI_DEV_POWER_MIN_LIMIT,
    ("nvmlDeviceGetPowerManagementLimitConstraints", "max"): pynvml.NVML_FI_DEV_POWER_MAX_LIMIT,
    ("nvmlDeviceGetTotalEnergyConsumption", ""): pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION,
    ("nvmlDeviceGetPcieReplayCounter", ""): pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER,
    ("nvmlDeviceGetEccMode", "current"): pynvml.NVML_FI_DEV_ECC_CURRENT,
    ("nvmlDeviceGetEccMode", "pending"): pynvml.NVML_FI_DEV_ECC_PENDING,
    ("nvmlDeviceGetTotalEccErrors", "corrected_volatile"): pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL,
    ("nvmlDeviceGetTotalEccErrors", "uncorrected_volatile"): pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL,
    ("nvmlDeviceGetTotalEccErrors", "corrected_aggregate"): pynvml.NVML_FI_DEV_ECC_SBE_AGG_TOTAL,
    ("nvmlDeviceGetTotalEccErrors", "uncorrected_aggregate"): pynvml.NVML_FI_DEV_ECC_DBE_AGG_TOTAL,
    # ECC errors by location: fields for L1, L2, device memory, register file and texture memory, and
    # the uncorrected CBU counts; the rest (shared memory, SRAM, corrected CBU) take their own call.
    **{
        ("nvmlDeviceGetMemoryErrorCounter", f"{kind}_{counter}_{location}"): getattr(
            pynvml, f"NVML_FI_DEV_ECC_{short}_{counter[:3].upper()}_{name}"
        )
        for location, name in (
            ("l1_cache", "L1"),
            ("l2_cache", "L2"),
            ("device_memory", "DEV"),
            ("register_file", "REG"),
            ("texture_memory", "TEX"),
        )
        for counter in ("volatile", "aggregate")
        for kind, short in (("corrected", "SBE"), ("uncorrected", "DBE"))
    },  # fmt: skip
    ("nvmlDeviceGetMemoryErrorCounter", "uncorrected_volatile_cbu"): pynvml.NVML_FI_DEV_ECC_DBE_VOL_CBU,
    ("nvmlDeviceGetMemoryErrorCounter", "uncorrected_aggregate_cbu"): pynvml.NVML_FI_DEV_ECC_DBE_AGG_CBU,
    ("nvmlDeviceGetRetiredPages", "multiple_single_bit"): pynvml.NVML_FI_DEV_RETIRED_SBE,
    ("nvmlDeviceGetRetiredPages", "double_bit"): pynvml.NVML_FI_DEV_RETIRED_DBE,
    ("nvmlDeviceGetRetiredPagesPendingStatus", ""): pynvml.NVML_FI_DEV_RETIRED_PENDING,
    ("nvmlDeviceGetRemappedRows", "correctable"): pynvml.NVML_FI_DEV_REMAPPED_COR,
    ("nvmlDeviceGetRemappedRows", "uncorrectable"): pynvml.NVML_FI_DEV_REMAPPED_UNC,
    ("nvmlDeviceGetRemappedRows", "pending"): pynvml.NVML_FI_DEV_REMAPPED_PENDING,
    ("nvmlDeviceGetRemappedRows", "failure"): pynvml.NVML_FI_DEV_REMAPPED_FAILURE,
    ("nvmlDeviceGetViolationStatus", "power"): pynvml.NVML_FI_DEV_PERF_POLICY_POWER,
    ("nvmlDeviceGetViolationStatus", "thermal"): pynvml.NVML_FI_DEV_PERF_POLICY_THERMAL,
    ("nvmlDeviceGetViolationStatus", "sync_boost"): pynvml.NVML_FI_DEV_PERF_POLICY_SYNC_BOOST,
    ("nvmlDeviceGetViolationStatus", "board_limit"): pynvml.NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT,
    ("nvmlDeviceGetViolationStatus", "low_utilization"): pynvml.NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION,
    ("nvmlDeviceGetViolationStatus", "reliability"): pynvml.NVML_FI_DEV_PERF_POLICY_RELIABILITY,
    ("nvmlDeviceGetViolationStatus", "app_clocks"): pynvml.NVML_FI_DEV_PERF_POLICY_TOTAL_APP_CLOCKS,
    ("nvmlDeviceGetViolationStatus", "base_clocks"): pynvml.NVML_FI_DEV_PERF_POLICY_TOTAL_BASE_CLOCKS,
}

# Per-lane NVLink error counters have one id per link for links 0-11 (L0-L5 and L6-L11 are two
# runs of ids); links 12 and up keep nvmlDeviceGetNvLinkErrorCounter.
_LANE_FIELDS: dict[str, tuple[int, ...]] = {
    selector: tuple(getattr(pynvml, f"NVML_FI_DEV_NVLINK_{name}_ERROR_COUNT_L{lane}") for lane in range(12))
    for selector, name in (
        ("crc_data", "CRC_DATA"),
        ("replay", "REPLAY"),
        ("recovery", "RECOVERY"),
        ("crc_flit", "CRC_FLIT"),
    )
}
# Per-link fields with scopeId = link.
_SCOPED_LINK_FIELDS: dict[tuple[str, str], int] = {
    ("nvmlDeviceGetFieldValues", "nvlink_tx"): pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
    ("nvmlDeviceGetFieldValues", "nvlink_rx"): pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
    ("nvmlDeviceGetNvLinkState", ""): pynvml.NVML_FI_DEV_NVLINK_GET_STATE,
    ("nvmlDeviceGetFieldValues", "nvlink_state"): pynvml.NVML_FI_DEV_NVLINK_GET_STATE,  # raw 0-3
    **{("nvmlDeviceGetFieldValues", selector): field_id for selector, field_id in NVLINK5_FIELD_IDS.items()},
}
_NVLINK_STATE = {pynvml.NVML_NVLINK_STATE_INACTIVE: 0.0, pynvml.NVML_NVLINK_STATE_ACTIVE: 1.0}
# Entry answers that mean "this field is no use here": ask the single call, from now on.
_NO_FIELD = (pynvml.NVML_ERROR_INVALID_ARGUMENT, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)


def field_of(source: NvmlSource, link: int | None) -> tuple[int, int] | None:
    """(field id, scopeId) of a source, or None where NVML has no field for it."""
    key = (source.call, source.selector)
    if link is None:
        field_id = DEVICE_FIELDS.get(key)
        scope = FIELD_SCOPES.get(source.selector, 0) if source.call == "nvmlDeviceGetFieldValues" else 0
        return None if field_id is None else (field_id, scope)
    if key in _SCOPED_LINK_FIELDS:
        return _SCOPED_LINK_FIELDS[key], link
    lanes = _LANE_FIELDS.get(source.selector) if source.call == "nvmlDeviceGetNvLinkErrorCounter" else None
    return (lanes[link], 0) if lanes is not None and link < len(lanes) else None


@dataclass(frozen=True)
class Wanted:
    """One value to fetch: for ``entity`` the row ``spec``, on NVLink ``link`` when not None."""

    entity: Entity
    spec: MetricSpec
    key: tuple[str, str]  # (entity uid, row key)
    source: NvmlSource
    link: int | None = None
    #: (field id, scopeId) from :func:`field_of`, or None where NVML has no field for it.
    field: tuple[int, int] | None = None

    @classmethod
    def of(cls, entity: Entity, spec: MetricSpec, row: str, source: NvmlSource, link: int | None) -> Wanted:
        """The value ``row`` of ``entity`` (on NVLink ``link``), with its field worked out."""
        return cls(entity, spec, (entity.uid, row), source, link, field_of(source, link))


#: Bound of the kept request arrays (one per field list a read asks; cleared when exceeded).
_REQUESTS_MAX = 1024

# What a batch says about one value: a raw value, an entry's error, or CALL (ask the single call).
CALL = object()
Outcome: TypeAlias = object  # float | pynvml.NVMLError | CALL (pynvml is untyped)


class FieldBatcher:
    """Builds and decodes the one field-value call per handle; remembers which (entity, row) pairs
    must use their own call. Runs on sampler worker threads: one device's reads at a time."""

    def __init__(self) -> None:
        self._use_call: set[tuple[str, str]] = set()  # (entity uid, row key)
        self._checked: set[tuple[str, str]] = set()  # NOT_SUPPORTED already checked against the call
        # (field id, scope) pairs of a call → the request array's type and bytes, filled in once: pynvml's
        # wrapper sets two attributes of every entry per call through Python (a read's field list repeats).
        self._requests: dict[tuple[tuple[int, int], ...], tuple[Any, bytes]] = {}

    def read(self, handle: Handle, wanted: Sequence[Wanted]) -> tuple[dict[tuple[str, str], Outcome], list[Wanted]]:
        """Outcomes by (entity uid, row key) for every wanted value NVML offers as a field, and the
        number of entries asked (0: no call made). Raises the whole call's NVMLError (GPU lost,
        ...) except a missing function or a handle without field values, which fall back."""
        entries: list[tuple[Wanted, tuple[int, int]]] = []
        use_call = self._use_call
        for item in wanted:
            field = item.field
            if field is not None and item.key not in use_call:
                entries.append((item, field))
        if not entries:
            return {}, []
        asked = [item for item, _field in entries]
        try:
            values = self._call(handle, tuple(field for _item, field in entries))
        except (pynvml.NVMLError_FunctionNotFound, pynvml.NVMLError_NotSupported, pynvml.NVMLLibraryMismatchError):
            self._use_call.update(item.key for item in asked)
            return {}, asked
        except pynvml.NVMLError_GpuIsLost:
            raise
        except pynvml.NVMLError as err:  # the whole call failed: every value it carried did
            return {item.key: err for item in asked}, asked
        out: dict[tuple[str, str], Outcome] = {}
        for (item, (field_id, _scope)), (status, value) in zip(entries, decoded(values), strict=True):
            key = item.key
            if status in _NO_FIELD:
                self._use_call.add(key)
                out[key] = CALL
                continue
            if status != pynvml.NVML_SUCCESS:
                out[key] = pynvml.NVMLError(status)
                continue
            if field_id == pynvml.NVML_FI_DEV_NVLINK_GET_STATE and item.source.call != "nvmlDeviceGetFieldValues":
                # Sleep and "active, traffic disabled" are not in the call's vocabulary: ask it.
                out[key] = _NVLINK_STATE.get(int(value), CALL)
            else:
                out[key] = value
        return out, asked

    def _call(self, handle: Handle, fields: tuple[tuple[int, int], ...]) -> Any:
        """``nvmlDeviceGetFieldValues`` for ``fields``, as pynvml's wrapper makes it, from a copy of the
        request array kept for that list; raises the call's NVMLError."""
        request = self._requests.get(fields)
        if request is None:
            if len(self._requests) >= _REQUESTS_MAX:
                self._requests.clear()
            kind = pynvml.c_nvmlFieldValue_t * len(fields)
            array = kind()
            for entry, (field_id, scope) in zip(array, fields, strict=True):
                entry.fieldId, entry.scopeId = field_id, scope
            request = self._requests[fields] = (kind, bytes(array))
        kind, filled = request
        values = kind.from_buffer_copy(filled)
        function = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetFieldValues")  # resolved by pynvml, cached there
        status = function(handle, ctypes.c_int32(len(fields)), ctypes.byref(values))
        if status != pynvml.NVML_SUCCESS:
            raise pynvml.NVMLError(status)
        return values

    def check_unsupported(self, key: tuple[str, str]) -> bool:
        """True the first time an entry answers NOT_SUPPORTED for ``key``: ask the single call once."""
        if key in self._checked:
            return False
        self._checked.add(key)
        return True

    def use_call(self, key: tuple[str, str]) -> None:
        """The single call answered where the field did not: use it from now on."""
        self._use_call.add(key)
