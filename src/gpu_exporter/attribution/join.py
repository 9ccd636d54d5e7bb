"""Attribution joined onto one GPU's reading, on that GPU's worker thread (never the sampler's,
never per scrape): the per-GPU process limit, process names, owners and workload labels from
/proc, and one allocation entity per pod container (the kubelet's pod-resources answer, cached by
its own refresher), Slurm job (from the cgroups of the GPU's processes) and HPC job (from the job
mapping directory) that holds the GPU or one of its MIG instances.

Only what is certain is labelled: a process gets ``pod_uid`` and ``slurm_job`` from its own cgroups
(``pod_uid`` joins kube-state-metrics' ``kube_pod_info`` for the pod's name); a pod is attached to
the GPU the kubelet says it was allocated."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from gpu_exporter import model
from gpu_exporter.attribution.cgroups import Workload
from gpu_exporter.attribution.deviceids import GpuIds, resolve
from gpu_exporter.attribution.hpcjobs import JobMapping
from gpu_exporter.attribution.kubeletpods import PodName
from gpu_exporter.attribution.procfs import FactsSource, ProcessFacts, ProcessNames
from gpu_exporter.attribution.refresh import Source, SourceState
from gpu_exporter.attribution.resourceslices import DraDevice
from gpu_exporter.backends.base import DeviceIdentity, RawReading
from gpu_exporter.model import Entity
from gpu_exporter.sampling.snapshot import DeviceView, SourceStatus

if TYPE_CHECKING:  # built by the assembly only with --kubernetes.node-condition
    from gpu_exporter.attribution.nodecondition import NodeCondition

log = logging.getLogger(__name__)


class PodAllocation(Protocol):
    """One device the kubelet allocated to a pod's container, resolved to a GPU (and MIG) UUID."""

    @property
    def namespace(self) -> str: ...
    @property
    def pod(self) -> str: ...
    @property
    def container(self) -> str: ...
    @property
    def gpu_uuid(self) -> str: ...
    @property
    def mig_uuid(self) -> str: ...
    @property
    def device_id(self) -> str: ...
    @property
    def claim(self) -> str: ...
    @property
    def claim_namespace(self) -> str: ...
    @property
    def driver(self) -> str: ...
    @property
    def pool(self) -> str: ...


class KubeletState(SourceState, Protocol):
    """The kubelet source's latest state (:class:`~gpu_exporter.attribution.podresources.PodResourcesState`)."""

    @property
    def allocations(self) -> Sequence[PodAllocation]: ...


class PodNameState(SourceState, Protocol):
    """The kubelet /pods source's state (:class:`~gpu_exporter.attribution.kubeletpods.KubeletPodsState`)."""

    @property
    def pods(self) -> Mapping[str, PodName]: ...


class SlicesState(SourceState, Protocol):
    """The ResourceSlices source's state (:class:`~gpu_exporter.attribution.kubeapi.ResourceSlicesState`)."""

    @property
    def devices(self) -> Mapping[tuple[str, str, str], DraDevice]: ...


class Reported(Protocol):
    """A source listed in the self-metrics whose lifecycle another part owns."""

    def current(self) -> SourceState: ...


Kubelet = Source[KubeletState]
PodNames = Source[PodNameState]
Slices = Source[SlicesState]


