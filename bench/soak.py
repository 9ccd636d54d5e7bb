"""Soak: gpu-exporter under 16 concurrent scrapers with faults cycling in the fake NVML, for 10
minutes, sampling its resident memory, open file descriptors and threads every 10 s.

From the repository root, with the project venv::

    .venv/bin/python -m bench.soak                      # 600 s, writes bench/results/soak.json
    .venv/bin/python -m bench.soak --write-benchmarks   # ... and the soak section of BENCHMARKS.md
    .venv/bin/python -m bench.soak --seconds 60         # a short run

Each scraper keeps a connection alive and opens a fresh one every 10th scrape, alternating text and
OpenMetrics, gzip and identity, at most 10 scrapes a second (160/s in all, so a 2-core machine
shared with other work is not saturated). Faults cycle as in tests/process/test_load.py: a failing power
read, a slow temperature read, a GPU lost and back every few seconds, an unsupported clock.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench import procfs
from bench.scenarios import Size, write
from bench.systems import REPO, start_gpu_exporter, wait_ready
from tests.fakenvml.build import build

FAULTS = """
gpu1.error.nvmlDeviceGetPowerUsage = 0,UNKNOWN@2
gpu2.delay.nvmlDeviceGetTemperature = 0,0.4@3
gpu3.error.nvmlDeviceGetSamples = 0,0,GPU_IS_LOST@5
gpu0.error.nvmlDeviceGetClockInfo = 0,NOT_SUPPORTED@7
"""
SCRAPERS = 16
PACE_S = 0.1
SAMPLE_EVERY_S = 10.0
RESULTS = REPO / "bench" / "results" / "soak.json"
BENCHMARKS = REPO / "BENCHMARKS.md"
START, END = "<!-- soak -->", "<!-- end:soak -->"


def _count(pid: int, what: str) -> int:
    return len(list(Path(f"/proc/{pid}/{what}").iterdir()))


def soak(seconds: float, gpus: int = 8) -> dict[str, Any]:
    """Run the soak; the samples and totals as a JSON-ready dict."""
    with tempfile.TemporaryDirectory(prefix="gpu-exporter-soak-") as tmp:
        work = Path(tmp)
        fake = build(work / "fake")
        scenario = write(work, Size(gpus))
        scenario.write_text(scenario.read_text() + FAULTS)
        running = start_gpu_exporter(fake, scenario, 1.0, work)
        try:
            wait_ready(running, b"gpu_exporter_build_info", 60)
            url = running.url
            stop = time.monotonic() + seconds
            scrapes = [0] * SCRAPERS
            errors: list[str] = []

            def scrape(worker: int) -> None:
                client = httpx.Client(timeout=10)
                accept = "application/openmetrics-text;version=1.0.0" if worker % 2 else "text/plain"
                encoding = "gzip" if worker % 4 else "identity"
                try:
                    while time.monotonic() < stop:
                        if scrapes[worker] % 10 == 9:
                            client.close()
                            client = httpx.Client(timeout=10)
                        try:
                            response = client.get(url, headers={"Accept": accept, "Accept-Encoding": encoding})
                            if response.status_code != 200:
                                errors.append(str(response.status_code))
                        except httpx.HTTPError as err:
                            errors.append(repr(err))
                        scrapes[worker] += 1
                        time.sleep(PACE_S)
                finally:
                    client.close()

            workers = [threading.Thread(target=scrape, args=(i,), daemon=True) for i in range(SCRAPERS)]
            started = time.monotonic()
            for worker in workers:
                worker.start()
            samples = []
            while time.monotonic() < stop:
                pid = running.pid
                samples.append({
                    "t_s": round(time.monotonic() - started, 1),
                    "rss_bytes": procfs.rss_bytes(pid),
                    "fds": _count(pid, "fd"),
                    "threads": _count(pid, "task"),
                    "cpu_s": round(procfs.cpu_seconds(pid), 2),
                })  # fmt: skip
                time.sleep(min(SAMPLE_EVERY_S, max(0.0, stop - time.monotonic())))
            for worker in workers:
                worker.join()
        finally:
            running.stop()
    return {"seconds": seconds, "gpus": gpus, "scrapes": sum(scrapes), "errors": len(errors),
            "first_errors": errors[:5], "samples": samples}  # fmt: skip


#: RSS growth (bytes) below which memory counts as level.
LEVEL_BYTES = 128 * 1024


def level_off(samples: list[dict[str, Any]]) -> float | None:
    """The first sample time from which RSS never rises more than :data:`LEVEL_BYTES` above its
    value at that time, if that is before the last quarter of the run; None if it kept growing."""
    for index, sample in enumerate(samples):
        later = [s["rss_bytes"] for s in samples[index:]]
        if max(later) - sample["rss_bytes"] <= LEVEL_BYTES:
            return float(sample["t_s"]) if index <= len(samples) * 3 // 4 else None
    return None


def markdown(result: dict[str, Any]) -> str:
    samples = result["samples"]
    mib = [s["rss_bytes"] / 2**20 for s in samples]
    flat = level_off(samples)
    rows = "\n".join(
        f"| {s['t_s']:g} | {s['rss_bytes'] / 2**20:.1f} | {s['fds']} | {s['threads']} | {s['cpu_s']:g} |"
        for s in samples[:: max(1, len(samples) // 20)]
    )
    verdict = (
        f"RSS levels off at {flat:g} s ({mib[0]:.1f} MiB at the first sample, {max(mib):.1f} MiB at most, "
        f"{mib[-1]:.1f} MiB at the end; from then on it never rises more than {LEVEL_BYTES // 1024} KiB)."
        if flat is not None
        else "RSS kept growing to the end of the run: a leak to find."
    )
    return (
        f"{START}\n## Soak\n\n"
        f"`.venv/bin/python -m bench.soak --write-benchmarks`: {result['seconds']:g} s, {result['gpus']} fake GPUs "
        f"sampled every second with faults cycling, {SCRAPERS} scrapers (keep-alive, a fresh connection every "
        f"10th scrape, text/OpenMetrics, gzip/identity, at most 10 scrapes/s each): "
        f"{result['scrapes']} scrapes, {result['errors']} errors. {verdict} Open file descriptors "
        f"{min(s['fds'] for s in samples)}–{max(s['fds'] for s in samples)}, threads "
        f"{min(s['threads'] for s in samples)}–{max(s['threads'] for s in samples)}.\n\n"
        "| Time (s) | RSS (MiB) | Open fds | Threads | CPU (s) |\n|---|---|---|---|---|\n"
        f"{rows}\n{END}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--write-benchmarks", action="store_true")
    parser.add_argument("--report", action="store_true", help="only render the last run's results again")
    args = parser.parse_args()
    if args.report:
        result = json.loads(RESULTS.read_text())
    else:
        result = soak(args.seconds, args.gpus)
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    section = markdown(result)
    print(section)
    if args.write_benchmarks:
        text = BENCHMARKS.read_text()
        if START in text:
            before, _, rest = text.partition(START)
            text = before + section + rest.partition(END)[2]
        else:
            text = text.rstrip("\n") + "\n\n" + section + "\n"
        BENCHMARKS.write_text(text)


if __name__ == "__main__":
    main()
