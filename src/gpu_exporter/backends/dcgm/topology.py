"""What one DCGM discovery found: devices as the sampler sees them, and DCGM's ids behind them.

Built from the entity list and the identity fields (sampled once per discovery): field 52 gives
the NVML index used as the ``gpu`` label, 54 the UUID, 50 the name (on a MIG GPU instance: its
profile, e.g. ``3g.40gb``), 67 the MIG mode, 51 the brand, 56 and 80-82 the inforom versions, 58 and
59 the PCI ids, 63 the compute capability; 1, 2 and 5 (global fields) the host's versions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from gpu_exporter.backends.base import DeviceIdentity, HostIdentity, MigIdentity
from gpu_exporter.backends.dcgm.values import (
    FE_GPU,
    FE_GPU_CI,
    FE_GPU_I,
    FE_LINK,
    FE_SWITCH,
    FI_BRAND,
    FI_CC_MODE,
    FI_CHASSIS_SERIAL,
    FI_COMPUTE_CAPABILITY,
    FI_CUDA_DRIVER_VERSION,
    FI_DRIVER_VERSION,
    FI_GPM_SUPPORT,
    FI_INFINIBAND_GUID,
    FI_INFOROM_ECC,
    FI_INFOROM_IMAGE,
    FI_INFOROM_OEM,
    FI_INFOROM_POWER,
    FI_MIG_MAX_SLICES,
    FI_MIG_MODE,
    FI_MINOR_NUMBER,
    FI_NAME,
    FI_NVML_INDEX,
    FI_NVML_VERSION,
    FI_PCI_BUS_ID,
    FI_PCI_COMBINED_ID,
    FI_PCI_SUBSYS_ID,
    FI_PLACEMENT,
    FI_SERIAL,
    FI_UUID,
    FI_VBIOS_VERSION,
    ST_GPU_IS_LOST,
    ST_GPU_NOT_SUPPORTED,
    Entity,
)

#: Decoded identity values: entity (group, id) → field id → value.
Values = Mapping[tuple[int, int], Mapping[int, int | float | str]]


@dataclass
class Topology:
    """Devices and host identity for the sampler; DCGM ids for the backend."""

    devices: tuple[DeviceIdentity, ...] = ()
    host: HostIdentity = field(default_factory=HostIdentity)
    gpus: dict[str, int] = field(default_factory=dict)  # GPU uuid → DCGM GPU id
    migs: dict[tuple[str, int], int] = field(default_factory=dict)  # (GPU uuid, MIG slot) → compute instance id
    owner: dict[tuple[int, int], str] = field(default_factory=dict)  # GPU/GI/CI entity → GPU uuid
    entities: tuple[Entity, ...] = ()
    #: DCGM GPU id → why the engine refuses to group it (it is a device with gpu_up 0, not watched).
    refused: dict[int, str] = field(default_factory=dict)
    #: DCGM GPU id → the refusal as a ``gpu_exporter_device_down`` reason (lost, unsupported, detached).
    refused_kind: dict[int, str] = field(default_factory=dict)

    def blocked(self, key: tuple[int, int]) -> bool:
        """Whether entity ``key`` is a refused GPU, one of its MIG instances, or one of its links."""
        parents = {e.key: e.parent for e in self.entities}
        while key[0] in (FE_GPU_I, FE_GPU_CI, FE_LINK):
            parent = parents.get(key)
            if parent is None:
                return False
            key = parent
        return key[0] == FE_GPU and key[1] in self.refused

    @property
    def switches(self) -> tuple[int, ...]:
        """DCGM ids of the NVSwitches."""
        return tuple(e.id for e in self.entities if e.group == FE_SWITCH)

    def ports(self, group: int, owner: int) -> tuple[Entity, ...]:
        """The NVLink port entities of one GPU or NVSwitch, by port number."""
        links = (e for e in self.entities if e.group == FE_LINK and e.parent == (group, owner))
        return tuple(sorted(links, key=lambda e: e.link or 0))

    def port_numbers(self, group: int, owner: int) -> tuple[int, ...]:
        """The NVLink port numbers of one GPU or NVSwitch, ascending."""
        return tuple(e.link for e in self.ports(group, owner) if e.link is not None)

    @property
    def layout(self) -> frozenset[tuple[int, int, tuple[int, int] | None]]:
        """GPUs, MIG instances, NVSwitches and NVLink ports with their parents: a change means
        identities and watches are stale (a port going down is a state change, not a layout one)."""
        return layout(self.entities)


def layout(entities: Sequence[Entity]) -> frozenset[tuple[int, int, tuple[int, int] | None]]:
    return frozenset((e.group, e.id, e.parent) for e in entities)


def text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _integer(value: object) -> int | None:
    return value if isinstance(value, int) else None


def _guid(value: str) -> str:
    """DCGM 571 as the NVML backend gives it: DCGM's text, "" for an all-zero GUID (nothing reported)."""
    try:
        zero = int(value, 16) == 0
    except ValueError:  # not a hex number: DCGM's text as it is
        zero = not value
    return "" if zero else value


