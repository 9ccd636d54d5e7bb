"""The sampling pipeline's promises, whatever the backend: counters and memos survive a changing
device list, a vanished GPU is forgotten after a bounded time, a hung DCGM read stalls only its GPU,
and no vendor call runs on the sampler's thread.

Out of process on the fake NVML (the scenario file is rewritten while the exporter runs), and in
process on the DCGM fake (which records the name of every thread that called it)."""

from __future__ import annotations

import re
import time
from pathlib import Path

from tests.harness import SCENARIOS, samples, start, value
from tests.process.test_faults import rewrite, wait_for


def _without_gpu3(text: str) -> str:
    kept = (line for line in text.splitlines() if not line.startswith("gpu3."))
    return "".join(line + "\n" for line in kept).replace("device_count = 4", "device_count = 3")


def test_xid_counters_survive_another_gpu_leaving_and_rejoining(fakenvml_dir: Path, tmp_path: Path) -> None:
    scenario = tmp_path / "host.scn"
    full = (SCENARIOS / "h100x4.scn").read_text() + "gpu0.xid = 79@0.3\ngpu1.xid = 13@0.3\n"
    scenario.write_text(full)
    exporter = start(fakenvml_dir, scenario, tmp_path, "--collect-interval", "200ms")
    try:
        wait_for(exporter, lambda p: value(p, "gpu_xid_errors_total", gpu="1", xid="13") == 1)
        parsed = wait_for(exporter, lambda p: value(p, "gpu_xid_errors_total", gpu="0", xid="79") == 1)
        last = value(parsed, "gpu_xid_last_timestamp_seconds", gpu="0")
        assert last is not None
        rewrite(scenario, _without_gpu3(full))  # GPU 3 leaves the driver's device list
        gone = wait_for(exporter, lambda p: value(p, "gpu_up", gpu="3") == 0)
        deadline = time.monotonic() + 15  # re-enumerated (with backoff): the event listener is rebuilt
        while "vanished from the driver's device list" not in exporter.log() and time.monotonic() < deadline:
            time.sleep(0.1)
        gone = samples(exporter.metrics())
        rewrite(scenario, full)  # ... and comes back
        back = wait_for(
            exporter, lambda p: value(p, "gpu_up", gpu="3") == 1 and bool(value(p, "gpu_power_watts", gpu="3"))
        )
        for parsed in (gone, back):
            assert value(parsed, "gpu_xid_errors_total", gpu="0", xid="79") == 1
            assert value(parsed, "gpu_xid_errors_total", gpu="1", xid="13") == 1
            assert value(parsed, "gpu_xid_last_timestamp_seconds", gpu="0") == last
    finally:
        exporter.stop()
    assert "vanished from the driver's device list" in exporter.log() and "is back" in exporter.log()


def test_a_briefly_unsupported_call_comes_back_by_itself(fakenvml_dir: Path, tmp_path: Path) -> None:
    scenario = tmp_path / "host.scn"
    healthy = (SCENARIOS / "h100x4.scn").read_text()
    scenario.write_text(healthy + "gpu0.error.nvmlDeviceGetPowerUsage = NOT_SUPPORTED\n")
    exporter = start(
        fakenvml_dir, scenario, tmp_path, "--collect-interval", "200ms", "--unsupported.retry-interval", "1s",
        "--log.level", "debug",
    )  # fmt: skip
    try:
        hiccup = samples(exporter.metrics())
        assert value(hiccup, "gpu_power_watts", gpu="0") is None  # absent, not 0
        assert value(hiccup, "gpu_power_watts", gpu="1") is not None
        time.sleep(1.5)  # asked again every second, still unsupported: logged only once
        rewrite(scenario, healthy)  # the driver answers again
        back = wait_for(exporter, lambda p: value(p, "gpu_power_watts", gpu="0") == 612.345, timeout=10)
        assert value(back, "gpu_exporter_collector_success", collector="power") == 1
    finally:
        exporter.stop()
    log = exporter.log()
    # unsupported (a count, then at debug which), answers again
    assert log.count("GPU 0 (GPU-4a1e0c2d-0b7f-4c3a-9e21-5d8f6a0b1c00): ") == 3, log
    # the values missing, named (after any the GPU never has, such as the busy SM clock minimum)
    assert re.search(r"not supported here: [a-z_, ]*\bgpu_power_watts, ", log), log
    assert "answers again: gpu_power_watts" in log and "nvmlDeviceGetPowerUsage is not supported)" in log


def test_a_vanished_gpu_is_forgotten_after_the_retention(fakenvml_dir: Path, tmp_path: Path) -> None:
    scenario = tmp_path / "host.scn"
    full = (SCENARIOS / "h100x4.scn").read_text()
    scenario.write_text(full)
    exporter = start(fakenvml_dir, scenario, tmp_path, "--collect-interval", "200ms", "--gpu.vanished-retention", "2s")
    try:
        rewrite(scenario, _without_gpu3(full))
        down = wait_for(exporter, lambda p: value(p, "gpu_exporter_device_down", gpu="3", reason="vanished") == 1)
        assert value(down, "gpu_up", gpu="3") == 0
        assert value(down, "gpu_up", gpu="2") == 1
        started = time.monotonic()
        gone = wait_for(exporter, lambda p: not any(dict(labels).get("gpu") == "3" for labels in p["gpu_up"]))
        assert time.monotonic() - started >= 1.0  # kept as gpu_up 0 for the retention first
        assert not [name for name, series in gone.items() for labels in series if dict(labels).get("gpu") == "3"]
        assert value(gone, "gpu_up", gpu="0") == 1
    finally:
        exporter.stop()
    assert "forgotten" in exporter.log()
