"""GPU rows of the clock_events and ecc collectors: throttling reasons and times, ECC, row remapping, retired pages;
and the inforom's configuration checksum and validity (modes collector)."""

from __future__ import annotations

from fractions import Fraction

from gpu_exporter.catalogue.spec import (
    FULL,
    STATIC,
    DcgmSource,
    MetricSpec,
    NvmlSource,
)
from gpu_exporter.catalogue.spec import (
    counter as _counter,
)
from gpu_exporter.catalogue.spec import (
    gauge as _gauge,
)
from gpu_exporter.catalogue.vocabulary import CLOCK_EVENT_REASONS, VIOLATION_POLICIES

#: Clock event reasons the default exposition keeps: those the shipped alerts watch (thermal, power cap and
#: brake, hardware slowdown). Idle, application and display clocks and sync boost are full detail.
ALERTING_CLOCK_EVENTS = frozenset({"power_cap", "hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake"})
#: Violation counters the default exposition keeps: the exact time of the causes the alerts watch (power cap,
#: thermal). Sync boost, board limit, low utilization and reliability are full detail.
LIMITING_POLICIES = frozenset({"power", "thermal"})
#: Memory locations of nvmlDeviceGetMemoryErrorCounter (nvmlMemoryLocation_t, in its order): the
#: ``location`` label, DCGM's abbreviation in its field names, and DCGM's corrected (SBE) field ids
#: of the volatile and the aggregate counter (the uncorrected, DBE, field is the next id).
ECC_LOCATIONS: tuple[tuple[str, str, int, int], ...] = (
    ("l1_cache", "L1", 314, 324),
    ("l2_cache", "L2", 316, 326),
    ("device_memory", "DEV", 318, 328),
    ("register_file", "REG", 320, 330),
    ("texture_memory", "TEX", 322, 332),
    ("shared_memory", "SHM", 334, 338),
    ("cbu", "CBU", 336, 340),
    ("sram", "SRM", 342, 344),
)
#: nvmlRowRemapperHistogramValues_t's members (the ``availability`` label), DCGM's field and name.
ROW_REMAP_AVAILABILITY: tuple[tuple[str, int, str], ...] = tuple(
    (name, 385 + i, f"DCGM_FI_DEV_BANKS_REMAP_ROWS_AVAIL_{name.upper()}")
    for i, name in enumerate(("max", "high", "partial", "low", "none"))
)

