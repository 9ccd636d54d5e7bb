"""The shipped Node Problem Detector configuration (deploy/node-problem-detector/gpu-health-monitor.json)
run as NPD runs a custom plugin: each rule's command with its arguments and timeout, its output cut at
``max_output_length``, its exit code read as OK (0), NonOK (1) or Unknown (anything else), against an
exporter on the fake NVML whose GPU 0 is asked to reset and then is not."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.harness import REPO, start

CONFIG = REPO / "deploy" / "node-problem-detector" / "gpu-health-monitor.json"
#: Where the rules' command is in the image, and how the tests run the same command here.
IMAGE_COMMAND = "/opt/gpu-exporter/bin/gpu-exporter"
STATUS = {0: "OK", 1: "NonOK"}  # NPD's plugin protocol: any other exit code is Unknown


def _seconds(duration: str) -> float:
    match = re.fullmatch(r"(\d+)s", duration)
    assert match, duration
    return float(match[1])


def _run_rule(config: dict[str, Any], rule: dict[str, Any], url: str) -> tuple[str, str]:
    """(NPD's status, message) of one run of ``rule``, as NPD's custom plugin runs it."""
    assert rule["path"] == IMAGE_COMMAND
    args = [url if arg == "http://127.0.0.1:9400" else arg for arg in rule["args"]]
    done = subprocess.run([sys.executable, "-m", "gpu_exporter", *args], capture_output=True, text=True,
                          timeout=_seconds(rule["timeout"]), check=False)  # fmt: skip
    message = done.stdout.strip()[: config["pluginConfig"]["max_output_length"]]
    return STATUS.get(done.returncode, "Unknown"), message


def _scenario(path: Path, action: int) -> None:
    path.write_text(
        "driver_version = 550.54.15\ndevice_count = 1\ngpu0.name = NVIDIA H100 80GB HBM3\n"
        f"gpu0.uuid = GPU-00000000-0000-0000-0000-000000000000\ngpu0.recovery_action = {action}\n"
    )


def test_the_configuration_is_a_custom_plugin_monitor_npd_accepts() -> None:
    config = json.loads(CONFIG.read_text())
    assert config["plugin"] == "custom" and config["source"]
    plugin = config["pluginConfig"]
    assert plugin["max_output_length"] == 80  # what gpu-exporter check promises to fit in
    assert _seconds(plugin["timeout"]) <= _seconds(plugin["invoke_interval"])
    conditions = {condition["type"] for condition in config["conditions"]}
    for rule in config["rules"]:
        assert rule["type"] in ("temporary", "permanent") and rule["reason"]
        assert rule["type"] == "temporary" or rule["condition"] in conditions
        assert _seconds(rule["timeout"]) <= _seconds(plugin["timeout"])
        assert rule["args"][0] == "check"


def test_npd_sees_nonok_naming_the_gpu_then_ok_then_unknown(fakenvml_dir: Path, tmp_path: Path) -> None:
    config = json.loads(CONFIG.read_text())
    (rule,) = [rule for rule in config["rules"] if rule["type"] == "permanent"]
    scenario = tmp_path / "host.scn"
    _scenario(scenario, 1)
    exporter = start(fakenvml_dir, scenario, tmp_path)
    try:
        seen = ("", "")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and seen[0] != "NonOK":
            seen = _run_rule(config, rule, exporter.url)
        assert seen == ("NonOK", "GPU 0: the driver asks for recovery action 1: reset_gpu")
        _scenario(scenario, 0)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and seen[0] != "OK":
            seen = _run_rule(config, rule, exporter.url)
        assert seen == ("OK", "OK: 1 GPU healthy")
    finally:
        exporter.stop()
    status, message = _run_rule(config, rule, exporter.url)
    assert status == "Unknown" and message.startswith("UNKNOWN: exporter at")
