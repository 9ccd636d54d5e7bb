"""GPU and MIG UUIDs of Dynamic Resource Allocation devices: the node's ``ResourceSlice`` objects.

The kubelet's pod-resources API names a DRA-allocated device by (driver, pool, device name) only.
The DRA driver publishes each device it offers in ``ResourceSlice`` objects (API group
``resource.k8s.io``, cluster-scoped, one or more per pool): ``spec.driver``, ``spec.pool.name``,
``spec.pool.generation`` and ``spec.devices[]`` with each device's ``name`` and typed
``attributes`` (``{"string": …}``, ``{"int": …}``, ``{"bool": …}``, ``{"version": …}``) — directly on
the device in ``v1`` and ``v1beta2``, under ``basic`` in ``v1beta1``. NVIDIA's DRA driver
(``gpu.nvidia.com``) gives every device a ``uuid`` attribute (``GPU-…`` or ``MIG-…``) and a ``type``
(``gpu``, ``mig``); a MIG device also carries ``parentUUID`` (its GPU) and ``profile``
(``1g.10gb``). Attribute names may be qualified with the driver's domain
(``gpu.nvidia.com/uuid``); both spellings are read.

Only the slices of a pool's newest generation count (a driver republishing a pool bumps it; older
slices still listed are stale). A MIG device the driver creates only when a claim is prepared
(its "dynamic MIG" devices) is published with ``parentUUID`` and ``profile`` but no ``uuid``: it is
kept with its GPU and profile, and the join names the GPU's one instance of that profile (none
or several: not attributed). Devices with neither ``uuid`` nor ``parentUUID`` are skipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from gpu_exporter.attribution.refresh import Failure

MAX_NAME = 1024


@dataclass(frozen=True)
class DraDevice:
    """One device a DRA driver publishes, as the exporter joins it."""

    gpu_uuid: str  # the GPU's UUID (a MIG device's parent)
    mig_uuid: str = ""  # the MIG device's own UUID; "" for a whole GPU (or a MIG device not yet created)
    profile: str = ""  # MIG profile (``1g.10gb``); "" for a whole GPU


#: (driver, pool, device name) → the device.
Devices = Mapping[tuple[str, str, str], DraDevice]
EMPTY: Devices = MappingProxyType({})


def _object(value: object, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Failure("malformed", f"{what} is not an object")
    return value


def _name(value: object, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_NAME:
        raise Failure("malformed", f"{what} is not a name of 1 to {MAX_NAME} characters")
    return value


def _attributes(device: dict[str, Any], driver: str, where: str) -> dict[str, str]:
    """The device's string attributes by unqualified name (``gpu.nvidia.com/uuid`` → ``uuid``)."""
    basic = device.get("basic")
    raw = device.get("attributes") if basic is None else _object(basic, f"{where}.basic").get("attributes")
    found: dict[str, str] = {}
    for key, value in _object({} if raw is None else raw, f"{where}.attributes").items():
        domain, _, name = str(key).rpartition("/")
        if domain not in ("", driver) or not isinstance(value, dict):
            continue
        text = value.get("string")
        if isinstance(text, str) and len(text) <= MAX_NAME:
            found[name] = text
    return found


def parse(items: Iterable[object], drivers: frozenset[str]) -> Devices:
    """The devices of the drivers in ``drivers`` in a list of ``ResourceSlice`` objects (as JSON);
    raises :class:`~.refresh.Failure` (``malformed``) when one is not a ResourceSlice."""
    newest: dict[tuple[str, str], int] = {}
    slices: list[tuple[str, str, int, list[Any]]] = []
    for index, item in enumerate(items):
        where = f"items[{index}].spec"
        spec = _object(_object(item, f"items[{index}]").get("spec"), where)
        driver = _name(spec.get("driver"), f"{where}.driver")
        if driver not in drivers:
            continue
        pool = _object(spec.get("pool"), f"{where}.pool")
        name = _name(pool.get("name"), f"{where}.pool.name")
        generation = pool.get("generation", 0)
        if not isinstance(generation, int):
            raise Failure("malformed", f"{where}.pool.generation is not an integer")
        devices = spec.get("devices")
        devices = [] if devices is None else devices
        if not isinstance(devices, list):
            raise Failure("malformed", f"{where}.devices is not a list")
        newest[(driver, name)] = max(generation, newest.get((driver, name), generation))
        slices.append((driver, name, generation, devices))
    found: dict[tuple[str, str, str], DraDevice] = {}
    for driver, pool_name, generation, devices in slices:
        if generation != newest[(driver, pool_name)]:
            continue
        for number, each in enumerate(devices):
            where = f"{driver} pool {pool_name} devices[{number}]"
            device = _object(each, where)
            attributes = _attributes(device, driver, where)
            uuid, parent = attributes.get("uuid", ""), attributes.get("parentUUID", "")
            if not uuid and not parent:
                continue
            known = DraDevice(parent, uuid, attributes.get("profile", "")) if parent else DraDevice(uuid)
            found[(driver, pool_name, _name(device.get("name"), f"{where}.name"))] = known
    return MappingProxyType(found)
