"""The ledger of a GPU: what each allocation (pod container, Slurm or HPC job) used of it between two
reads, split so that the parts always add up to the GPU's own totals.

At every read of a GPU :func:`holdings` says which allocations the read found on the GPU and its MIG
instances, and to which allocation each process belongs: a pod's process by its ``namespace``,
``pod`` and ``container`` labels (or its ``pod_uid``), a Slurm job's by its ``slurm_job`` label (both
from the process's cgroups), and a process none of these name to the one allocation of its GPU or
MIG instance where there is exactly one that a scheduler assigned and the process's cgroups do not say
it is someone else's (an HPC job; a pod the kubelet's pod-resources API names without its UID).
:func:`split` then divides the interval since the previous read (pure, no clock):

- **allocated time**: the interval, evenly among the GPU's allocations;
- **busy time** (the growth of ``gpu_utilization_seconds_total``): by each process's SM activity
  (``nvmlDeviceGetProcessUtilization``, averaged by the backend over every sample since its last
  read). Where the processes' SM activity adds up to less than the GPU's utilization, the rest is
  no one's: unattributed; where it adds up to more (time-slicing reports overlapping shares), the
  shares are scaled down to the busy time. A GPU with one allocation and no process of anyone else
  gives it all of its busy time, per-process utilization or not;
- **energy** (the growth of ``gpu_energy_joules_total``): the busy part (energy × utilization)
  as the busy time, the idle rest by allocated time (evenly), or unattributed without allocations;
- **SM time** of each allocation's processes (their SM ratio × the interval), where known;
- **memory**: the sum of its processes' memory at the read (a gauge);
- **peak memory**: the largest of its processes' own peaks since they started (NVML accounting's
  maxMemoryUsage, where accounting mode is on): a gauge, not per interval, and for several processes
  the largest single one, a lower bound of their combined peak.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpu_exporter.catalogue.keys import PROCESS_MEMORY_PEAK, PROCESS_MEMORY_USED, PROCESS_SM_UTILIZATION
from gpu_exporter.model import Entity

_POD = ("namespace", "pod", "container")


@dataclass(frozen=True)
class Holding:
    """One process of the interval: the allocation it belongs to (its uid, or none), its SM
    utilization ratio over the interval, the memory it holds and the most it has held since it
    started (bytes), where known."""

    allocation: str | None
    sm: float | None = None
    memory: float | None = None
    peak: float | None = None


@dataclass(frozen=True)
class Interval:
    """One GPU between two reads: ``seconds`` long, ``busy`` seconds busy and ``energy`` joules spent
    (none where unknown), the uids of its ``allocations`` and its processes."""

    seconds: float
    busy: float | None
    energy: float | None
    allocations: tuple[str, ...]
    processes: tuple[Holding, ...] = ()


@dataclass
class Parts:
    """Each allocation's part of an :class:`Interval` by uid (a part that is unknown is left out),
    and the busy time and energy no allocation accounts for."""

    allocated: dict[str, float] = field(default_factory=dict)
    busy: dict[str, float] = field(default_factory=dict)
    energy: dict[str, float] = field(default_factory=dict)
    sm: dict[str, float] = field(default_factory=dict)
    memory: dict[str, float] = field(default_factory=dict)
    memory_peak: dict[str, float] = field(default_factory=dict)
    unattributed_busy: float | None = None
    unattributed_energy: float | None = None


def split(interval: Interval) -> Parts:
    """The parts of ``interval``: the busy parts and the unattributed busy time add up to
    ``interval.busy``, the energy parts and the unattributed energy to ``interval.energy``."""
    parts = Parts()
    seconds, allocations = max(interval.seconds, 0.0), interval.allocations
    for uid in allocations:
        parts.allocated[uid] = seconds / len(allocations)
    weights = dict.fromkeys(allocations, 0.0)
    outside = 0.0  # SM activity of processes of no allocation
    orphans = False
    for process in interval.processes:
        if process.allocation is None or process.allocation not in weights:
            orphans = True
            outside += process.sm or 0.0
            continue
        weights[process.allocation] += process.sm or 0.0
        if process.sm is not None:
            parts.sm[process.allocation] = parts.sm.get(process.allocation, 0.0) + process.sm * seconds
        if process.memory is not None:
            parts.memory[process.allocation] = parts.memory.get(process.allocation, 0.0) + process.memory
        if process.peak is not None:
            parts.memory_peak[process.allocation] = max(parts.memory_peak.get(process.allocation, 0.0), process.peak)
    alone = allocations[0] if len(allocations) == 1 and not orphans else None
    shares: dict[str, float] = {}  # fraction of the busy time per allocation
    utilization = None
    if interval.busy is not None:
        utilization = min(max(interval.busy / seconds, 0.0), 1.0) if seconds > 0 else 0.0
        scale = max(sum(weights.values()) + outside, utilization)
        shares = {uid: weight / scale if scale > 0 else 0.0 for uid, weight in weights.items()}
        if alone is not None:
            shares = {alone: 1.0}
        busy = max(interval.busy, 0.0)
        parts.busy = {uid: busy * share for uid, share in shares.items()}
        parts.unattributed_busy = max(busy - sum(parts.busy.values()), 0.0)
    if interval.energy is not None:
        energy = max(interval.energy, 0.0)
        active = energy * utilization if utilization is not None else 0.0
        idle = energy - active
        parts.energy = {uid: active * shares.get(uid, 0.0) for uid in allocations}
        if utilization is None and alone is not None:
            idle, parts.energy = 0.0, {alone: energy}
        for uid in allocations:
            parts.energy[uid] += idle / len(allocations)
        parts.unattributed_energy = max(energy - sum(parts.energy.values()), 0.0)
    return parts


def holdings(values: Mapping[Entity, Mapping[str, float]]) -> tuple[tuple[str, ...], tuple[Holding, ...]]:
    """The allocations (uids, in read order) of one GPU's read and its processes, each with the
    allocation it belongs to (see the module's description)."""
    allocations = [entity for entity in values if entity.kind in ("pod", "job")]
    by_pod: dict[tuple[str, ...], str | None] = {}
    by_pod_uid: dict[str, str] = {}
    by_job: dict[str, str] = {}
    by_holder: dict[str, list[Entity]] = {}
    for entity in allocations:
        labels, info = dict(entity.labels), dict(entity.info)
        by_holder.setdefault(info.get("parent", ""), []).append(entity)
        if entity.kind == "pod":
            by_pod.setdefault(tuple(labels.get(k, "") for k in _POD), entity.uid)
            pod = tuple(labels.get(k, "") for k in _POD[:2])  # a pod's only container here, else no guess
            by_pod[pod] = entity.uid if pod not in by_pod else None
            if info.get("pod_uid"):
                by_pod_uid.setdefault(info["pod_uid"], entity.uid)
        elif labels.get("slurm_job"):
            by_job.setdefault(labels["slurm_job"], entity.uid)
    processes = []
    for entity, own in values.items():
        if entity.kind != "process":
            continue
        labels = dict(entity.labels)
        found = (by_pod.get(tuple(labels.get(k, "") for k in _POD)) if labels.get("pod") else None) or (
            by_pod.get(tuple(labels.get(k, "") for k in _POD[:2])) if labels.get("pod") else None
        )
        found = found or by_pod_uid.get(labels.get("pod_uid", "")) or by_job.get(labels.get("slurm_job", ""))
        if found is None:
            found = _sole(by_holder.get(dict(entity.info).get("parent", ""), []), labels)
        processes.append(
            Holding(found, own.get(PROCESS_SM_UTILIZATION), own.get(PROCESS_MEMORY_USED), own.get(PROCESS_MEMORY_PEAK))
        )
    return tuple(entity.uid for entity in allocations), tuple(processes)


def _sole(held: list[Entity], labels: Mapping[str, str]) -> str | None:
    """The one allocation of a process's GPU or MIG instance that a scheduler assigned (a pod or an HPC
    job; a Slurm job is known only from its own processes), unless the process's cgroups say it is
    someone else's: a Slurm job's process is not another allocation's, nor a pod's process a job's or
    a pod of another known UID (a pod whose UID no source names may be its own: pod-resources names
    pods, not their UIDs)."""
    if len(held) != 1 or labels.get("slurm_job"):
        return None
    allocation = held[0]
    if dict(allocation.labels).get("slurm_job"):
        return None  # known only from its own processes' cgroups: no claim on anyone else's
    if labels.get("pod_uid"):
        own_uid = dict(allocation.info).get("pod_uid", "")
        if allocation.kind != "pod" or (own_uid and own_uid != labels["pod_uid"]):
            return None
    return allocation.uid
