"""Entities: the things a sample is about, one topology for every backend.

Every sample is keyed by (entity, catalogue key). An :class:`Entity` carries its kind, a ``uid``
that stays the same across cycles and rediscoveries (memos and logs use it), the labels its series
carry, in order, and the extra labels of its kind's ``*_info`` metric. The constructors below are
the only code that writes those label keys (``tests/unit/test_single_source.py`` fails on a label set
written elsewhere); a new kind (process, pod, job) adds one here. The catalogue's vocabulary
declares the same keys for the metrics without a row (``DEVICE_LABELS``, ``MIG_LABELS``,
``LINK_LABEL``), and that test checks the two agree. Code elsewhere may read one label back by
name (``dict(entity.labels)["nvlink"]``); dcgm-exporter's own labels (``compat``) are its facts.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

from gpu_exporter.catalogue import LINK_LABEL, EntityKind

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Entity:
    """One thing measured: a GPU, a MIG instance, an NVLink, an NVSwitch or one of its ports."""

    kind: EntityKind
    uid: str
    labels: Labels
    info: Labels = ()

    def __hash__(self) -> int:
        # By uid alone (unique per entity; equal entities share it): str caches its hash, where
        # the generated hash re-hashed every label tuple on each of the many lookups per cycle.
        return hash(self.uid)


@functools.lru_cache(maxsize=8192)  # one object per GPU, instance and link: lookups match by identity
def gpu(index: int, uuid: str) -> Entity:
    """A physical GPU: labels ``gpu`` (NVML index) and ``uuid``."""
    return Entity("gpu", uuid, (("gpu", str(index)), ("uuid", uuid)))


@functools.lru_cache(maxsize=8192)  # one object per GPU, instance and link: lookups match by identity
def mig(
    index: int, uuid: str, gpu_instance: int, compute_instance: int, profile: str, mig_uuid: str, name: str
) -> Entity:
    """A MIG compute instance of GPU ``uuid``: the GPU's labels, then ``gpu_instance``,
    ``compute_instance`` and ``profile``; its own UUID and name go on ``gpu_mig_info``."""
    labels = (
        ("gpu", str(index)), ("uuid", uuid), ("gpu_instance", str(gpu_instance)),
        ("compute_instance", str(compute_instance)), ("profile", profile),
    )  # fmt: skip
    uid = mig_uuid or f"{uuid}/mig{gpu_instance}.{compute_instance}"
    return Entity("mig", uid, labels, (("mig_uuid", mig_uuid), ("name", name)))


@functools.lru_cache(maxsize=8192)  # one object per GPU, instance and link: lookups match by identity
def nvlink(index: int, uuid: str, link: int) -> Entity:
    """NVLink ``link`` of GPU ``uuid``."""
    return Entity("nvlink", f"{uuid}/nvlink{link}", (("gpu", str(index)), ("uuid", uuid), (LINK_LABEL, str(link))))


def nvswitch(switch: int, pci_bus_id: str = "", physical_id: str = "") -> Entity:
    """An NVSwitch by the backend's switch id; PCI bus id and physical id go on ``gpu_nvswitch_info``."""
    return Entity(
        "nvswitch", f"nvswitch{switch}", (("nvswitch", str(switch)),),
        (("pci_bus_id", pci_bus_id), ("physical_id", physical_id)),
    )  # fmt: skip


def nvswitch_port(switch: int, port: int) -> Entity:
    """Port ``port`` (an NVLink) of NVSwitch ``switch``."""
    return Entity("nvswitch_port", f"nvswitch{switch}/port{port}", (("nvswitch", str(switch)), (LINK_LABEL, str(port))))


#: The ``pid`` of the one series a GPU's processes beyond the per-GPU limit are folded into.
OTHER_PID = "other"


def process(parent: Entity, pid: int | str, name: str = "", user: str = "") -> Entity:
    """Process ``pid`` on ``parent`` (a GPU or MIG instance): the parent's labels, then ``pid``,
    ``process`` (the short name, from /proc/PID/comm) and ``user`` (name, else numeric uid);
    names are empty (absent) where they cannot be known."""
    labels = (*parent.labels, ("pid", str(pid)), ("process", name), ("user", user))
    return Entity("process", f"{parent.uid}/pid{pid}", labels, (("parent", parent.uid),))


def other_process(entity: Entity) -> Entity:
    """The one ``pid="other"`` process of ``entity``'s parent, which ``entity`` (a process made by
    :func:`process`, not yet :func:`named`) is folded into when its parent has too many."""
    parent = dict(entity.info).get("parent", "")
    labels = (*entity.labels[:-3], ("pid", OTHER_PID), ("process", ""), ("user", ""))
    return Entity("process", f"{parent}/pid{OTHER_PID}", labels, entity.info)


def workload(pod: tuple[str, str, str] | None, pod_uid: str, slurm_job: str) -> Labels:
    """A process's workload labels, for :func:`named`: ``namespace``, ``pod`` and ``container`` where
    the pod is known (``pod``: that triple), then ``pod_uid`` and ``slurm_job`` (empty ones are left out)."""
    labels: Labels = () if pod is None else (("namespace", pod[0]), ("pod", pod[1]), ("container", pod[2]))
    return (*labels, ("pod_uid", pod_uid), ("slurm_job", slurm_job))


def named(entity: Entity, name: str, user: str, workload: Labels = ()) -> Entity:
    """``entity`` (a process) with its ``process`` and ``user`` labels set, and the workload labels
    that are known (``namespace``, ``pod``, ``container``, ``slurm_job``; empty ones left out)."""
    fixed = {"process": name, "user": user}
    labels = tuple((k, fixed.get(k, v)) for k, v in entity.labels) + tuple((k, v) for k, v in workload if v)
    return Entity(entity.kind, entity.uid, labels, entity.info)


def pod(
    parent: Entity, namespace: str, name: str, container: str, claim: tuple[str, str] = ("", ""), info: Labels = ()
) -> Entity:
    """An allocation of ``parent`` (a GPU or MIG instance) to one container of a Kubernetes pod;
    ``claim``: (name, namespace) of the DRA ResourceClaim it came through, labels ``claim`` and
    ``claim_namespace`` when set; ``info``: what is known of the pod beside its labels (``pod_uid``)."""
    labels = (*parent.labels, ("namespace", namespace), ("pod", name), ("container", container))
    if claim[0]:
        labels += (("claim", claim[0]), ("claim_namespace", claim[1]))
    uid = f"{parent.uid}/pod/{namespace}/{name}/{container}" + (f"/claim/{claim[1]}/{claim[0]}" if claim[0] else "")
    return Entity("pod", uid, labels, (("parent", parent.uid), *info))


def pod_info(pod_uid: str, pod_labels: Mapping[str, str]) -> Labels:
    """What the API server says of a pod beside its entity's labels, for :func:`pod`'s ``info``:
    ``pod_uid``, then each of the pod's Kubernetes labels as ``label/KEY``, sorted by key."""
    return (("pod_uid", pod_uid), *((f"label/{key}", value) for key, value in sorted(pod_labels.items())))


def job(parent: Entity, label: str, job_id: str) -> Entity:
    """An allocation of ``parent`` to a batch job: ``label`` is ``slurm_job`` or ``hpc_job``."""
    return Entity("job", f"{parent.uid}/{label}/{job_id}", (*parent.labels, (label, job_id)), (("parent", parent.uid),))
