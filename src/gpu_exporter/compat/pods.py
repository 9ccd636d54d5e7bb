"""dcgm-exporter's attribution labels in its compatibility mode: which pod (``-k``) a GPU's or MIG
instance's series name, with the pod's UID and Kubernetes labels where dcgm-exporter's flags ask,
and which HPC jobs (``--hpc-job-mapping-dir``) hold it.

As dcgm-exporter's transformations (its ``PodMapper`` and ``hpcMapper``, applied to every series of
the GPU entity group before rendering: the field values, ``DCGM_FI_DEV_XID_ERRORS``, the Xid and
clock-event window counts, P2P status, and the GPU's NVLink series) each series of a GPU or GPU
instance gets its pod's labels, then is copied once per HPC job of that GPU (the file named by its
index) or GPU instance (``index.instance``; a GPU instance's series never take the whole GPU's file)
with ``hpc_job`` set; a GPU or instance without jobs keeps its one series. Unlike dcgm-exporter,
blank lines and repeated ids in a job file are not copies of their own (they would be series
without ``hpc_job`` twice, or the same series twice, which Prometheus rejects)."""

from __future__ import annotations

import logging
import re

from gpu_exporter.compat.flags import DcgmOptions
from gpu_exporter.sampling.snapshot import DeviceView

Labels = list[tuple[str, str]]
#: The most Kubernetes labels of a pod copied onto each series of its GPU, and their bytes (names and
#: values): a node's usual pod labels fit many times over (Kubernetes allows values of 63 characters).
MAX_POD_LABELS = 32
MAX_POD_LABEL_BYTES = 4096
log = logging.getLogger(__name__)
#: dcgm-exporter's pod label names with ``--use-old-namespace`` (1.x).
_OLD_NAMES = ("pod_name", "pod_namespace", "container_name")

#: Names a tenant's pod label never takes: what says which GPU a series is (dcgm-exporter's identity
#: labels, in both namespaces), what else a compat series carries, and the target labels Prometheus
#: attaches (``instance``, ``job``: with ``honor_labels`` a pod label would replace them). A series'
#: own labels also win over any pod label of the same name when the series is built.
RESERVED = frozenset({
    "gpu", "UUID", "uuid", "pci_bus_id", "device", "modelName", "Hostname", "hostname", "GPU_I_PROFILE",
    "GPU_I_ID", "DCGM_FI_DRIVER_VERSION", "DCGM_FI_PROCESS_NAME", "DCGM_FI_DEV_SERIAL", "err_code", "err_msg",
    "link_status", "peer_gpu", "nvlink", "nvswitch", "port", "pod", "namespace", "container", "uid", "hpc_job",
    "pod_uid", "pod_name", "pod_namespace", "container_name", "instance", "job", "le", "quantile",
})  # fmt: skip


def pod_labels(device: DeviceView, options: DcgmOptions) -> dict[str, Labels]:
    """dcgm-exporter's ``pod``, ``namespace`` and ``container`` labels (``--kubernetes``; with ``-o``
    ``pod_name``, ``pod_namespace``, ``container_name``) for each GPU or
    MIG instance allocated to exactly one pod container, then its ``pod_uid``
    (``--kubernetes-enable-pod-uid``) and its Kubernetes labels (``--kubernetes-enable-pod-labels``,
    names made valid, those of ``--kubernetes-pod-label-allowlist-regex``, never one of
    :data:`RESERVED`) where the API server lists the pod. A device several pods share
    (time-slicing) gets none: copying its values to every pod would count them once per pod; the
    per-process series say who uses what."""
    by_parent: dict[str, list[tuple[dict[str, str], dict[str, str]]]] = {}
    for entity in device.samples:
        if entity.kind == "pod":
            info = dict(entity.info)
            by_parent.setdefault(info.get("parent", ""), []).append((dict(entity.labels), info))
    out: dict[str, Labels] = {}
    for parent, own in by_parent.items():
        if len(own) != 1:
            continue
        labels, info = own[0]
        names = _OLD_NAMES if options.old_namespace else ("pod", "namespace", "container")
        found = list(zip(names, (labels["pod"], labels["namespace"], labels["container"]), strict=True))
        if options.pod_uid and info.get("pod_uid"):
            found.append(("pod_uid", info["pod_uid"]))
        if options.pod_labels:
            found += _kubernetes_labels(info, options.pod_label_allowlist, {name for name, _ in found} | RESERVED)
        out[parent] = found
    return out


def _kubernetes_labels(info: dict[str, str], allowlist: str, taken: set[str]) -> Labels:
    """The pod's Kubernetes labels (``label/KEY`` in the allocation's info) as Prometheus labels, the
    first :data:`MAX_POD_LABELS` by name within :data:`MAX_POD_LABEL_BYTES`: they are copied onto
    every series of the GPU, so a tenant with thousands of labels must not multiply /metrics; what is
    left out is counted in one (aggregated) warning that names the allowlist flag, the way to choose."""
    patterns = [re.compile(p.strip()) for p in allowlist.split(",") if p.strip()]
    found: list[tuple[str, str]] = []
    size, dropped = 0, 0
    for key, value in sorted(info.items()):
        if not key.startswith("label/"):
            continue
        name = key[len("label/") :]
        if patterns and not any(p.fullmatch(name) for p in patterns):
            continue
        clean = re.sub(r"[^a-zA-Z0-9_]", "_", name)
        clean = f"_{clean}" if clean[:1].isdigit() else clean
        if clean and clean not in taken and not clean.startswith(("__", "exported_")):
            if len(found) >= MAX_POD_LABELS or size + len(clean) + len(value) > MAX_POD_LABEL_BYTES:
                dropped += 1
                continue
            taken.add(clean)
            size += len(clean) + len(value)
            found.append((clean, value))
    if dropped:
        log.warning("pod %s: %d Kubernetes label(s) beyond the first %d or %d bytes not copied onto its GPU's "
                    "series; choose them with --kubernetes-pod-label-allowlist-regex", info.get("pod_uid", "?"),
                    dropped, MAX_POD_LABELS, MAX_POD_LABEL_BYTES)  # fmt: skip
    return found


def hpc_jobs(device: DeviceView) -> dict[str, tuple[str, ...]]:
    """The HPC job ids (``--hpc-job-mapping-dir``) holding each GPU or MIG instance, by its uid, in
    the file's order."""
    out: dict[str, tuple[str, ...]] = {}
    for entity in device.samples:
        if entity.kind == "job":
            job = dict(entity.labels).get("hpc_job")
            if job is not None:
                parent = dict(entity.info).get("parent", "")
                out[parent] = (*out.get(parent, ()), job)
    return out


def attributed(found: list[tuple[Labels, float]], pods: Labels, jobs: tuple[str, ...]) -> list[tuple[Labels, float]]:
    """Series of one GPU or instance with its pod's labels, then one copy per HPC job with ``hpc_job``."""
    if not pods and not jobs:
        return found
    out = []
    for labels, value in found:
        labels = [*labels, *pods]
        if not jobs:
            out.append((labels, value))
        out += [([*labels, ("hpc_job", job)], value) for job in jobs]
    return out


def first_wins(labels: Labels) -> dict[str, str]:
    """A series' labels as a mapping where the first of two same-named labels stays: the exporter's
    own labels come before a pod's, so a tenant's label can never replace one of them."""
    out: dict[str, str] = {}
    for name, value in labels:
        out.setdefault(name, value)
    return out