class Attributor:
    """Applies every attribution source that is configured to each reading of a GPU."""

    def __init__(
        self,
        procfs: Path = Path("/proc"),
        hpc_job_dir: str = "",
        kubelet: Kubelet | None = None,
        pod_names: PodNames | None = None,
        slices: Slices | None = None,
        api_pods: PodNames | None = None,
        passwd: Path | None = None,
        names: FactsSource | None = None,
        node_condition: NodeCondition | None = None,
    ) -> None:
        self._names = names if names is not None else ProcessNames(procfs, passwd)
        self._hpc = JobMapping(hpc_job_dir) if hpc_job_dir else None
        self._kubelet = kubelet
        self._pod_names = pod_names
        self._slices = slices
        self._api_pods = api_pods
        named: tuple[tuple[str, Kubelet | PodNames | Slices | NodeCondition | None], ...] = (
            ("kubelet", kubelet), ("kubelet_pods", pod_names), ("kubernetes_resourceslices", slices),
            ("kubernetes_pods", api_pods), ("kubernetes_node_condition", node_condition),
        )  # fmt: skip
        self._sources = tuple((name, source) for name, source in named if source is not None)
        self._reported: list[tuple[str, Reported]] = []  # listed here, run by their owner
        if node_condition is not None and node_condition.events is not None:
            self._reported.append(("kubernetes_node_events", node_condition.events))

    def report(self, name: str, source: Reported) -> None:
        """List ``source`` in the self-metrics as ``name`` (its owner starts and stops it); before :meth:`start`."""
        self._reported.append((name, source))

    def start(self) -> None:
        """Start the sources that refresh on their own thread (the kubelet, the API server)."""
        for _name, source in self._sources:
            source.start()

    def stop(self) -> None:
        for _name, source in self._sources:
            source.stop()

    def sources(self) -> dict[str, SourceStatus]:
        """The state of each cached source with a lifecycle of its own (for self-metrics)."""
        out = {}
        for name, source in (*self._sources, *self._reported):
            if source is not None:
                state = source.current()
                last = state.fetched_at if state.fetched_at else None
                out[name] = SourceStatus(state.up, state.calls, dict(state.failures), last)
        return out

    def apply(self, reading: RawReading, device: DeviceIdentity) -> None:
        """Label processes (the sampler folded those beyond its limit already) and add the GPU's allocations."""
        parents = {entity.uid: entity for entity in reading.raw if entity.kind in ("gpu", "mig")}
        gpu = model.gpu(device.index, device.uuid)
        parents.setdefault(gpu.uid, gpu)
        allocations: dict[Entity, dict[str, float]] = {}
        out: dict[Entity, dict[str, float]] = {}
        for entity, values in reading.raw.items():
            pid = dict(entity.labels).get("pid", "")
            if entity.kind == "process" and pid.isascii() and pid.isdigit():
                try:
                    facts = self._names.facts(int(pid))
                except Exception as exc:  # noqa: BLE001 # one process's odd /proc entry costs it its names, no more
                    log.debug("process %s: /proc not understood (%s): left unnamed", pid, exc)
                    facts = ProcessFacts()
                work = facts.workload
                workload = model.workload(self._pod_of(work), work.pod_uid, work.slurm_job)
                entity = model.named(entity, facts.name, facts.user, workload)
                parent = parents.get(dict(entity.info).get("parent", ""))
                if work.slurm_job and parent is not None:
                    allocations.setdefault(model.job(parent, "slurm_job", work.slurm_job), {})
            out[entity] = values
        for holder, jobs in self._hpc_parents(device, parents):
            for job_id in jobs:
                allocations.setdefault(model.job(holder, "hpc_job", job_id), {})
        ids = known_gpus_of(device)
        dra = self._slices.current().devices if self._slices is not None else {}
        for allocation in self._kubelet.current().allocations if self._kubelet is not None else ():
            gpu_uuid, mig_uuid = allocation.gpu_uuid, allocation.mig_uuid
            profile = ""
            if allocation.driver:  # DRA: the node's ResourceSlices name the device's UUIDs (now, not when listed)
                published = dra.get((allocation.driver, allocation.pool, allocation.device_id))
                gpu_uuid, mig_uuid = (published.gpu_uuid, published.mig_uuid) if published else ("", "")
                profile = published.profile if published else ""
            elif not gpu_uuid:  # answered before this GPU was known (the first refresh): resolve now
                gpu_uuid, mig_uuid = resolve(allocation.device_id, ids)
            if gpu_uuid != device.uuid:
                continue
            holder = next((p for p in parents.values() if p.kind == "mig" and p.uid == mig_uuid), gpu)
            if profile and not mig_uuid:  # a MIG device made for its claim: the GPU's one instance of the profile
                same = [p for p in parents.values() if p.kind == "mig" and dict(p.labels).get("profile") == profile]
                if len(same) != 1:
                    continue  # none yet, or several: no guess
                holder = same[0]
            elif mig_uuid and holder is gpu:
                continue  # an instance this read did not see: no guess
            claim = (allocation.claim, allocation.claim_namespace)
            info = self._pod_info(allocation.namespace, allocation.pod)
            entity = model.pod(holder, allocation.namespace, allocation.pod, allocation.container, claim, info)
            allocations.setdefault(entity, {})
        out.update(allocations)
        reading.raw = out

    def _pod_info(self, namespace: str, pod: str) -> tuple[tuple[str, str], ...]:
        """``pod_uid`` and ``label/KEY`` entries of a pod the API server lists (for dcgm-exporter's labels)."""
        if self._api_pods is None:
            return ()
        state = self._api_pods.current()
        named = next((p for p in state.pods.values() if p.namespace == namespace and p.pod == pod), None)
        if named is None:
            return ()
        return model.pod_info(named.uid, named.labels)

    def _pod_of(self, work: Workload) -> tuple[str, str, str] | None:
        """Namespace, pod and container of a process's pod UID, where the kubelet names it."""
        if not work.pod_uid:
            return None
        sources = (self._pod_names, self._api_pods)
        named = next((n for s in sources if s is not None for n in [s.current().pods.get(work.pod_uid)] if n), None)
        if named is None:
            return None
        return named.namespace, named.pod, named.containers.get(work.container_id, "")

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


def known_gpus(devices: Sequence[DeviceView]) -> list[GpuIds]:
    """(index, uuid, ((GPU instance, compute instance, MIG UUID), ...) in NVML's MIG order) per GPU."""
    return [
        (
            d.identity.index,
            d.identity.uuid,
            tuple((m.gpu_instance, m.compute_instance, m.uuid) for m in d.identity.migs),
        )
        for d in devices
    ]


def known_gpus_of(device: DeviceIdentity) -> list[GpuIds]:
    """One GPU's ids as :func:`~gpu_exporter.attribution.deviceids.resolve` wants them."""
    return [(device.index, device.uuid, tuple((m.gpu_instance, m.compute_instance, m.uuid) for m in device.migs))]
