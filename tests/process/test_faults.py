"""Fault signals, out of process on the fake NVML: Xid, lost and hung GPUs, no driver, absurd
values, throttling. Each scenario is small and fast; waits poll with a deadline instead of sleeping
a fixed time."""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
import pytest

from tests.harness import SCENARIOS, Exporter, Labels, samples, start, value, wait_cycles
from tests.harness import scrape_until as wait_for

Parsed = dict[str, dict[Labels, float]]


def rewrite(path: Path, text: str) -> None:
    """Replace a scenario file atomically (the fake never reads it half-written), with a modification
    time that surely differs from the old one."""
    old = path.stat().st_mtime_ns
    staging = path.with_suffix(".new")
    staging.write_text(text)
    os.utime(staging, ns=(old + 1_000_000, old + 1_000_000))
    os.replace(staging, path)


def four_gpus(tmp_path: Path, extra: str = "") -> Path:
    scenario = tmp_path / "host.scn"
    # GPU 0's power draw cycles, so "keeps updating" is observable.
    text = (
        (SCENARIOS / "h100x4.scn")
        .read_text()
        .replace("gpu0.power.usage = 612345", "gpu0.power.usage = 100000,200000@0.3")
    )
    scenario.write_text(text + extra)
    return scenario


def observed(exporter: Exporter, metric: str, seconds: float = 1.5, **labels: str) -> set[float | None]:
    """The distinct values of one series seen by scrapes spread over ``seconds``."""
    seen = set()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        seen.add(value(samples(exporter.metrics()), metric, **labels))
        time.sleep(0.1)
    return seen


def comparable(parsed: Parsed) -> dict[tuple[str, Labels], float]:
    """Samples that must not move when nothing but Xids happen (drops timing and event families)."""
    moving = (
        "gpu_exporter_", "gpu_utilization_seconds_total", "gpu_utilization_low_", "gpu_utilization_high_", "gpu_xid_",
        "gpu_power_watts", "gpu_power_instant", "gpu_power_peak", "gpu_energy_",
        "gpu_health_",  # the health model judges the Xids (tests/unit/test_health_model.py)
    )  # fmt: skip
    return {
        (name, labels): v
        for name, series in parsed.items()
        if not name.startswith(moving)
        for labels, v in series.items()
    }


def test_xid_counters_count_every_event_with_the_right_labels(fakenvml_dir: Path, tmp_path: Path) -> None:
    scenario = four_gpus(tmp_path, "gpu0.xid = 79@2\ngpu1.xid = 13@1.5,13@2.5\n")
    # GPM's series appear from the second read: "nothing else changes" below is about Xids, without them.
    exporter = start(fakenvml_dir, scenario, tmp_path, "--collect-interval", "200ms", "--no-collector.profiling")
    try:
        before = wait_for(  # every GPU read (a 200 ms cycle may publish before its first reads end)
            exporter, lambda p: all(value(p, "gpu_temperature_celsius", gpu=gpu) is not None for gpu in "0123")
        )
        uuid0 = next(dict(labels)["uuid"] for labels in before["gpu_up"] if dict(labels)["gpu"] == "0")
        # The first Xid after start is an increase of the all-codes total from 0; a code's series
        # appears with its first Xid (the lean default pre-creates none).
        assert value(before, "gpu_xid_errors_all_codes_total", gpu="0") == 0
        assert value(before, "gpu_xid_errors_all_codes_total", gpu="1") == 0
        assert "gpu_xid_errors_total" not in before
        after = wait_for(
            exporter,
            lambda p: (
                value(p, "gpu_xid_errors_total", gpu="1", xid="13") == 2
                and value(p, "gpu_xid_errors_total", gpu="0", xid="79") == 1
            ),
        )
        final = samples(wait_cycles(exporter, 5))  # five cycles later: nothing counted twice
    finally:
        exporter.stop()
    assert value(final, "gpu_xid_errors_total", gpu="0", uuid=uuid0, xid="79") == 1
    assert value(final, "gpu_xid_errors_total", gpu="1", xid="13") == 2
    assert {(dict(labels)["gpu"], dict(labels)["xid"]) for labels in final["gpu_xid_errors_total"]} == {
        ("0", "79"),
        ("1", "13"),
    }
    totals = {dict(labels)["gpu"]: v for labels, v in final["gpu_xid_errors_all_codes_total"].items()}
    assert totals == {"0": 1, "1": 2, "2": 0, "3": 0}
    assert value(final, "gpu_xid_last_timestamp_seconds", gpu="0") is not None
    assert value(final, "gpu_xid_last_timestamp_seconds", gpu="2") is None
    assert comparable(before) == comparable(after) == comparable(final)  # nothing else changes
    assert "Xid 79" in exporter.log()


