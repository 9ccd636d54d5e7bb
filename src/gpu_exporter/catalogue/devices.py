"""GPU rows of the utilization, memory, temperature, power, clocks and pcie collectors, in table order."""

from __future__ import annotations

from fractions import Fraction

from gpu_exporter.catalogue.spec import (
    FULL,
    GPU_AND_MIG,
    KIB,
    MIB,
    STATIC,
    DcgmSource,
    IdleWhileHeld,
    Integral,
    MetricSpec,
    NvmlSource,
)
from gpu_exporter.catalogue.spec import (
    counter as _counter,
)
from gpu_exporter.catalogue.spec import (
    gauge as _gauge,
)

_PERCENT = Fraction(1, 100)
_MILLI = Fraction(1, 1000)
_MHZ = Fraction(10**6)
#: Below this utilization a GPU held by a process counts as nearly idle.
IDLE_UTILIZATION = 0.05
#: The two ends of the utilization distribution counted per driver sample: below 10 %, at or above 90 %.
LOW_UTILIZATION = 0.10
HIGH_UTILIZATION = 0.90

ROWS: tuple[MetricSpec, ...] = (
    # utilization
    _gauge(
        "gpu_utilization_ratio", "ratio",
        "Fraction of time during which one or more kernels ran on the GPU: on NVML the mean of the driver's "
        "samples since the previous read (nvmlDeviceGetSamples NVML_GPU_UTILIZATION_SAMPLES, several a second), "
        "so a periodic load reads as its average rather than aliased into 0 and 1; the latest sample where no "
        "new one came, and where the driver keeps none its last sample period",
        "utilization",
        NvmlSource("nvmlDeviceGetUtilizationRates", "gpu", _PERCENT), DcgmSource(203, _PERCENT),
        "DCGM_FI_DEV_GPU_UTIL", Fraction(100),
    ),
    _counter(
        "gpu_utilization_seconds_total", "seconds",
        "Busy time: gpu_utilization_ratio integrated over the time between samples (on NVML every driver "
        "sample of nvmlDeviceGetSamples, several a second), so rate() gives the true average utilization over "
        "any window", "utilization",
        None, None, derive=Integral("gpu_utilization_ratio"),
    ),
    _gauge(
        "gpu_compute_processes", "", "Compute processes (CUDA contexts) running on the GPU", "utilization",
        NvmlSource("nvmlDeviceGetComputeRunningProcesses"), None,
    ),
    _counter(
        "gpu_idle_while_allocated_seconds_total", "seconds",
        "Time the GPU sat nearly idle (utilization below 5%) while at least one compute process held it: "
        "an input pipeline that cannot keep up shows as this rising while gpu_utilization_seconds_total also "
        "rises", "utilization",
        None, None, derive=IdleWhileHeld("gpu_utilization_ratio", "gpu_compute_processes", IDLE_UTILIZATION),
    ),
    _counter(
        "gpu_utilization_low_seconds_total", "seconds",
        "Time the GPU's utilization stayed below 10% while at least one compute process held it, counted per "
        "driver sample (nvmlDeviceGetSamples NVML_GPU_UTILIZATION_SAMPLES, several a second; elsewhere per "
        "read): sub-second stalls of a starving input pipeline show here", "utilization",
        None, None, derive=IdleWhileHeld("gpu_utilization_ratio", "gpu_compute_processes", LOW_UTILIZATION),
    ),
    _counter(
        "gpu_utilization_high_seconds_total", "seconds",
        "Time the GPU's utilization stayed at or above 90% while at least one compute process held it, counted "
        "per driver sample (nvmlDeviceGetSamples NVML_GPU_UTILIZATION_SAMPLES; elsewhere per read)",
        "utilization", None, None,
        derive=IdleWhileHeld("gpu_utilization_ratio", "gpu_compute_processes", HIGH_UTILIZATION, above=True),
    ),
    _gauge(
        "gpu_memory_copy_utilization_ratio", "ratio",
        "Fraction of the last sample period during which device memory was being read or written", "utilization",
        NvmlSource("nvmlDeviceGetUtilizationRates", "memory", _PERCENT), DcgmSource(204, _PERCENT),
        "DCGM_FI_DEV_MEM_COPY_UTIL", Fraction(100),
    ),
    _gauge(
        "gpu_encoder_utilization_ratio", "ratio", "Video encoder utilization", "utilization",
        NvmlSource("nvmlDeviceGetEncoderUtilization", "", _PERCENT), DcgmSource(206, _PERCENT),
        "DCGM_FI_DEV_ENC_UTIL", Fraction(100),
    ),
    _gauge(
        "gpu_decoder_utilization_ratio", "ratio", "Video decoder utilization", "utilization",
        NvmlSource("nvmlDeviceGetDecoderUtilization", "", _PERCENT), DcgmSource(207, _PERCENT),
        "DCGM_FI_DEV_DEC_UTIL", Fraction(100),
    ),
    # memory
    _gauge(
        "gpu_memory_total_bytes", "bytes", "Framebuffer memory installed", "memory",
        NvmlSource("nvmlDeviceGetMemoryInfo", "total"), DcgmSource(250, MIB), "DCGM_FI_DEV_FB_TOTAL", 1 / MIB,
        entities=GPU_AND_MIG,
    ),
    _gauge(
        "gpu_memory_used_bytes", "bytes", "Framebuffer memory allocated, excluding memory reserved by the driver",
        "memory", NvmlSource("nvmlDeviceGetMemoryInfo", "used"), DcgmSource(252, MIB),
        "DCGM_FI_DEV_FB_USED", 1 / MIB, entities=GPU_AND_MIG,
    ),
    _gauge(
        "gpu_memory_free_bytes", "bytes", "Framebuffer memory available for allocation", "memory",
        NvmlSource("nvmlDeviceGetMemoryInfo", "free"), DcgmSource(251, MIB), "DCGM_FI_DEV_FB_FREE", 1 / MIB,
        entities=GPU_AND_MIG,
        detail=FULL,
    ),
    _gauge(
        "gpu_memory_reserved_bytes", "bytes", "Framebuffer memory reserved by the driver and firmware", "memory",
        NvmlSource("nvmlDeviceGetMemoryInfo", "reserved"), DcgmSource(253, MIB),
        "DCGM_FI_DEV_FB_RESERVED", 1 / MIB,
    ),
    _gauge(
        "gpu_bar1_memory_total_bytes", "bytes", "BAR1 aperture size", "memory",
        NvmlSource("nvmlDeviceGetBAR1MemoryInfo", "total"), DcgmSource(90, MIB), "DCGM_FI_DEV_BAR1_TOTAL", 1 / MIB,
        every=STATIC,
        detail=FULL,
    ),
    _gauge(
        "gpu_bar1_memory_used_bytes", "bytes", "BAR1 aperture in use", "memory",
        NvmlSource("nvmlDeviceGetBAR1MemoryInfo", "used"), DcgmSource(92, MIB), "DCGM_FI_DEV_BAR1_USED", 1 / MIB,
        detail=FULL,
    ),
    _gauge(
        "gpu_bar1_memory_free_bytes", "bytes", "BAR1 aperture not in use", "memory",
        NvmlSource("nvmlDeviceGetBAR1MemoryInfo", "free"), DcgmSource(93, MIB), "DCGM_FI_DEV_BAR1_FREE", 1 / MIB,
        detail=FULL,
    ),
    # temperature and cooling
    _gauge(
        "gpu_temperature_celsius", "celsius", "GPU core temperature", "temperature",
        NvmlSource("nvmlDeviceGetTemperature", "gpu"), DcgmSource(150), "DCGM_FI_DEV_GPU_TEMP",
    ),
    _gauge(
        "gpu_memory_temperature_celsius", "celsius", "Memory (HBM) temperature", "temperature",
        NvmlSource("nvmlDeviceGetFieldValues", "memory_temperature"), DcgmSource(140),
        "DCGM_FI_DEV_MEMORY_TEMP",
    ),
    _gauge(
        "gpu_temperature_margin_celsius", "celsius",
        "Core temperature headroom: degrees below the GPU's thermal limit (negative past it)", "temperature",
        NvmlSource("nvmlDeviceGetMarginTemperature"), DcgmSource(153), "DCGM_FI_DEV_GPU_TEMP_LIMIT", every=5,
        minimum=-273.0,
        detail=FULL,
    ),
    _gauge(
        "gpu_temperature_slowdown_threshold_celsius", "celsius",
        "Core temperature at which the GPU starts to slow its clocks", "temperature",
        NvmlSource("nvmlDeviceGetTemperatureThreshold", "slowdown"), DcgmSource(158), "DCGM_FI_DEV_SLOWDOWN_TEMP",
        every=STATIC,
    ),
    _gauge(
        "gpu_temperature_shutdown_threshold_celsius", "celsius",
        "Core temperature at which the GPU shuts down to protect itself", "temperature",
        NvmlSource("nvmlDeviceGetTemperatureThreshold", "shutdown"), DcgmSource(159), "DCGM_FI_DEV_SHUTDOWN_TEMP",
        every=STATIC,
        detail=FULL,
    ),
    _gauge(
        "gpu_temperature_max_operating_celsius", "celsius", "Maximum operating core temperature", "temperature",
        NvmlSource("nvmlDeviceGetTemperatureThreshold", "max_operating"), DcgmSource(152),
        "DCGM_FI_DEV_GPU_MAX_OP_TEMP", every=STATIC,
    ),
    _gauge(
        "gpu_memory_temperature_max_operating_celsius", "celsius", "Maximum operating memory (HBM) temperature",
        "temperature", NvmlSource("nvmlDeviceGetTemperatureThreshold", "memory_max_operating"), DcgmSource(151),
        "DCGM_FI_DEV_MEM_MAX_OP_TEMP", every=STATIC,
    ),
    _gauge(
        "gpu_fan_speed_ratio", "ratio", "Fan speed as a fraction of its maximum (intended speed)", "temperature",
        NvmlSource("nvmlDeviceGetFanSpeed", "", _PERCENT), DcgmSource(191, _PERCENT),
        "DCGM_FI_DEV_FAN_SPEED", Fraction(100), maximum=2.0,  # NVML: "may exceed 100%"
    ),
    # power
    _gauge(
        "gpu_power_watts", "watts", "Power draw of the whole board", "power",
        NvmlSource("nvmlDeviceGetPowerUsage", "", _MILLI), DcgmSource(155), "DCGM_FI_DEV_POWER_USAGE",
    ),
    _gauge(
        "gpu_power_peak_watts", "watts",
        "Highest board power among the driver's power samples (nvmlDeviceGetSamples NVML_TOTAL_POWER_SAMPLES, "
        "every ~20 ms) since the previous read that the driver still holds (an H200 keeps the last 2.4 s): "
        "the spikes a 1 s average hides", "power",
        NvmlSource("nvmlDeviceGetSamples", "total_power_max", _MILLI), None,
    ),
    _gauge(
        "gpu_power_instant_watts", "watts", "Instantaneous power draw of the whole board (not averaged)", "power",
        NvmlSource("nvmlDeviceGetFieldValues", "power_instant", _MILLI), DcgmSource(157),
        "DCGM_FI_DEV_POWER_USAGE_INSTANT",
        detail=FULL,
    ),
    _gauge(
        "gpu_power_limit_watts", "watts", "Power limit the driver enforces, after all limiters", "power",
        NvmlSource("nvmlDeviceGetEnforcedPowerLimit", "", _MILLI), DcgmSource(164),
        "DCGM_FI_DEV_ENFORCED_POWER_LIMIT",
    ),
    _gauge(
        "gpu_power_default_limit_watts", "watts", "Default power management limit of the board", "power",
        NvmlSource("nvmlDeviceGetPowerManagementDefaultLimit", "", _MILLI), DcgmSource(163),
        "DCGM_FI_DEV_POWER_MGMT_LIMIT_DEF", every=STATIC,
    ),
    _gauge(
        "gpu_power_management_limit_watts", "watts",
        "Power management limit requested for the board (by an administrator, else the default)", "power",
        NvmlSource("nvmlDeviceGetPowerManagementLimit", "", _MILLI), DcgmSource(160), "DCGM_FI_DEV_POWER_MGMT_LIMIT",
        every=STATIC,
        detail=FULL,
    ),
    _gauge(
        "gpu_power_min_limit_watts", "watts", "Lowest power management limit the board accepts", "power",
        NvmlSource("nvmlDeviceGetPowerManagementLimitConstraints", "min", _MILLI), DcgmSource(161),
        "DCGM_FI_DEV_POWER_MGMT_LIMIT_MIN", every=STATIC,
        detail=FULL,
    ),
    _gauge(
        "gpu_power_max_limit_watts", "watts", "Highest power management limit the board accepts", "power",
        NvmlSource("nvmlDeviceGetPowerManagementLimitConstraints", "max", _MILLI), DcgmSource(162),
        "DCGM_FI_DEV_POWER_MGMT_LIMIT_MAX", every=STATIC,
        detail=FULL,
    ),
    _counter(
        "gpu_energy_joules_total", "joules", "Energy consumed since the driver was loaded", "power",
        NvmlSource("nvmlDeviceGetTotalEnergyConsumption", "", _MILLI), DcgmSource(156, _MILLI),
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", Fraction(1000),
    ),
    # clocks
    _gauge(
        "gpu_sm_clock_hertz", "hertz", "Current SM clock", "clocks",
        NvmlSource("nvmlDeviceGetClockInfo", "sm", _MHZ), DcgmSource(100, _MHZ), "DCGM_FI_DEV_SM_CLOCK", 1 / _MHZ,
    ),
    _gauge(
        "gpu_sm_clock_busy_min_hertz", "hertz",
        "Lowest SM clock among the driver's clock samples (nvmlDeviceGetSamples NVML_PROCESSOR_CLK_SAMPLES) "
        "since the previous read taken while the GPU's utilization sample was at least 10%: a clock that "
        "sags under load", "clocks",
        NvmlSource("nvmlDeviceGetSamples", "processor_clk_busy_min", _MHZ), None,
    ),
    _gauge(
        "gpu_memory_clock_hertz", "hertz", "Current memory clock", "clocks",
        NvmlSource("nvmlDeviceGetClockInfo", "memory", _MHZ), DcgmSource(101, _MHZ),
        "DCGM_FI_DEV_MEM_CLOCK", 1 / _MHZ,
    ),
    _gauge(
        "gpu_video_clock_hertz", "hertz", "Current video (encoder/decoder) clock", "clocks",
        NvmlSource("nvmlDeviceGetClockInfo", "video", _MHZ), DcgmSource(102, _MHZ), "DCGM_FI_DEV_VIDEO_CLOCK", 1 / _MHZ,
        detail=FULL,
    ),
    _gauge(
        "gpu_sm_clock_application_hertz", "hertz", "SM clock the GPU targets when it runs work (application clock)",
        "clocks", NvmlSource("nvmlDeviceGetApplicationsClock", "sm", _MHZ), DcgmSource(110, _MHZ),
        "DCGM_FI_DEV_APP_SM_CLOCK", 1 / _MHZ, every=STATIC,
        detail=FULL,
    ),
    _gauge(
        "gpu_memory_clock_application_hertz", "hertz", "Memory clock the GPU targets when it runs work (application "
        "clock)", "clocks", NvmlSource("nvmlDeviceGetApplicationsClock", "memory", _MHZ), DcgmSource(111, _MHZ),
        "DCGM_FI_DEV_APP_MEM_CLOCK", 1 / _MHZ, every=STATIC,
        detail=FULL,
    ),
    _gauge(
        "gpu_sm_clock_max_hertz", "hertz", "Maximum SM clock the GPU supports", "clocks",
        NvmlSource("nvmlDeviceGetMaxClockInfo", "sm", _MHZ), DcgmSource(113, _MHZ),
        "DCGM_FI_DEV_MAX_SM_CLOCK", 1 / _MHZ, every=STATIC,
    ),
    _gauge(
        "gpu_memory_clock_max_hertz", "hertz", "Maximum memory clock the GPU supports", "clocks",
        NvmlSource("nvmlDeviceGetMaxClockInfo", "memory", _MHZ), DcgmSource(114, _MHZ),
        "DCGM_FI_DEV_MAX_MEM_CLOCK", 1 / _MHZ, every=STATIC,
        detail=FULL,
    ),
    _gauge(
        "gpu_video_clock_max_hertz", "hertz", "Maximum video (encoder/decoder) clock the GPU supports", "clocks",
        NvmlSource("nvmlDeviceGetMaxClockInfo", "video", _MHZ), DcgmSource(115, _MHZ),
        "DCGM_FI_DEV_MAX_VIDEO_CLOCK", 1 / _MHZ, every=STATIC,
        detail=FULL,
    ),
    _gauge(
        "gpu_performance_state", "", "Performance state, 0 (fastest) to 15 (slowest)", "clocks",
        NvmlSource("nvmlDeviceGetPerformanceState"), DcgmSource(190), "DCGM_FI_DEV_PSTATE", maximum=15,
    ),
    # PCIe
    _gauge(
        "gpu_pcie_link_generation", "", "Current PCIe link generation (drops at idle to save power)", "pcie",
        NvmlSource("nvmlDeviceGetCurrPcieLinkGeneration"), DcgmSource(237), "DCGM_FI_DEV_PCIE_LINK_GEN", maximum=16,
    ),
    _gauge(
        "gpu_pcie_link_generation_max", "", "Highest PCIe link generation this GPU and slot support", "pcie",
        NvmlSource("nvmlDeviceGetMaxPcieLinkGeneration"), DcgmSource(235), "DCGM_FI_DEV_PCIE_MAX_LINK_GEN", maximum=16,
        every=STATIC,
    ),
    _gauge(
        "gpu_pcie_link_width", "", "Current PCIe link width (lanes)", "pcie",
        NvmlSource("nvmlDeviceGetCurrPcieLinkWidth"), DcgmSource(238), "DCGM_FI_DEV_PCIE_LINK_WIDTH", maximum=64,
    ),
    _gauge(
        "gpu_pcie_link_width_max", "", "Widest PCIe link (lanes) this GPU and slot support", "pcie",
        NvmlSource("nvmlDeviceGetMaxPcieLinkWidth"), DcgmSource(236), "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", maximum=64,
        every=STATIC,
    ),
    _counter(
        "gpu_pcie_replay_errors_total", "", "PCIe replays (link-level retransmissions) since the driver loaded",
        "pcie", NvmlSource("nvmlDeviceGetPcieReplayCounter"), DcgmSource(202), "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    ),
    _counter(  # NVML field 173, in the field-value batch
        "gpu_pcie_correctable_errors_total", "", "PCIe correctable errors the GPU's link reported", "pcie",
        NvmlSource("nvmlDeviceGetFieldValues", "pcie_correctable_errors"), DcgmSource(1501),
        "DCGM_FI_DEV_PCIE_CORRECTABLE_ERROR_TOTAL",
    ),
    # NVML fields 197, 198 (NVML_FI_DEV_PCIE_COUNT_TX/RX_BYTES, "PCIe transmit bytes. Value can be wrapped."),
    # in the field-value batch; DCGM's 1091, 1092 (DCGM_FI_PROF_PCIE_TX/RX_BYTES_TOTAL) are profiling-module
    # fields the DCGM backend does not watch, so only NVML serves them
    _counter(
        "gpu_pcie_transmit_bytes_total", "bytes", "Bytes the GPU sent over PCIe, as NVML counts them", "pcie",
        NvmlSource("nvmlDeviceGetFieldValues", "pcie_tx_bytes"), None, "DCGM_FI_PROF_PCIE_TX_BYTES_TOTAL",
    ),
    _counter(
        "gpu_pcie_receive_bytes_total", "bytes", "Bytes the GPU received over PCIe, as NVML counts them", "pcie",
        NvmlSource("nvmlDeviceGetFieldValues", "pcie_rx_bytes"), None, "DCGM_FI_PROF_PCIE_RX_BYTES_TOTAL",
    ),
    _gauge(
        "gpu_pcie_transmit_bytes_per_second", "bytes_per_second",
        "PCIe transmit throughput averaged over a 20 ms window (KB taken as 1024 bytes)", "pcie",
        NvmlSource("nvmlDeviceGetPcieThroughput", "tx", KIB), DcgmSource(200, KIB),
        "DCGM_FI_DEV_PCIE_TX_THROUGHPUT", 1 / KIB, every=5,
    ),
    _gauge(
        "gpu_pcie_receive_bytes_per_second", "bytes_per_second",
        "PCIe receive throughput averaged over a 20 ms window (KB taken as 1024 bytes)", "pcie",
        NvmlSource("nvmlDeviceGetPcieThroughput", "rx", KIB), DcgmSource(201, KIB),
        "DCGM_FI_DEV_PCIE_RX_THROUGHPUT", 1 / KIB, every=5,
    ),
)  # fmt: skip
