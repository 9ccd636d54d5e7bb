"""The system-tier tests of tests/process/test_compat.py (split by what they start)."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import httpx
import pytest

from tests.harness import (
    SCENARIOS,
    TOOLKIT_LISTENING,
    bound_port,
    start,
)
from tests.process.test_compat import (
    DASHBOARD_12239,
    FIXTURE,
    MIB,
    _ApiServer,
    _compat,
    _query,
    inherent_promtool_issues,
)
from tests.process.test_exporter_e2e import scenario_values


def test_promtool_reports_only_what_dcgm_exporter_names_inherently_have(fakenvml_dir: Path, tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: run scripts/test"
    exporter = _compat(fakenvml_dir, tmp_path, SCENARIOS / "h100x4.scn")
    try:
        text = exporter.metrics()
    finally:
        exporter.stop()
    result = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, check=False)
    reported = {line.strip() for line in (result.stdout + result.stderr).splitlines() if line.strip()}
    assert reported == inherent_promtool_issues(text)
    assert not [line for line in reported if "gpu_exporter_" in line]


def test_dashboard_12239_queries_on_a_real_prometheus(fakenvml_dir: Path, tmp_path: Path) -> None:
    binary = shutil.which("prometheus")
    assert binary, "prometheus not found: run scripts/test"
    keys = scenario_values(SCENARIOS / "h100x4.scn")
    exporter = start(
        fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "-f", str(FIXTURE), "-c", "500", "--collector.profiling"
    )
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s}\nscrape_configs:\n"
        f"  - job_name: dcgm\n    static_configs: [{{targets: ['127.0.0.1:{exporter.port}']}}]\n"
    )
    with (tmp_path / "prometheus.log").open("wb") as log:
        server = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
             "--web.listen-address=127.0.0.1:0"], stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        port = bound_port(tmp_path / "prometheus.log", lambda: server.poll() is None, TOOLKIT_LISTENING)
        results: dict[str, list[dict[str, object]]] = {}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                results = {title: _query(port, promql) for title, promql in DASHBOARD_12239.items()}
            except httpx.HTTPError:
                results = {}
            if results and all(results[title] for title in DASHBOARD_12239):
                break
            time.sleep(0.5)
    finally:
        server.terminate()
        server.wait(20)
        exporter.stop()

    def per_gpu(title: str) -> dict[str, float]:
        return {r["metric"]["gpu"]: float(r["value"][1]) for r in results[title]}  # type: ignore[index]

    gpus = [str(n) for n in range(4)]
    assert per_gpu("GPU Temperature") == {g: float(keys[f"gpu{g}.temperature.gpu"]) for g in gpus}
    assert per_gpu("GPU Power Usage") == {g: float(Fraction(keys[f"gpu{g}.power.usage"]) / 1000) for g in gpus}
    assert per_gpu("GPU SM Clocks") == {g: float(keys[f"gpu{g}.clock.sm"]) * 1e6 for g in gpus}
    assert per_gpu("GPU Utilization") == {g: float(keys[f"gpu{g}.utilization.gpu"]) for g in gpus}
    assert per_gpu("GPU Framebuffer Mem Used") == {
        g: float(math.trunc(Fraction(keys[f"gpu{g}.memory.used"]) / MIB)) for g in gpus
    }  # whole MiB, as DCGM
    avg = results["GPU Avg. Temp"][0]["value"][1]  # type: ignore[index]
    assert float(avg) == sum(float(keys[f"gpu{g}.temperature.gpu"]) for g in gpus) / 4
    total = results["GPU Power Total"][0]["value"][1]  # type: ignore[index]
    assert float(total) == pytest.approx(sum(float(keys[f"gpu{g}.power.usage"]) for g in gpus) / 1000)
    # Tensor-core activity is a profiling field: on NVML it comes from GPM, which only GPU 0 offers
    # (h100x4.scn: gpm.any_tensor_util = 8); the others have no series rather than a made-up 0.
    assert per_gpu("Tensor Core Utilization") == {"0": float(keys["gpu0.gpm.any_tensor_util"]) / 100}


def test_configmap_data_reads_the_counters_through_the_api(fakenvml_dir: Path, tmp_path: Path) -> None:
    path = "/api/v1/namespaces/gpu/configmaps/counters"
    metrics = "# from a ConfigMap\nDCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n"
    bare = "/api/v1/namespaces/gpu/configmaps/bare"
    api = _ApiServer(tmp_path / "tls", {path: {"kind": "ConfigMap", "data": {"metrics": metrics}},
                                         bare: {"data": {"other": "x"}}})  # fmt: skip
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    ca = str(api.certs.path("ca.crt"))
    auth = ["--kubernetes.kubelet-token-file", str(token), "--kubernetes.kubelet-ca-file", ca]
    try:
        exporter = start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "-m", "gpu:counters", "-f", str(FIXTURE),
                         "--collect-interval", "1h", *auth, env=api.env())  # fmt: skip
        try:
            text = exporter.metrics()
        finally:
            exporter.stop()
        assert "DCGM_FI_DEV_GPU_TEMP{" in text and "DCGM_FI_DEV_SM_CLOCK" not in text  # -m wins over -f
        assert api.seen[0] == (path, "Bearer s3cret-token")

        def run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, "-m", "gpu_exporter", *args, *auth], capture_output=True, text=True,
                                  timeout=60, check=False, env={**os.environ, **env})  # fmt: skip

        missing = run("-m", "gpu:absent", env=api.env())
        assert missing.returncode == 1 and "the API server answered 404" in missing.stderr
        no_key = run("-m", "gpu:bare", env=api.env())
        assert no_key.returncode == 2 and "has no 'metrics' key" in no_key.stderr
        outside = run("-m", "gpu:counters", env={"KUBERNETES_SERVICE_HOST": ""})
        assert outside.returncode == 1 and "KUBERNETES_SERVICE_HOST is not set" in outside.stderr
        for result in (missing, no_key, outside):
            assert result.stderr.count("\n") == 1 and "s3cret" not in result.stderr
    finally:
        api.close()
