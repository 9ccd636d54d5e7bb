"""gpu_utilization_ratio as the interval's truth (issue 37), in process: where the backend hands over the
driver's samples since the previous read (NVML's sample buffer), the gauge is their mean, so a load busy
one sample in five reads 0.2 whatever the read's phase, rather than the 0 or 1 of the newest sample; a
read that brought no new sample keeps the newest; the raw value, which dcgm-exporter's names render
(DCGM_FI_DEV_GPU_UTIL, as DCGM serves it), stays the driver's newest sample; the plan asks for the samples."""

from __future__ import annotations

from gpu_exporter import model
from gpu_exporter.backends.base import RawReading
from gpu_exporter.catalogue import DEFAULT_COLLECTORS, enabled_specs, keys
from gpu_exporter.sampling.convert import convert
from gpu_exporter.sampling.memo import UnsupportedMemo
from gpu_exporter.sampling.plan import Plan

GPU = model.gpu(0, "GPU-0000")
UTIL = keys.UTILIZATION


def _read(newest: float, samples: tuple[float, ...]) -> tuple[float, float]:
    """(value, raw) of the utilisation row from one NVML read with these samples (percent, 0.2 s apart)."""
    reading = RawReading({GPU: {UTIL: newest}})
    if samples:
        reading.samples[GPU] = {UTIL: tuple((1000.0 + 0.2 * i, value) for i, value in enumerate(samples))}
    out = convert(reading, "nvml", UnsupportedMemo(), keep_raw=True)
    return out.values[GPU][UTIL], out.raw[GPU][UTIL]


def test_the_gauge_is_the_mean_of_the_samples_since_the_previous_read() -> None:
    # A periodic load: busy (100 %) one 200 ms sample in five. Whatever the read's phase, the mean is 0.2.
    for phase in range(5):
        load = tuple(100.0 if (i + phase) % 5 == 0 else 0.0 for i in range(25))
        value, raw = _read(load[-1], load)
        assert value == 0.2, phase
        assert raw == load[-1]  # dcgm-exporter's DCGM_FI_DEV_GPU_UTIL: the newest sample, unchanged


def test_equal_samples_give_exactly_their_value_and_no_sample_keeps_the_newest() -> None:
    assert _read(97.0, (97.0,) * 25) == (0.97, 97.0)
    assert _read(64.0, ()) == (0.64, 64.0)  # reads faster than samples: nothing new
    # An implausible sample (above 100 %) is no part of the mean.
    assert _read(40.0, (20.0, 250.0, 40.0)) == (0.3, 40.0)


def test_other_buffered_rows_keep_the_newest_sample() -> None:
    key = "gpu_sm_clock_hertz"
    reading = RawReading({GPU: {key: 1410.0}})
    reading.samples[GPU] = {key: ((1000.0, 1980.0), (1000.2, 1410.0))}
    assert convert(reading, "nvml", UnsupportedMemo()).values[GPU][key] == 1410e6


def test_the_plan_asks_for_the_utilisation_samples() -> None:
    assert UTIL in Plan(enabled_specs(DEFAULT_COLLECTORS), "nvml", 5.0).sampled
