"""The convert stage in process: raw vendor values become base units by each row's exact scale (or
its flag bit, or NVML's encoded bit error rate); driver sentinels, values outside a row's minimum and
bound, and parts above their whole are dropped and counted, never exported as 0; every answer and
every "unsupported" goes to the memo. No process, no clock: a read is a plain ``RawReading``."""

from __future__ import annotations

import math
from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from gpu_exporter import model
from gpu_exporter.backends.base import RawReading
from gpu_exporter.catalogue import BY_KEY
from gpu_exporter.sampling.convert import convert, group
from gpu_exporter.sampling.memo import UnsupportedMemo

GPU = model.gpu(0, "GPU-0000")
MIG = model.mig(0, "GPU-0000", 1, 0, "1g.10gb", "MIG-1111", "NVIDIA H100 MIG 1g.10gb")
LINK = model.nvlink(0, "GPU-0000", 3)
REASON = "gpu_clock_event_active{reason=%s}"


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _one(backend: str, values: dict[str, float], entity: model.Entity = GPU) -> tuple[dict[str, float], dict[str, int]]:
    out = convert(RawReading({entity: values}), backend, UnsupportedMemo())
    return out.values[entity], out.invalid


def test_each_backend_scales_into_base_units_exactly() -> None:
    nvml, invalid = _one("nvml", {
        "gpu_power_watts": 612345,  # mW
        "gpu_utilization_ratio": 97,  # %
        "gpu_sm_clock_hertz": 1980,  # MHz
        "gpu_memory_used_bytes": 10_737_418_240,  # bytes already
        "gpu_energy_joules_total": 123_456_789,  # mJ
    })  # fmt: skip
    assert invalid == {}
    assert nvml == {
        "gpu_power_watts": 612.345,
        "gpu_utilization_ratio": 0.97,
        "gpu_sm_clock_hertz": 1.98e9,
        "gpu_memory_used_bytes": 10_737_418_240.0,
        "gpu_energy_joules_total": 123_456.789,
    }
    dcgm, _ = _one("dcgm", {"gpu_power_watts": 612.345, "gpu_memory_used_bytes": 10240, "gpu_utilization_ratio": 97})
    assert dcgm == {
        "gpu_power_watts": 612.345,
        "gpu_memory_used_bytes": 10_737_418_240.0,
        "gpu_utilization_ratio": 0.97,
    }


def test_the_raw_value_behind_each_kept_value_is_kept_beside_it() -> None:
    out = convert(RawReading({GPU: {"gpu_power_watts": 612345, "gpu_temperature_celsius": 0xFFFFFFFF}}), "nvml",
                  UnsupportedMemo())  # fmt: skip
    assert out.raw[GPU] == {"gpu_power_watts": 612345}  # the dropped value has no raw either


@given(st.integers(min_value=0, max_value=2**40))
def test_any_milliwatt_reading_is_the_nearest_double_to_its_watts_or_dropped(raw: int) -> None:
    values, invalid = _one("nvml", {"gpu_power_watts": raw})
    watts = Fraction(raw, 1000)
    if raw in (0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF) or watts > 10_000:  # a sentinel, or above the watts bound
        assert values == {} and invalid == {"gpu_power_watts": 1}
    else:
        assert values == {"gpu_power_watts": float(watts)} and invalid == {}


def test_driver_sentinels_are_dropped_and_counted_not_exported() -> None:
    values, invalid = _one("nvml", {
        "gpu_utilization_ratio": 0xFFFFFFFF,
        "gpu_memory_used_bytes": 0xFFFFFFFFFFFFFFFF,
        "gpu_temperature_celsius": 41,
    })  # fmt: skip
    assert values == {"gpu_temperature_celsius": 41.0}
    assert invalid == {"gpu_utilization_ratio": 1, "gpu_memory_used_bytes": 1}


def test_plausibility_bounds_and_minimum_are_inclusive_and_per_row() -> None:
    assert BY_KEY["gpu_temperature_celsius"].bound == 200.0
    values, invalid = _one("nvml", {
        "gpu_temperature_celsius": 200,  # at the bound: kept
        "gpu_utilization_ratio": 100,  # 1.0, the ratio bound: kept
        "gpu_temperature_margin_celsius": -20,  # this row's minimum is below 0
        "gpu_memory_temperature_celsius": 644245923,  # a broken driver's reading
    })  # fmt: skip
    assert values == {"gpu_temperature_celsius": 200.0, "gpu_utilization_ratio": 1.0,
                      "gpu_temperature_margin_celsius": -20.0}  # fmt: skip
    assert invalid == {"gpu_memory_temperature_celsius": 1}
    values, invalid = _one("nvml", {"gpu_temperature_celsius": -1, "gpu_utilization_ratio": 101})
    assert values == {} and invalid == {"gpu_temperature_celsius": 1, "gpu_utilization_ratio": 1}


def test_invalid_values_are_counted_per_metric_across_entities() -> None:
    reading = RawReading({GPU: {"gpu_memory_used_bytes": -1.0}, MIG: {"gpu_memory_used_bytes": -5.0}})
    assert convert(reading, "nvml", UnsupportedMemo()).invalid == {"gpu_memory_used_bytes": 2}


