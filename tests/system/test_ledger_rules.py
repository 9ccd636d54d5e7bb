"""The ledger's recording rules on a real Prometheus scraping the real exporter on the fake NVML: two
Slurm jobs share GPU 0 at 60 % and 20 % SM (tests/process/test_ledger.py's host), HPC job hpc-7 holds
GPU 2. A copy of alerts/gpu-recording.rules.yml whose groups are evaluated every second (the shipped
group runs every 5 minutes) gives each job's GPU-hours, busy GPU-hours and kWh over the day: the
jobs' busy GPU-hours 3:1, the shared GPU's hours split evenly, each job in its own series."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import yaml

from tests.harness import SCENARIOS, served, start
from tests.process.test_ledger import PROCESSES, _procfs
from tests.unit.test_alerts import RECORDING_RULES, tool, wait_until

BUSY = "slurm_job:gpu_allocation_busy_gpu_hours:increase1d"
HOURS = "slurm_job:gpu_allocation_gpu_hours:increase1d"
KWH = "slurm_job:gpu_allocation_energy_kwh:increase1d"
HPC_HOURS = "hpc_job:gpu_allocation_gpu_hours:increase1d"


def _query(url: str, expr: str) -> dict[str, float]:
    """The instant vector of ``expr`` by its job label's value (Slurm or HPC)."""
    body = httpx.get(f"{url}/api/v1/query", params={"query": expr}, timeout=5).json()
    return {
        sample["metric"].get("slurm_job") or sample["metric"].get("hpc_job", ""): float(sample["value"][1])
        for sample in body["data"]["result"]
    }


def test_recording_rules_sum_each_jobs_ledger_on_a_real_prometheus(fakenvml_dir: Path, tmp_path: Path) -> None:
    scenario = tmp_path / "host.scn"
    scenario.write_text((SCENARIOS / "h100x4.scn").read_text() + PROCESSES)
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "2").write_text("hpc-7\n")
    rules = yaml.safe_load(RECORDING_RULES.read_text())
    for group in rules["groups"]:
        group["interval"] = "1s"
    rule_copy = tmp_path / "gpu-recording.rules.yml"
    rule_copy.write_text(yaml.safe_dump(rules, sort_keys=False))
    exporter = start(
        fakenvml_dir, scenario, tmp_path, "--collect-interval", "500ms", "--path.procfs",
        str(_procfs(tmp_path / "proc")), "--hpc-job-mapping-dir", str(jobs),
    )  # fmt: skip
    try:
        config = tmp_path / "prometheus.yml"
        config.write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(rule_copy)],
            "scrape_configs": [{"job_name": "gpu-exporter",
                                "static_configs": [{"targets": [f"127.0.0.1:{exporter.port}"]}]}],
        }))  # fmt: skip
        command = [tool("prometheus"), f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
                   "--web.listen-address=127.0.0.1:0"]  # fmt: skip
        with served(command, tmp_path / "prometheus.log", "/-/ready") as url:

            def recorded() -> bool:  # every rule has evaluated over every job asked about below
                busy, jobs = _query(url, BUSY), {"101", "202", "303"}
                return (set(busy) == jobs and busy["202"] > 0 and jobs <= set(_query(url, HOURS))
                        and {"101", "202"} <= set(_query(url, KWH)) and "hpc-7" in _query(url, HPC_HOURS))  # fmt: skip

            wait_until(recorded, 60, f"{BUSY}, {HOURS}, {KWH} for jobs 101, 202, 303 and {HPC_HOURS} for hpc-7")
            busy, hours, kwh = _query(url, BUSY), _query(url, HOURS), _query(url, KWH)
    finally:
        exporter.stop()
    assert set(busy) == {"101", "202", "303"}
    assert busy["101"] / busy["202"] == pytest.approx(3.0, rel=0.05)
    assert hours["101"] == pytest.approx(hours["202"], rel=0.05)  # GPU 0's time, half each
    assert hours["303"] == pytest.approx(2 * hours["101"], rel=0.05)  # GPU 1 alone
    assert kwh["101"] > kwh["202"] > 0
