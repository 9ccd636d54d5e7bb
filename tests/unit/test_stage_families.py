"""Family building in process: from one cycle's device views, fabric samples, event tallies and
self-state to Prometheus metric families. Names, types and label names come from the catalogue; a
value that is absent gives no sample (never 0); identity, ``gpu_up`` and the event counters are there
for every GPU the sampler lists, a lost one included."""

from __future__ import annotations

from prometheus_client.core import Metric

from gpu_exporter import model
from gpu_exporter.backends.base import DeviceIdentity, HostIdentity, MigIdentity
from gpu_exporter.catalogue import FIXED, LINK_LABEL, METRICS, PRECREATED_XIDS, SWITCH_METRICS, MetricSpec
from gpu_exporter.exposition.families import (
    device_families,
    entity_families,
    event_families,
    fabric_families,
    self_families,
)
from gpu_exporter.sampling.events import XidTally
from gpu_exporter.sampling.snapshot import CollectorStatus, DeviceView, SelfStats

HOST = HostIdentity("550.54.15", "12.4")
H100 = DeviceIdentity(
    0, "GPU-0000", "NVIDIA H100 80GB HBM3", "00000000:18:00.0", "1650923000001", mig_mode="enabled",
    migs=(MigIdentity(1, 0, "1g.10gb", "MIG-1111", "NVIDIA H100 MIG 1g.10gb"),), nvlinks=(0,),
    compute_capability=(9, 0), pci_device_id=0x233010DE,
)  # fmt: skip
LOST = DeviceIdentity(1, "GPU-1111", "NVIDIA H100 80GB HBM3")
GPU = model.gpu(0, "GPU-0000")
MIG = model.mig(0, "GPU-0000", 1, 0, "1g.10gb", "MIG-1111", "NVIDIA H100 MIG 1g.10gb")
LINK = model.nvlink(0, "GPU-0000", 0)
CRC = "gpu_nvlink_errors_total{type=crc_data}"


def _view() -> DeviceView:
    samples = {
        GPU: {"gpu_temperature_celsius": 41.0, "gpu_memory_used_bytes": 2.0**30, "gpu_energy_joules_total": 5.5},
        LINK: {CRC: 7.0},
        MIG: {"gpu_memory_used_bytes": 2.0**20},  # no temperature per instance: that row is the GPU's only
    }
    return DeviceView(H100, True, samples, read_seconds=0.002)


def _down() -> DeviceView:
    return DeviceView(LOST, False, {model.gpu(1, "GPU-1111"): {}}, down_reason="lost")


def _by_name(families: list[Metric]) -> dict[str, Metric]:
    return {family.name: family for family in families}


def _samples(family: Metric) -> list[tuple[str, dict[str, str], float]]:
    return [(sample.name, sample.labels, sample.value) for sample in family.samples]


def test_a_value_gives_one_sample_with_the_entitys_then_the_rows_labels() -> None:
    families = _by_name(device_families(METRICS, HOST, [_view(), _down()]))
    base = {"gpu": "0", "uuid": "GPU-0000"}
    assert _samples(families["gpu_temperature_celsius"]) == [("gpu_temperature_celsius", base, 41.0)]
    assert families["gpu_temperature_celsius"].type == "gauge" and families["gpu_temperature_celsius"].unit == "celsius"
    mig = {**base, "gpu_instance": "1", "compute_instance": "0", "profile": "1g.10gb"}
    assert _samples(families["gpu_memory_used_bytes"]) == [  # the whole GPU without MIG labels, then the instance
        ("gpu_memory_used_bytes", base, 2.0**30),
        ("gpu_memory_used_bytes", mig, 2.0**20),
    ]
    assert _samples(families["gpu_energy_joules"]) == [("gpu_energy_joules_total", base, 5.5)]
    assert families["gpu_energy_joules"].type == "counter"
    assert _samples(families["gpu_nvlink_errors"]) == [
        ("gpu_nvlink_errors_total", {**base, LINK_LABEL: "0", "type": "crc_data"}, 7.0)
    ]


