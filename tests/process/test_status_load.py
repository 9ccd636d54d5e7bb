"""The status page under load, against the real exporter on loopback with 64 GPUs: 100 clients
asking for ``/`` without pause must not hold up ``/metrics`` (the page was built on the event loop,
once per request: scrapes took 7-13 s here, over Prometheus' 10 s timeout)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx

from bench.scenarios import Size, write
from tests.harness import Exporter, start

CLIENTS = 100


async def _storm(exporter: Exporter) -> list[float]:
    """``/`` from CLIENTS clients until five scrapes of ``/metrics`` are done; their durations."""
    stop = asyncio.Event()
    pages = 0

    async def hammer(client: httpx.AsyncClient) -> None:
        nonlocal pages
        while not stop.is_set():
            answer = await client.get(f"{exporter.url}/")
            assert answer.status_code == 200
            pages += 1

    limits = httpx.Limits(max_connections=CLIENTS)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client, httpx.AsyncClient(timeout=60) as scraper:
        tasks = [asyncio.create_task(hammer(client)) for _ in range(CLIENTS)]
        try:
            while pages < 2 * CLIENTS:  # every client has had pages: the storm is on
                await asyncio.sleep(0.05)
            durations = []
            for _ in range(5):
                started = time.monotonic()
                answer = await scraper.get(f"{exporter.url}/metrics")
                durations.append(time.monotonic() - started)
                assert answer.status_code == 200 and "gpu_temperature_celsius{" in answer.text
        finally:
            stop.set()
            await asyncio.gather(*tasks)
    return durations


def test_status_page_storm_does_not_hold_up_scrapes(fakenvml_dir: Path, tmp_path: Path) -> None:
    scenario = write(tmp_path, Size(64))
    exporter = start(fakenvml_dir, scenario, tmp_path)
    try:
        durations = asyncio.run(_storm(exporter))
        assert max(durations) < 5.0, durations  # half of Prometheus' default scrape timeout
    finally:
        exporter.stop()
    assert exporter.process.returncode == 0
