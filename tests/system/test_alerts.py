"""The system-tier tests of tests/unit/test_alerts.py (split by what they start)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from tests.harness import served, start
from tests.unit.test_alerts import (
    ALERT_RULES,
    ALERTS,
    AM_EXAMPLE,
    RECORDING_RULES,
    RUNBOOK_BASE,
    UNIT_TESTS,
    Webhooks,
    alertmanager,
    alertmanager_config,
    rules,
    run,
    tool,
    wait_until,
)


def test_promtool_check_rules_is_clean() -> None:
    result = run(tool("promtool"), "check", "rules", "--lint-fatal", str(ALERT_RULES), str(RECORDING_RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_unit_tests_pass() -> None:
    assert len(UNIT_TESTS) >= 4
    result = run(tool("promtool"), "test", "rules", *map(str, UNIT_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr


def test_render_writes_a_customised_copy(tmp_path: Path) -> None:
    script = str(ALERTS / "generate.py")
    default = run(sys.executable, script, "render")
    assert default.returncode == 0 and default.stdout == ALERT_RULES.read_text()
    out = tmp_path / "custom.rules.yml"
    result = run(
        sys.executable, script, "render", "--job", "gpu", "--runbook-base", "https://wiki.example/gpu/",
        "--threshold", "temperature_high_celsius=80", "--threshold", "busy_ratio=0.3",
        "--for", "GPUTemperatureHigh=15m", "--severity", "GPUExporterDown=critical", "-o", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    check = run(tool("promtool"), "check", "rules", "--lint-fatal", str(out))
    assert check.returncode == 0, check.stdout + check.stderr
    custom = {rule["alert"]: rule for rule in [r for _, r in rules(out) if "alert" in r]}
    assert "> 80  # threshold: temperature_high_celsius" in custom["GPUTemperatureHigh"]["expr"]
    assert custom["GPUTemperatureHigh"]["for"] == "15m"
    assert custom["GPUTemperatureCritical"]["for"] == "2m"  # untouched
    assert custom["GPUExporterDown"]["labels"]["severity"] == "critical"
    assert 'up{job="gpu"} == 0' in custom["GPUExporterDown"]["expr"]
    assert "> 0.5  #" not in out.read_text() and out.read_text().count("> 0.3  # threshold: busy_ratio") == 8
    assert custom["GPUXidError"]["annotations"]["runbook_url"] == "https://wiki.example/gpu/gpuxiderror.md"
    for bad, message in (
        (["--threshold", "nope=1"], "unknown"),
        (["--threshold", "busy_ratio=high"], "not a number"),
        (["--for", "GPUTemperatureHigh=10 minutes"], "duration"),
        (["--for", "GPUNope=1m"], "no such alert"),
        (["--severity", "GPUXidError=critical"], "Xid table"),
        (["--severity", "GPUTemperatureHigh=page"], "expected one of"),
    ):
        failed = run(sys.executable, script, "render", *bad)
        assert failed.returncode == 2 and message in failed.stderr, (bad, failed.stderr)


def test_amtool_check_config() -> None:
    result = run(tool("amtool"), "check-config", str(AM_EXAMPLE))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout and "3 inhibit rules" in result.stdout


@pytest.mark.parametrize(
    ("labels", "receiver"),
    [
        (["severity=critical", "alertname=GPUFallenOffBus", "instance=n1:9400", "gpu=0"], "pager"),
        (["severity=critical", "alertname=GPUXidError", "instance=n1:9400", "gpu=3", "xid=79"], "pager"),
        (["severity=warning", "alertname=GPUTemperatureHigh", "instance=n1:9400", "gpu=1"], "chat"),
        (["severity=warning", "alertname=GPUExporterDown", "instance=n1:9400"], "chat"),
        (["severity=info", "alertname=GPUUtilizationSaturated", "instance=n1:9400", "gpu=2"], "null"),
        (["alertname=SomethingWithoutSeverity"], "chat"),
    ],
)
def test_amtool_routes_by_severity(labels: list[str], receiver: str) -> None:
    result = run(tool("amtool"), "config", "routes", "test", f"--config.file={AM_EXAMPLE}",
                 f"--verify.receivers={receiver}", *labels)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == receiver


def test_alertmanager_inhibits_with_amtool(tmp_path: Path) -> None:
    """Inhibition on a real Alertmanager: alerts added and queried with amtool."""
    amtool = tool("amtool")
    with Webhooks().running() as hooks, alertmanager(tmp_path, alertmanager_config(hooks.url, "30s")) as url:
        sent = {
            "fallen": ["GPUFallenOffBus", "severity=critical", "instance=n1:9400", "gpu=0"],
            "xid_same_gpu": ["GPUXidError", "severity=warning", "instance=n1:9400", "gpu=0", "xid=13"],
            "temp_other_gpu": ["GPUTemperatureHigh", "severity=warning", "instance=n1:9400", "gpu=1"],
            "exporter_down": ["GPUExporterDown", "severity=warning", "instance=n2:9400"],
            "temp_down_node": ["GPUTemperatureHigh", "severity=warning", "instance=n2:9400", "gpu=0"],
            "stale_down_node": ["GPUExporterStale", "severity=warning", "instance=n2:9400"],
            "critical_temp": ["GPUTemperatureCritical", "severity=critical", "instance=n3:9400", "gpu=0"],
            "high_temp_same_gpu": ["GPUTemperatureHigh", "severity=warning", "instance=n3:9400", "gpu=0"],
            "other_job": ["NodeDiskFull", "severity=warning", "instance=n2:9400"],
        }
        for alertname, *labels in sent.values():
            added = run(amtool, f"--alertmanager.url={url}", "alert", "add", f"alertname={alertname}", *labels)
            assert added.returncode == 0, added.stderr
        inhibited = {"xid_same_gpu", "temp_down_node", "stale_down_node", "high_temp_same_gpu"}

        def states() -> dict[str, str]:
            query = run(amtool, f"--alertmanager.url={url}", "-o", "json", "alert", "query", "--active", "--inhibited")
            assert query.returncode == 0, query.stderr
            by_labels = {frozenset(a["labels"].items()): a["status"] for a in json.loads(query.stdout)}
            found = {}
            for key, (alertname, *labels) in sent.items():
                wanted = frozenset({"alertname": alertname, **dict(x.split("=", 1) for x in labels)}.items())
                status = by_labels.get(wanted)
                if status is not None:
                    found[key] = status["state"] if status["state"] == "active" or status["inhibitedBy"] else "?"
            return found

        expected = {key: "suppressed" if key in inhibited else "active" for key in sent}
        wait_until(lambda: states() == expected, 60, f"inhibition states {expected}")


def test_end_to_end_exporter_prometheus_alertmanager(fakenvml_dir: Path, tmp_path: Path) -> None:
    """Exporter on the fake NVML → Prometheus with the rules (shortened for:) → Alertmanager → webhooks."""
    prometheus = tool("prometheus")
    xid_at = 8.0  # seconds after the exporter's nvmlInit: Prometheus has scraped the zero counts by then
    uuids = [f"GPU-e2e00000-0000-4000-8000-00000000000{i}" for i in range(3)]
    scenario = tmp_path / "e2e.scn"
    gpus = []
    for i, (temperature, extra) in enumerate(
        [
            (95, ""),  # hot: within 3 °C of its slowdown threshold (critical) and above 85 °C (inhibited)
            (60, f"gpu1.xid = 13@{xid_at}\ngpu1.lost_after = {xid_at + 3}\n"),  # an Xid, then off the bus
            (86, f"gpu2.xid = 48@{xid_at}\n"),  # above 85 °C only; a critical Xid
        ]
    ):
        gpus.append(
            f"gpu{i}.name = NVIDIA H100 80GB HBM3\ngpu{i}.uuid = {uuids[i]}\ngpu{i}.temperature.gpu = {temperature}\n"
            f"gpu{i}.temperature.slowdown = 90\ngpu{i}.temperature.shutdown = 92\ngpu{i}.utilization.gpu = 40\n"
            f"gpu{i}.memory.total = 85520809984\ngpu{i}.memory.used = 10737418240\n"
            f"gpu{i}.power.usage = {300000 + 100000 * i}\n{extra}"
        )
    scenario.write_text("driver_version = 550.54.15\ndevice_count = 3\n" + "\n".join(gpus))

    # A copy of the rules with every for: shortened to 1 s.
    rule_copy = tmp_path / "gpu-alerts.rules.yml"
    data = yaml.safe_load(ALERT_RULES.read_text())
    for group in data["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = "1s"
    rule_copy.write_text(yaml.safe_dump(data, sort_keys=False))
    group_wait = 10  # seconds; Alertmanager holds each new group this long, so an inhibiting alert can join

    exporter = start(fakenvml_dir, scenario, tmp_path, "--collect-interval", "500ms")
    try:
        with (
            Webhooks().running() as hooks,
            alertmanager(tmp_path, alertmanager_config(hooks.url, f"{group_wait}s")) as am_url,
        ):
            config = tmp_path / "prometheus.yml"
            config.write_text(yaml.safe_dump({
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(rule_copy), str(RECORDING_RULES)],
                "alerting": {"alertmanagers": [{"static_configs": [{"targets": [am_url.removeprefix("http://")]}]}]},
                "scrape_configs": [{"job_name": "gpu-exporter",
                                    "static_configs": [{"targets": [f"127.0.0.1:{exporter.port}"]}]}],
            }))  # fmt: skip
            check = run(tool("promtool"), "check", "config", str(config))
            assert check.returncode == 0, check.stdout + check.stderr
            command = [prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'prom-data'}",
                       "--web.listen-address=127.0.0.1:0"]  # fmt: skip
            with served(command, tmp_path / "prometheus.log", "/-/ready") as prom_url:
                instance = f"127.0.0.1:{exporter.port}"
                base = {"job": "gpu-exporter", "instance": instance}
                pager = {
                    ("GPUTemperatureCritical", "0"): {**base, "severity": "critical", "gpu": "0", "uuid": uuids[0]},
                    ("GPUFallenOffBus", "1"): {**base, "severity": "critical", "gpu": "1", "uuid": uuids[1]},
                    ("GPUXidError", "2"): {**base, "severity": "critical", "gpu": "2", "uuid": uuids[2], "xid": "48"},
                }
                chat = {("GPUTemperatureHigh", "2"): {**base, "severity": "warning", "gpu": "2", "uuid": uuids[2]}}

                def delivered(path: str) -> dict[tuple[str, str], dict[str, str]]:
                    return {
                        (alert["labels"]["alertname"], alert["labels"].get("gpu", "")): alert["labels"]
                        for alert in hooks.alerts(path)
                    }

                wait_until(
                    lambda: set(pager) <= set(delivered("/pager")) and set(chat) <= set(delivered("/chat")),
                    70,
                    f"pager {sorted(pager)} and chat {sorted(chat)}; got {hooks.received}",
                )
                for path, expected in (("/pager", pager), ("/chat", chat)):
                    for key, labels in expected.items():
                        assert delivered(path)[key] == {"alertname": key[0], **labels}, key

                # The inhibited alerts reached Alertmanager and are held back there...
                inhibited = {("GPUTemperatureHigh", "0"), ("GPUXidError", "1")}

                def suppressed() -> set[tuple[str, str]]:
                    alerts = httpx.get(f"{am_url}/api/v2/alerts", timeout=5).json()
                    return {
                        (a["labels"]["alertname"], a["labels"].get("gpu", ""))
                        for a in alerts
                        if a["status"]["state"] == "suppressed" and a["status"]["inhibitedBy"]
                    }

                wait_until(lambda: inhibited <= suppressed(), 20, f"{inhibited} suppressed in Alertmanager")
                time.sleep(group_wait + 3)  # ...past the moment their groups would have been sent
                everything = set(delivered("/pager")) | set(delivered("/chat")) | set(delivered("/null"))
                assert everything & inhibited == set(), hooks.received
                assert everything == set(pager) | set(chat), hooks.received  # nothing else fired
                for _, payload in hooks.received:
                    assert set(payload["groupLabels"]) <= {"instance", "gpu"}
                    for alert in payload["alerts"]:
                        assert alert["annotations"]["runbook_url"].startswith(RUNBOOK_BASE)
                        assert instance in alert["annotations"]["description"]

                # The recording rules run on the same data.
                counts = httpx.get(f"{prom_url}/api/v1/query",
                                   params={"query": "instance:gpu_info:count"}, timeout=5).json()  # fmt: skip
                assert [sample["value"][1] for sample in counts["data"]["result"]] == ["3"]
    finally:
        exporter.stop()