def test_a_part_above_its_whole_is_dropped_and_counted() -> None:
    values, invalid = _one("dcgm", {
        "gpu_memory_total_bytes": 81559, "gpu_memory_used_bytes": 90000, "gpu_memory_free_bytes": 71319,
    })  # fmt: skip  # MiB
    assert values == {"gpu_memory_total_bytes": 81559 * 2**20, "gpu_memory_free_bytes": 71319 * 2**20}
    assert invalid == {"gpu_memory_used_bytes": 1}
    values, _ = _one("dcgm", {"gpu_memory_used_bytes": 90000})  # no total in this read: nothing to contradict
    assert values == {"gpu_memory_used_bytes": 90000 * 2**20}


def test_non_finite_values_are_never_kept() -> None:
    """Absence is absence: NaN and ±inf are no sample, whether or not the row has a bound."""
    assert BY_KEY["gpu_pcie_replay_errors_total"].bound is None and BY_KEY["gpu_compute_processes"].bound is None
    values, invalid = _one("nvml", {
        "gpu_power_watts": math.nan, "gpu_temperature_margin_celsius": -math.inf,
        "gpu_pcie_replay_errors_total": math.nan, "gpu_compute_processes": math.inf,
    })  # fmt: skip
    assert values == {}
    assert invalid == dict.fromkeys(
        ("gpu_power_watts", "gpu_temperature_margin_celsius", "gpu_pcie_replay_errors_total", "gpu_compute_processes"),
        1,
    )


def test_a_dcgm_flag_row_reads_its_bit() -> None:
    sources = {reason: BY_KEY[REASON % reason].dcgm for reason in ("gpu_idle", "power_cap", "hw_slowdown")}
    bits = {reason: source.bit for reason, source in sources.items() if source is not None}
    mask = bits["power_cap"] | bits["hw_slowdown"]
    values, _ = _one("dcgm", {REASON % reason: mask for reason in bits})
    assert values == {REASON % "gpu_idle": 0.0, REASON % "power_cap": 1.0, REASON % "hw_slowdown": 1.0}


def test_nvml_encoded_bit_error_rate_is_mantissa_times_ten_to_minus_exponent() -> None:
    values, _ = _one("nvml", {"gpu_nvlink_symbol_bit_error_ratio": (3 << 8) | 9})
    assert values == {"gpu_nvlink_symbol_bit_error_ratio": 3e-9}


def test_a_row_this_backend_has_no_source_for_is_ignored_not_invalid() -> None:
    assert BY_KEY["gpu_compute_processes"].source("dcgm") is None
    values, invalid = _one("dcgm", {"gpu_compute_processes": 2, "gpu_temperature_celsius": 40})
    assert values == {"gpu_temperature_celsius": 40.0} and invalid == {}


def test_an_entity_without_values_is_still_listed_in_order() -> None:
    out = convert(RawReading({GPU: {"gpu_temperature_celsius": 40}, LINK: {}, MIG: {}}), "nvml", UnsupportedMemo())
    assert list(out.values) == [GPU, LINK, MIG]
    assert out.values[LINK] == {} and out.values[MIG] == {}


def test_unsupported_pairs_go_to_the_memo_and_an_answer_takes_them_out() -> None:
    clock = _Clock()
    memo = UnsupportedMemo(60.0, clock)
    reading = RawReading({GPU: {"gpu_temperature_celsius": 40}})
    reading.unsupported.append((GPU, "gpu_power_watts", "nvmlDeviceGetPowerUsage is not supported"))
    out = convert(reading, "nvml", memo)
    assert "gpu_power_watts" not in out.values[GPU]  # absent, not 0
    assert not memo.asks(GPU.uid, "gpu_power_watts") and memo.asks(GPU.uid, "gpu_temperature_celsius")
    clock.now += 60.0
    assert memo.asks(GPU.uid, "gpu_power_watts")  # asked again after the retry interval ...
    convert(RawReading({GPU: {"gpu_power_watts": 300_000}}), "nvml", memo)  # ... and it answers
    assert not memo.remembers_any()
    clock.now += 1.0
    reading = RawReading({GPU: {}})
    reading.unsupported.append((GPU, "gpu_power_watts", "nvmlDeviceGetPowerUsage is not supported"))
    convert(reading, "nvml", memo)
    assert not memo.asks(GPU.uid, "gpu_power_watts")  # unsupported again: left alone for another minute


def test_group_names_the_device_an_entity_belongs_to() -> None:
    assert group(GPU) == "GPU 0 (GPU-0000)"
    assert group(MIG) == "GPU 0 (GPU-0000)" and group(LINK) == "GPU 0 (GPU-0000)"
    assert group(model.nvswitch_port(2, 17)) == "NVSwitch 2"


def test_driver_samples_are_scaled_and_bounded_like_the_value() -> None:
    """Every driver sample (``nvmlDeviceGetSamples``) comes out in base units by the row's exact scale, as
    the value does; a NaN, a driver sentinel and a value past the row's bound are dropped, in order."""
    utilisation = ((1.0, 97.0), (1.1, 40.0), (1.2, math.nan), (1.3, 4294967295.0), (1.4, 250.0), (1.5, 0.0))
    power = ((2.0, 612345.0), (2.1, 700000.0))
    reading = RawReading(
        {GPU: {"gpu_utilization_ratio": 0.0, "gpu_power_watts": 700000}},
        samples={GPU: {"gpu_utilization_ratio": utilisation, "gpu_power_watts": power}},
    )
    out = convert(reading, "nvml", UnsupportedMemo())
    assert out.samples[GPU]["gpu_utilization_ratio"] == ((1.0, 0.97), (1.1, 0.4), (1.5, 0.0))
    assert out.samples[GPU]["gpu_power_watts"] == ((2.0, 612.345), (2.1, 700.0))
