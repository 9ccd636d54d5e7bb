"""A 60-second load test on loopback: 16 concurrent scrapers (keep-alive and fresh connections,
plain and gzip, text and OpenMetrics) while faults cycle in the fake NVML (failing and slow calls,
a GPU lost and back). Zero failed scrapes; file descriptors and threads return to where they were."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import httpx

from tests.harness import SCENARIOS
from tests.webtls import launch, open_fds, threads

DURATION = float(os.environ.get("GPU_EXPORTER_LOAD_SECONDS", "60"))
SCRAPERS = 16
FAULTS = """
gpu1.error.nvmlDeviceGetPowerUsage = 0,UNKNOWN@2
gpu2.delay.nvmlDeviceGetTemperature = 0,0.4@3
gpu3.error.nvmlDeviceGetSamples = 0,0,GPU_IS_LOST@5
gpu0.error.nvmlDeviceGetClockInfo = 0,NOT_SUPPORTED@7
"""
ACCEPTS = ("", "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5")


def _settle(pid: int, baseline: tuple[int, int], seconds: float = 15) -> tuple[int, int]:
    deadline = time.monotonic() + seconds
    now = (open_fds(pid), threads(pid))
    while now[0] > baseline[0] or now[1] > baseline[1]:
        if time.monotonic() > deadline:
            break
        time.sleep(0.25)
        now = (open_fds(pid), threads(pid))
    return now


def test_sixteen_scrapers_for_a_minute_with_faults_cycling(fakenvml_dir: Path, tmp_path: Path) -> None:
    scenario = tmp_path / "faults.scn"
    scenario.write_text((SCENARIOS / "h100x4.scn").read_text() + FAULTS)
    exporter = launch(fakenvml_dir, tmp_path, "--collect-interval", "200ms", scenario=scenario)
    try:
        for _ in range(3):
            assert exporter.get("/metrics").status_code == 200
        time.sleep(1)
        pid = exporter.process.pid
        baseline = (open_fds(pid), threads(pid))
        errors: list[str] = []
        counts = [0] * SCRAPERS
        stop = time.monotonic() + DURATION

        def scrape(worker: int) -> None:
            client = httpx.Client(timeout=10)
            try:
                while time.monotonic() < stop:
                    if counts[worker] % 10 == 9:  # now and then a fresh connection
                        client.close()
                        client = httpx.Client(timeout=10)
                    headers = {"Accept": ACCEPTS[worker % 2], "Accept-Encoding": "gzip" if worker % 4 else "identity"}
                    try:
                        response = client.get(exporter.url + "/metrics", headers=headers)
                        if response.status_code != 200 or "gpu_exporter_build_info" not in response.text:
                            errors.append(f"{response.status_code}: {response.text[:100]}")
                    except httpx.HTTPError as err:
                        errors.append(repr(err))
                    counts[worker] += 1
            finally:
                client.close()

        workers = [threading.Thread(target=scrape, args=(i,)) for i in range(SCRAPERS)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert not errors, f"{len(errors)} failed scrapes of {sum(counts)}: {errors[:5]}"
        assert sum(counts) > SCRAPERS * DURATION  # more than one scrape per scraper and second
        after = _settle(pid, baseline)
        assert after[0] <= baseline[0] and after[1] <= baseline[1], f"fds/threads {baseline} -> {after}"
        assert exporter.process.poll() is None
    finally:
        exporter.stop()
    assert exporter.process.returncode == 0
    assert "Traceback" not in exporter.log()
