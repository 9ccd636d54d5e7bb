"""A real Prometheus server (Debian's package, on loopback) scrapes the exporter and is queried."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import httpx

from tests.harness import SCENARIOS, TOOLKIT_LISTENING, bound_port, start


def _query(port: int, promql: str) -> list[dict[str, object]]:
    response = httpx.get(f"http://127.0.0.1:{port}/api/v1/query", params={"query": promql}, timeout=10)
    response.raise_for_status()
    result: list[dict[str, object]] = response.json()["data"]["result"]
    return result


def test_prometheus_query_returns_scenario_value_in_base_units(fakenvml_dir: Path, tmp_path: Path) -> None:
    binary = shutil.which("prometheus")
    assert binary, "prometheus not found: run scripts/test, which installs Debian's prometheus package"
    exporter = start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "--collect-interval", "500ms")
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: gpu\n    static_configs: [{{targets: ['127.0.0.1:{exporter.port}']}}]\n"
    )
    log = (tmp_path / "prometheus.log").open("wb")
    server = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
         "--web.listen-address=127.0.0.1:0"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        port = bound_port(tmp_path / "prometheus.log", lambda: server.poll() is None, TOOLKIT_LISTENING)
        deadline = time.monotonic() + 60
        power: list[dict[str, object]] = []
        while time.monotonic() < deadline and not power:
            time.sleep(0.5)
            try:
                power = _query(port, 'gpu_power_watts{gpu="0"}')
            except httpx.HTTPError:
                continue
        assert power, (tmp_path / "prometheus.log").read_text()
        assert power[0]["value"][1] == "612.345"  # type: ignore[index]  # 612345 mW in the scenario
        clocks = _query(port, "gpu_sm_clock_hertz")
        assert sorted(float(s["value"][1]) for s in clocks) == [3.45e8, 1.41e9, 1.755e9, 1.98e9]  # type: ignore[index]
        up = _query(port, 'up{job="gpu"}')
        assert up[0]["value"][1] == "1"  # type: ignore[index]
        joined = _query(port, 'gpu_memory_used_bytes * on(gpu, uuid) group_left(name) gpu_info{gpu="2"}')
        assert joined[0]["metric"]["name"] == "NVIDIA H100 80GB HBM3"  # type: ignore[index]
    finally:
        server.terminate()
        server.wait(20)
        log.close()
        exporter.stop()
