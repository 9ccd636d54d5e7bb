"""Which GPU (and MIG device) a kubelet device id names, and which resources are GPUs.

Device plugins choose the ids the kubelet reports; the forms understood here:

- ``GPU-<uuid>``: the NVIDIA device plugin's default (``--device-id-strategy=uuid``);
- ``MIG-<uuid>``: a MIG device (drivers from R470 on), and ``MIG-GPU-<gpu uuid>/<gi>/<ci>``, the
  MIG device UUID of older drivers;
- ``<id>::<n>``: replica *n* of ``<id>`` under time-slicing or MPS sharing (any form above);
- ``<index>`` and ``<index>:<m>``: ``--device-id-strategy=index``, the GPU's NVML index and its
  MIG device *m* (the position in the MIG list the caller gives, which must be NVML's MIG device
  index order);
- ``nvidia<index>`` and ``nvidia<index>/gi<g>``: GKE's device plugin, a GPU by its minor number
  (taken to be the NVML index, as it is on GKE nodes) and a MIG partition by GPU instance id.

UUIDs compare case-insensitively; the answer is spelled as the caller's list spells it. An id
that names nothing the caller knows resolves to ``("", "")``, a GPU without a MIG device it can
name to ``(gpu_uuid, "")``: absent, never guessed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

#: One GPU as the caller knows it: (NVML index, UUID, ((gpu instance, compute instance, MIG UUID), ...)).
GpuIds = tuple[int, str, tuple[tuple[int, int, str], ...]]

#: Resources counted as GPUs besides every ``nvidia.com/mig-*``: whole GPUs, and the name the NVIDIA
#: device plugin gives shared GPUs under time-slicing with ``renameByDefault``.
GPU_RESOURCES = frozenset({"nvidia.com/gpu", "nvidia.com/gpu.shared"})
MIG_PREFIX = "nvidia.com/mig-"

_OLD_MIG = re.compile(r"mig-(gpu-[0-9a-f-]+)/([0-9]{1,4})/([0-9]{1,4})")
_GKE = re.compile(r"nvidia([0-9]{1,4})(?:/gi([0-9]{1,4}))?")
_INDEX = re.compile(r"([0-9]{1,4})(?::([0-9]{1,4}))?")


def is_gpu_resource(resource: str, extra: frozenset[str] = frozenset()) -> bool:
    """Whether ``resource`` (a kubelet resource name) is a GPU: the defaults, MIG profiles, ``extra``."""
    return resource in GPU_RESOURCES or resource.startswith(MIG_PREFIX) or resource in extra


def resolve(device_id: str, gpus: Sequence[GpuIds]) -> tuple[str, str]:
    """(GPU UUID, MIG UUID) that ``device_id`` names among ``gpus``; empty strings where it names none."""
    ident = device_id.strip()
    base, sep, replica = ident.rpartition("::")
    if sep and replica.isascii() and replica.isdigit():
        ident = base
    key = ident.lower()
    if key.startswith("gpu-"):
        for _, uuid, _migs in gpus:
            if uuid.lower() == key:
                return uuid, ""
        return "", ""
    if key.startswith("mig-"):
        return _mig(key, gpus)
    gke = _GKE.fullmatch(key)
    if gke is not None:
        gpu = _by_index(int(gke.group(1)), gpus)
        if gpu is None:
            return "", ""
        if gke.group(2) is None:
            return gpu[1], ""
        wanted = int(gke.group(2))
        found = [mig for gi, _ci, mig in gpu[2] if gi == wanted]
        # GKE makes one compute instance per GPU instance; more than one cannot be told apart.
        return gpu[1], found[0] if len(found) == 1 else ""
    index = _INDEX.fullmatch(key)
    if index is not None:
        gpu = _by_index(int(index.group(1)), gpus)
        if gpu is None:
            return "", ""
        if index.group(2) is None:
            return gpu[1], ""
        position = int(index.group(2))
        return gpu[1], gpu[2][position][2] if position < len(gpu[2]) else ""
    return "", ""


def _mig(key: str, gpus: Sequence[GpuIds]) -> tuple[str, str]:
    for _, uuid, migs in gpus:
        for _gi, _ci, mig in migs:
            if mig.lower() == key:
                return uuid, mig
    old = _OLD_MIG.fullmatch(key)
    if old is not None:
        for _, uuid, migs in gpus:
            if uuid.lower() == old.group(1):
                gi, ci = int(old.group(2)), int(old.group(3))
                return uuid, next((mig for g, c, mig in migs if (g, c) == (gi, ci)), "")
    return "", ""


def _by_index(index: int, gpus: Sequence[GpuIds]) -> GpuIds | None:
    return next((gpu for gpu in gpus if gpu[0] == index), None)
