"""The system-tier tests of tests/unit/test_dashboards.py (split by what they start)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tests.harness import SCENARIOS, TOOLKIT_LISTENING, Exporter, bound_port, start
from tests.unit.test_dashboards import (
    EVENTS,
    FILES,
    GPU1_UUID,
    HOST_A_EXTRA,
    HOST_B_EXTRA,
    POD_RESOURCES,
    SERIES_VALUES,
    STAT_VALUES,
    Panel,
    _get,
    _wait,
    all_panels,
    expand,
    fake_procfs,
    grafana_regex,
    load,
)


def test_every_query_returns_data_on_a_real_prometheus(fakenvml_dir: Path, tmp_path: Path) -> None:
    binary = shutil.which("prometheus")
    assert binary, "prometheus not found: run scripts/test, which installs Debian's prometheus package"
    host_a, host_b = tmp_path / "host-a.scn", tmp_path / "host-b.scn"
    host_a.write_text((SCENARIOS / "h100x4.scn").read_text() + HOST_A_EXTRA)
    host_b.write_text((SCENARIOS / "mig.scn").read_text() + HOST_B_EXTRA)
    exporters: list[Exporter] = []
    log_path = tmp_path / "prometheus.log"
    server: subprocess.Popen[bytes] | None = None
    stoppers: list[Callable[[], None]] = []
    targets = tmp_path / "targets.json"
    targets.write_text("[]")
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: gpu-exporter\n    file_sd_configs: [{{files: ['{targets}']}}]\n"
    )
    try:
        with log_path.open("wb") as log:  # Prometheus starts while the exporters do; they join by file.
            server = subprocess.Popen(
                [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
                 "--web.listen-address=127.0.0.1:0"],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        jobs = tmp_path / "jobs"
        jobs.mkdir()
        (jobs / "2").write_text("hpc-9\n")
        attribution = {host_a: ["--path.procfs", str(fake_procfs(tmp_path / "proc")), "--hpc-job-mapping-dir",
                                str(jobs)], host_b: []}  # fmt: skip
        if POD_RESOURCES:  # a real gRPC server as host A's kubelet: pod ml/train-0 holds GPU 1
            from tests.podresources_server import FakeKubelet, pod

            kubelet = FakeKubelet(str(tmp_path / "kubelet.sock"))
            kubelet.set_pods(pod("ml", "train-0", ("trainer", [("nvidia.com/gpu", [GPU1_UUID])])))
            kubelet.start()
            stoppers.append(kubelet.stop)
            attribution[host_a] += ["--kubernetes", "--kubernetes.pod-resources-socket", kubelet.socket_path,
                                    "--kubernetes.refresh-interval", "1s"]  # fmt: skip
        for scenario in (host_a, host_b):
            exporters.append(start(fakenvml_dir, scenario, tmp_path, "--collect-interval", "500ms",
                                   "--collector.nvlink", *attribution[scenario]))  # fmt: skip
        written = tmp_path / "targets.new"
        written.write_text(json.dumps([{"targets": [f"127.0.0.1:{e.port}" for e in exporters]}]))
        os.replace(written, targets)
        port = bound_port(log_path, lambda: server is not None and server.poll() is None, TOOLKIT_LISTENING)
        _wait(port, 'count(up{job="gpu-exporter"} == 1) == 2', log_path)
        _wait(port, 'gpu_xid_errors_all_codes_total{gpu="3"} == 0', log_path)
        _wait(port, 'gpu_allocation_info{hpc_job="hpc-9"}', log_path)
        _wait(port, 'gpu_sm_active_ratio{gpu="0"}', log_path)
        if POD_RESOURCES:
            _wait(port, 'gpu_allocation_info{namespace="ml", pod="train-0"}', log_path)
        changed = tmp_path / "host-a.new"
        changed.write_text(host_a.read_text() + EVENTS)
        os.replace(changed, host_a)
        _wait(port, 'gpu_xid_errors_total{gpu="3", xid="48"} == 1', log_path)
        # two more scrapes of the newest series (the Xids'), so every rate window holds two samples
        _wait(port, 'min(count_over_time(gpu_xid_errors_total{gpu="3"}[1m])) >= 3', log_path)

        variables: dict[str, str] = {}
        for path in FILES:
            for variable in load(path)["templating"]["list"]:  # in order: job, instance, gpu
                if variable["type"] != "query":
                    continue
                match = re.fullmatch(r"label_values\((.*), (\w+)\)", variable["query"])
                assert match, variable["query"]
                selector = expand(match[1], variables)
                values = _get(port, f"/api/v1/label/{match[2]}/values", **{"match[]": selector})["data"]
                assert values, f"{path.stem}: variable {variable['name']} has no values"
                # "All" selected, as when a dashboard opens: the allValue where there is one, else every value.
                variables[variable["name"]] = variable.get("allValue") or grafana_regex(values)
        assert variables["job"] == "gpu-exporter"
        now = time.time()

        def check(panel: Panel, target: dict[str, Any]) -> str | None:
            expr = expand(target["expr"], variables)
            if target.get("instant"):
                result = _get(port, "/api/v1/query", query=expr, time=str(now))["data"]["result"]
            else:
                result = _get(port, "/api/v1/query_range", query=expr, start=str(now - 10), end=str(now),
                              step="1")["data"]["result"]  # fmt: skip
            if panel.dcgm_only:
                return f"{panel.name}: DCGM-only query has data on NVML: {expr}" if result else None
            if panel.pod_resources and not POD_RESOURCES:
                return f"{panel.name}: pod-resources query has data without the API: {expr}" if result else None
            if not result:
                return f"{panel.name}: no data: {expr}"
            series = SERIES_VALUES.get((panel.data["title"], target["refId"]))
            if series is not None:
                got = {}
                for item in result:
                    keys = [key for key in series if set(key) <= set(item["metric"].items())]
                    got[keys[0] if len(keys) == 1 else tuple(item["metric"].items())] = float(
                        (item.get("value") or item["values"][-1])[1]
                    )
                if got.keys() != series.keys() or any(abs(got[k] - v) > 1e-6 * max(1, v) for k, v in series.items()):
                    return f"{panel.name}: {got}, expected {series}: {expr}"
            expected = STAT_VALUES.get((panel.dashboard, panel.data["title"]))
            if expected is not None and abs(float(result[0]["value"][1]) - expected) > 1e-6 * max(1, expected):
                return f"{panel.name}: {result[0]['value'][1]}, expected {expected}: {expr}"
            return None

        queries = [(panel, target) for panel in all_panels() for target in panel.data.get("targets", [])]
        with ThreadPoolExecutor(4) as pool:
            failures = [f for f in pool.map(lambda job: check(*job), queries) if f]
        unproven = {panel.name for panel, _ in queries if panel.dcgm_only}
        unproven |= {panel.name for panel, _ in queries if panel.pod_resources and not POD_RESOURCES}
        print("unproven here (empty, as they must be):", *sorted(unproven), sep="\n  ")
        assert {(p.dashboard, p.data["title"]) for p, _ in queries} >= set(STAT_VALUES)
        assert failures == [], "\n".join(failures)
        assert len(unproven) >= 4
    finally:
        if server is not None:
            server.terminate()
            server.wait(20)
        for exporter in exporters:
            exporter.stop()
        for stop in stoppers:
            stop()