def test_lost_gpu_goes_down_alone_and_comes_back(fakenvml_dir: Path, tmp_path: Path) -> None:
    scenario = four_gpus(tmp_path, "gpu2.lost_after = 3\n")
    exporter = start(fakenvml_dir, scenario, tmp_path, "--collect-interval", "200ms")
    try:
        before = wait_for(exporter, lambda p: value(p, "gpu_power_watts", gpu="2") is not None)  # GPU 2 read
        assert value(before, "gpu_up", gpu="2") == 1 and value(before, "gpu_power_watts", gpu="2") == 98.007
        lost = wait_for(exporter, lambda p: value(p, "gpu_up", gpu="2") == 0)
        assert value(lost, "gpu_power_watts", gpu="2") is None  # GPU 2's metrics vanish...
        assert value(lost, "gpu_exporter_device_down", gpu="2", reason="lost") == 1
        # the health model's verdict on the lost GPU stays too: fail, reboot
        kept = ("gpu_exporter_", "gpu_up", "gpu_info", "gpu_xid_errors_", "gpu_ecc_error_events_total", "gpu_health_")
        assert value(lost, "gpu_health_action", gpu="2") == 4
        assert not [labels for name, series in lost.items() if not name.startswith(kept)
                    for labels in series if dict(labels).get("gpu") == "2"]  # fmt: skip
        assert value(lost, "gpu_xid_errors_all_codes_total", gpu="2") == 0  # event counters stay, pre-created
        for gpu in ("0", "1", "3"):  # ...while the others keep reporting
            assert value(lost, "gpu_up", gpu=gpu) == 1
            assert value(lost, "gpu_temperature_celsius", gpu=gpu) is not None
        assert observed(exporter, "gpu_power_watts", gpu="0") == {100.0, 200.0}  # GPU 0 keeps updating
        assert exporter.get("/readyz").status_code == 200  # three GPUs still sampled
        rewrite(scenario, scenario.read_text().replace("gpu2.lost_after = 3\n", ""))
        back = wait_for(exporter, lambda p: value(p, "gpu_up", gpu="2") == 1)
        assert value(back, "gpu_power_watts", gpu="2") == 98.007
    finally:
        exporter.stop()
    assert "Application shutdown complete" in exporter.log()  # a clean stop despite the lost GPU


