"""Rows of the allocations collector: one entity per allocation of a GPU (or MIG instance) to a
Kubernetes pod container (labels ``namespace``, ``pod``, ``container``, from the kubelet's
pod-resources API; ``claim`` and ``claim_namespace`` too when the GPU was allocated through a DRA
ResourceClaim, its device resolved to a GPU or MIG UUID through the node's ResourceSlices), a
Slurm job (``slurm_job``, from the cgroups of the GPU's processes) or an HPC job (``hpc_job``,
from a job-mapping directory). They join to every device metric by ``uuid``."""

from __future__ import annotations

from gpu_exporter.catalogue.spec import Constant, IdleWhileAllocated, MetricSpec
from gpu_exporter.catalogue.spec import counter as _counter
from gpu_exporter.catalogue.spec import gauge as _gauge

#: Below this utilization an allocated GPU counts as idle.
IDLE_UTILIZATION = 0.05
_ALLOCATIONS = ("pod", "job")

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
)  # fmt: skip
