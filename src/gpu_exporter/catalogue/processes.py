"""Rows of the processes collector: one series per process on a GPU (or MIG instance), labelled
``pid``, ``process`` (short name) and ``user``. Beyond ``--collector.processes.max-per-gpu``
processes per GPU the rest are folded into one ``pid="other"`` series; ``gpu_processes`` says how
many processes each series stands for."""

from __future__ import annotations

from fractions import Fraction

from gpu_exporter.catalogue.spec import FULL, DcgmSource, MetricSpec, NvmlSource
from gpu_exporter.catalogue.spec import gauge as _gauge

_PERCENT = Fraction(1, 100)
_PROCESS = ("process",)
#: DCGM: the pid lists (fields 220/221, one dcgmRunningProcess_t per process) and the job statistics'
#: per-pid utilization (backends/dcgm/pidvalues.py says how each is read).
_DCGM_LISTS = DcgmSource(0, call="DCGM_FI_DEV_COMPUTE_PIDS")
_DCGM_UTILIZATION = DcgmSource(0, _PERCENT, call="dcgmJobGetStats")

ROWS: tuple[MetricSpec, ...] = (
    _gauge(
        "gpu_processes", "", "Processes this series stands for: 1 per process, the number folded into the "
        "pid=\"other\" series beyond the per-GPU limit", "processes",
        NvmlSource("nvmlDeviceGetComputeRunningProcesses", "count"), _DCGM_LISTS, entities=_PROCESS,
    ),
    _gauge(
        "gpu_process_memory_used_bytes", "bytes", "GPU memory the process (compute or graphics) holds", "processes",
        NvmlSource("nvmlDeviceGetComputeRunningProcesses", "used_memory"), _DCGM_LISTS, entities=_PROCESS,
    ),
    _gauge(
        # nvml.h, nvmlAccountingStats_t.maxMemoryUsage: "Maximum total memory in bytes that was ever allocated
        # by the process"; nvmlDeviceGetAccountingStats answers NOT_SUPPORTED while accounting mode is off.
        "gpu_process_memory_peak_bytes", "bytes", "Most GPU memory the process has held since it started (NVML "
        "accounting statistics' maxMemoryUsage, not per interval); only where accounting mode is on (as root: "
        "nvidia-smi -am 1)", "processes",
        NvmlSource("nvmlDeviceGetAccountingStats", "max_memory_usage"), None, entities=_PROCESS, detail=FULL,
    ),
    _gauge(
        "gpu_process_sm_utilization_ratio", "ratio",
        "Fraction of time the process had kernels running on the SMs, averaged over the samples of the last "
        "interval (its share of gpu_utilization_ratio)", "processes",
        NvmlSource("nvmlDeviceGetProcessUtilization", "sm", _PERCENT), _DCGM_UTILIZATION, entities=_PROCESS,
    ),
    _gauge(
        "gpu_process_memory_utilization_ratio", "ratio",
        "Fraction of time the process was reading or writing device memory, averaged over the last interval",
        "processes", NvmlSource("nvmlDeviceGetProcessUtilization", "mem", _PERCENT), _DCGM_UTILIZATION,
        entities=_PROCESS,
        detail=FULL,  # per process, and nothing shipped computes with it (docs/metrics.md, the lean budget)
    ),
    _gauge(
        "gpu_process_encoder_utilization_ratio", "ratio", "The process's share of the video encoder, averaged "
        "over the last interval", "processes",
        NvmlSource("nvmlDeviceGetProcessUtilization", "enc", _PERCENT), None, entities=_PROCESS,
        detail=FULL,
    ),
    _gauge(
        "gpu_process_decoder_utilization_ratio", "ratio", "The process's share of the video decoder, averaged "
        "over the last interval", "processes",
        NvmlSource("nvmlDeviceGetProcessUtilization", "dec", _PERCENT), None, entities=_PROCESS,
        detail=FULL,
    ),
)  # fmt: skip
