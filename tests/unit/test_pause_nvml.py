"""A pause on the NVML backend (issue 37), in process: the unmodified nvidia-ml-py over the simulated
library (the test fake's scenario format and call trace) under a sampler stepped by hand, the pause on a
fake clock. A profiling pause makes no GPM call from its first cycle on and its series go; resume brings
them back from a fresh sample. A full pause calls nvmlShutdown and then no NVML function at all (the Xid
listener stopped first) while /metrics keeps the exporter's own series with backend_up 0; when it ends on
its own every GPU is back with its counters intact."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_exporter.assemble import bare_sampler
from gpu_exporter.backends.nvml import NvmlBackend
from gpu_exporter.catalogue import DEFAULT_COLLECTORS, enabled_specs
from gpu_exporter.sampling.pause import Pauses
from gpu_exporter.sampling.sampler import Sampler
from tests.harness import SCENARIOS, samples, value
from tests.unit.simnvml import simulated, traced_calls

INTERVAL = 1.0
Parsed = dict[str, dict[frozenset[tuple[str, str]], float]]


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Run:
    def __init__(self, trace: Path) -> None:
        self.trace = trace
        self.clock = _Clock()
        self.pauses = Pauses(self.clock)
        specs = enabled_specs(DEFAULT_COLLECTORS)
        self.sampler: Sampler = bare_sampler(
            NvmlBackend(compat_identity=False), specs, INTERVAL, "test", clock=self.clock, pauses=self.pauses,
        )  # fmt: skip

    def cycle(self) -> Parsed:
        self.clock.now += INTERVAL
        return samples(self.sampler.run_cycle().rendered.text.decode())

    def calls(self) -> list[str]:
        return traced_calls(self.trace)


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Run]:
    trace = tmp_path / "trace"
    with simulated(SCENARIOS / "h100x4.scn", trace):
        started = Run(trace)
        try:
            yield started
        finally:
            started.sampler.stop()


def _gpm(calls: list[str]) -> list[str]:
    return [call for call in calls if call.startswith("nvmlGpm")]


def test_a_profiling_pause_stops_every_gpm_call_until_resumed(run: Run) -> None:
    run.cycle()
    assert value(run.cycle(), "gpu_sm_active_ratio", gpu="0") == 0.35
    run.pauses.request("profiling", 600, "test")
    first = run.cycle()  # the pause's first cycle: buffers freed, no sample taken
    assert value(first, "gpu_sm_active_ratio", gpu="0") is None
    mark = len(run.calls())
    for _ in range(3):
        paused = run.cycle()
        assert value(paused, "gpu_sm_active_ratio", gpu="0") is None  # absent, never stale or 0
        assert value(paused, "gpu_temperature_celsius", gpu="0") is not None
    later = run.calls()[mark:]
    assert later and _gpm(later) == []  # reads went on, without a single GPM call
    assert value(paused, "gpu_exporter_paused", scope="profiling") == 1
    assert value(paused, "gpu_exporter_backend_up") == 1
    run.pauses.resume()
    run.cycle()
    back = run.cycle()
    assert value(back, "gpu_sm_active_ratio", gpu="0") == 0.35
    assert value(back, "gpu_exporter_paused", scope="profiling") == 0


def test_a_full_pause_makes_no_nvml_call_until_it_ends(run: Run) -> None:
    run.cycle()
    before = run.cycle()
    energy = value(before, "gpu_energy_joules_total", gpu="0")
    busy = value(before, "gpu_utilization_seconds_total", gpu="0")
    assert energy is not None and busy is not None
    run.pauses.request("full", 300, "test")
    for _ in range(3):  # the close waits for no read; the Xid listener's stop takes up to two of its waits
        paused = run.cycle()
        if not run.sampler.snapshot.stats.backend_up:
            break
    calls = run.calls()
    assert calls[-1] == "nvmlShutdown" and value(paused, "gpu_exporter_backend_up") == 0
    for _ in range(5):
        paused = run.cycle()
        assert value(paused, "gpu_exporter_backend_up") == 0
    assert run.calls() == calls  # not one NVML call after nvmlShutdown
    assert value(paused, "gpu_exporter_paused", scope="full") == 1
    assert not any(name.startswith("gpu_") and not name.startswith("gpu_exporter_") for name in paused)
    [info] = paused["gpu_exporter_backend_info"]
    assert dict(info)["reason"] == "paused" and dict(info)["until"].endswith("Z")
    assert "full pause until" in (run.sampler.snapshot.stats.backend_problem or "")
    run.clock.now += 300  # it ends on its own
    run.cycle()
    assert run.calls()[len(calls)].startswith("nvmlInit")
    back = run.cycle()
    assert value(back, "gpu_up", gpu="0") == 1 and value(back, "gpu_exporter_backend_up") == 1
    assert (value(back, "gpu_energy_joules_total", gpu="0") or 0) >= energy  # counters intact
    assert (value(back, "gpu_utilization_seconds_total", gpu="0") or 0) >= busy
    assert value(back, "gpu_power_limit_watts", gpu="0") is not None  # slow rows asked again at once