def _placement(values: list[object]) -> tuple[int, int, int, int, int] | None:
    """DCGM 573-577 (slot, tray, host id, peer type, module id); None unless all five are integers."""
    numbers = [value for value in values if isinstance(value, int)]
    if len(numbers) != 5:
        return None
    return numbers[0], numbers[1], numbers[2], numbers[3], numbers[4]


def _capability(value: object) -> tuple[int, int] | None:
    """DCGM field 63 packs the CUDA compute capability as major << 16 | minor."""
    return (value >> 16, value & 0xFFFF) if isinstance(value, int) else None


def build(entities: Sequence[Entity], values: Values) -> Topology:
    """Device identities (sorted by NVML index), MIG devices in (GPU instance, compute instance)
    order, and which GPU owns each GPU, GPU instance and compute instance entity."""
    gpus = [e for e in entities if e.group == FE_GPU]
    instances = {e.id: e for e in entities if e.group == FE_GPU_I}
    computes = [e for e in entities if e.group == FE_GPU_CI]
    topology = Topology(entities=tuple(entities))
    devices = []
    for gpu in gpus:
        own = values.get(gpu.key, {})
        uuid = text(own.get(FI_UUID)) or f"GPU-dcgm-{gpu.id}"
        gpu_name = text(own.get(FI_NAME))
        migs: list[MigIdentity] = []
        mine = [c for c in computes if c.parent and instances.get(c.parent[1], Entity(0, 0)).parent == gpu.key]
        for compute in sorted(mine, key=lambda c: (c.gpu_instance or 0, c.compute_instance or 0)):
            assert compute.parent is not None
            profile = text(values.get(compute.parent, {}).get(FI_NAME))
            topology.migs[(uuid, len(migs))] = compute.id
            topology.owner[compute.key] = uuid
            migs.append(
                MigIdentity(
                    gpu_instance=compute.gpu_instance or 0,
                    compute_instance=compute.compute_instance or 0,
                    profile=profile,
                    uuid=text(values.get(compute.key, {}).get(FI_UUID)),
                    name=f"{gpu_name} MIG {profile}" if profile else gpu_name,  # the driver's naming
                )
            )
        for instance in instances.values():
            if instance.parent == gpu.key:
                topology.owner[instance.key] = uuid
        index = own.get(FI_NVML_INDEX)
        mig_mode = own.get(FI_MIG_MODE)
        devices.append(
            DeviceIdentity(
                placeholder=FI_UUID not in own,
                index=index if isinstance(index, int) else gpu.id,
                uuid=uuid,
                name=gpu_name,
                pci_bus_id=text(own.get(FI_PCI_BUS_ID)),
                serial=text(own.get(FI_SERIAL)),
                vbios_version=text(own.get(FI_VBIOS_VERSION)),
                minor_number=text(own.get(FI_MINOR_NUMBER)),
                mig_mode={1: "enabled", 0: "disabled"}.get(mig_mode, "") if isinstance(mig_mode, int) else "",
                migs=tuple(migs),
                nvlinks=topology.port_numbers(FE_GPU, gpu.id),
                brand=text(own.get(FI_BRAND)),
                inforom_image_version=text(own.get(FI_INFOROM_IMAGE)),
                inforom_oem_version=text(own.get(FI_INFOROM_OEM)),
                inforom_ecc_version=text(own.get(FI_INFOROM_ECC)),
                inforom_power_version=text(own.get(FI_INFOROM_POWER)),
                pci_device_id=_integer(own.get(FI_PCI_COMBINED_ID)),
                pci_subsystem_id=_integer(own.get(FI_PCI_SUBSYS_ID)),
                compute_capability=_capability(own.get(FI_COMPUTE_CAPABILITY)),
                chassis_serial=text(own.get(FI_CHASSIS_SERIAL)),
                placement=_placement([own.get(number) for number in FI_PLACEMENT]),
                infiniband_guid=_guid(text(own.get(FI_INFINIBAND_GUID))),
                gpm_supported=None if _integer(own.get(FI_GPM_SUPPORT)) is None else own.get(FI_GPM_SUPPORT) != 0,
                cc_mode=_integer(own.get(FI_CC_MODE)),
                mig_max_slices=_integer(own.get(FI_MIG_MAX_SLICES)),
            )
        )
        topology.gpus[uuid] = gpu.id
        topology.owner[gpu.key] = uuid
    topology.devices = tuple(sorted(devices, key=lambda d: d.index))
    first = values.get(gpus[0].key, {}) if gpus else {}
    cuda = first.get(FI_CUDA_DRIVER_VERSION)
    topology.host = HostIdentity(
        driver_version=text(first.get(FI_DRIVER_VERSION)),
        cuda_version=f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) and cuda > 0 else "",
        nvml_version=text(first.get(FI_NVML_VERSION)),
    )
    return topology


