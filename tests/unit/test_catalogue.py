"""The catalogue's rules: names, units, conversions, and that every NVML source can be read."""

from __future__ import annotations

import re
from fractions import Fraction

import pytest

from gpu_exporter.backends.nvml.processes import supported_process_calls
from gpu_exporter.backends.nvml.readers import supported_calls, supported_link_calls
from gpu_exporter.catalogue import (
    BY_KEY,
    FAMILIES,
    METRICS,
    SWITCH_METRICS,
    UNIT_SUFFIXES,
    DcgmSource,
    NvmlSource,
    scaled,
)

REQUIRED = [
    "gpu_utilization_ratio",
    "gpu_memory_copy_utilization_ratio",
    "gpu_encoder_utilization_ratio",
    "gpu_decoder_utilization_ratio",
    "gpu_memory_total_bytes",
    "gpu_memory_used_bytes",
    "gpu_memory_free_bytes",
    "gpu_memory_reserved_bytes",
    "gpu_temperature_celsius",
    "gpu_memory_temperature_celsius",
    "gpu_power_watts",
    "gpu_power_limit_watts",
    "gpu_energy_joules_total",
    "gpu_sm_clock_hertz",
    "gpu_memory_clock_hertz",
    "gpu_sm_clock_max_hertz",
    "gpu_memory_clock_max_hertz",
    "gpu_performance_state",
    "gpu_fan_speed_ratio",
    "gpu_pcie_link_generation",
    "gpu_pcie_link_generation_max",
    "gpu_pcie_link_width",
    "gpu_pcie_link_width_max",
    "gpu_pcie_replay_errors_total",
    "gpu_pcie_transmit_bytes_per_second",
    "gpu_pcie_receive_bytes_per_second",
    "gpu_utilization_seconds_total",
]


def test_required_names_are_in_the_catalogue() -> None:
    assert sorted(set(REQUIRED) - set(BY_KEY)) == []


def test_keys_are_unique_and_families_agree() -> None:
    assert len(BY_KEY) == len(METRICS) + len(SWITCH_METRICS)
    for name, rows in FAMILIES.items():
        assert len({(row.kind, row.unit, row.collector, row.help, row.mig) for row in rows}) == 1, name
        assert len({tuple(label for label, _ in row.variant) for row in rows}) == 1, name
    compat = [spec.compat_name for spec in METRICS if spec.compat_name]
    assert len(compat) == len(set(compat))


@pytest.mark.parametrize("spec", (*METRICS, *SWITCH_METRICS), ids=lambda spec: spec.key)
def test_name_carries_its_base_unit(spec: object) -> None:
    from gpu_exporter.catalogue import MetricSpec

    assert isinstance(spec, MetricSpec)
    assert spec.name.startswith("gpu_")
    assert spec.name.endswith("_total") == (spec.kind == "counter"), "_total exactly on counters"
    stem = spec.name.removesuffix("_total")
    if spec.unit:
        assert stem.endswith("_" + spec.unit)
        assert any(spec.name.endswith(suffix) for suffix in UNIT_SUFFIXES)
    else:
        # Dimensionless: must not pretend to a unit either.
        assert not any(stem.endswith(s) for s in ("_percent", "_milliwatts", "_mhz", "_kb", "_mib", "_ms"))
    for banned in ("percent", "milli", "mhz", "kib", "mib"):
        assert banned not in spec.name


@pytest.mark.parametrize("spec", (*METRICS, *SWITCH_METRICS), ids=lambda spec: spec.key)
def test_help_names_the_source(spec: object) -> None:
    from gpu_exporter.catalogue import MetricSpec

    assert isinstance(spec, MetricSpec)
    if spec.nvml is not None:
        assert spec.nvml.call in spec.help
    if spec.dcgm is not None and spec.dcgm.call:
        assert f"DCGM {spec.dcgm.call}" in spec.help
    elif spec.dcgm is not None and spec.dcgm.links:
        # Every link's field id is named, in ranges: expand them and compare.
        named = spec.help.partition("DCGM ")[2]
        listed = set()
        for run in re.findall(r"(\d+)-(\d+)|(?<![-\d])(\d+)(?![-\d])", named.split("(links")[0]):
            low, high, single = run
            listed |= set(range(int(low), int(high) + 1)) if low else {int(single)}
        assert set(spec.dcgm.links) <= listed, sorted(set(spec.dcgm.links) - listed)
    elif spec.dcgm is not None:
        assert f"DCGM field {spec.dcgm.field_id}" in spec.help or (
            spec.variant and str(spec.dcgm.field_id) in spec.help.partition("DCGM fields")[2]
        )
    assert spec.nvml or spec.dcgm or spec.derive


