"""deploy/prometheus: the scrape examples pass ``promtool check config`` (with the shipped rule files in
their ``rules/`` folder), and the static one, pointed at the exporter on loopback, is scraped by a real
Prometheus with the labels the rules expect.

Debian's Prometheus is built without Kubernetes service discovery, so the Kubernetes example is checked
with its ``kubernetes_sd_configs`` swapped for a static target (everything else, relabelling included,
is checked as written) and its discovery settings are checked here.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.harness import REPO, SCENARIOS, served, start
from tests.unit.test_alerts import tool, wait_until

HERE = REPO / "deploy" / "prometheus"
STATIC = HERE / "prometheus.static.yml"
KUBERNETES = HERE / "prometheus.kubernetes.yml"
RULE_FILES = (REPO / "alerts" / "gpu-alerts.rules.yml", REPO / "alerts" / "gpu-recording.rules.yml")


def with_rules(folder: Path, config: dict[str, Any]) -> Path:
    """Write ``config`` as prometheus.yml in ``folder`` with the rule files in rules/ beside it."""
    (folder / "rules").mkdir(exist_ok=True)
    for path in RULE_FILES:
        shutil.copyfile(path, folder / "rules" / path.name)
    target = folder / "prometheus.yml"
    target.write_text(yaml.safe_dump(config, sort_keys=False))
    return target


def check(path: Path) -> None:
    result = subprocess.run([tool("promtool"), "check", "config", str(path)], capture_output=True, text=True,
                            timeout=60, check=False)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


def job(config: dict[str, Any]) -> dict[str, Any]:
    (scrape,) = config["scrape_configs"]
    assert scrape["job_name"] == "gpu-exporter"  # the rules' GPUExporterDown and GPUMetricsAbsent select it
    return scrape


def test_static_example_passes_promtool(tmp_path: Path) -> None:
    config = yaml.safe_load(STATIC.read_text())
    assert config["rule_files"] == [f"rules/{path.name}" for path in RULE_FILES]
    check(with_rules(tmp_path, config))


def test_kubernetes_example(tmp_path: Path) -> None:
    config = yaml.safe_load(KUBERNETES.read_text())
    scrape = job(config)
    (sd,) = scrape.pop("kubernetes_sd_configs")
    assert sd["role"] == "pod" and sd["namespaces"]["names"] == ["gpu-exporter"]
    assert sd["selectors"] == [{"role": "pod", "label": "app.kubernetes.io/name=gpu-exporter"}]
    relabel = {r.get("target_label", r.get("action")): r for r in scrape["relabel_configs"]}
    assert relabel["keep"]["source_labels"] == ["__meta_kubernetes_pod_container_port_name"]
    assert relabel["keep"]["regex"] == "metrics"  # the DaemonSet's port name
    assert relabel["instance"]["source_labels"] == ["__meta_kubernetes_pod_node_name"]
    scrape["static_configs"] = [{"targets": ["127.0.0.1:9400"]}]
    check(with_rules(tmp_path, config))


def test_static_example_scraped_by_a_real_prometheus(fakenvml_dir: Path, tmp_path: Path) -> None:
    exporter = start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path)
    try:
        config = yaml.safe_load(STATIC.read_text())
        config.pop("alerting")
        scrape = job(config)
        scrape.update(scrape_interval="1s", scrape_timeout="1s")
        scrape["static_configs"][0]["targets"] = [f"127.0.0.1:{exporter.port}"]
        scrape["file_sd_configs"][0]["files"] = [str(tmp_path / "targets" / "*.yml")]
        config["global"].update(scrape_interval="1s", evaluation_interval="1s")
        path = with_rules(tmp_path, config)
        check(path)
        command = [tool("prometheus"), f"--config.file={path}", f"--storage.tsdb.path={tmp_path / 'data'}",
                   "--web.listen-address=127.0.0.1:0"]  # fmt: skip
        with served(command, tmp_path / "prometheus.log", "/-/ready") as url:
            api = f"{url}/api/v1"

            def query(expr: str) -> list[dict[str, Any]]:
                result: list[dict[str, Any]] = httpx.get(f"{api}/query", params={"query": expr}, timeout=5).json()[
                    "data"
                ]["result"]
                return result

            wait_until(lambda: len(query("gpu_info")) == 4, 30, "four gpu_info series in Prometheus")
            (up,) = query("up")
            # The port is relabelled away: `instance` is the host, as the alerts and dashboards name it.
            assert up["metric"] == {"__name__": "up", "job": "gpu-exporter", "instance": "127.0.0.1",
                                    "cluster": "example"}  # fmt: skip
            groups = httpx.get(f"{api}/rules", timeout=5).json()["data"]["groups"]
            expected = sum(len(yaml.safe_load(p.read_text())["groups"]) for p in RULE_FILES)
            assert len(groups) == expected
    finally:
        exporter.stop()
