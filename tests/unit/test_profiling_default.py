"""Profiling on by default (issue 37), in process: the profiling collector is on unless switched off by
flag, environment or config file; in dcgm-exporter mode the counters list decides unless it was switched
explicitly; and a GPM sample refused because another profiler holds the counters (or they are restricted
to administrators) is asked again with backoff, 5 s doubling up to 10 minutes, on a fake clock, against the
simulated NVML's own IN_USE fault and its call trace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pynvml
import pytest

from gpu_exporter.backends.nvml.gpm import HELD_RETRY_MAX_SECONDS, HELD_RETRY_SECONDS, GpmSampler
from gpu_exporter.cli import parse_settings, with_profiling_for
from gpu_exporter.compat.counters import Counter, parse
from tests.unit.simnvml import simulated, traced_calls, write_scenario

GPU = "gpu0.name = NVIDIA H100 80GB HBM3\ngpu0.gpm_supported = 1\ngpu0.gpm.sm_util = 35\n"
HELD = GPU + "gpu0.error.nvmlGpmSampleGet = IN_USE\n"


def test_profiling_is_on_by_default_and_each_form_turns_it_off(tmp_path: Path) -> None:
    assert "profiling" in parse_settings([], {}).collectors
    assert "profiling" not in parse_settings(["--no-collector.profiling"], {}).collectors
    assert "profiling" not in parse_settings([], {"GPU_EXPORTER_COLLECTOR_PROFILING": "false"}).collectors
    config = tmp_path / "config.yml"
    config.write_text("collectors:\n  profiling: false\n")
    assert "profiling" not in parse_settings(["--config.file", str(config)], {}).collectors
    assert "profiling" in parse_settings(["--collector.profiling"], {}).collectors_chosen


def _counters(*fields: str) -> tuple[Counter, ...]:
    return parse("".join(f"{field}, gauge, help\n" for field in fields), "test.csv")


def test_in_dcgm_exporter_mode_the_counters_list_decides_unless_switched() -> None:
    default = parse_settings(["--metric-names", "dcgm-exporter"], {})
    without = with_profiling_for(_counters("DCGM_FI_DEV_GPU_TEMP"), default)
    assert "profiling" not in without.collectors  # nothing takes the counters for fields nobody exports
    assert "profiling" in with_profiling_for(_counters("DCGM_FI_PROF_SM_ACTIVE"), default).collectors
    on = parse_settings(["--metric-names", "dcgm-exporter", "--collector.profiling"], {})
    assert "profiling" in with_profiling_for(_counters("DCGM_FI_DEV_GPU_TEMP"), on).collectors
    off = parse_settings(["--metric-names", "dcgm-exporter", "--no-collector.profiling"], {})
    assert "profiling" not in with_profiling_for(_counters("DCGM_FI_PROF_SM_ACTIVE"), off).collectors


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_held_counters_are_asked_again_with_backoff(tmp_path: Path) -> None:
    scenario, trace = tmp_path / "gpm.scn", tmp_path / "trace"
    write_scenario(scenario, HELD)
    clock = _Clock()
    with simulated(scenario, trace):
        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            sampler = GpmSampler(clock)

            def read() -> dict[str, Any]:
                return sampler.read("gpu0", lambda sample: pynvml.nvmlGpmSampleGet(handle, sample), ["sm_util"])

            def samples_taken() -> int:
                return traced_calls(trace).count("nvmlGpmSampleGet")

            tries = []
            for _ in range(4):  # refused, then asked again after 5, 10 and 20 s, never in between
                with pytest.raises(pynvml.NVMLError_InUse):
                    read()
                tries.append(samples_taken())
                clock.now += 1.0  # reads in between raise the same refusal without a call
                with pytest.raises(pynvml.NVMLError_InUse):
                    read()
                assert samples_taken() == tries[-1]
                clock.now += min(HELD_RETRY_SECONDS * 2 ** len(tries[:-1]), HELD_RETRY_MAX_SECONDS) - 1.0
            assert tries == [1, 2, 3, 4]
            clock.now += HELD_RETRY_MAX_SECONDS  # the longest wait is 10 minutes
            write_scenario(scenario, GPU)  # the other profiler let go
            assert read() == {}  # a first sample again
            clock.now += 5.0
            assert read()["sm_util"] == pytest.approx(35.0)  # and from then on every read
            assert samples_taken() == 6
            sampler.close()
        finally:
            pynvml.nvmlShutdown()


def test_unsupported_is_no_refusal_to_back_off_from(tmp_path: Path) -> None:
    """NOT_SUPPORTED (a pre-Hopper GPU) is the unsupported memo's to retry: GPM itself asks every time."""
    scenario, trace = tmp_path / "gpm.scn", tmp_path / "trace"
    write_scenario(scenario, "gpu0.name = NVIDIA A100-SXM4-80GB\n")
    with simulated(scenario, trace):
        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            sampler = GpmSampler(_Clock())
            for _ in range(3):
                with pytest.raises(pynvml.NVMLError_NotSupported):
                    sampler.read("gpu0", lambda sample: pynvml.nvmlGpmSampleGet(handle, sample), ["sm_util"])
            assert traced_calls(trace).count("nvmlGpmSampleGet") == 3
            sampler.close()
        finally:
            pynvml.nvmlShutdown()
