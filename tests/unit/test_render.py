"""Rendering on demand: an exporter nobody scrapes encodes nothing, and concurrent scrapes of one
snapshot share one encoding per format.

The exporter runs as a process on the fake NVML; ``--log.level debug`` makes it log each encoding
it makes ("encoded openmetrics for a snapshot: ...", "compressed openmetrics ..."), which is what
is counted here.
"""

from __future__ import annotations

import gzip
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from gpu_exporter.exposition.cache import Rendered
from gpu_exporter.exposition.encoder import choose
from tests.harness import Exporter

PROMETHEUS = {
    "Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "Accept-Encoding": "gzip",
}


def _encodings(exporter: Exporter) -> list[str]:
    return re.findall(r"((?:encoded|compressed) \S+) for a snapshot", exporter.log())


def test_rendered_encodes_each_format_once_for_concurrent_callers() -> None:
    calls: list[str] = []

    def encoder(name: str) -> bytes | None:
        calls.append(name)
        time.sleep(0.05)  # long enough for every caller to arrive while it runs
        return b"# EOF\n" if name == "openmetrics" else b"text\n"

    rendered = Rendered(encoder)
    assert not rendered.ready("text", False)
    barrier = threading.Barrier(16)

    def get(index: int) -> bytes | None:
        barrier.wait()
        return rendered.get(("text", "openmetrics")[index % 2], index % 4 < 2)

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(get, range(16)))
    assert sorted(calls) == ["openmetrics", "text"]
    assert rendered.encodings == 2
    assert gzip.decompress(results[0] or b"") == b"text\n"
    assert results[3] == b"# EOF\n"
    assert rendered.ready("text", True) and rendered.ready("openmetrics", False)


def test_a_renderer_without_openmetrics_answers_text() -> None:
    rendered = Rendered({"text": b"DCGM_FI_DEV_GPU_TEMP 40\n"}.get)
    body, content_type, gzipped = choose(rendered, PROMETHEUS["Accept"], "gzip")
    assert (gzip.decompress(body), content_type, gzipped) == (
        b"DCGM_FI_DEV_GPU_TEMP 40\n",
        "text/plain; version=0.0.4; charset=utf-8",
        True,
    )
