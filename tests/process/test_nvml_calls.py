"""NVML calls per GPU per interval, counted with the fake's trace (FAKE_NVML_TRACE).

The exporter samples at 1 s on the 4-GPU H100 scenario (NVLink collector on); the trace is cut
after start-up (discovery and the first, every-row cycle), right after a cycle is published, and
counted over the following cycles (each seen published: wait_cycles).
One ``nvmlDeviceGetMemoryInfo_v2`` per GPU per cycle marks the cycles (utilisation now comes from the
driver's sample buffer). A regression in batching
(a value read with its own call where NVML offers it as a field) fails here.
"""

from __future__ import annotations

import collections
from pathlib import Path

from tests.harness import REPO, SCENARIOS, start, wait_cycles

#: Per GPU per steady 1 s interval, one process per GPU. Before batching (one call per value, link
#: and selector; pynvml's two-call process lists) gpu0, with 2 NVLinks, made 48.5; after, 17.4; 18.4 with
#: the video clock (DCGM_FI_DEV_VIDEO_CLOCK), which NVML offers only as a call; 18.6 with the thermal
#: margin (nvmlDeviceGetMarginTemperature, every 5th cycle). nvitop-exporter makes 19.0. 20.8 with the
#: driver's sample buffers: one nvmlDeviceGetSamples per kept sampling type (GPU, memory, encoder and
#: decoder utilisation, board power: 5) replaces three point calls (utilisation rates, encoder, decoder)
#: and adds the power peak, for every driver sample instead of one point a second (a longer read
#: interval, which the buffers allow, divides all of them). The clock buffers are empty (as an H200's):
#: asked once, the SM and memory clocks keep their point calls; where a driver keeps them, 7 types. 21.8
#: with the profiling collector on by default: gpu0 offers GPM, one nvmlGpmSampleGet per read (its
#: nvmlGpmMetricsGet names no GPU in the trace).
MAX_CALLS_PER_GPU = 22.0
SAMPLING_TYPES = 7
FIELD_CALLS_PER_GPU = 1  # every field-backed value in one nvmlDeviceGetFieldValues


def _per_gpu_calls(lines: list[str]) -> dict[str, collections.Counter[str]]:
    per_gpu: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in lines:
        symbol, _, rest = line.partition(" ")
        gpu = rest.partition(" ")[0]  # nvmlDeviceGetSamples lines go on with "type=T n=N"
        if gpu.startswith("gpu") and not symbol.startswith("nvmlEventSetWait"):
            per_gpu[gpu][symbol] += 1
    return per_gpu


def test_calls_per_gpu_per_interval(fakenvml_dir: Path, tmp_path: Path) -> None:
    scenario = tmp_path / "scenario.scn"  # a process on every GPU: list calls answer in one call, not two
    scenario.write_text(
        (SCENARIOS / "h100x4.scn").read_text()
        + "".join(f"gpu{i}.process.0.pid = {4000 + i}\ngpu{i}.process.0.used_memory = 1048576\n" for i in range(4))
    )
    exporter = start(
        fakenvml_dir, scenario, tmp_path, "--collect-interval", "1s", "--collector.nvlink",
        trace=True, wait_for="/readyz",
    )  # fmt: skip
    try:
        assert exporter.trace_path is not None
        wait_cycles(exporter, 1)  # the second cycle published: cut between cycles
        exporter.trace_path.write_bytes(b"")  # the fake appends (O_APPEND): later calls land in the empty file
        wait_cycles(exporter, 4)  # and read right after the fourth cycle since
        lines = exporter.trace_path.read_text().splitlines()
    finally:
        exporter.stop()
    per_gpu = _per_gpu_calls(lines)
    assert sorted(per_gpu) == ["gpu0", "gpu1", "gpu2", "gpu3"], per_gpu
    for gpu, symbols in per_gpu.items():
        cycles = symbols["nvmlDeviceGetMemoryInfo_v2"]
        assert cycles >= 3, (gpu, symbols)
        per_interval = sum(symbols.values()) / cycles
        report = ", ".join(f"{name} {count / cycles:g}" for name, count in symbols.most_common())
        print(f"{gpu}: {per_interval:.1f} NVML calls per interval ({report})")
        assert symbols["nvmlDeviceGetFieldValues"] / cycles <= FIELD_CALLS_PER_GPU, report
        assert per_interval <= MAX_CALLS_PER_GPU, report
        # One call per symbol per interval; nvmlDeviceGetClockInfo takes the clock as an argument (sm, memory,
        # video), nvmlDeviceGetSamples the sampling type.
        per_call = {"nvmlDeviceGetClockInfo": 3, "nvmlDeviceGetSamples": SAMPLING_TYPES}
        assert all(count <= cycles * per_call.get(name, 1) for name, count in symbols.items()), report


