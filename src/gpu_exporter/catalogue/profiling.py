"""Profiling rows of the profiling collector: DCGM's profiling (DCP) fields, and on the NVML backend the
same measurements from GPM (``nvmlGpmMetricsGet`` over two samples, Hopper and later)."""

from __future__ import annotations

from fractions import Fraction

from gpu_exporter.catalogue.spec import (
    FULL,
    GPU_AND_MIG,
    MIB,
    DcgmSource,
    MetricSpec,
    NvmlSource,
)
from gpu_exporter.catalogue.spec import (
    gauge as _gauge,
)

_PERCENT = Fraction(1, 100)


def _gpm(selector: str, scale: Fraction = _PERCENT) -> NvmlSource:
    """A GPM metric (``backends/nvml/gpm.py`` selector): percent into a ratio unless told (MiB/s)."""
    return NvmlSource("nvmlGpmMetricsGet", selector, scale)


def _engine(kind: str, what: str, count: int) -> tuple[MetricSpec, ...]:
    """One row per video/JPEG/optical-flow engine N (GPM ``<kind>_N_util``, DCGM_FI_PROF_<KIND>N_ACTIVE)."""
    return tuple(
        _gauge(
            f"gpu_{kind}_engine_active_ratio", "ratio", f"Fraction of time each {what} engine was busy",
            "profiling", _gpm(f"{kind}_{n}_util"), None, f"DCGM_FI_PROF_{kind.upper()}{n}_ACTIVE",
            entities=GPU_AND_MIG, variant=(("engine", str(n)),), detail=FULL,
        )
        for n in range(count)
    )  # fmt: skip