def test_hung_gpu_does_not_stall_scrapes_or_other_gpus(fakenvml_dir: Path, tmp_path: Path) -> None:
    scenario = four_gpus(tmp_path)
    exporter = start(fakenvml_dir, scenario, tmp_path, "--collect-interval", "200ms")
    try:
        first = wait_for(exporter, lambda p: value(p, "gpu_power_watts", gpu="1") is not None)  # GPU 1 read
        assert value(first, "gpu_power_watts", gpu="1") == 455.12
        rewrite(scenario, scenario.read_text() + "gpu1.delay.nvmlDeviceGetPowerUsage = 30\n")
        # Freshness rule: 3 intervals = 0.6 s; give the fake a moment to see the new file.
        stalled = wait_for(exporter, lambda p: value(p, "gpu_exporter_device_stalled", gpu="1") == 1, timeout=10)
        gone = wait_for(exporter, lambda p: value(p, "gpu_temperature_celsius", gpu="1") is None, timeout=3)
        assert value(stalled, "gpu_up", gpu="1") == 1  # hung, not lost
        assert value(gone, "gpu_power_watts", gpu="1") is None
        powers: set[float | None] = set()
        deadline, scrapes = time.monotonic() + 20, 0
        while scrapes < 10 or len(powers - {None}) < 2:  # both of GPU 0's power values seen: it keeps updating
            assert time.monotonic() < deadline, f"GPU 0 stopped updating: {powers}"
            # Each scrape answers well within the client timeout although GPU 1 is stuck for 30 s.
            response = httpx.get(exporter.url + "/metrics", timeout=2.0)
            scrapes += 1
            assert response.status_code == 200
            parsed = samples(response.text)
            powers.add(value(parsed, "gpu_power_watts", gpu="0"))
            assert value(parsed, "gpu_temperature_celsius", gpu="3") == 83
            time.sleep(0.1)  # the pace of the scrapes
        assert powers - {None} == {100.0, 200.0}, powers
    finally:
        exporter.stop()


def test_no_driver_then_driver_without_restart(fakenvml_dir: Path, tmp_path: Path) -> None:
    scenario = tmp_path / "host.scn"
    healthy = (SCENARIOS / "old_gpu.scn").read_text()
    scenario.write_text("init.error = DRIVER_NOT_LOADED\n" + healthy)
    exporter = start(fakenvml_dir, scenario, tmp_path, "--collect-interval", "200ms")
    try:
        ready = exporter.get("/readyz")
        assert ready.status_code == 503 and "driver_not_loaded" in ready.text
        parsed = samples(exporter.metrics())
        assert value(parsed, "gpu_exporter_backend_up") == 0
        assert value(parsed, "gpu_info") is None
        rewrite(scenario, healthy)
        wait_for(exporter, lambda p: value(p, "gpu_exporter_backend_up") == 1, timeout=20)
        deadline = time.monotonic() + 10
        while exporter.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline, exporter.get("/readyz").text
            time.sleep(0.1)
    finally:
        exporter.stop()
    log = exporter.log()
    assert log.count("kernel driver is not loaded") == 1  # one actionable line, not one per retry


@pytest.mark.skipif(Path("/dev/nvidiactl").exists(), reason="this host has NVIDIA device nodes")
def test_container_without_device_nodes_gets_its_own_hint(fakenvml_dir: Path, tmp_path: Path) -> None:
    scenario = tmp_path / "nodriver.scn"
    scenario.write_text("init.error = DRIVER_NOT_LOADED\n")
    # KUBERNETES_SERVICE_HOST marks a pod; nothing connects to it.
    exporter = start(fakenvml_dir, scenario, tmp_path, env={"KUBERNETES_SERVICE_HOST": "10.0.0.1"})
    try:
        ready = exporter.get("/readyz")
    finally:
        exporter.stop()
    assert "driver_not_loaded" in ready.text
    assert "container without /dev/nvidia* device nodes" in exporter.log()


def test_absurd_values_are_dropped_and_counted(fakenvml_dir: Path, tmp_path: Path) -> None:
    scenario = four_gpus(tmp_path, "gpu1.absurd = 1\n")
    exporter = start(fakenvml_dir, scenario, tmp_path, "--collect-interval", "200ms")
    try:
        first = wait_for(exporter, lambda p: value(p, "gpu_temperature_celsius", gpu="0") is not None)  # GPU 0 read
        later = wait_for(
            exporter,
            lambda p: (
                (value(p, "gpu_exporter_invalid_values_total", field="gpu_temperature_celsius") or 0)
                > (value(first, "gpu_exporter_invalid_values_total", field="gpu_temperature_celsius") or 0)
            ),
        )
    finally:
        exporter.stop()
    for parsed in (first, later):
        assert value(parsed, "gpu_temperature_celsius", gpu="1") is None
        assert value(parsed, "gpu_utilization_ratio", gpu="1") is None
        assert value(parsed, "gpu_temperature_celsius", gpu="0") == 71  # the other GPUs are untouched
        for series in parsed.values():
            assert all(v < 1e16 for v in series.values())  # no sentinel anywhere
    assert (value(later, "gpu_exporter_invalid_values_total", field="gpu_utilization_ratio") or 0) >= 1