def test_nvswitch_rows_are_read_every_cycle() -> None:
    """The DCGM backend reads switch rows from each cycle's fetch and keeps no slow-cadence values for them."""
    assert all(spec.every == 1 and spec.nvml is None and spec.dcgm is not None for spec in SWITCH_METRICS)


def test_per_link_dcgm_fields_are_distinct_and_cover_eighteen_links() -> None:
    """DCGM numbers per-link fields in four blocks (links 0-5, 6-11, 12-14, 15-17); a slip would read
    another link's or another type's counter."""
    fields = [spec.dcgm.links for spec in METRICS if spec.dcgm is not None and spec.dcgm.links]
    assert len(fields) == 4  # crc_data, replay, recovery, crc_flit
    assert all(len(links) == 18 for links in fields)
    flat = [field for links in fields for field in links]
    assert len(set(flat)) == len(flat)
    crc = next(
        spec.dcgm.links for spec in METRICS if spec.key == "gpu_nvlink_errors_total{type=crc_data}" and spec.dcgm
    )
    assert (crc[0], crc[5], crc[6], crc[11], crc[12], crc[14], crc[15], crc[17]) == (
        410,
        415,
        457,
        462,
        416,
        418,
        484,
        486,
    )


def test_every_nvml_source_has_a_reader() -> None:
    readable, per_link, per_process = supported_calls(), supported_link_calls(), supported_process_calls()
    missing = [
        (spec.name, spec.nvml.call, spec.nvml.selector)
        for spec in METRICS
        if spec.nvml is not None
        and (spec.nvml.call, spec.nvml.selector)
        not in (per_link if spec.per_link else per_process if "process" in spec.entities else readable)
    ]
    assert missing == []


@pytest.mark.parametrize(
    ("name", "raw", "expected"),
    [
        ("gpu_power_watts", 312450, 312.45),  # mW → W
        ("gpu_power_limit_watts", 700000, 700.0),
        ("gpu_energy_joules_total", 123456789012, 123456789.012),  # mJ → J
        ("gpu_sm_clock_hertz", 1980, 1.98e9),  # MHz → Hz
        ("gpu_memory_clock_max_hertz", 2619, 2.619e9),
        ("gpu_utilization_ratio", 97, 0.97),  # % → ratio
        ("gpu_fan_speed_ratio", 100, 1.0),
        ("gpu_pcie_transmit_bytes_per_second", 123456, 126418944.0),  # KB/s (1024) → B/s
        ("gpu_memory_total_bytes", 85520809984, 85520809984.0),  # already bytes
        ("gpu_temperature_celsius", 71, 71.0),
    ],
)
def test_nvml_conversion_to_base_units(name: str, raw: float, expected: float) -> None:
    spec = BY_KEY[name]
    assert spec.nvml is not None
    assert scaled(raw, spec.nvml.scale) == expected  # exactly: the nearest float to the decimal value


@pytest.mark.parametrize(
    ("name", "raw", "expected"),
    [
        ("gpu_power_watts", 312.45, 312.45),  # DCGM reports W
        ("gpu_memory_used_bytes", 1024, 1073741824.0),  # DCGM reports MiB
        ("gpu_energy_joules_total", 5000, 5.0),  # mJ
        ("gpu_utilization_ratio", 50, 0.5),
    ],
)
def test_dcgm_conversion_to_base_units(name: str, raw: float, expected: float) -> None:
    spec = BY_KEY[name]
    assert isinstance(spec.dcgm, DcgmSource)
    assert scaled(raw, spec.dcgm.scale) == expected


def test_compat_scale_inverts_to_dcgm_exporter_units() -> None:
    # dcgm-exporter shows MiB, %, MHz, mJ: base value × compat_scale gives those back.
    assert scaled(1073741824, BY_KEY["gpu_memory_used_bytes"].compat_scale) == 1024
    assert scaled(0.97, BY_KEY["gpu_utilization_ratio"].compat_scale) == pytest.approx(97)
    assert scaled(1.98e9, BY_KEY["gpu_sm_clock_hertz"].compat_scale) == 1980
    assert scaled(5.0, BY_KEY["gpu_energy_joules_total"].compat_scale) == 5000


def test_nvml_source_default_scale_is_identity() -> None:
    assert NvmlSource("nvmlDeviceGetPowerUsage").scale == Fraction(1)


@pytest.mark.parametrize("raw", [1, 3, 7, 612345, 455120, 98007, 699999, 123456789012, 777000000123])
def test_scaling_rounds_once(raw: int) -> None:
    for scale in (Fraction(1, 1000), Fraction(1, 100), Fraction(10**6), Fraction(1024), Fraction(1, 1024 * 1024)):
        assert scaled(raw, scale) == float(Fraction(raw) * scale)
