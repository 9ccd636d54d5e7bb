"""dcgm-exporter's ``-d`` selection: which GPUs and GPU instances its mode reports.

``f`` (the default) reports a GPU in MIG mode as its GPU instances only and any other GPU as itself;
``g[:IDS]`` whole GPUs by index (MIG or not); ``i[:IDS]`` GPU instances only, by DCGM's host-wide
GPU-instance entity id, as dcgm-exporter selects them. DCGM numbers a GPU's instances from
GPU id × 8 (``DCGM_MAX_INSTANCES_PER_GPU``) in the order it finds them; here that order is the GPU
instance id's, so the first instance of GPU 1 is entity 8 whatever its ``GPU_I_ID`` label says.
"""

from __future__ import annotations

from gpu_exporter.compat.flags import Devices
from gpu_exporter.model import Entity
from gpu_exporter.sampling.snapshot import DeviceView, Frame

#: DCGM's GPU-instance entity ids per GPU (DCGM_MAX_INSTANCES_PER_GPU).
MAX_INSTANCES_PER_GPU = 8


def _instances(device: DeviceView) -> list[Entity]:
    """The GPU's instances (one entity per GPU instance, its first compute instance), in GPU
    instance id order."""
    found: dict[int, Entity] = {}
    for entity in device.samples:
        if entity.kind == "mig":
            found.setdefault(int(dict(entity.labels)["gpu_instance"]), entity)
    return [found[gi] for gi in sorted(found)]


def monitored(device: DeviceView, chosen: Devices) -> tuple[bool, list[Entity]]:
    """What ``-d`` reports of one GPU: whether the whole GPU, and which of its GPU instances."""
    ordered = _instances(device)
    if chosen.flex:
        return not ordered, ordered
    whole = chosen.gpus and (chosen.gpu_ids is None or device.identity.index in chosen.gpu_ids)
    first = device.identity.index * MAX_INSTANCES_PER_GPU
    wanted = [
        entity
        for place, entity in enumerate(ordered)
        if chosen.instances and (chosen.instance_ids is None or first + place in chosen.instance_ids)
    ]
    return whole, wanted


def unmatched_ids(chosen: Devices, frame: Frame) -> list[str]:
    """The GPU indices and GPU-instance entity ids ``-d`` names that the frame lacks (dcgm-exporter
    refuses to start with them; here they are warned once and match nothing)."""
    gpus = {device.identity.index for device in frame.devices}
    instances: set[int] = set()
    for device in frame.devices:
        first = device.identity.index * MAX_INSTANCES_PER_GPU
        instances.update(range(first, first + len(_instances(device))))
    missing = [f"GPU {gpu}" for gpu in sorted((chosen.gpu_ids or frozenset()) - gpus)]
    return missing + [f"GPU instance {gi}" for gi in sorted((chosen.instance_ids or frozenset()) - instances)]