def test_throttle_reasons_and_violation_counters(fakenvml_dir: Path, tmp_path: Path) -> None:
    exporter = start(
        fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "--collect-interval", "1h", "--metrics.detail=full"
    )  # fmt: skip
    try:
        parsed = samples(exporter.metrics())
    finally:
        exporter.stop()
    active = {dict(labels)["reason"] for labels, v in parsed["gpu_clock_event_active"].items()
              if dict(labels)["gpu"] == "3" and v == 1}  # fmt: skip
    assert active == {"power_cap", "hw_thermal"}  # 0x44 = SwPowerCap | HwThermalSlowdown
    assert value(parsed, "gpu_clock_event_active", gpu="0", reason="power_cap") == 0
    assert len([1 for labels in parsed["gpu_clock_event_active"] if dict(labels)["gpu"] == "0"]) == 9
    # nanoseconds → seconds, one series per policy
    assert value(parsed, "gpu_clock_throttle_seconds_total", gpu="3", reason="power") == 98.7654321
    assert value(parsed, "gpu_clock_throttle_seconds_total", gpu="1", reason="thermal") == 0.25
    assert value(parsed, "gpu_clock_throttle_seconds_total", gpu="2", reason="low_utilization") == 7200
    assert value(parsed, "gpu_clock_throttle_seconds_total", gpu="0", reason="board_limit") == 0


def test_zero_gpus_ready_only_when_allowed(fakenvml_dir: Path, tmp_path: Path) -> None:
    scenario = tmp_path / "empty.scn"
    scenario.write_text("device_count = 0\n")
    exporter = start(fakenvml_dir, scenario, tmp_path, "--ready.without-gpus", "true")
    try:
        assert exporter.get("/readyz").status_code == 200
    finally:
        exporter.stop()


def test_mig_instances_created_and_destroyed_at_run_time_are_picked_up(fakenvml_dir: Path, tmp_path: Path) -> None:
    """A MIG instance a DRA driver (or an admin) creates after start is enumerated within the
    re-enumeration interval, and one destroyed leaves; the GPU itself never goes down."""
    full = (SCENARIOS / "mig.scn").read_text()
    created = [line for line in full.splitlines(keepends=True) if line.startswith("gpu0.mig.2.")]
    assert created, "mig.scn has a third instance"
    scenario = tmp_path / "mig.scn"
    scenario.write_text("".join(line for line in full.splitlines(keepends=True) if line not in created))
    new_uuid = "MIG-7c3d4e5f-6a7b-5c8d-ae9f-1a2b3c4d5e6f"
    exporter = start(fakenvml_dir, scenario, tmp_path, "--collect-interval", "200ms", "--gpu.rediscover-interval", "1s")
    try:

        def instance(parsed: Parsed) -> float | None:
            return value(parsed, "gpu_mig_info", gpu="0", gpu_instance="13", mig_uuid=new_uuid)

        before = samples(exporter.metrics())
        assert instance(before) is None
        assert value(before, "gpu_mig_info", gpu="0", gpu_instance="5") == 1
        rewrite(scenario, full)
        after = wait_for(exporter, lambda p: instance(p) == 1)
        assert value(after, "gpu_up", gpu="0") == 1
        assert value(after, "gpu_memory_used_bytes", gpu="0", gpu_instance="13", compute_instance="0") == 1073741824
        rewrite(scenario, "".join(line for line in full.splitlines(keepends=True) if line not in created))
        gone = wait_for(exporter, lambda p: instance(p) is None)
        assert value(gone, "gpu_up", gpu="0") == 1 and value(gone, "gpu_mig_info", gpu="0", gpu_instance="5") == 1
    finally:
        exporter.stop()
