"""The native renderer in process: a frame becomes its exposition under gpu-exporter's own names, built
only when a format is first asked for and once for all formats; families without a sample are left
out; the NVSwitch families only when a fabric row is enabled."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client.parser import text_string_to_metric_families

from gpu_exporter import model
from gpu_exporter.backends.base import DeviceIdentity, HostIdentity
from gpu_exporter.catalogue import ALL_METRICS, METRICS
from gpu_exporter.exposition.render import native_renderer
from gpu_exporter.model import Entity
from gpu_exporter.sampling.events import XidTally
from gpu_exporter.sampling.snapshot import DeviceView, Frame, SelfStats

GPU = model.gpu(0, "GPU-0000")
SWITCH = model.nvswitch(0, "0000:05:00.0", "7")


class _Counted(Mapping[Entity, Mapping[str, float]]):
    """A device's samples that count how often the renderer walks them."""

    walks = 0

    def __init__(self, samples: dict[Entity, dict[str, float]]) -> None:
        self._samples = samples

    def __getitem__(self, entity: Entity) -> Mapping[str, float]:
        return self._samples[entity]

    def __iter__(self) -> Iterator[Entity]:
        _Counted.walks += 1
        return iter(self._samples)

    def __len__(self) -> int:
        return len(self._samples)


def _frame(samples: Mapping[Entity, Mapping[str, float]]) -> Frame:
    identity = DeviceIdentity(0, "GPU-0000", "NVIDIA H100 80GB HBM3")
    stats = SelfStats("1.2.3", "nvml", True, "requested", 1.0, cycle_seconds=0.01)
    return Frame(
        host=HostIdentity("550.54.15", "12.4"),
        devices=(DeviceView(identity, True, samples),),
        events={"GPU-0000": XidTally({79: 1}, {}, 1.7e9, 79, ())},
        windows={},
        stats=stats,
        wall_time=1.7e9,
        fabric={SWITCH: {"gpu_nvswitch_temperature_celsius": 44.0}},
    )


def _parsed(text: bytes) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    return {
        family.name: [(s.name, s.labels, s.value) for s in family.samples]
        for family in text_string_to_metric_families(text.decode())
    }


def test_a_frame_renders_its_samples_and_leaves_empty_families_out() -> None:
    parsed = _parsed(native_renderer(METRICS)(_frame({GPU: {"gpu_temperature_celsius": 41.0}})).text)
    assert parsed["gpu_temperature_celsius"] == [("gpu_temperature_celsius", {"gpu": "0", "uuid": "GPU-0000"}, 41.0)]
    assert parsed["gpu_up"][0][2] == 1.0
    assert ("gpu_xid_errors_total", {"gpu": "0", "uuid": "GPU-0000", "xid": "79"}, 1.0) in parsed["gpu_xid_errors"]
    assert "gpu_power_watts" not in parsed and "gpu_mig_info" not in parsed  # no sample, no HELP either
    assert b"# HELP gpu_power_watts " not in native_renderer(METRICS)(_frame({GPU: {}})).text
    assert parsed["gpu_exporter_sample_duration_seconds"][0][2] == 0.01


def test_switch_families_only_when_a_fabric_row_is_enabled() -> None:
    frame = _frame({GPU: {}})
    assert b"nvswitch" not in native_renderer(METRICS)(frame).text  # the fabric's values are not rendered
    parsed = _parsed(native_renderer(ALL_METRICS)(frame).text)
    assert parsed["gpu_nvswitch_temperature_celsius"] == [("gpu_nvswitch_temperature_celsius", {"nvswitch": "0"}, 44.0)]
    assert parsed["gpu_nvswitch_info"][0][1] == {"nvswitch": "0", "pci_bus_id": "0000:05:00.0", "physical_id": "7"}


def test_families_are_built_when_first_asked_for_and_once_for_every_format() -> None:
    _Counted.walks = 0
    rendered = native_renderer(METRICS)(_frame(_Counted({GPU: {"gpu_temperature_celsius": 41.0}})))
    assert _Counted.walks == 0  # the sampler's thread builds nothing
    text = rendered.text
    built = _Counted.walks
    assert built > 0
    openmetrics = rendered.openmetrics
    assert rendered.text_gzip and rendered.openmetrics_gzip and rendered.text == text
    assert _Counted.walks == built  # the other formats encode the same families, built once
    assert b"gpu_temperature_celsius{" in text and openmetrics is not None and openmetrics.endswith(b"# EOF\n")