ROWS: tuple[MetricSpec, ...] = (
    # clock events (throttling): one 0/1 series per reason bit
    *(
        _gauge(
            "gpu_clock_event_active", "",
            "1 while this reason holds the clocks below their target (clock event, formerly throttle reason)",
            "clock_events", NvmlSource("nvmlDeviceGetCurrentClocksEventReasons", reason), DcgmSource(112, bit=bit),
            variant=(("reason", reason),), maximum=1, detail="lean" if reason in ALERTING_CLOCK_EVENTS else FULL,
        )
        for reason, bit in CLOCK_EVENT_REASONS
    ),
    *(
        _counter(
            "gpu_clock_throttle_seconds_total", "seconds",
            "Cumulative time the clocks were held below their target by this cause", "clock_events",
            NvmlSource("nvmlDeviceGetViolationStatus", policy, Fraction(1, 10**9)),
            DcgmSource(field_id, Fraction(1, 10**9)), compat, Fraction(10**9), variant=(("reason", policy),),
            detail="lean" if policy in LIMITING_POLICIES else FULL,
        )
        for policy, field_id, compat in VIOLATION_POLICIES
    ),
    # The driver's totals over the causes above (DCGM 246, 247): not one more cause, so not a reason
    # of gpu_clock_throttle_seconds_total, whose sum over reasons they would double.
    *(
        _counter(
            "gpu_clock_below_target_seconds_total", "seconds",
            "Cumulative time any limiter held the clocks below the application clocks (target application) or "
            "the base clocks (target base)", "clock_events",
            NvmlSource("nvmlDeviceGetViolationStatus", policy, Fraction(1, 10**9)),
            DcgmSource(field_id, Fraction(1, 10**9)), compat, Fraction(10**9), variant=(("target", target),),
            detail=FULL,
        )
        for target, policy, field_id, compat in (
            ("application", "app_clocks", 246, "DCGM_FI_DEV_TOTAL_APP_CLOCKS_VIOLATION"),
            ("base", "base_clocks", 247, "DCGM_FI_DEV_TOTAL_BASE_CLOCKS_VIOLATION"),
        )
    ),
    # HW slowdowns (clocks cut by half or more; NVML fields 270, 271, ns): a family of their own, since
    # NVML does not say whether its perf-policy counters (board limit, ...) already include this time.
    *(
        _counter(
            "gpu_clock_hw_slowdown_seconds_total", "seconds",
            "Cumulative time a hardware slowdown cut the clocks by a factor of 2 or more: temperature too high "
            "(hw_thermal) or an external power brake (hw_power_brake)", "clock_events",
            NvmlSource("nvmlDeviceGetFieldValues", selector, Fraction(1, 10**9)),
            DcgmSource(field_id, Fraction(1, 10**9)), compat, Fraction(10**9), variant=(("reason", reason),),
        )
        for reason, selector, field_id, compat in (
            ("hw_thermal", "hw_thermal_slowdown", 1423, "DCGM_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN_NS"),
            ("hw_power_brake", "hw_power_brake_slowdown", 1424,
             "DCGM_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN_NS"),
        )
    ),
    # memory errors
    _gauge(
        "gpu_ecc_mode_enabled", "", "1 when ECC is enabled (current mode)", "ecc",
        NvmlSource("nvmlDeviceGetEccMode", "current"), DcgmSource(300), "DCGM_FI_DEV_ECC_CURRENT", maximum=1,
        every=STATIC,
    ),
    _gauge(
        "gpu_ecc_mode_pending_enabled", "", "1 when ECC will be enabled after the next reboot (pending mode)", "ecc",
        NvmlSource("nvmlDeviceGetEccMode", "pending"), DcgmSource(301), "DCGM_FI_DEV_ECC_PENDING", maximum=1,
        every=STATIC,
        detail=FULL,
    ),
    # DCGM 346 reads the same call (DcgmCacheManager: bThresholdExceeded of nvmlDeviceGetSramEccErrorStatus)
    _gauge(
        "gpu_ecc_sram_threshold_exceeded", "",
        "1 when the GPU's SRAM ECC errors have passed the error threshold of its field diagnostics", "ecc",
        NvmlSource("nvmlDeviceGetSramEccErrorStatus", "threshold_exceeded"), DcgmSource(346),
        "DCGM_FI_DEV_SRAM_EXCEEDED", maximum=1, detail=FULL,
    ),
    *(
        _counter(
            "gpu_ecc_errors_total", "",
            "ECC errors in device memory; volatile counts since the driver loaded, aggregate over the board's life",
            "ecc", NvmlSource("nvmlDeviceGetTotalEccErrors", f"{kind}_{counter}"), DcgmSource(field_id), compat,
            variant=(("type", kind), ("counter", counter)), detail="lean" if counter == "volatile" else FULL,
        )
        for kind, counter, field_id, compat in (
            ("corrected", "volatile", 310, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"),
            ("uncorrected", "volatile", 311, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"),
            ("corrected", "aggregate", 312, "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL"),
            ("uncorrected", "aggregate", 313, "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"),
        )
    ),
    # ECC errors by where they happened (DCGM 314-345: SBE id, then DBE id + 1), read slowly
    *(
        _counter(
            "gpu_ecc_location_errors_total", "",
            "ECC errors by the memory they occurred in (caches, register file, device memory, ...); volatile "
            "counts since the driver loaded, aggregate over the board's life",
            "ecc", NvmlSource("nvmlDeviceGetMemoryErrorCounter", f"{kind}_{counter}_{location}"),
            DcgmSource(field_id + offset), f"DCGM_FI_DEV_ECC_{short}_{counter[:3].upper()}_{dcgm}",
            variant=(("location", location), ("type", kind), ("counter", counter)), every=STATIC, detail=FULL,
        )
        for location, dcgm, volatile_id, aggregate_id in ECC_LOCATIONS
        for counter, field_id in (("volatile", volatile_id), ("aggregate", aggregate_id))
        for kind, short, offset in (("corrected", "SBE", 0), ("uncorrected", "DBE", 1))
    ),
    _counter(
        "gpu_remapped_rows_total", "", "Memory rows remapped to spare rows, by the kind of error that caused it", "ecc",
        NvmlSource("nvmlDeviceGetRemappedRows", "correctable"), DcgmSource(394),
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", variant=(("cause", "correctable"),),
    ),
    _counter(
        "gpu_remapped_rows_total", "", "Memory rows remapped to spare rows, by the kind of error that caused it", "ecc",
        NvmlSource("nvmlDeviceGetRemappedRows", "uncorrectable"), DcgmSource(393),
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", variant=(("cause", "uncorrectable"),),
    ),
    _gauge(
        "gpu_row_remap_pending", "", "1 when a row remap is pending: reset the GPU to apply it", "ecc",
        NvmlSource("nvmlDeviceGetRemappedRows", "pending"), DcgmSource(396), "DCGM_FI_DEV_ROW_REMAP_PENDING",
        maximum=1,
    ),
    _gauge(
        "gpu_row_remap_failed", "", "1 when a row remap failed: the GPU needs service", "ecc",
        NvmlSource("nvmlDeviceGetRemappedRows", "failure"), DcgmSource(395), "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        maximum=1,
    ),
    _gauge(  # read slowly: a flag the driver sets once, read with a call of its own
        "gpu_memory_unrepairable", "",
        "1 when the GPU's memory has an error that row remapping cannot repair: the GPU needs service", "ecc",
        NvmlSource("nvmlDeviceGetUnrepairableMemoryFlag_v1"), DcgmSource(1507), "DCGM_FI_DEV_MEMORY_UNREPAIRABLE_FLAG",
        maximum=1, every=STATIC,
    ),
    *(
        _gauge(
            "gpu_row_remap_banks", "",
            "Memory banks by the spare rows they have left for remapping (max: all, none: no spare row left)",
            "ecc", NvmlSource("nvmlDeviceGetRowRemapperHistogram", availability), DcgmSource(field_id), compat,
            variant=(("availability", availability),), every=STATIC, detail=FULL,
        )
        for availability, field_id, compat in ROW_REMAP_AVAILABILITY
    ),
    _counter(
        "gpu_retired_pages_total", "", "Framebuffer pages retired (pre-Ampere page retirement), by cause", "ecc",
        NvmlSource("nvmlDeviceGetRetiredPages", "multiple_single_bit"), DcgmSource(390), "DCGM_FI_DEV_RETIRED_SBE",
        variant=(("cause", "multiple_single_bit"),),
    ),
    _counter(
        "gpu_retired_pages_total", "", "Framebuffer pages retired (pre-Ampere page retirement), by cause", "ecc",
        NvmlSource("nvmlDeviceGetRetiredPages", "double_bit"), DcgmSource(391), "DCGM_FI_DEV_RETIRED_DBE",
        variant=(("cause", "double_bit"),),
    ),
    _gauge(
        "gpu_retired_pages_pending", "", "1 when pages wait to be retired at the next driver reload", "ecc",
        NvmlSource("nvmlDeviceGetRetiredPagesPendingStatus"), DcgmSource(392), "DCGM_FI_DEV_RETIRED_PENDING",
        maximum=1,
    ),
    _gauge(  # NVML field 230
        "gpu_recovery_action", "",
        "What the driver asks to recover the GPU (nvmlDeviceGpuRecoveryAction_t): 0 none, 1 GPU reset, 2 node "
        "reboot, 3 drain P2P, 4 drain P2P and reset, 5 recover the IMEX domain, 6 PCIe bus reset, 7 system reboot",
        "modes", NvmlSource("nvmlDeviceGetFieldValues", "recovery_action"), DcgmSource(1523),
        "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION", maximum=255,
    ),
    # the inforom (the board's configuration store): near-static, read slowly
    _gauge(
        "gpu_inforom_configuration_checksum", "",
        "Checksum of the configuration in the inforom's power and ECC objects; changes with the driver release "
        "or a configuration change (e.g. ECC toggled), so GPUs of one fleet that differ stand out", "modes",
        NvmlSource("nvmlDeviceGetInforomConfigurationChecksum"), DcgmSource(83), "DCGM_FI_DEV_INFOROM_CONFIG_CHECK",
        maximum=2**32 - 1, every=STATIC,
        detail=FULL,
    ),
    _gauge(
        "gpu_inforom_valid", "", "1 while the inforom's checksums verify, 0 when the inforom is corrupted", "modes",
        NvmlSource("nvmlDeviceValidateInforom"), DcgmSource(84), "DCGM_FI_DEV_INFOROM_CONFIG_VALID", maximum=1,
        every=STATIC,
    ),
)  # fmt: skip
