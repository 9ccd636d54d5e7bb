"""What the DCGM fabric worker turns into samples and events: NVSwitches and their ports from one
fetch of their latest values, and the Xids DCGM recorded (field 230), owned by the GPU of the
entity they were recorded on (DCGM records a MIG-attributed Xid on the GPU or compute instance)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from gpu_exporter import model
from gpu_exporter.backends.base import Event, RawReading
from gpu_exporter.backends.dcgm.fields import plain_fields
from gpu_exporter.backends.dcgm.fill import field_specs, fill, pci_bus_id
from gpu_exporter.backends.dcgm.topology import Topology, text
from gpu_exporter.backends.dcgm.values import (
    FE_SWITCH,
    FI_XID_ERRORS,
    Blank,
    FieldValue,
    decode,
)
from gpu_exporter.catalogue import NVSWITCH_IDENTITY_FIELDS, MetricSpec

Latest = Mapping[tuple[int, int], Mapping[int, FieldValue]]


def switch_keys(topology: Topology, specs: Sequence[MetricSpec]) -> tuple[list[tuple[int, int]], list[int]]:
    """The switch and port entities, and the fields (identity included), to fetch for ``specs``."""
    keys = [(FE_SWITCH, switch) for switch in topology.switches] + [
        port.key for switch in topology.switches for port in topology.ports(FE_SWITCH, switch)
    ]  # the port entity ids as the engine listed them (their encoding differs between 3.x and 4.x)
    switch_specs = [spec for spec in specs if not spec.per_link]
    port_specs = field_specs([spec for spec in specs if spec.per_link])
    return keys, sorted({*plain_fields(switch_specs), *NVSWITCH_IDENTITY_FIELDS, *plain_fields(port_specs)})


def fill_switches(
    reading: RawReading,
    latest: Latest,
    topology: Topology,
    specs: Sequence[MetricSpec],
    states: Mapping[tuple[int, int, int], int],
    asks: Callable[[str, str], bool],
) -> None:
    """Each NVSwitch (with its PCI bus id and physical id from the identity fields) and its ports."""
    switch_specs = [spec for spec in specs if not spec.per_link]
    port_specs = [spec for spec in specs if spec.per_link]
    for switch in topology.switches:
        samples = latest.get((FE_SWITCH, switch), {})
        identity: dict[int, int | float | str] = {}
        for field_id in NVSWITCH_IDENTITY_FIELDS:
            decoded = decode(samples[field_id]) if field_id in samples else Blank("blank")
            if not isinstance(decoded, Blank):
                identity[field_id] = decoded
        entity = model.nvswitch(switch, pci_bus_id(identity), text(identity.get(863)))
        fill(reading, entity, samples, switch_specs, asks)
        for port in topology.ports(FE_SWITCH, switch):
            number = port.link or 0
            state = states.get((FE_SWITCH, switch, number))
            fill(reading, model.nvswitch_port(switch, number), latest.get(port.key, {}), port_specs, asks, state)


def xid_events(samples: Iterable[FieldValue], owner: Mapping[tuple[int, int], str]) -> list[Event]:
    """One event per recorded field-230 value, oldest first; time = the sample's engine timestamp."""
    events = []
    for sample in sorted(samples, key=lambda s: s.ts):
        code = decode(sample)
        uuid = owner.get((sample.group, sample.entity))
        if sample.field_id == FI_XID_ERRORS and uuid is not None and isinstance(code, int):
            events.append(Event(uuid, sample.ts / 1e6, xid=code))
    return events
