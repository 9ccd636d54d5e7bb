"""The driver's sample buffers on the NVML backend, out of process on the C fake and the simulator:
a GPU whose utilisation dips to 5 % for 0.3 s every 2.5 s while a process holds it shows those dips
in gpu_utilization_low_seconds_total although a 1 s point poller would miss most of them. The driver
reports the busy percent of each 200 ms (as an H200 does), so one sample per dip lies wholly in it:
0.08 of the time is counted below 10 % (the neighbouring samples, half in the dip, read 37 %).
gpu_utilization_seconds_total integrates every driver sample (the cycle's mean, 0.622, not the 0.70
most points show), and gpu_utilization_ratio is the mean of the samples since the previous read; a GPU
whose driver keeps no utilisation buffer falls back to the point read, as does a clock whose buffer is
empty (as an H200's are), each asked once; the utilisation point call is not made where the buffer
answers. The power peak is the highest 20 ms power sample; the SM clock
minimum counts only samples taken while busy."""

from __future__ import annotations

from pathlib import Path

from tests.harness import Exporter, samples, start, value

DIP = ["70"] * 22 + ["5"] * 3  # 0.1 s steps: 5 % for 0.3 s every 2.5 s
SCENARIO = f"""
gpu0.name = NVIDIA H100 80GB HBM3
gpu0.memory.total = 85520809984
gpu0.memory.used = 42949672960
gpu0.utilization.gpu = {",".join(DIP)}@0.1
gpu0.utilization.memory = 40
gpu0.clock.sm = 1980,1410@0.6
gpu0.samples.clocks = 1
gpu0.power.usage = 400000,400000,400000,650000@0.1
gpu0.clock.memory = 2619
gpu0.process.0.pid = 4242
gpu0.process.0.used_memory = 40000000000
gpu1.name = Tesla K80
gpu1.utilization.gpu = 95
gpu1.utilization.memory = 20
gpu1.samples.unsupported = gpu_utilization
gpu1.clock.sm = 823
gpu1.process.0.pid = 4243
gpu2.name = NVIDIA H100 80GB HBM3
gpu2.utilization.gpu = 5
gpu2.clock.sm = 1005
gpu2.samples.clocks = 1
gpu2.process.0.pid = 4244
"""
WINDOW = 15.0  # six dips


def _start(backend: str, fakenvml_dir: Path, tmp_path: Path) -> Exporter:
    scenario = tmp_path / "dips.scn"
    scenario.write_text(SCENARIO)
    debug = ("--log.level", "debug")  # a buffer the driver does not keep is a debug line (the point call answers)
    if backend == "fake":
        return start(fakenvml_dir, scenario, tmp_path, *debug, trace=True)
    return start(None, None, tmp_path, "--simulate", str(scenario), *debug, env={"LD_LIBRARY_PATH": ""})


def _scrape(exporter: Exporter) -> tuple[float, dict[str, float | None]]:
    parsed = samples(exporter.metrics())
    at = value(parsed, "gpu_exporter_last_sample_timestamp_seconds")
    assert at is not None
    names = ("gpu_utilization_low_seconds_total", "gpu_utilization_high_seconds_total",
             "gpu_utilization_seconds_total", "gpu_utilization_ratio", "gpu_power_peak_watts",
             "gpu_sm_clock_busy_min_hertz", "gpu_sm_clock_hertz")  # fmt: skip
    return at, {f"{name}:{gpu}": value(parsed, name, gpu=gpu) for name in names for gpu in "012"}


def point_poller_catches(phase: float, seconds: float = 60.0) -> float:
    """The share of the scenario's dips that a poller reading once a second (at ``phase``) sees."""
    dips = [(2.5 * n + 2.2, 2.5 * n + 2.5) for n in range(int(seconds / 2.5))]
    reads = [phase + k for k in range(int(seconds) + 1)]
    return sum(any(a <= t < b for t in reads) for a, b in dips) / len(dips)


def test_a_one_second_point_poller_misses_most_dips() -> None:
    """The premise: a 1 s poller sees 30 % of 0.3 s dips every 2.5 s on average over its phase, and
    at most half of them at its luckiest phase (and none at the unluckiest)."""
    caught = [point_poller_catches(phase / 100) for phase in range(100)]
    assert sum(caught) / len(caught) <= 0.3 + 1e-9 and max(caught) <= 0.5 and min(caught) == 0.0


def test_reductions_are_readable() -> None:
    """The catalogue's nvmlDeviceGetSamples selectors are the backend's reductions (readers.py lists them
    for the catalogue check, samples.py computes them)."""
    from gpu_exporter.backends.nvml.readers import supported_calls
    from gpu_exporter.backends.nvml.samples import CALL, REDUCED

    assert {selector for call, selector in supported_calls() if call == CALL} == set(REDUCED)
