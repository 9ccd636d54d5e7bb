"""The process-tier tests of tests/unit/test_nvml_samples.py (split by what they start)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness import samples, start, value, wait_cycles, wait_published
from tests.unit.test_nvml_samples import SCENARIO, WINDOW, _scrape, _start


@pytest.mark.parametrize("backend", ["fake", "simulate"])
def test_sub_second_dips_are_counted_from_the_drivers_samples(backend: str, fakenvml_dir: Path, tmp_path: Path) -> None:
    exporter = _start(backend, fakenvml_dir, tmp_path)
    try:
        wait_cycles(exporter, 2)  # two reads after the first: the buffers' values are all there
        first_at, first = _scrape(exporter)
        wait_published(exporter, first_at + WINDOW, timeout=WINDOW + 30)  # the window, in the exporter's cycles
        last_at, last = _scrape(exporter)
        log = exporter.log()
    finally:
        exporter.stop()
    elapsed = last_at - first_at
    assert elapsed > WINDOW - 1.5

    def rate(key: str) -> float:
        before, after = first[key], last[key]
        assert before is not None and after is not None, key
        return (after - before) / elapsed

    # One 200 ms driver sample lies wholly in each 0.3 s dip: 0.08 of the time below 10 %, while held.
    assert 0.06 <= rate("gpu_utilization_low_seconds_total:0") <= 0.10
    assert rate("gpu_utilization_high_seconds_total:0") == 0.0
    # Busy time integrates every sample: (22 x 0.70 + 3 x 0.05) / 25 = 0.622, not the 0.70 of most points.
    assert 0.60 <= rate("gpu_utilization_seconds_total:0") <= 0.645
    assert 0.05 <= (last["gpu_utilization_ratio:0"] or 0) <= 0.7  # the mean of the read's five samples
    # GPU 1 keeps no utilisation buffer: the point read, every read, by the old rule.
    assert last["gpu_utilization_ratio:1"] == 0.95
    assert 0.9 <= rate("gpu_utilization_high_seconds_total:1") <= 1.05
    assert rate("gpu_utilization_low_seconds_total:1") == 0.0
    assert 0.85 <= rate("gpu_utilization_seconds_total:1") <= 1.0
    assert "GPU 1 (Tesla K80): the driver keeps no samples of type 1" in log
    # Peak power: a 650 W step of 0.1 s in every 0.4 s. The SM clock drops to 1410 MHz for 0.6 s in every
    # 1.2 s while busy; gpu2's 1005 MHz comes only while it idles at 5 %, so it has no busy minimum.
    assert first["gpu_power_peak_watts:0"] == last["gpu_power_peak_watts:0"] == 650.0
    assert first["gpu_sm_clock_busy_min_hertz:0"] == last["gpu_sm_clock_busy_min_hertz:0"] == 1410e6
    assert last["gpu_sm_clock_hertz:0"] in (1980e6, 1410e6)  # the latest sample
    assert last["gpu_sm_clock_hertz:2"] == 1005e6 and last["gpu_sm_clock_busy_min_hertz:2"] is None
    assert rate("gpu_utilization_low_seconds_total:2") > 0.95
    # gpu1: no power key, no buffers of utilisation (listed) or clocks (empty): point reads.
    assert last["gpu_power_peak_watts:1"] is None and last["gpu_sm_clock_busy_min_hertz:1"] is None
    assert last["gpu_sm_clock_hertz:1"] == 823e6
    assert "GPU 1 (Tesla K80): the driver keeps no samples of type 5 (its buffer is empty)" in log
    if backend == "fake":
        assert exporter.trace_path is not None
        # "SYMBOL gpuN" of each line (nvmlDeviceGetSamples lines go on with "type=T n=N")
        trace = [" ".join(line.split()[:2]) for line in exporter.trace_path.read_text().splitlines()]
        reads = trace.count("nvmlDeviceGetComputeRunningProcesses_v3 gpu0")
        assert reads >= WINDOW
        # gpu0's utilisation and clocks come from the buffers: at most the first read (no sample
        # yet) used the point calls; one nvmlDeviceGetSamples per buffered type per read (4), plus
        # one NOT_SUPPORTED answer each for the encoder and decoder (remembered), and the power buffer (5).
        assert trace.count("nvmlDeviceGetUtilizationRates gpu0") == 0  # the rings are full from the start
        assert trace.count("nvmlDeviceGetClockInfo gpu0") <= 1  # the video clock (absent here), once
        assert 5 * reads <= trace.count("nvmlDeviceGetSamples gpu0") <= 5 * reads + 2 + 5
        # gpu1: the memory utilisation buffer every read; the others asked once (clock: empty, utilisation:
        # not supported, encoder, decoder, power, memory clock: no key)
        assert reads <= trace.count("nvmlDeviceGetSamples gpu1") <= reads + 6 + 6
        # gpu1: the utilisation type answered NOT_SUPPORTED once, then the point call every read.
        assert trace.count("nvmlDeviceGetUtilizationRates gpu1") >= reads - 1


def test_at_the_default_pace_every_driver_sample_is_still_counted(fakenvml_dir: Path, tmp_path: Path) -> None:
    """Without --collect-interval the NVML backend reads every 5 s (its fast values come from the
    driver's buffers, which keep 14 s of utilisation samples): the dips and the busy time come out as
    at 1 s, from a fifth of the reads."""
    scenario = tmp_path / "dips.scn"
    scenario.write_text(SCENARIO)
    exporter = start(fakenvml_dir, scenario, tmp_path, pin_interval=False)
    try:
        parsed = samples(exporter.metrics())
        assert value(parsed, "gpu_exporter_collect_interval_seconds") == 5.0
        assert "sampling every 5s" in exporter.log()
        first_at, first = _scrape(exporter)
        wait_published(exporter, first_at + 10.0)  # two more reads: they come every 5 s
        last_at, last = _scrape(exporter)
    finally:
        exporter.stop()
    elapsed = last_at - first_at
    for key, low, high in (
        ("gpu_utilization_low_seconds_total:0", 0.06, 0.10),
        ("gpu_utilization_seconds_total:0", 0.60, 0.645),
    ):
        before, after = first[key], last[key]
        assert before is not None and after is not None, key
        assert low <= (after - before) / elapsed <= high, key
    # The gauge says what the 5 s were: the mean of their 25 samples (two whole cycles, 0.622 give or take
    # the sample at either end), never the 0.70, 0.37 or 0.05 of the newest sample alone.
    assert 0.58 <= (last["gpu_utilization_ratio:0"] or 0) <= 0.665