ROWS: tuple[MetricSpec, ...] = (
    # ---- BEGIN DCGM-only profiling (DCP) metrics (issue 4) ------------------------------------------------
    # Collector "profiling" (on by default wherever the GPU offers it, as dcgm-exporter's default counters list
    # has DCGM_FI_PROF_*; the profiling counters are one lock per GPU, shared with Nsight and CUPTI, so
    # --no-collector.profiling turns it off). The lean default renders the two that answer the field guide's
    # question, SM activity (is a busy GPU really working: GPUBusyLowSMActivity) and tensor-pipe activity (does
    # the work use the tensor cores); every other profiling row is full detail, to keep the lean default's
    # series budget (tests/process/test_lean.py). The status page and snapshot show occupancy and DRAM either way.
    # DCGM reports ratios 0-1 and bytes per second already, averaged over its sample period; on NVML, GPM
    # reports percent and MiB/s averaged between two samples (one per read), per GPU and per MIG GPU instance
    # (every compute instance of a GPU instance shows its GPU instance's value).
    _gauge(
        "gpu_graphics_engine_active_ratio", "ratio",
        "Fraction of time the graphics or compute engine had any work in flight", "profiling",
        _gpm("graphics_util"), DcgmSource(1001), "DCGM_FI_PROF_GR_ENGINE_ACTIVE", entities=GPU_AND_MIG, detail=FULL,
    ),
    _gauge(
        "gpu_sm_active_ratio", "ratio",
        "Fraction of time at least one warp was resident on a streaming multiprocessor, averaged over all SMs "
        "(low while gpu_utilization_ratio is high means kernels that occupy few SMs; on NVML: GPM's fraction of "
        "SMs busy)", "profiling",
        _gpm("sm_util"), DcgmSource(1002), "DCGM_FI_PROF_SM_ACTIVE", entities=GPU_AND_MIG,
    ),
    _gauge(
        "gpu_sm_occupancy_ratio", "ratio",
        "Resident warps as a fraction of the most a streaming multiprocessor can hold, averaged over all SMs",
        "profiling", _gpm("sm_occupancy"), DcgmSource(1003), "DCGM_FI_PROF_SM_OCCUPANCY", entities=GPU_AND_MIG,
        detail=FULL,
    ),
    _gauge(
        "gpu_tensor_pipe_active_ratio", "ratio", "Fraction of cycles any tensor-core pipe was active", "profiling",
        _gpm("any_tensor_util"), DcgmSource(1004), "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", entities=GPU_AND_MIG,
    ),
    _gauge(
        "gpu_dram_active_ratio", "ratio",
        "Fraction of cycles the device memory interface was busy sending or receiving data (on NVML: GPM's DRAM "
        "bandwidth used as a fraction of the theoretical maximum)", "profiling",
        _gpm("dram_bw_util"), DcgmSource(1005), "DCGM_FI_PROF_DRAM_ACTIVE", entities=GPU_AND_MIG, detail=FULL,
    ),
    _gauge(
        "gpu_fp64_pipe_active_ratio", "ratio", "Fraction of cycles the FP64 (double precision) pipe was active "
        "(on NVML: non-tensor math only)",
        "profiling", _gpm("fp64_util"), DcgmSource(1006), "DCGM_FI_PROF_PIPE_FP64_ACTIVE", entities=GPU_AND_MIG,
        detail=FULL,
    ),
    _gauge(
        "gpu_fp32_pipe_active_ratio", "ratio", "Fraction of cycles the FP32 (single precision) pipe was active "
        "(on NVML: non-tensor math only)",
        "profiling", _gpm("fp32_util"), DcgmSource(1007), "DCGM_FI_PROF_PIPE_FP32_ACTIVE", entities=GPU_AND_MIG,
        detail=FULL,
    ),
    _gauge(
        "gpu_fp16_pipe_active_ratio", "ratio", "Fraction of cycles the FP16 (half precision) pipe was active "
        "(on NVML: non-tensor math only)",
        "profiling", _gpm("fp16_util"), DcgmSource(1008), "DCGM_FI_PROF_PIPE_FP16_ACTIVE", entities=GPU_AND_MIG,
        detail=FULL,
    ),
    _gauge(
        "gpu_pcie_transmit_with_headers_bytes_per_second", "bytes_per_second",
        "PCIe traffic sent by the GPU, protocol headers included, averaged over the sample period (unlike "
        "gpu_pcie_transmit_bytes_per_second, a 20 ms window; on NVML GPM's rate, which nvml.h does not say "
        "includes headers)", "profiling",
        _gpm("pcie_tx_per_sec", MIB), DcgmSource(1009), "DCGM_FI_PROF_PCIE_TX_BYTES", detail=FULL,
    ),
    _gauge(
        "gpu_pcie_receive_with_headers_bytes_per_second", "bytes_per_second",
        "PCIe traffic received by the GPU, protocol headers included, averaged over the sample period (unlike "
        "gpu_pcie_receive_bytes_per_second, a 20 ms window; on NVML GPM's rate, which nvml.h does not say "
        "includes headers)", "profiling",
        _gpm("pcie_rx_per_sec", MIB), DcgmSource(1010), "DCGM_FI_PROF_PCIE_RX_BYTES", detail=FULL,
    ),
    _gauge(
        "gpu_nvlink_transmit_bytes_per_second", "bytes_per_second",
        "NVLink traffic sent by the GPU over all its links, protocol headers included", "profiling",
        # NVLink 5 moves 0.9 TB/s each way, near the generic 1e12 bound: leave room for the next generation.
        _gpm("nvlink_total_tx_per_sec", MIB), DcgmSource(1011), "DCGM_FI_PROF_NVLINK_TX_BYTES", maximum=1e13,
        detail=FULL,
    ),
    _gauge(
        "gpu_nvlink_receive_bytes_per_second", "bytes_per_second",
        "NVLink traffic received by the GPU over all its links, protocol headers included", "profiling",
        _gpm("nvlink_total_rx_per_sec", MIB), DcgmSource(1012), "DCGM_FI_PROF_NVLINK_RX_BYTES", maximum=1e13,
        detail=FULL,
    ),
    # C2C, the GPU's chip-to-chip link to its Grace CPU (Grace Hopper and later): DCGM 1076-1079 are GPM's
    # NVML_GPM_METRIC_C2C_{TOTAL,DATA}_{TX,RX}_PER_SEC × 2^20 (DcgmCacheManager: "PCIe, NVLink, and C2C
    # throughput fields are returned in MiB/s by NVML"), the GPU's own; absent on a GPU without C2C.
    *(
        _gauge(
            f"gpu_c2c_{way}_{'' if what == 'total' else 'data_'}bytes_per_second", "bytes_per_second",
            f"C2C (chip-to-chip link to the CPU) traffic {verb} the GPU"
            + (", protocol headers included" if what == "total" else ", payload only"), "profiling",
            _gpm(f"c2c_{what}_{tx}_per_sec", MIB), DcgmSource(field_id), compat, detail=FULL,
        )
        for way, verb, tx, what, field_id, compat in (
            ("transmit", "sent by", "tx", "total", 1076, "DCGM_FI_PROF_C2C_TX_ALL_BYTES"),
            ("transmit", "sent by", "tx", "data", 1077, "DCGM_FI_PROF_C2C_TX_DATA_BYTES"),
            ("receive", "received by", "rx", "total", 1078, "DCGM_FI_PROF_C2C_RX_ALL_BYTES"),
            ("receive", "received by", "rx", "data", 1079, "DCGM_FI_PROF_C2C_RX_DATA_BYTES"),
        )
    ),
    # GPM-only rows (NVML backend): what DCGM offers as fields 1013-1034 but the DCGM backend does not watch yet.
    _gauge(
        "gpu_tensor_hmma_pipe_active_ratio", "ratio",
        "Fraction of time the SMs were doing HMMA (half-precision matrix) tensor operations", "profiling",
        _gpm("hmma_tensor_util"), None, "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE", entities=GPU_AND_MIG, detail=FULL,
    ),
    _gauge(
        "gpu_tensor_imma_pipe_active_ratio", "ratio",
        "Fraction of time the SMs were doing IMMA (integer matrix) tensor operations", "profiling",
        _gpm("imma_tensor_util"), None, "DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE", entities=GPU_AND_MIG, detail=FULL,
    ),
    _gauge(
        "gpu_tensor_dfma_pipe_active_ratio", "ratio",
        "Fraction of time the SMs were doing DFMA (double-precision matrix) tensor operations", "profiling",
        _gpm("dfma_tensor_util"), None, "DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE", entities=GPU_AND_MIG, detail=FULL,
    ),
    _gauge(
        "gpu_integer_pipe_active_ratio", "ratio", "Fraction of time the SMs were doing integer operations",
        "profiling", _gpm("integer_util"), None, "DCGM_FI_PROF_PIPE_INT_ACTIVE", entities=GPU_AND_MIG, detail=FULL,
    ),
    *_engine("nvdec", "video decoder (NVDEC)", 8),
    *_engine("nvjpg", "JPEG decoder (NVJPG)", 8),
    *_engine("nvofa", "optical flow (NVOFA)", 2),
    _gauge(
        "gpu_nvlink_link_transmit_bytes_per_second", "bytes_per_second",
        "NVLink traffic sent over this link, averaged between two GPM samples (NVML backend)", "profiling",
        _gpm("nvlink_tx_per_sec", MIB), None, entities=("nvlink",), maximum=1e13, detail=FULL,
    ),
    _gauge(
        "gpu_nvlink_link_receive_bytes_per_second", "bytes_per_second",
        "NVLink traffic received over this link, averaged between two GPM samples (NVML backend)", "profiling",
        _gpm("nvlink_rx_per_sec", MIB), None, entities=("nvlink",), maximum=1e13, detail=FULL,
    ),
    _gauge(
        "gpu_profiling_interval_seconds", "seconds",
        "Time between the two GPM samples the profiling ratios and rates were averaged over (NVML backend)",
        "profiling", _gpm("interval", Fraction(1)), None, entities=GPU_AND_MIG, detail=FULL,
    ),
)  # fmt: skip
