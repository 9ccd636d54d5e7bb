"""The system-tier tests of tests/unit/test_deploy_kubernetes.py (split by what they start)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from tests.harness import REPO, SCENARIOS, bound_port
from tests.unit.test_deploy_kubernetes import (
    CRD_KINDS,
    KUBERNETES_VERSIONS,
    TREES,
    _flag_names,
    container,
    one,
    rendered,
    rendered_text,
    tool,
    tree,
)


@pytest.mark.parametrize("name", TREES)
@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_kubernetes_validate_strict(name: str, version: str, tmp_path: Path) -> None:
    path = tmp_path / f"{name}.yaml"
    path.write_text(rendered_text(name))
    result = subprocess.run([tool("kubernetes-validate"), "--strict", "-k", version, str(path)],
                            capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    problems = [line for line in output.splitlines() if not line.startswith("INFO")]
    # kubernetes-validate has no schemas for the Prometheus Operator's CRDs: those are checked below.
    unknown = {m.group(1) for line in problems if (m := re.search(r"schema for kind (\w+) with api version", line))}
    assert unknown <= CRD_KINDS and len(problems) == len(unknown), output
    kinds = {doc["kind"] for doc in rendered(name)}
    assert {"Namespace", "ServiceAccount", "DaemonSet", "Service", "ServiceMonitor"} <= kinds


def test_prometheus_rule_equals_the_rule_files(tmp_path: Path) -> None:
    rule = one(rendered("base"), "PrometheusRule")
    groups = [group for name in ("gpu-alerts", "gpu-recording")
              for group in yaml.safe_load((REPO / "alerts" / f"{name}.rules.yml").read_text())["groups"]]  # fmt: skip
    assert rule["spec"]["groups"] == groups
    assert rule["metadata"]["namespace"] == "gpu-exporter"
    extracted = tmp_path / "rules.yml"
    extracted.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: run scripts/test (Debian's prometheus package)"
    check = subprocess.run([promtool, "check", "rules", str(extracted)], capture_output=True, text=True,
                           timeout=60, check=False)  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr


def test_tls_overlay_web_config_serves_https(fakenvml_dir: Path, tmp_path: Path) -> None:
    """The tls overlay's web config, with its certificate paths pointed at a certificate made here, passes
    ``promtool check web-config`` and makes the real exporter serve the probe paths over HTTPS only."""
    if "--web.config.file" not in _flag_names():
        pytest.xfail("the exporter has no --web.config.file yet: the tls overlay waits for it")
    openssl = shutil.which("openssl")
    assert openssl, "openssl not found (Debian's openssl package)"
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    made = subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                           "/CN=gpu-exporter.gpu-exporter.svc", "-keyout", str(key), "-out", str(cert)],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert made.returncode == 0, made.stderr
    web_config = yaml.safe_load((tree("tls") / "web-config.yml").read_text())
    web_config["tls_server_config"].update(cert_file=str(cert), key_file=str(key))
    config_file = tmp_path / "web-config.yml"
    config_file.write_text(yaml.safe_dump(web_config))
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: run scripts/test (Debian's prometheus package)"
    checked = subprocess.run([promtool, "check", "web-config", str(config_file)], capture_output=True, text=True,
                             timeout=60, check=False)  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    log = tmp_path / "exporter.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPU_EXPORTER_", "FAKE_NVML_"))}
    env.update(LD_LIBRARY_PATH=str(fakenvml_dir), FAKE_NVML_SCENARIO=str(SCENARIOS / "h100x4.scn"))
    command = [sys.executable, "-m", "gpu_exporter", "--web.listen-address=127.0.0.1:0",
               f"--web.config.file={config_file}"]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
    try:
        port = bound_port(log, lambda: proc.poll() is None)
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                if httpx.get(f"https://127.0.0.1:{port}/readyz", verify=False, timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        main = container(rendered("tls"))
        for probe in (main["livenessProbe"], main["readinessProbe"]):
            url = f"{probe['httpGet']['scheme'].lower()}://127.0.0.1:{port}{probe['httpGet']['path']}"
            assert httpx.get(url, verify=False, timeout=5).status_code == 200, url  # kubelet does not verify
        try:  # plain HTTP gets no metrics: refused, or an error answer as Go's servers give
            plain = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
            assert plain.status_code == 400 and "gpu_info" not in plain.text, plain.status_code
        except httpx.TransportError:
            pass
    finally:
        proc.terminate()
        proc.wait(15)
