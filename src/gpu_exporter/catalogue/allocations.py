"""Rows of the allocations collector: one entity per allocation of a GPU (or MIG instance) to a
Kubernetes pod container (labels ``namespace``, ``pod``, ``container``, from the kubelet's
pod-resources API; ``claim`` and ``claim_namespace`` too when the GPU was allocated through a DRA
ResourceClaim, its device resolved to a GPU or MIG UUID through the node's ResourceSlices), a
Slurm job (``slurm_job``, from the cgroups of the GPU's processes) or an HPC job (``hpc_job``,
from a job-mapping directory). They join to every device metric by ``uuid``.

The ledger rows (``derive=Share``) split each GPU's time, busy time and energy among its allocations
at every read (see :mod:`gpu_exporter.sampling.ledger` and docs/attribution.md); what no allocation
accounts for is the GPU's own ``gpu_unattributed_*`` series, so the parts add up to the GPU's totals."""

from __future__ import annotations

from gpu_exporter.catalogue.spec import FULL, Constant, IdleWhileAllocated, MetricSpec, Share
from gpu_exporter.catalogue.spec import counter as _counter
from gpu_exporter.catalogue.spec import gauge as _gauge

#: Below this utilization an allocated GPU counts as idle.
IDLE_UTILIZATION = 0.05
_ALLOCATIONS = ("pod", "job")
#: The labels an allocation's series may have beside its GPU's (and MIG instance's): a pod container's,
#: a DRA claim's, a Slurm job's or an HPC job's (:func:`gpu_exporter.model.pod`, :func:`~gpu_exporter.model.job`).
ALLOCATION_LABELS = ("namespace", "pod", "container", "claim", "claim_namespace", "slurm_job", "hpc_job")

ROWS: tuple[MetricSpec, ...] = (
    _gauge(
        "gpu_allocation_info", "", "One series per allocation of this GPU or MIG instance (a pod's container, "
        "through the device plugin or a DRA claim; a Slurm or HPC job); value is always 1: join it by uuid "
        "to attribute any GPU metric", "allocations",
        None, None, entities=_ALLOCATIONS, derive=Constant(1.0),
    ),
    _counter(
        "gpu_allocation_idle_seconds_total", "seconds", "Time this allocation's GPU ran no compute process or "
        "stayed below 5% utilization: reserved but wasted", "allocations",
        None, None, entities=_ALLOCATIONS,
        derive=IdleWhileAllocated("gpu_utilization_ratio", "gpu_compute_processes", IDLE_UTILIZATION),
    ),
    _counter(
        "gpu_allocation_gpu_seconds_total", "seconds", "GPU time allocated: the GPU's time split evenly among "
        "the allocations it has (a GPU shared by two allocations gives each half a second per second)",
        "allocations", None, None, entities=_ALLOCATIONS, derive=Share("allocated"),
    ),
    _counter(
        "gpu_allocation_busy_seconds_total", "seconds", "This allocation's part of the GPU's busy time "
        "(gpu_utilization_seconds_total), split by its processes' share of SM activity (per-process "
        "utilization samples); all of it on a GPU this allocation holds alone", "allocations",
        None, None, entities=_ALLOCATIONS, derive=Share("busy"),
    ),
    _counter(
        "gpu_allocation_energy_joules_total", "joules", "This allocation's part of the GPU's energy "
        "(gpu_energy_joules_total): the busy part split as the busy time, the idle part by allocated time "
        "(an estimate on a shared GPU)", "allocations",
        None, None, entities=_ALLOCATIONS, derive=Share("energy"),
    ),
    _counter(
        "gpu_allocation_sm_seconds_total", "seconds", "SM time of this allocation's processes: their SM "
        "utilization (per-process samples) integrated over the time between reads; absent where the driver "
        "gives no per-process utilization", "allocations",
        None, None, entities=_ALLOCATIONS, derive=Share("sm"), detail=FULL,
    ),
    _gauge(
        "gpu_allocation_memory_used_bytes", "bytes", "GPU memory this allocation's processes held at the "
        "last read (the sum of gpu_process_memory_used_bytes; a peak between reads is not seen: see "
        "gpu_allocation_memory_peak_bytes where NVML accounting mode is on)", "allocations",
        None, None, entities=_ALLOCATIONS, derive=Share("memory"),
    ),
    _gauge(
        "gpu_allocation_memory_peak_bytes", "bytes", "The most GPU memory any one of this allocation's running "
        "processes has held since it started (the largest gpu_process_memory_peak_bytes: NVML accounting's "
        "per-process maximum, since the process started, not per interval); only on GPUs with accounting "
        "mode on (nvidia-smi -am 1)", "allocations",
        None, None, entities=_ALLOCATIONS, derive=Share("memory_peak"),
    ),
    _counter(
        "gpu_unattributed_busy_seconds_total", "seconds", "Busy time of a GPU with processes or allocations "
        "that no allocation accounts for (processes of no known allocation, activity no process sample "
        "explains): with the gpu_allocation_busy_seconds_total of its allocations, the GPU's busy time",
        "allocations", None, None, derive=Share("unattributed_busy"),
    ),
    _counter(
        "gpu_unattributed_energy_joules_total", "joules", "Energy of a GPU with processes or allocations that "
        "no allocation accounts for: with the gpu_allocation_energy_joules_total of its allocations, the "
        "GPU's energy", "allocations", None, None, derive=Share("unattributed_energy"),
    ),
)  # fmt: skip
