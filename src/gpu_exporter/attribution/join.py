"""Attribution joined onto one GPU's reading, on that GPU's worker thread (never the sampler's,
never per scrape): the per-GPU process limit, process names, owners and workload labels from
/proc, and one allocation entity per pod container (the kubelet's pod-resources answer, cached by
its own refresher), Slurm job (from the cgroups of the GPU's processes) and HPC job (from the job
mapping directory) that holds the GPU or one of its MIG instances.

Only what is certain is labelled: a process gets ``pod_uid`` and ``slurm_job`` from its own cgroups
(``pod_uid`` joins kube-state-metrics' ``kube_pod_info`` for the pod's name); a pod is attached to
the GPU the kubelet says it was allocated."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from gpu_exporter import model
from gpu_exporter.attribution.hpcjobs import JobMapping
from gpu_exporter.attribution.procfs import ProcessNames
from gpu_exporter.backends.base import DeviceIdentity, RawReading
from gpu_exporter.model import Entity
from gpu_exporter.pipeline.processes import fold


class PodAllocation(Protocol):
    """One device the kubelet allocated to a pod's container, resolved to a GPU (and MIG) UUID."""

    namespace: str
    pod: str
    container: str
    gpu_uuid: str
    mig_uuid: str


class Attributor:
    """Applies every attribution source that is configured to each reading of a GPU."""

    def __init__(
        self,
        procfs: Path = Path("/proc"),
        max_processes: int = 16,
        hpc_job_dir: str = "",
        pods: Callable[[], Sequence[PodAllocation]] | None = None,
    ) -> None:
        self._names = ProcessNames(procfs)
        self._max_processes = max_processes
        self._hpc = JobMapping(hpc_job_dir) if hpc_job_dir else None
        self._pods = pods

    def apply(self, reading: RawReading, device: DeviceIdentity) -> None:
        """Fold processes beyond the limit, label processes, and add the GPU's allocations."""
        fold(reading, self._max_processes)
        parents = {entity.uid: entity for entity in reading.raw if entity.kind in ("gpu", "mig")}
        gpu = model.gpu(device.index, device.uuid)
        parents.setdefault(gpu.uid, gpu)
        allocations: dict[Entity, dict[str, float]] = {}
        out: dict[Entity, dict[str, float]] = {}
        for entity, values in reading.raw.items():
            pid = dict(entity.labels).get("pid", "")
            if entity.kind == "process" and pid.isdigit():
                facts = self._names.facts(int(pid))
                work = facts.workload
                entity = model.named(
                    entity, facts.name, facts.user, (("pod_uid", work.pod_uid), ("slurm_job", work.slurm_job))
                )
                parent = parents.get(dict(entity.info).get("parent", ""))
                if work.slurm_job and parent is not None:
                    allocations.setdefault(model.job(parent, "slurm_job", work.slurm_job), {})
            out[entity] = values
        for holder, jobs in self._hpc_parents(device, parents):
            for job_id in jobs:
                allocations.setdefault(model.job(holder, "hpc_job", job_id), {})
        for allocation in self._pods() if self._pods is not None else ():
            if allocation.gpu_uuid != device.uuid:
                continue
            holder = next((p for p in parents.values() if p.kind == "mig" and p.uid == allocation.mig_uuid), gpu)
            if allocation.mig_uuid and holder is gpu:
                continue  # an instance this read did not see: no guess
            allocations.setdefault(model.pod(holder, allocation.namespace, allocation.pod, allocation.container), {})
        out.update(allocations)
        reading.raw = out

    def _hpc_parents(self, device: DeviceIdentity, parents: dict[str, Entity]) -> list[tuple[Entity, tuple[str, ...]]]:
        if self._hpc is None:
            return []
        found = []
        for (index, instance), jobs in self._hpc.jobs().items():
            if index != device.index:
                continue
            if instance is None:
                found.append((parents[device.uuid], jobs))
                continue
            mig = next(
                (p for p in parents.values() if p.kind == "mig" and dict(p.labels)["gpu_instance"] == str(instance)),
                None,
            )
            if mig is not None:
                found.append((mig, jobs))
        return found