def test_unknown_field_falls_back_and_unsupported_spoils_nothing(fakenvml_dir: Path, tmp_path: Path) -> None:
    """gpu3's driver does not know the power-average field id: power comes from its own call, every
    cycle, and the batch still serves the rest. gpu2's ECC totals are not supported: checked once
    against the call, then left to the memo, while the other fields of its batch keep their values."""
    scenario = tmp_path / "scenario.scn"
    scenario.write_text(
        (SCENARIOS / "h100x4.scn").read_text()
        + "gpu3.fields.unknown = 185\ngpu2.error.nvmlDeviceGetTotalEccErrors = NOT_SUPPORTED\n"
    )
    exporter = start(
        fakenvml_dir, scenario, tmp_path, "--collect-interval", "1s", "--metrics.detail=full", trace=True,
        wait_for="/readyz",
    )  # fmt: skip
    try:
        assert exporter.trace_path is not None
        wait_cycles(exporter, 1)
        exporter.trace_path.write_bytes(b"")
        wait_cycles(exporter, 3)
        lines = exporter.trace_path.read_text().splitlines()
        text = exporter.metrics()
    finally:
        exporter.stop()
    per_gpu = _per_gpu_calls(lines)
    cycles = per_gpu["gpu3"]["nvmlDeviceGetMemoryInfo_v2"]
    assert cycles >= 2
    assert per_gpu["gpu3"]["nvmlDeviceGetPowerUsage"] == cycles  # the fallback, remembered
    assert per_gpu["gpu3"]["nvmlDeviceGetFieldValues"] == cycles  # ... and the batch for the rest
    assert per_gpu["gpu0"]["nvmlDeviceGetPowerUsage"] == 0
    assert per_gpu["gpu2"]["nvmlDeviceGetTotalEccErrors"] == 0  # unsupported: not asked again each cycle
    assert 'gpu_power_watts{gpu="3",uuid="GPU-4a1e0c2d-3b7f-4c3a-9e21-5d8f6a0b1c33"} 699.999' in text
    assert 'gpu_ecc_errors_total{counter="volatile",gpu="2"' not in text
    assert 'gpu_clock_throttle_seconds_total{gpu="2",reason="low_utilization",' in text
    assert 'gpu_power_watts{gpu="2",' in text


def test_discovery_reads_what_only_dcgm_exporter_names_show_only_under_them(fakenvml_dir: Path, tmp_path: Path) -> None:
    """NVLink P2P status between every pair of GPUs (N × (N - 1) calls), the platform's placement and
    the confidential-compute mode appear only in dcgm-exporter's series: discovery under gpu-exporter's
    own names does not ask for them; with a counters list (dcgm-exporter's names) it does."""

    def calls(name: str, *flags: str) -> collections.Counter[str]:
        workdir = tmp_path / name
        workdir.mkdir()
        exporter = start(
            fakenvml_dir, SCENARIOS / "h100x4.scn", workdir, "--collect-interval", "1h", *flags,
            trace=True, wait_for="/readyz",
        )  # fmt: skip
        try:  # ready: discovery and the first cycle are done
            assert exporter.trace_path is not None
            lines = exporter.trace_path.read_text().splitlines()
        finally:
            exporter.stop()
        return collections.Counter(line.partition(" ")[0] for line in lines)

    native = calls("native")
    compat = calls("compat", "-f", str(REPO / "tests" / "fixtures" / "default-counters.csv"))
    for symbol, expected in (
        ("nvmlDeviceGetP2PStatus", 4 * 3),
        ("nvmlDeviceGetPlatformInfo", 4),
        ("nvmlSystemGetConfComputeState", 1),
    ):
        assert (native[symbol], compat[symbol]) == (0, expected), symbol
