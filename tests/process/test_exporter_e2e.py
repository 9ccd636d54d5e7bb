"""The real exporter process, on the fake NVML, scraped over HTTP on 127.0.0.1."""

from __future__ import annotations

import gzip
import time
from fractions import Fraction
from pathlib import Path

import httpx

from tests.harness import ENERGY, SCENARIOS, Exporter, energy_in_range, samples, start, value

# Scenario key and the exact factor from the NVML unit to the base unit, per required metric.
EXPECTED: dict[str, tuple[str, Fraction]] = {
    "gpu_utilization_ratio": ("utilization.gpu", Fraction(1, 100)),
    "gpu_memory_copy_utilization_ratio": ("utilization.memory", Fraction(1, 100)),
    "gpu_encoder_utilization_ratio": ("utilization.encoder", Fraction(1, 100)),
    "gpu_decoder_utilization_ratio": ("utilization.decoder", Fraction(1, 100)),
    "gpu_memory_total_bytes": ("memory.total", Fraction(1)),
    "gpu_memory_used_bytes": ("memory.used", Fraction(1)),
    "gpu_memory_free_bytes": ("memory.free", Fraction(1)),
    "gpu_memory_reserved_bytes": ("memory.reserved", Fraction(1)),
    "gpu_temperature_celsius": ("temperature.gpu", Fraction(1)),
    "gpu_memory_temperature_celsius": ("temperature.memory", Fraction(1)),
    "gpu_power_watts": ("power.usage", Fraction(1, 1000)),
    "gpu_power_limit_watts": ("power.enforced_limit", Fraction(1, 1000)),
    "gpu_energy_joules_total": ("energy", Fraction(1, 1000)),
    "gpu_sm_clock_hertz": ("clock.sm", Fraction(10**6)),
    "gpu_memory_clock_hertz": ("clock.memory", Fraction(10**6)),
    "gpu_sm_clock_max_hertz": ("max_clock.sm", Fraction(10**6)),
    "gpu_memory_clock_max_hertz": ("max_clock.memory", Fraction(10**6)),
    "gpu_performance_state": ("pstate", Fraction(1)),
    "gpu_fan_speed_ratio": ("fan_speed", Fraction(1, 100)),
    "gpu_pcie_link_generation": ("pcie.link_gen", Fraction(1)),
    "gpu_pcie_link_generation_max": ("pcie.max_link_gen", Fraction(1)),
    "gpu_pcie_link_width": ("pcie.link_width", Fraction(1)),
    "gpu_pcie_link_width_max": ("pcie.max_link_width", Fraction(1)),
    "gpu_pcie_replay_errors_total": ("pcie.replay_counter", Fraction(1)),
    "gpu_pcie_transmit_bytes_per_second": ("pcie.tx", Fraction(1024)),
    "gpu_pcie_receive_bytes_per_second": ("pcie.rx", Fraction(1024)),
}


def scenario_values(path: Path) -> dict[str, str]:
    """The scenario file's keys (a test-side reading of the format, independent of the fake's C)."""
    values = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "=" in line:
            key, _, raw = line.partition("=")
            values[key.strip()] = raw.strip()
    return values


def test_every_required_metric_for_every_gpu_in_base_units(fakenvml_dir: Path, tmp_path: Path) -> None:
    scenario = SCENARIOS / "h100x4.scn"
    keys = scenario_values(scenario)
    exporter = start(fakenvml_dir, scenario, tmp_path, "--collect-interval", "1h", "--metrics.detail=full")
    try:
        parsed = samples(exporter.metrics())
    finally:
        exporter.stop()
    for gpu in range(4):
        uuid = keys[f"gpu{gpu}.uuid"]
        for name, (key, factor) in EXPECTED.items():
            expected = float(Fraction(keys[f"gpu{gpu}.{key}"]) * factor)
            got = value(parsed, name, gpu=str(gpu), uuid=uuid)
            if name in ENERGY:  # grows by the integral of power since init
                assert energy_in_range(got, expected, float(Fraction(keys[f"gpu{gpu}.power.usage"]) / 1000)), name
                continue
            assert got == expected, f"{name} gpu{gpu}: {got} != {expected} ({key} = {keys[f'gpu{gpu}.{key}']})"
        assert value(parsed, "gpu_utilization_seconds_total", gpu=str(gpu), uuid=uuid) is not None
        assert value(parsed, "gpu_up", gpu=str(gpu), uuid=uuid) == 1
        info = value(
            parsed, "gpu_info", gpu=str(gpu), uuid=uuid, name=keys[f"gpu{gpu}.name"],
            pci_bus_id=keys[f"gpu{gpu}.pci_bus_id"], serial=keys[f"gpu{gpu}.serial"],
            driver_version=keys["driver_version"], cuda_version="12.4",
        )  # fmt: skip
        assert info == 1
    # every sample of every catalogue metric carries gpu and uuid
    for name, series in parsed.items():
        if name.startswith("gpu_") and not name.startswith("gpu_exporter_"):
            for labels in series:
                assert {"gpu", "uuid"} <= {label for label, _ in labels}, name