def test_an_absent_value_gives_no_sample_not_zero() -> None:
    families = device_families(METRICS, HOST, [_view(), _down()])
    names = {sample.name for family in families for sample in family.samples}
    assert "gpu_power_watts" not in names and "gpu_utilization_seconds_total" not in names
    lost = [
        (family.name, sample.labels)
        for family in families
        for sample in family.samples
        if sample.labels.get("uuid") == "GPU-1111"
    ]
    assert sorted(name for name, _ in lost) == ["gpu_info", "gpu_up"]  # only gpu_info and gpu_up for the lost GPU
    assert _samples(_by_name(families)["gpu_up"]) == [
        ("gpu_up", {"gpu": "0", "uuid": "GPU-0000"}, 1),
        ("gpu_up", {"gpu": "1", "uuid": "GPU-1111"}, 0),
    ]


def test_identity_families_carry_the_catalogues_labels() -> None:
    families = _by_name(device_families(METRICS, HOST, [_view()]))
    ((name, labels, value),) = _samples(families["gpu_info"])
    assert name == "gpu_info" and value == 1 and tuple(labels) == FIXED["gpu_info"].labels
    assert labels["driver_version"] == "550.54.15" and labels["cuda_version"] == "12.4"
    assert labels["compute_capability"] == "9.0" and labels["pci_device_id"] == "0x233010DE"
    assert labels["pci_subsystem_id"] == "" and labels["serial"] == "1650923000001"
    ((name, labels, value),) = _samples(families["gpu_mig_info"])
    assert name == "gpu_mig_info" and value == 1 and tuple(labels) == FIXED["gpu_mig_info"].labels
    assert labels["mig_uuid"] == "MIG-1111"


def test_families_come_in_catalogue_order_and_only_gpu_rows_for_devices() -> None:
    families = device_families(METRICS, HOST, [_view()])
    assert [family.name for family in families[:3]] == ["gpu_info", "gpu_up", "gpu_mig_info"]
    names = [family.name for family in families[3:]]
    expected = (spec.name.removesuffix("_total") if spec.kind == "counter" else spec.name for spec in METRICS)
    assert names == list(
        dict.fromkeys(name for name, spec in zip(expected, METRICS, strict=True) if spec.root == "gpu")
    )
    assert not {spec.name for spec in SWITCH_METRICS} & {family.name for family in families}


def test_event_families_only_with_the_xid_collector() -> None:
    assert "gpu_xid_errors" not in _by_name(device_families(METRICS, HOST, [_view()], None))
    assert "gpu_xid_errors" in _by_name(device_families(METRICS, HOST, [_view()], {}))


def test_xid_series_start_at_zero_and_a_lost_gpu_keeps_its_counts() -> None:
    events = {"GPU-1111": XidTally({79: 1, 999: 2}, {"double_bit": 1}, 1.7e9, 999, ())}
    xids, last, ecc = (_by_name(event_families([_view(), _down()], events))[name] for name in (
        "gpu_xid_errors", "gpu_xid_last_timestamp_seconds", "gpu_ecc_error_events"))  # fmt: skip
    counts = {(s.labels["uuid"], int(s.labels["xid"])): s.value for s in xids.samples}
    assert {code for uuid, code in counts if uuid == "GPU-0000"} == set(PRECREATED_XIDS)
    assert all(value == 0 for (uuid, _), value in counts.items() if uuid == "GPU-0000")
    assert counts[("GPU-1111", 79)] == 1 and counts[("GPU-1111", 999)] == 2  # a code outside the table too
    assert _samples(last) == [("gpu_xid_last_timestamp_seconds", {"gpu": "1", "uuid": "GPU-1111"}, 1.7e9)]
    assert [(s.labels["uuid"], s.labels["type"], s.value) for s in ecc.samples] == [
        ("GPU-0000", "single_bit", 0), ("GPU-0000", "double_bit", 0),
        ("GPU-1111", "single_bit", 0), ("GPU-1111", "double_bit", 1),
    ]  # fmt: skip
    assert {s.name for s in xids.samples} == {"gpu_xid_errors_total"}


