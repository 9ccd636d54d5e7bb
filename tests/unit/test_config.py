"""Settings precedence and bad-input handling (flags, environment, YAML file)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpu_exporter.catalogue import COLLECTORS
from gpu_exporter.cli import parse_settings
from gpu_exporter.config import ConfigError, Settings
from gpu_exporter.options import parse_duration


def test_defaults() -> None:
    settings = parse_settings([], {})
    assert settings == Settings()
    assert settings.port == 9400 and settings.host == "0.0.0.0"
    assert settings.collectors == frozenset(COLLECTORS) - {"nvlink", "nvswitch"}


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1s", 1.0), ("500ms", 0.5), ("2m", 120.0), ("1h", 3600.0), ("15000", 15.0), ("250", 0.25), ("0.5s", 0.5)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "1x", "-1s", "10ms", "2h", "fast"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_precedence_flag_over_env_over_file(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("collect-interval: 5s\nbackend: nvml\nlog: {level: debug}\ncollectors: {pcie: false}\n")
    env = {"GPU_EXPORTER_CONFIG_FILE": str(config), "GPU_EXPORTER_COLLECT_INTERVAL": "3s"}
    settings = parse_settings(["--collect-interval", "2s"], env)
    assert settings.collect_interval == 2.0  # flag wins
    assert settings.backend == "nvml" and settings.log_level == "debug"  # from the file
    assert "pcie" not in settings.collectors
    assert parse_settings([], env).collect_interval == 3.0  # env beats file
    assert "pcie" in parse_settings(["--collector.pcie"], env).collectors  # flag beats file
    assert "pcie" in parse_settings([], {**env, "GPU_EXPORTER_COLLECTOR_PCIE": "true"}).collectors


def test_metrics_detail_from_flag_env_and_file(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("metrics: {detail: full}\n")
    assert parse_settings([], {}).metrics_detail == "lean"
    assert parse_settings(["--metrics.detail", "full"], {}).metrics_detail == "full"
    assert parse_settings([], {"GPU_EXPORTER_METRICS_DETAIL": "full"}).metrics_detail == "full"
    assert parse_settings([], {"GPU_EXPORTER_CONFIG_FILE": str(config)}).metrics_detail == "full"
    with pytest.raises(ConfigError, match="--metrics.detail='all' is not allowed: use one of lean, full"):
        parse_settings(["--metrics.detail", "all"], {})


def test_no_collector_flag() -> None:
    settings = parse_settings(["--no-collector.power", "--web.listen-address", "[::1]:9500"], {})
    assert "power" not in settings.collectors
    assert settings.host == "::1" and settings.port == 9500


@pytest.mark.parametrize(
    ("argv", "env", "needle"),
    [
        (["--web.listen-address", "9400"], {}, "--web.listen-address='9400' is not allowed: use HOST:PORT"),
        (["--web.listen-address", ":70000"], {}, "port from 0 (any free port) to 65535"),
        (["--web.telemetry-path", "metrics"], {}, "--web.telemetry-path='metrics' is not allowed"),
        (["--collect-interval", "fast"], {}, "--collect-interval='fast' is not allowed: use a duration"),
        (["--backend", "rocm"], {}, "--backend='rocm' is not allowed: use one of auto, dcgm, nvml"),
        (["--log.level", "loud"], {}, "--log.level='loud' is not allowed"),
        ([], {"GPU_EXPORTER_LOG_FORMAT": "xml"}, "GPU_EXPORTER_LOG_FORMAT='xml' is not allowed: use one of text, json"),
        ([], {"GPU_EXPORTER_COLLECTOR_POWER": "maybe"}, "GPU_EXPORTER_COLLECTOR_POWER='maybe' is not allowed"),
        (["--expected-gpus", "eight"], {}, "--expected-gpus='eight' is not allowed: use a whole number from 0 to 1024"),
        ([], {"GPU_EXPORTER_EXPECTED_GPUS": "-1"}, "GPU_EXPORTER_EXPECTED_GPUS='-1' is not allowed"),
        (["--kubernetes.node-condition", "gpu-healthy"], {}, "use a CamelCase condition type"),
    ],
)
def test_bad_values_name_setting_value_and_allowed(argv: list[str], env: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_settings(argv, env)
    assert needle in str(caught.value)
    assert "\n" not in str(caught.value)


def test_expected_gpus_and_node_condition_from_flag_and_environment() -> None:
    assert parse_settings([], {}).expected_gpus == 0  # not set: no inventory
    assert parse_settings(["--expected-gpus", "8"], {}).expected_gpus == 8
    assert parse_settings([], {"GPU_EXPORTER_EXPECTED_GPUS": "4"}).expected_gpus == 4
    assert parse_settings([], {}).node_condition == ""  # off
    env = {"GPU_EXPORTER_KUBERNETES_NODE_CONDITION": "GPUHealthy"}
    assert parse_settings([], env).node_condition == "GPUHealthy"


def test_config_file_errors(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    with pytest.raises(ConfigError, match="cannot be read"):
        parse_settings(["--config.file", str(missing)], {})
    broken = tmp_path / "broken.yaml"
    broken.write_text("web:\n  listen-address: [\n")
    with pytest.raises(ConfigError, match="at line 3; fix the YAML syntax"):
        parse_settings(["--config.file", str(broken)], {})
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("web:\n  listen-adress: ':1'\n")
    with pytest.raises(ConfigError, match="unknown key 'web.listen-adress'; allowed keys: "):
        parse_settings(["--config.file", str(unknown)], {})
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("just a string\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        parse_settings(["--config.file", str(scalar)], {})
    bad_value = tmp_path / "bad.yaml"
    bad_value.write_text("collect-interval: 0\n")
    with pytest.raises(ConfigError, match="collect-interval='0' is not allowed"):
        parse_settings(["--config.file", str(bad_value)], {})


def _run_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpu_exporter", *argv], capture_output=True, text=True, timeout=60, check=False
    )