def test_unsupported_functions_produce_no_sample(fakenvml_dir: Path, tmp_path: Path) -> None:
    text = (SCENARIOS / "h100x4.scn").read_text()
    text = text.replace("gpu1.fan_speed = 45\n", "")  # key absent → NOT_SUPPORTED
    text += "gpu2.error.nvmlDeviceGetPowerUsage = NOT_SUPPORTED\ngpu3.error.nvmlDeviceGetClockInfo = UNKNOWN\n"
    # An old driver: a missing symbol (FunctionNotFound) and, for the process list, pynvml's
    # NVMLLibraryMismatchError, which is not an NVMLError.
    text += "gpu0.error.nvmlDeviceGetPcieReplayCounter = FUNCTION_NOT_FOUND\n"
    text += "gpu0.error.nvmlDeviceGetComputeRunningProcesses = FUNCTION_NOT_FOUND\n"
    scenario = tmp_path / "unsupported.scn"
    scenario.write_text(text)
    # the driver's words are a debug line (the info line counts the values a GPU lacks)
    exporter = start(fakenvml_dir, scenario, tmp_path, "--collect-interval", "1h", "--log.level", "debug")
    try:
        body = exporter.metrics()
    finally:
        exporter.stop()
    parsed = samples(body)
    assert value(parsed, "gpu_fan_speed_ratio", gpu="1") is None
    assert value(parsed, "gpu_fan_speed_ratio", gpu="0") == 0.3
    assert value(parsed, "gpu_power_watts", gpu="2") is None
    assert value(parsed, "gpu_power_watts", gpu="1") == 455.12
    assert value(parsed, "gpu_sm_clock_hertz", gpu="3") is None  # a failing call is absent too...
    # ...and counted: one per nvmlDeviceGetClockInfo asked (SM, memory, video)
    assert value(parsed, "gpu_exporter_sample_errors_total", kind="unknown") == 3
    assert value(parsed, "gpu_temperature_celsius", gpu="3") == 83  # the rest of GPU 3 is untouched
    assert "NaN" not in body and "nan" not in body.lower().replace("nanoseconds", "")
    assert value(parsed, "gpu_pcie_replay_errors_total", gpu="0") is None
    assert value(parsed, "gpu_pcie_replay_errors_total", gpu="1") == 3
    assert value(parsed, "gpu_compute_processes", gpu="0") is None
    assert value(parsed, "gpu_compute_processes", gpu="1") == 0
    assert value(parsed, "gpu_temperature_celsius", gpu="0") == 71  # the rest of GPU 0 is untouched
    assert "NVMLLibraryMismatchError" in exporter.log()
    assert "not supported" in exporter.log()  # logged once...
    assert exporter.log().count("nvmlDeviceGetPowerUsage is not supported") == 1


def test_a_gpu_past_its_thermal_limit_has_a_negative_margin(fakenvml_dir: Path, tmp_path: Path) -> None:
    """Negative values are implausible for almost every row, but a margin past the limit is a fact."""
    text = (SCENARIOS / "h100x4.scn").read_text() + "gpu1.temperature.margin = -4\n"
    scenario = tmp_path / "hot.scn"
    scenario.write_text(text)
    exporter = start(fakenvml_dir, scenario, tmp_path, "--collect-interval", "1h", "--metrics.detail=full")
    try:
        parsed = samples(exporter.metrics())
    finally:
        exporter.stop()
    assert value(parsed, "gpu_temperature_margin_celsius", gpu="1") == -4
    assert value(parsed, "gpu_temperature_margin_celsius", gpu="0") == 19
    assert value(parsed, "gpu_exporter_invalid_values_total", field="gpu_temperature_margin_celsius") is None