def test_fabric_families_group_each_switch_with_its_ports() -> None:
    switches = [model.nvswitch(n, f"0000:0{n}:00.0", str(100 + n)) for n in (0, 1)]
    fabric = {
        switches[0]: {"gpu_nvswitch_temperature_celsius": 40.0},
        model.nvswitch_port(1, 2): {"gpu_nvswitch_nvlink_up": 1.0},
        switches[1]: {"gpu_nvswitch_temperature_celsius": 45.0},
        model.nvswitch_port(0, 5): {"gpu_nvswitch_nvlink_up": 0.0},
    }
    families = _by_name(fabric_families(SWITCH_METRICS, fabric))
    assert [s.labels for s in families["gpu_nvswitch_info"].samples] == [
        {"nvswitch": "0", "pci_bus_id": "0000:00:00.0", "physical_id": "100"},
        {"nvswitch": "1", "pci_bus_id": "0000:01:00.0", "physical_id": "101"},
    ]
    assert [(s.labels, s.value) for s in families["gpu_nvswitch_nvlink_up"].samples] == [
        ({"nvswitch": "0", LINK_LABEL: "5"}, 0.0),  # switch 0's port before switch 1's
        ({"nvswitch": "1", LINK_LABEL: "2"}, 1.0),
    ]
    assert "gpu_temperature_celsius" not in families


def test_entity_families_fill_info_families_of_kinds_present_only() -> None:
    rows: list[MetricSpec] = [spec for spec in METRICS if spec.key == "gpu_memory_used_bytes"]
    info = device_families(METRICS, HOST, [])[2]  # an empty gpu_mig_info family
    families = entity_families(rows, [{GPU: {}, MIG: {}}], {"gpu_mig_info": info})
    assert families[0].samples == []  # no value: no sample, whatever the entities
    assert len(info.samples) == 1 and info.samples[0].labels["mig_uuid"] == "MIG-1111"


def test_self_families_say_what_is_known_and_nothing_else() -> None:
    stats = SelfStats(
        "1.2.3", "nvml", True, "requested", 1.0, errors={"timeout": 2, "exception": 0},
        invalid={"gpu_power_watts": 3},
        collectors={"power": CollectorStatus(True, 0.01), "xid": CollectorStatus(False)},
    )  # fmt: skip
    families = _by_name(self_families(stats, [_view(), _down()]))
    assert families["gpu_exporter_sample_duration_seconds"].samples == []  # no cycle yet: absent
    assert families["gpu_exporter_last_sample_timestamp_seconds"].samples == []
    assert _samples(families["gpu_exporter_sample_errors"]) == [
        ("gpu_exporter_sample_errors_total", {"kind": "exception"}, 0),
        ("gpu_exporter_sample_errors_total", {"kind": "timeout"}, 2),
    ]
    assert _samples(families["gpu_exporter_device_down"]) == [
        ("gpu_exporter_device_down", {"gpu": "1", "uuid": "GPU-1111", "reason": "lost"}, 1)
    ]
    assert [s.labels["uuid"] for s in families["gpu_exporter_device_read_duration_seconds"].samples] == ["GPU-0000"]
    assert [s.value for s in families["gpu_exporter_device_stalled"].samples] == [0, 0]
    assert _samples(families["gpu_exporter_collector_success"]) == [
        ("gpu_exporter_collector_success", {"collector": "power"}, 1),
        ("gpu_exporter_collector_success", {"collector": "xid"}, 0),
    ]
    assert [s.labels for s in families["gpu_exporter_collector_duration_seconds"].samples] == [{"collector": "power"}]
    assert _samples(families["gpu_exporter_backend_info"])[0][1] == {"backend": "nvml", "reason": "requested"}


def test_a_down_gpu_without_a_reason_is_lost() -> None:
    stats = SelfStats("1.2.3", "nvml", True, "requested", 1.0)
    view = DeviceView(LOST, False, {})
    families = _by_name(self_families(stats, [view]))
    assert families["gpu_exporter_device_down"].samples[0].labels["reason"] == "lost"