def with_p2p(topology: Topology, rows: Mapping[int, Mapping[int, int]]) -> tuple[DeviceIdentity, ...]:
    """The devices with their NVLink P2P status towards each other GPU DCGM reports (``rows``: DCGM
    GPU id → peer GPU id → status), peers named by their index as the ``gpu`` label is."""
    index = {topology.gpus[d.uuid]: d.index for d in topology.devices if d.uuid in topology.gpus}
    out = []
    for device in topology.devices:
        gpu = topology.gpus.get(device.uuid)
        row = rows.get(gpu, {}) if gpu is not None and gpu not in topology.refused else {}
        peers = tuple(sorted((index[peer], status) for peer, status in row.items() if peer in index and peer != gpu))
        out.append(replace(device, p2p_nvlink=peers))
    return tuple(out)


def refusal(status: int) -> str:
    """Why dcgmGroupAddEntity refused a GPU, in words (the DCGM status of its entity)."""
    if status == ST_GPU_IS_LOST:
        return "DCGM reports the GPU lost (fallen off the bus?)"
    if status == ST_GPU_NOT_SUPPORTED:
        return "DCGM does not support this GPU"
    return "DCGM will not group the GPU (not in status OK: detached or inaccessible)"


def refusal_kind(status: int) -> str:
    """dcgmGroupAddEntity's refusal as a ``gpu_exporter_device_down`` reason: ``lost`` (the GPU fell
    off the bus), ``unsupported`` (a GPU DCGM does not support: a GeForce, or one its allowlist
    rejects) or ``detached`` (any other status but OK: detached or inaccessible)."""
    if status == ST_GPU_IS_LOST:
        return "lost"
    if status == ST_GPU_NOT_SUPPORTED:
        return "unsupported"
    return "detached"


def refuse(topology: Topology, gpu: int, reason: str, previous: Topology | None) -> None:
    """Mark DCGM GPU ``gpu`` refused. It stays a device (so it is reported with gpu_up 0), under the
    identity it had before when ``previous`` knew it, else the placeholder ``build`` gave it (UUID
    ``GPU-dcgm-<id>``, index = DCGM id: no identity field can be read from an ungrouped GPU); its MIG
    devices are dropped."""
    topology.refused[gpu] = reason
    current = next((uuid for uuid, number in topology.gpus.items() if number == gpu), None)
    known = {number: uuid for uuid, number in previous.gpus.items()} if previous is not None else {}
    before = next((d for d in previous.devices if d.uuid == known.get(gpu)), None) if previous else None
    devices = []
    for device in topology.devices:
        if device.uuid == current:
            device = before if before is not None else replace(device, migs=())
        devices.append(device)
    topology.devices = tuple(sorted(devices, key=lambda d: d.index))
    if current is not None:
        for key in [key for key, uuid in topology.owner.items() if uuid == current]:
            del topology.owner[key]
        del topology.gpus[current]
        for slot in [slot for slot in topology.migs if slot[0] == current]:
            del topology.migs[slot]
    uuid = before.uuid if before is not None else current
    if uuid is not None:
        topology.gpus[uuid] = gpu
        topology.owner[(FE_GPU, gpu)] = uuid