def test_http_surface(fakenvml_dir: Path, tmp_path: Path) -> None:
    exporter = start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "--collect-interval", "1h")
    try:
        _check_http(exporter)
    finally:
        exporter.stop()


def _check_http(exporter: Exporter) -> None:
    plain = exporter.get("/metrics", headers={"Accept-Encoding": "identity"})
    assert plain.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert "content-encoding" not in plain.headers
    assert "gpu_power_watts{" in plain.text

    prometheus_accept = (
        "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
        "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
    )
    raw = httpx.get(
        exporter.url + "/metrics", headers={"Accept": prometheus_accept, "Accept-Encoding": "gzip"}, timeout=10
    )
    assert raw.headers["content-type"].startswith("application/openmetrics-text; version=1.0.0")
    assert raw.headers["content-encoding"] == "gzip"
    assert raw.text.endswith("# EOF\n")  # httpx decoded the gzip body
    with httpx.stream("GET", exporter.url + "/metrics", headers={"Accept-Encoding": "gzip"}, timeout=10) as stream:
        body = b"".join(stream.iter_raw())
    assert gzip.decompress(body).decode() == plain.text  # same snapshot, same bytes

    head = httpx.head(exporter.url + "/metrics", timeout=10)
    assert head.status_code == 200 and head.content == b""
    assert httpx.post(exporter.url + "/metrics", timeout=10).status_code == 405
    assert exporter.get("/nope").status_code == 404
    landing = exporter.get("/")
    assert landing.status_code == 200 and "NVIDIA H100 80GB HBM3" in landing.text and "/metrics" in landing.text
    assert exporter.get("/healthz").status_code == 200
    ready = exporter.get("/readyz")
    assert ready.status_code == 200, ready.text


def test_custom_telemetry_path(fakenvml_dir: Path, tmp_path: Path) -> None:
    exporter = start(fakenvml_dir, SCENARIOS / "old_gpu.scn", tmp_path, "--web.telemetry-path", "/gpu/metrics")
    try:
        assert exporter.get("/gpu/metrics").status_code == 200
        assert exporter.get("/metrics").status_code == 404
    finally:
        exporter.stop()


def test_not_ready_without_driver_but_serving_self_metrics(fakenvml_dir: Path, tmp_path: Path) -> None:
    scenario = tmp_path / "nodriver.scn"
    scenario.write_text("init.error = DRIVER_NOT_LOADED\ngpu0.name = X\n")
    exporter = start(fakenvml_dir, scenario, tmp_path)
    try:
        ready = exporter.get("/readyz")
        parsed = samples(exporter.metrics())
    finally:
        exporter.stop()
    assert ready.status_code == 503
    assert "driver_not_loaded" in ready.text
    assert value(parsed, "gpu_exporter_backend_up") == 0
    assert value(parsed, "gpu_exporter_backend_info", backend="nvml", reason="driver_not_loaded") == 1
    assert "kernel driver is not loaded" in exporter.log()


def test_not_ready_with_zero_gpus(fakenvml_dir: Path, tmp_path: Path) -> None:
    scenario = tmp_path / "empty.scn"
    scenario.write_text("device_count = 0\n")
    exporter = start(fakenvml_dir, scenario, tmp_path)
    try:
        ready = exporter.get("/readyz")
    finally:
        exporter.stop()
    assert ready.status_code == 503 and "no GPU found" in ready.text


def test_scrapes_make_no_nvml_calls_whatever_the_gpu_count(fakenvml_dir: Path, tmp_path: Path) -> None:
    """A scrape only hands out bytes: the fake's call trace does not grow with scrapes, at 1 or 4 GPUs."""
    one_gpu = tmp_path / "one.scn"
    one_gpu.write_text(
        "\n".join(line for line in (SCENARIOS / "h100x4.scn").read_text().splitlines() if not line.startswith(
            ("gpu1.", "gpu2.", "gpu3.", "device_count")))
    )  # fmt: skip
    calls_per_cycle = {}
    for name, scenario in (("one", one_gpu), ("four", SCENARIOS / "h100x4.scn")):
        exporter = start(fakenvml_dir, scenario, tmp_path, "--collect-interval", "1h", trace=True)
        try:
            before = exporter.trace_lines()
            assert before > 0  # the first sampling cycle did call NVML
            for _ in range(200):
                assert exporter.get("/metrics").status_code == 200
            exporter.get("/")
            exporter.get("/readyz")
            assert exporter.trace_lines() == before, f"{name}: scrapes called NVML"
            calls_per_cycle[name] = before
        finally:
            exporter.stop()
    # Sampling (not scraping) is what grows with the GPU count.
    assert calls_per_cycle["four"] > calls_per_cycle["one"]


