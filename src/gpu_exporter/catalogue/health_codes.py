"""The ``DCGM_FR_*`` failure codes DCGM's health watches report, as data: each code's number, name and
the recommended action the health model gives an incident with it.

Numbers and names: ``dcgmError_t`` in NVIDIA/DCGM ``dcgmlib/dcgm_errors.h`` (the same numbers at v3.3.9,
v4.4.2 and v4.6.0; 4.x renamed 10 and 12 from ``CLOCK_THROTTLE_*`` to ``CLOCKS_EVENT_*``, the newer
names are used; 121 to 132 exist from 4.x). The codes listed are those
``modules/health/DcgmHealthWatch.cpp`` reports at those tags. Actions: DCGM's own severity of each code
(``dcgmErrorMeta`` in ``dcgmlib/src/dcgm_errors.c``, v4.6.0: MONITOR → none, ISOLATE → drain, RESET →
reset_gpu, TRIAGE → service), except where the model's field rules (:mod:`.health_rules`,
:mod:`gpu_exporter.sampling.health`) already give the same code an action: there the field rule's
action, so that one code means one action on either backend.
"""

from __future__ import annotations

#: dcgmError_t → (name, action).
FR_CODES: dict[int, tuple[str, str]] = {
    3: ("DCGM_FR_PCI_REPLAY_RATE", "none"),  # ISOLATE in DCGM; the field rule warns with no action
    4: ("DCGM_FR_VOLATILE_DBE_DETECTED", "reset_gpu"),  # field rule (DCGM: ISOLATE)
    6: ("DCGM_FR_PENDING_PAGE_RETIREMENTS", "reset_gpu"),  # RESET
    7: ("DCGM_FR_RETIRED_PAGES_LIMIT", "drain"),  # ISOLATE
    8: ("DCGM_FR_RETIRED_PAGES_DBE_LIMIT", "drain"),  # ISOLATE
    9: ("DCGM_FR_CORRUPT_INFOROM", "service"),  # TRIAGE
    10: ("DCGM_FR_CLOCKS_EVENT_THERMAL", "none"),  # MONITOR
    11: ("DCGM_FR_POWER_UNREADABLE", "none"),  # MONITOR
    12: ("DCGM_FR_CLOCKS_EVENT_POWER", "none"),  # MONITOR
    13: ("DCGM_FR_NVLINK_ERROR_THRESHOLD", "drain"),  # ISOLATE
    14: ("DCGM_FR_NVLINK_DOWN", "service"),  # TRIAGE
    15: ("DCGM_FR_NVSWITCH_FATAL_ERROR", "drain"),  # ISOLATE
    16: ("DCGM_FR_NVSWITCH_NON_FATAL_ERROR", "none"),  # MONITOR
    33: ("DCGM_FR_FIELD_VIOLATION", "drain"),  # ISOLATE
    36: ("DCGM_FR_FIELD_THRESHOLD_DBL", "drain"),  # ISOLATE
    40: ("DCGM_FR_THERMAL_VIOLATIONS", "none"),  # MONITOR
    52: ("DCGM_FR_FAULTY_MEMORY", "drain"),  # ISOLATE
    70: ("DCGM_FR_NVLINK_CRC_ERROR_THRESHOLD", "drain"),  # ISOLATE
    71: ("DCGM_FR_NVLINK_ERROR_CRITICAL", "drain"),  # ISOLATE
    80: ("DCGM_FR_ROW_REMAP_FAILURE", "service"),  # field rule (DCGM: RESET)
    81: ("DCGM_FR_UNCONTAINED_ERROR", "drain"),  # ISOLATE
    85: ("DCGM_FR_PENDING_ROW_REMAP", "reset_gpu"),  # RESET
    101: ("DCGM_FR_XID_ERROR", "service"),  # TRIAGE; see XID_WARN_ACTION
    119: ("DCGM_FR_NVLINK_EFFECTIVE_BER_THRESHOLD", "drain"),  # ISOLATE
    120: ("DCGM_FR_FALLEN_OFF_BUS", "reboot"),  # field rule for a GPU that is down (DCGM: ISOLATE)
    121: ("DCGM_FR_NVLINK_SYMBOL_BER_THRESHOLD", "drain"),  # ISOLATE
    122: ("DCGM_FR_IMEX_UNHEALTHY", "drain"),  # ISOLATE; the recovery-action rule's drain
    123: ("DCGM_FR_FABRIC_PROBE_STATE", "drain"),  # MONITOR in DCGM; the fabric field rule drains
    125: ("DCGM_FR_GPU_RECOVERY_RESET", "reset_gpu"),  # RESET
    126: ("DCGM_FR_GPU_RECOVERY_REBOOT", "reboot"),  # the recovery action's own word (DCGM: ISOLATE)
    127: ("DCGM_FR_GPU_RECOVERY_DRAIN_P2P", "drain"),  # the recovery action's own word
    128: ("DCGM_FR_GPU_RECOVERY_DRAIN_RESET", "reset_gpu"),  # RESET
    131: ("DCGM_FR_CONTAINED_ERROR", "none"),  # MONITOR
    132: ("DCGM_FR_UNCORRECTABLE_ROW_REMAP_LIMIT", "service"),  # field rule (DCGM: TRIAGE)
}
#: DCGM_FR_XID_ERROR as a warning (an Xid in DCGM's per-system tables: MMU, PBDMA, PCIe bus, clock
#: change...): the job may need restarting, the GPU nothing; a failing one (the devastating Xids: 48, 74,
#: 79, 119, 120, 140...) takes :data:`FR_CODES`' action.
XID_WARN_ACTION = "restart_job"
#: An incident whose code is not listed: its name and action.
UNKNOWN_CODE = ("DCGM_FR_UNKNOWN", "service")


def code_name(code: int) -> str:
    return FR_CODES.get(code, UNKNOWN_CODE)[0]


def code_action(code: int, failed: bool) -> str:
    """The recommended action for an incident with ``code``; ``failed``: the result is FAIL, not WARN."""
    if code == 101 and not failed:
        return XID_WARN_ACTION
    return FR_CODES.get(code, UNKNOWN_CODE)[1]
