"""Series per GPU, bytes per scrape (plain and gzip) and labels per series of one /metrics scrape, on
the fake NVML's benchmark hosts (bench/scenarios.py): gpu-exporter's default (lean) exposition, its
``--metrics.detail=full`` one, and its dcgm-exporter mode with dcgm-exporter's default counters (the
same names, labels and values dcgm-exporter renders for them), and nvitop-exporter NVITOP_VERSION
(PyPI, in the harness's venv under bench/.cache/, started as ``bench.systems.start_nvitop`` starts
it, at 1 s, scraped once its first read has every GPU and one more interval has passed).

    .venv/bin/python -m bench.series [GPUS ...]     (default: 1 8 64)

Prints a Markdown table. A series "of a GPU" is one that carries that GPU's UUID (``uuid``, or
``UUID`` in dcgm-exporter's names); per GPU is the largest such count over the host's GPUs. The same
rule holds for nvitop-exporter: its GPU series (and its per-process series) are labelled
``hostname, index, devicename, uuid`` (+ ``pid, username``), so its ``uuid`` label names the GPU;
its host series (CPU, memory, swap, network, disk, labelled by ``hostname`` and an interface or
mount point) are in "Series" but no GPU's. Bytes are the text exposition (no Accept header); the
gzip bytes are what the exporter sends for ``Accept-Encoding: gzip`` (prometheus_client gzips its
WSGI responses, so nvitop-exporter does too: the table says so if one did not and the body was
gzipped here instead).
"""

from __future__ import annotations

import gzip
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench.scenarios import Size, gpu_uuid, write
from bench.systems import NVITOP_VERSION, nvitop_venv, start_nvitop, wait_ready
from tests.fakenvml.build import build
from tests.harness import REPO, start

COUNTERS = REPO / "tests" / "fixtures" / "default-counters.csv"
SYSTEMS: dict[str, tuple[str, ...]] = {
    "gpu-exporter (default: lean)": (),
    "gpu-exporter --metrics.detail=full": ("--metrics.detail", "full"),
    "gpu-exporter -f default-counters.csv (dcgm-exporter's defaults)": ("-f", str(COUNTERS)),
}


def measure(text: str, gzipped: int) -> tuple[int, int, int, int, float]:
    """(series, per GPU, bytes, gzip bytes, labels per series) of one exposition."""
    series = 0
    labels = 0
    per_gpu: Counter[str] = Counter()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            series += 1
            labels += len(sample.labels)
            uuid = sample.labels.get("uuid") or sample.labels.get("UUID") or ""
            if uuid.startswith("GPU-"):
                per_gpu[uuid] += 1
    return series, max(per_gpu.values(), default=0), len(text.encode()), gzipped, labels / max(series, 1)


NVITOP_INTERVAL_S = 1.0


def nvitop(venv: Path, library: Path, scenario: Path, work: Path, gpus: int) -> tuple[str, int, bool]:
    """nvitop-exporter's text exposition, its gzip size, and whether it served gzip itself."""
    running = start_nvitop(venv, library, scenario, NVITOP_INTERVAL_S, work)
    try:
        wait_ready(running, gpu_uuid(gpus - 1).encode(), 120.0)
        time.sleep(2 * NVITOP_INTERVAL_S)
        text = httpx.get(running.url, headers={"Accept-Encoding": "identity"}, timeout=30).text
        with httpx.stream("GET", running.url, headers={"Accept-Encoding": "gzip"}, timeout=30) as response:
            raw = b"".join(response.iter_raw())
            served = response.headers.get("content-encoding") == "gzip"
    finally:
        running.stop()
    return text, len(raw) if served else len(gzip.compress(text.encode())), served


def main(sizes: list[int]) -> None:
    work = Path(tempfile.mkdtemp(prefix="gpu-exporter-series-"))
    library = build(work / "fakenvml")
    venv = nvitop_venv(REPO / "bench" / ".cache", lambda line: print(line, file=sys.stderr))
    print("| Host | System | Series | Series per GPU | Bytes | Bytes, gzip | Labels per series |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for gpus in sizes:
        scenario = write(work, Size(gpus))
        text, zipped, served = nvitop(venv, library, scenario, work, gpus)
        series, per_gpu, size, packed, labels = measure(text, zipped)
        name = f"nvitop-exporter {NVITOP_VERSION} (--interval {NVITOP_INTERVAL_S:g})" + (
            "" if served else " (served no gzip: body gzipped here)"
        )
        print(f"| {gpus} GPU{'s' if gpus > 1 else ''} | {name} | {series:,} | {per_gpu} | {size:,} | {packed:,} "
              f"| {labels:.1f} |")  # fmt: skip
        for name, flags in SYSTEMS.items():
            exporter = start(library, scenario, work, "--collect-interval", "1h", *flags)
            try:
                text = exporter.get("/metrics", headers={"Accept-Encoding": "identity"}).text
                raw = httpx.get(exporter.url + "/metrics", headers={"Accept-Encoding": "gzip"}, timeout=10)
                zipped = len(gzip.compress(raw.content)) if raw.headers.get("content-encoding") != "gzip" else 0
                if not zipped:
                    with httpx.stream("GET", exporter.url + "/metrics", headers={"Accept-Encoding": "gzip"}) as r:
                        zipped = sum(len(chunk) for chunk in r.iter_raw())
            finally:
                exporter.stop()
            series, per_gpu, size, packed, labels = measure(text, zipped)
            print(f"| {gpus} GPU{'s' if gpus > 1 else ''} | {name} | {series:,} | {per_gpu} | {size:,} | {packed:,} "
                  f"| {labels:.1f} |")  # fmt: skip


if __name__ == "__main__":
    main([int(arg) for arg in sys.argv[1:]] or [1, 8, 64])