def test_busy_time_counter_integrates_utilization(fakenvml_dir: Path, tmp_path: Path) -> None:
    """rate(gpu_utilization_seconds_total) is the average utilization, here a 100/0 square wave."""
    scenario = tmp_path / "wave.scn"
    scenario.write_text(
        "gpu0.uuid = GPU-wave\ngpu0.utilization.gpu = 100,0@0.5\ngpu0.utilization.memory = 1\n"
        "gpu1.utilization.gpu = 40\ngpu1.utilization.memory = 1\n"
    )
    exporter = start(fakenvml_dir, scenario, tmp_path, "--collect-interval", "100ms")
    try:
        first = samples(exporter.metrics())
        started = time.monotonic()
        time.sleep(4)
        second = samples(exporter.metrics())
        elapsed = time.monotonic() - started
    finally:
        exporter.stop()
    for gpu, expected in (("0", 0.5), ("1", 0.4)):
        busy0 = value(first, "gpu_utilization_seconds_total", gpu=gpu)
        busy1 = value(second, "gpu_utilization_seconds_total", gpu=gpu)
        assert busy0 is not None and busy1 is not None
        average = (busy1 - busy0) / elapsed
        assert abs(average - expected) < 0.1, f"gpu{gpu}: average utilization {average:.3f}, expected {expected}"


def test_nvlink_collector_reports_each_link(fakenvml_dir: Path, tmp_path: Path) -> None:
    keys = scenario_values(SCENARIOS / "h100x4.scn")
    exporter = start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "--collect-interval", "1h", "--collector.nvlink")
    try:
        parsed = samples(exporter.metrics())
    finally:
        exporter.stop()
    for gpu, link in (("0", "0"), ("0", "1"), ("1", "0"), ("1", "1")):
        prefix = f"gpu{gpu}.nvlink.{link}."
        assert value(parsed, "gpu_nvlink_up", gpu=gpu, nvlink=link) == float(keys[prefix + "state"])
        assert value(parsed, "gpu_nvlink_transmit_bytes_total", gpu=gpu, nvlink=link) == int(keys[prefix + "tx"]) * 1024
        assert value(parsed, "gpu_nvlink_receive_bytes_total", gpu=gpu, nvlink=link) == int(keys[prefix + "rx"]) * 1024
        for kind, key in (("crc_data", "crc_errors"), ("replay", "replay_errors"), ("recovery", "recovery_errors")):
            got = value(parsed, "gpu_nvlink_errors_total", gpu=gpu, nvlink=link, type=kind)
            assert got == float(keys[prefix + key]), (gpu, link, kind)
    # GPUs without NVLink have no link series at all
    assert not [labels for labels in parsed["gpu_nvlink_up"] if dict(labels)["gpu"] in ("2", "3")]


def test_nvlink_collector_is_off_by_default(fakenvml_dir: Path, tmp_path: Path) -> None:
    exporter = start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "--collect-interval", "1h")
    try:
        assert "gpu_nvlink_" not in exporter.metrics()
    finally:
        exporter.stop()


def test_near_static_values_stay_between_their_reads(fakenvml_dir: Path, tmp_path: Path) -> None:
    """Limits and maximums are read once a minute (every 60th cycle) and served in between."""
    exporter = start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "--collect-interval", "100ms", trace=True)
    try:
        time.sleep(1.5)  # about 15 cycles: only the first read the near-static values
        parsed = samples(exporter.metrics())
        trace = exporter.trace_path.read_text() if exporter.trace_path else ""
    finally:
        exporter.stop()
    assert value(parsed, "gpu_sm_clock_max_hertz", gpu="0") == 1.98e9
    assert value(parsed, "gpu_temperature_slowdown_threshold_celsius", gpu="3") == 90
    assert value(parsed, "gpu_pcie_link_width_max", gpu="2") == 16
    calls = trace.splitlines()
    assert calls.count("nvmlDeviceGetMaxPcieLinkWidth gpu0") == 1
    assert calls.count("nvmlDeviceGetMemoryInfo_v2 gpu0") > 5  # read every cycle
