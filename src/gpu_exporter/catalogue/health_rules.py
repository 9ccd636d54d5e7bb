"""The health model's rules as data: DCGM's health-watch subsystems, the statuses and recommended
actions, how each Xid bucket and group of the Xid table (:mod:`.xids`) and each driver recovery action
counts, and the catalogue keys each subsystem is judged from. :mod:`gpu_exporter.sampling.health`
applies them each cycle."""

from __future__ import annotations

from gpu_exporter.catalogue import keys
from gpu_exporter.catalogue.spec import key_of

#: DCGM's health-watch systems (``DCGM_HEALTH_WATCH_*``, dcgm_structs.h), in DCGM's bit order: the
#: ``subsystem`` label's values.
SUBSYSTEMS: tuple[str, ...] = ("pcie", "nvlink", "pmu", "mcu", "mem", "sm", "inforom", "thermal", "power", "driver")
PASS, WARN, FAIL = 0, 1, 2
STATUS_NAMES = ("pass", "warn", "fail")
#: Recommended actions, least to most drastic: the value of ``gpu_health_action`` is the index.
ACTIONS: tuple[str, ...] = ("none", "restart_job", "drain", "reset_gpu", "reboot", "service")
#: How long an Xid counts after its last occurrence (an Xid is a past event).
XID_HOLD_SECONDS = 3600.0
#: DCGM's PCIe health watch limit (DCGM_LIMIT_MAX_PCIREPLAY_RATE: replays per minute).
PCIE_REPLAYS_PER_MINUTE = 8
#: The window over which counters (PCIe replays, NVLink errors) are judged, seconds.
RATE_WINDOW_SECONDS = 60.0
#: Xid action bucket → (status, action); buckets not here (``none``) need nothing.
XID_BUCKETS: dict[str, tuple[int, str]] = {
    "app": (WARN, "restart_job"), "debug": (WARN, "restart_job"), "vm": (WARN, "restart_job"),
    "reset": (FAIL, "reset_gpu"), "dbe": (FAIL, "reset_gpu"), "nvlink": (FAIL, "reset_gpu"),
    "reboot": (FAIL, "reboot"), "seating": (FAIL, "service"), "support": (WARN, "service"),
    "update": (WARN, "service"), "uvm": (WARN, "reset_gpu"), "ecc": (WARN, "reboot"), "nvlink5": (WARN, "none"),
    "cleanup": (WARN, "none"), "recovery": (WARN, "none"), "power": (WARN, "none"), "cc": (WARN, "none"),
}  # fmt: skip
#: Xid table group → subsystem; codes whose subsystem differs from their group's are named.
XID_GROUPS = {"application": "sm", "memory": "mem", "interconnect": "nvlink", "firmware": "driver", "engine": "sm",
               "power": "power", "virtualization": "driver", "unused": "driver"}  # fmt: skip
XID_SUBSYSTEM = {32: "pcie", 79: "pcie", 80: "pcie", 167: "pcie", 62: "mcu", 169: "mcu", 122: "pmu", 123: "pmu",
                  124: "pmu"}  # fmt: skip
#: nvmlDeviceGpuRecoveryAction_t → (status, action, DCGM failure code), nvml.h.
RECOVERY = {
    1: (FAIL, "reset_gpu", "DCGM_FR_GPU_RECOVERY_RESET"), 2: (FAIL, "reboot", "DCGM_FR_GPU_RECOVERY_REBOOT"),
    3: (WARN, "drain", "DCGM_FR_GPU_RECOVERY_DRAIN_P2P"), 4: (FAIL, "reset_gpu", "DCGM_FR_GPU_RECOVERY_DRAIN_RESET"),
    5: (FAIL, "drain", "DCGM_FR_IMEX_UNHEALTHY"), 6: (FAIL, "reset_gpu", "DCGM_FR_GPU_RECOVERY_RESET"),
    7: (FAIL, "reboot", "DCGM_FR_GPU_RECOVERY_REBOOT"),
}  # fmt: skip
UNCORRECTED = key_of(keys.ECC_ERRORS, (("type", "uncorrected"), ("counter", "volatile")))
NVLINK_ERRORS = tuple(
    key_of(keys.NVLINK_ERRORS, (("type", t),)) for t in ("crc_flit", "crc_data", "replay", "recovery")
)
THERMAL = key_of(keys.CLOCK_EVENT_ACTIVE, (("reason", "hw_thermal"),))
POWER = key_of(keys.CLOCK_EVENT_ACTIVE, (("reason", "hw_power_brake"),))
#: The keys each subsystem is judged from (besides the Xids).
INPUTS: dict[str, tuple[str, ...]] = {
    "mem": (keys.MEMORY_UNREPAIRABLE, keys.ROW_REMAP_FAILED, keys.ROW_REMAP_PENDING, keys.RETIRED_PAGES_PENDING,
            UNCORRECTED),
    "inforom": (keys.INFOROM_VALID,), "thermal": (THERMAL,), "power": (POWER,), "pcie": (keys.PCIE_REPLAYS,),
    "nvlink": (keys.FABRIC_HEALTH, keys.FABRIC_STATE), "driver": (keys.RECOVERY_ACTION,),
}  # fmt: skip
