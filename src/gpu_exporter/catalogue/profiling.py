"""DCGM-only profiling (DCP) rows of the profiling collector."""

from __future__ import annotations

from gpu_exporter.catalogue.spec import (
    GPU_AND_MIG,
    DcgmSource,
    MetricSpec,
)
from gpu_exporter.catalogue.spec import (
    gauge as _gauge,
)

ROWS: tuple[MetricSpec, ...] = (
    # ---- BEGIN DCGM-only profiling (DCP) metrics (issue 4) ------------------------------------------------
    # Collector "profiling" (off by default: the profiling counters are one lock per GPU, shared with Nsight
    # and CUPTI). NVML has no source for these, so they have names of their own; DCGM reports ratios 0-1 and
    # bytes per second already, averaged over its sample period. The per-instance ones are read per MIG
    # compute instance (DRAM activity per GPU instance, which DCGM maps for us).
    _gauge(
        "gpu_graphics_engine_active_ratio", "ratio",
        "Fraction of time the graphics or compute engine had any work in flight", "profiling",
        None, DcgmSource(1001), "DCGM_FI_PROF_GR_ENGINE_ACTIVE", entities=GPU_AND_MIG,
    ),
    _gauge(
        "gpu_sm_active_ratio", "ratio",
        "Fraction of time at least one warp was resident on a streaming multiprocessor, averaged over all SMs "
        "(low while gpu_utilization_ratio is high means kernels that occupy few SMs)", "profiling",
        None, DcgmSource(1002), "DCGM_FI_PROF_SM_ACTIVE", entities=GPU_AND_MIG,
    ),
    _gauge(
        "gpu_sm_occupancy_ratio", "ratio",
        "Resident warps as a fraction of the most a streaming multiprocessor can hold, averaged over all SMs",
        "profiling", None, DcgmSource(1003), "DCGM_FI_PROF_SM_OCCUPANCY", entities=GPU_AND_MIG,
    ),
    _gauge(
        "gpu_tensor_pipe_active_ratio", "ratio", "Fraction of cycles any tensor-core pipe was active", "profiling",
        None, DcgmSource(1004), "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", entities=GPU_AND_MIG,
    ),
    _gauge(
        "gpu_dram_active_ratio", "ratio",
        "Fraction of cycles the device memory interface was busy sending or receiving data", "profiling",
        None, DcgmSource(1005), "DCGM_FI_PROF_DRAM_ACTIVE", entities=GPU_AND_MIG,
    ),
    _gauge(
        "gpu_fp64_pipe_active_ratio", "ratio", "Fraction of cycles the FP64 (double precision) pipe was active",
        "profiling", None, DcgmSource(1006), "DCGM_FI_PROF_PIPE_FP64_ACTIVE", entities=GPU_AND_MIG,
    ),
    _gauge(
        "gpu_fp32_pipe_active_ratio", "ratio", "Fraction of cycles the FP32 (single precision) pipe was active",
        "profiling", None, DcgmSource(1007), "DCGM_FI_PROF_PIPE_FP32_ACTIVE", entities=GPU_AND_MIG,
    ),
    _gauge(
        "gpu_fp16_pipe_active_ratio", "ratio", "Fraction of cycles the FP16 (half precision) pipe was active",
        "profiling", None, DcgmSource(1008), "DCGM_FI_PROF_PIPE_FP16_ACTIVE", entities=GPU_AND_MIG,
    ),
    _gauge(
        "gpu_pcie_transmit_with_headers_bytes_per_second", "bytes_per_second",
        "PCIe traffic sent by the GPU, protocol headers included, averaged over the sample period (unlike "
        "gpu_pcie_transmit_bytes_per_second, a 20 ms window)", "profiling",
        None, DcgmSource(1009), "DCGM_FI_PROF_PCIE_TX_BYTES",
    ),
    _gauge(
        "gpu_pcie_receive_with_headers_bytes_per_second", "bytes_per_second",
        "PCIe traffic received by the GPU, protocol headers included, averaged over the sample period (unlike "
        "gpu_pcie_receive_bytes_per_second, a 20 ms window)", "profiling",
        None, DcgmSource(1010), "DCGM_FI_PROF_PCIE_RX_BYTES",
    ),
    _gauge(
        "gpu_nvlink_transmit_bytes_per_second", "bytes_per_second",
        "NVLink traffic sent by the GPU over all its links, protocol headers included", "profiling",
        # NVLink 5 moves 0.9 TB/s each way, near the generic 1e12 bound: leave room for the next generation.
        None, DcgmSource(1011), "DCGM_FI_PROF_NVLINK_TX_BYTES", maximum=1e13,
    ),
    _gauge(
        "gpu_nvlink_receive_bytes_per_second", "bytes_per_second",
        "NVLink traffic received by the GPU over all its links, protocol headers included", "profiling",
        None, DcgmSource(1012), "DCGM_FI_PROF_NVLINK_RX_BYTES", maximum=1e13,
    ),
)  # fmt: skip
