"""The process-tier tests of tests/unit/test_deploy_kubernetes.py (split by what they start)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx

from tests.harness import SCENARIOS, start
from tests.unit.test_deploy_kubernetes import KUSTOMIZE, container, one, rendered


def test_generated_objects_are_up_to_date() -> None:
    result = subprocess.run([sys.executable, str(KUSTOMIZE / "generate.py"), "check"], capture_output=True,
                            text=True, timeout=60, check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr


def test_probe_paths_answer_on_the_real_exporter(fakenvml_dir: Path, tmp_path: Path) -> None:
    """The probes' paths and the ServiceMonitor's path, on the exporter started with the base's arguments
    (bound to loopback)."""
    docs = rendered("base")
    main = container(docs)
    args = [arg for arg in main["args"] if not arg.startswith("--web.listen-address")]
    exporter = start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, *args, wait_for="/readyz")
    try:
        paths = [main["livenessProbe"]["httpGet"]["path"], main["readinessProbe"]["httpGet"]["path"]]
        paths += [endpoint["path"] for endpoint in one(docs, "ServiceMonitor")["spec"]["endpoints"]]
        for path in paths:
            assert httpx.get(exporter.url + path, timeout=10).status_code == 200, path
    finally:
        exporter.stop()
