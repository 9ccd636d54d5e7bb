"""Series per GPU, bytes per scrape (plain and gzip) and labels per series of one /metrics scrape, on
the fake NVML's benchmark hosts (bench/scenarios.py): gpu-exporter's default (lean) exposition, its
``--metrics.detail=full`` one, and its dcgm-exporter mode with dcgm-exporter's default counters (the
same names, labels and values dcgm-exporter renders for them).

    .venv/bin/python -m bench.series [GPUS ...]     (default: 1 8 64)

Prints a Markdown table. A series "of a GPU" is one that carries that GPU's UUID (``uuid``, or
``UUID`` in dcgm-exporter's names); per GPU is the largest such count over the host's GPUs.
"""

from __future__ import annotations

import gzip
import sys
import tempfile
from collections import Counter
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench.scenarios import Size, write
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


def main(sizes: list[int]) -> None:
    work = Path(tempfile.mkdtemp(prefix="gpu-exporter-series-"))
    library = build(work / "fakenvml")
    print("| Host | System | Series | Series per GPU | Bytes | Bytes, gzip | Labels per series |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for gpus in sizes:
        scenario = write(work, Size(gpus))
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
