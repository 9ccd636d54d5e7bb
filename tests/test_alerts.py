"""Alert rules, recording rules, the Alertmanager example and the runbooks.

promtool checks and unit-tests the rules; every metric and label the rules use is checked against the
catalogue; the Xid code lists against the shared Xid table; amtool checks the Alertmanager example's
routing, and its inhibition on a real Alertmanager; and one test runs the whole path on loopback: the
exporter on the fake NVML (a hot GPU, Xids, a GPU falling off the bus), a real Prometheus evaluating a
copy of the rules with shortened ``for:``, a real Alertmanager, and webhook receivers in the test.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
import yaml

from gpu_exporter.catalogue import (
    DEVICE_LABELS,
    FAMILIES,
    FIXED,
    LINK_LABEL,
    MIG_LABELS,
    SWITCH_METRICS,
    XID_CODES,
    Detail,
    detailed,
)
from tests.harness import REPO, served, start

ALERTS = REPO / "alerts"
ALERT_RULES = ALERTS / "gpu-alerts.rules.yml"
RECORDING_RULES = ALERTS / "gpu-recording.rules.yml"
AM_EXAMPLE = ALERTS / "alertmanager.example.yml"
UNIT_TESTS = sorted((ALERTS / "tests").glob("*.test.yml"))
RUNBOOKS = REPO / "docs" / "runbooks"
RUNBOOK_BASE = "https://github.com/OWNER/gpu-exporter/blob/main/docs/runbooks"

#: The alerts issue 5 asks for, by name.
EXPECTED_ALERTS = {
    "GPUTemperatureHigh", "GPUTemperatureCritical", "GPUMemoryTemperatureHigh", "GPUXidError", "GPUFallenOffBus",
    "GPUUncorrectableECCError", "GPURowRemapFailure", "GPURowRemapPending", "GPUThermalThrottling",
    "GPUPowerThrottling", "GPUHardwareSlowdown", "GPUClockStraggler", "GPUMemoryNearlyFull",
    "GPUUtilizationSaturated", "GPUBusyLowSMActivity", "GPUIdleMemoryHeld", "GPUInputStarvation", "GPUAllocatedIdle",
    "GPUPCIeLinkDegraded",
    "GPUExporterDown",
    "GPUMetricsAbsent", "GPUExporterStale", "GPUExporterBackendDown",
    "GPUNVLinkDown", "GPUNVLinkErrors", "GPUNVSwitchFatalError", "GPUNVSwitchPortDown", "GPUNVSwitchTemperatureHigh",
    # issue 38: every health signal the health model reads
    "GPURecoveryActionRequired", "GPUMemoryUnrepairable", "GPUFabricUnhealthy", "GPUInforomInvalid", "GPUMissing",
}  # fmt: skip
#: Alerts about a node's exporter rather than one GPU: their descriptions need not name a GPU.
NODE_ALERTS = {"GPUExporterDown", "GPUMetricsAbsent", "GPUExporterBackendDown", "GPUMissing"}
#: Alerts about an NVSwitch: their descriptions name the switch instead of a GPU.
SWITCH_ALERTS = {"GPUNVSwitchFatalError", "GPUNVSwitchPortDown", "GPUNVSwitchTemperatureHigh"}
#: Labels Prometheus adds to every scraped series.
TARGET_LABELS = ("job", "instance")

Rule = dict[str, Any]


def tool(*names: str) -> str:
    """The first of ``names`` on PATH; fail with the install hint otherwise."""
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    pytest.fail(f"{' or '.join(names)} not found: run scripts/test, which installs Debian's prometheus and "
                "prometheus-alertmanager packages", pytrace=False)  # fmt: skip


def run(*command: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)


def rules(path: Path) -> list[tuple[str, Rule]]:
    """(group name, rule) for every rule of a rule file."""
    data = yaml.safe_load(path.read_text())
    return [(group["name"], rule) for group in data["groups"] for rule in group["rules"]]


def alert_rules() -> list[Rule]:
    return [rule for _, rule in rules(ALERT_RULES) if "alert" in rule]


def load_generate() -> ModuleType:
    """``alerts/generate.py`` as a module (it is a script, not part of a package)."""
    spec = importlib.util.spec_from_file_location("alerts_generate", ALERTS / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- promtool ----------------------------------------------------------------------------------------


def test_promtool_check_rules_is_clean() -> None:
    result = run(tool("promtool"), "check", "rules", "--lint-fatal", str(ALERT_RULES), str(RECORDING_RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_unit_tests_pass() -> None:
    assert len(UNIT_TESTS) >= 4
    result = run(tool("promtool"), "test", "rules", *map(str, UNIT_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_firing_and_a_quiet_unit_test() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for path in UNIT_TESTS:
        for group in yaml.safe_load(path.read_text())["tests"]:
            for case in group.get("alert_rule_test", []):
                (firing if case.get("exp_alerts") else quiet).add(case["alertname"])
    names = {rule["alert"] for rule in alert_rules()}
    assert names - firing == set(), "alerts without a unit test where they fire"
    assert names - quiet == set(), "alerts without a unit test where they must not fire (exp_alerts: [])"


def test_every_recording_rule_has_a_value_test() -> None:
    tested = {
        case["expr"]
        for path in UNIT_TESTS
        for group in yaml.safe_load(path.read_text())["tests"]
        for case in group.get("promql_expr_test", [])
    }
    records = {rule["record"] for _, rule in rules(RECORDING_RULES)}
    assert records - tested == set()


# --- the rules against the catalogue -------------------------------------------------------------------

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_COMMENT = re.compile(r"#[^\n]*")
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENTIFIER = re.compile(r"(?<![\w.:$])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![\w:])(?!\s*\()")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
             "group_right", "inf", "nan", "start", "end"}  # fmt: skip
_SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}")
_MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"')


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects: identifiers that are not functions, keywords,
    label names (in matchers and grouping clauses), durations or numbers."""
    text = _STRING.sub('""', expr)
    text = _COMMENT.sub("", text)
    text = _MATCHERS.sub("", text)
    text = _RANGE.sub("", text)
    text = _GROUPING.sub("", text)
    return {name for name in _IDENTIFIER.findall(text) if name not in _KEYWORDS}


def test_metric_name_extraction() -> None:
    expr = """
        max without (xid) (increase(gpu_xid_errors_total{xid="79"}[10m]) > 0)  # threshold: x_y
        or gpu_up == 0 unless on (instance) gpu_info offset 10m or gpu_up offset $__range
        and 1e9 * quantile by (instance, name) (0.5, instance:gpu_power_watts:sum) > bool 3
        or absent(up{job="gpu-exporter"}) or timestamp(a_b) - a_b > 3 * c + 30
    """
    assert metric_names(expr) == {"gpu_xid_errors_total", "gpu_up", "gpu_info", "instance:gpu_power_watts:sum",
                                  "up", "a_b", "c"}  # fmt: skip


def catalogue_labels(detail: Detail = "full") -> dict[str, dict[str, set[str] | None]]:
    """For every metric exported at ``detail`` (``--metrics.detail``): each label it may carry → its
    allowed values (None: any value)."""
    known: dict[str, dict[str, set[str] | None]] = {}
    switch_families = {spec.name: tuple(s for s in SWITCH_METRICS if s.name == spec.name) for spec in SWITCH_METRICS}
    for name, every in {**FAMILIES, **switch_families}.items():
        specs = detailed(every, detail)
        if not specs:
            continue
        owner = ("nvswitch",) if any(spec.nvswitch for spec in specs) else DEVICE_LABELS
        labels: dict[str, set[str] | None] = dict.fromkeys((*TARGET_LABELS, *owner))
        if any(spec.mig for spec in specs):
            labels.update(dict.fromkeys(MIG_LABELS))
        if any(spec.per_link for spec in specs):
            labels.update(dict.fromkeys((LINK_LABEL,)))
        for spec in specs:
            for label, value in spec.variant:
                values = labels.get(label) or set()
                values.add(value)
                labels[label] = values
        known[name] = labels
    for metric in FIXED.values():
        known[metric.name] = dict.fromkeys((*TARGET_LABELS, *metric.labels))
    known["up"] = dict.fromkeys(TARGET_LABELS)  # Prometheus' own per-target series
    return known


def all_expressions() -> list[str]:
    return [rule["expr"] for path in (ALERT_RULES, RECORDING_RULES) for _, rule in rules(path)]


def test_every_metric_the_rules_use_exists() -> None:
    known = catalogue_labels()
    recorded = {rule["record"] for _, rule in rules(RECORDING_RULES)}
    used = set().union(*map(metric_names, all_expressions()))
    assert {"gpu_temperature_celsius", "gpu_xid_errors_total", "up", "gpu_info"} <= used  # the parser works
    assert used - set(known) - recorded == set(), "metrics used by the rules but not exported by gpu-exporter"


def test_every_label_matcher_names_a_real_label_and_value() -> None:
    known = catalogue_labels()
    checked = 0
    for expr in all_expressions():
        for metric, body in _SELECTOR.findall(_COMMENT.sub("", expr)):
            if metric not in known:
                continue  # a recording rule's output
            for label, op, value in _MATCHER.findall(body):
                checked += 1
                assert label in known[metric], f"{metric} has no label {label}"
                if label == "xid":
                    assert all(re.fullmatch(r"\d+", code) for code in value.split("|")), f"{metric}{{{body}}}"
                allowed = known[metric][label]
                if allowed is None or op == "!=" or (op == "=" and value == ""):
                    continue
                assert set(value.split("|")) <= allowed, f"{metric}{{{body}}}: allowed {sorted(allowed)}"
    assert checked > 20


def test_the_rules_need_nothing_the_lean_default_leaves_out() -> None:
    """Every metric the alert and recording rules select, and every label value they ask for, is in the
    default (lean) exposition: no rule needs --metrics.detail=full."""
    lean = catalogue_labels("lean")
    recorded = {rule["record"] for _, rule in rules(RECORDING_RULES)}
    used = set().union(*map(metric_names, all_expressions()))
    assert used - set(lean) - recorded == set(), "metrics the rules use that the lean default leaves out"
    checked = 0
    for expr in all_expressions():
        for metric, body in _SELECTOR.findall(_COMMENT.sub("", expr)):
            for label, op, value in _MATCHER.findall(body):
                allowed = lean.get(metric, {}).get(label)
                if allowed is None or op in ("!=", "!~") or value == "":
                    continue
                checked += 1
                assert set(value.split("|")) <= allowed, f"{metric}{{{body}}}: the lean default has {sorted(allowed)}"
    assert checked >= 5  # the clock event reasons, ECC types, ...


def test_alerts_drop_a_severity_label_of_their_series() -> None:
    """An alert's own ``severity`` label would silently replace a ``severity`` label of the series it
    selects (gpu_nvswitch_last_sxid's fatal/non_fatal): such rules aggregate it away."""
    known = catalogue_labels()
    checked = 0
    for rule in alert_rules():
        if any("severity" in known.get(metric, {}) for metric in metric_names(rule["expr"])):
            checked += 1
            assert re.search(r"\bwithout\s*\(\s*severity\s*\)", rule["expr"]), rule["alert"]
    assert checked >= 1


def _xid_selector(rule: Rule) -> tuple[str, str]:
    """The (operator, regex) of a GPUXidError rule; every selector in it must be the same."""
    selectors: set[tuple[str, str]] = set(re.findall(r'gpu_xid_errors_total\{xid(=~|!~)"([^"]*)"\}', rule["expr"]))
    assert len(selectors) == 1, rule["expr"]
    return selectors.pop()


def test_xid_rules_follow_the_shared_xid_table() -> None:
    result = run(sys.executable, str(ALERTS / "generate.py"), "check")
    assert result.returncode == 0, result.stderr
    xid_rules = [rule for rule in alert_rules() if rule["alert"] == "GPUXidError"]
    assert sorted(rule["labels"]["severity"] for rule in xid_rules) == ["critical", "info", "warning"]
    expected = {str(code): xid.severity for code, xid in XID_CODES.items()} | {"999": "warning", "0": "warning"}
    for code, severity in expected.items():
        matching = []
        for rule in xid_rules:
            op, regex = _xid_selector(rule)
            if (re.fullmatch(regex, code) is not None) == (op == "=~"):
                matching.append(rule["labels"]["severity"])
        assert matching == [severity], f"Xid {code}: rules {matching}, table {severity}"
    assert {severity for severity in expected.values()} == {"critical", "warning", "info"}


# --- annotations, labels, runbooks ---------------------------------------------------------------------


def test_alerts_are_the_expected_set_with_severity_and_annotations() -> None:
    groups: dict[str, int] = {}
    for group, _ in rules(ALERT_RULES):
        groups[group] = groups.get(group, 0) + 1
    assert max(groups.values()) <= 20 and all(len(name) <= 40 for name in groups)
    seen = set()
    for rule in alert_rules():
        name = rule["alert"]
        seen.add(name)
        assert re.fullmatch(r"GPU[A-Z][A-Za-z]+", name) and len(name) <= 40, name
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, name
        notes = rule["annotations"]
        assert set(notes) == {"summary", "description", "runbook_url"}, name
        summary, description = notes["summary"], notes["description"]
        assert "{{" not in summary and summary[0].isupper() and summary.endswith("."), f"{name}: {summary}"
        assert "$labels.instance" in description, f"{name}: the description must name the node"
        if name in SWITCH_ALERTS:
            assert "$labels.nvswitch" in description, f"{name}: name the NVSwitch"
        elif name not in NODE_ALERTS:
            assert "$labels.gpu" in description and "$labels.uuid" in description, f"{name}: name the GPU"
        assert notes["runbook_url"] == f"{RUNBOOK_BASE}/{name.lower()}.md", name
        assert (RUNBOOKS / f"{name.lower()}.md").is_file(), name
    assert seen == EXPECTED_ALERTS


def test_runbooks_say_what_it_means_how_to_confirm_and_what_to_do() -> None:
    names = {rule["alert"] for rule in alert_rules()}
    files = {path.name for path in RUNBOOKS.glob("*.md")} - {"README.md"}
    assert files == {f"{name.lower()}.md" for name in names}
    index = (RUNBOOKS / "README.md").read_text()
    for name in names:
        text = (RUNBOOKS / f"{name.lower()}.md").read_text()
        assert text.startswith(f"# {name}\n"), name
        sections = re.split(r"^## ", text, flags=re.MULTILINE)
        titles = {section.split("\n", 1)[0] for section in sections[1:]}
        assert {"Meaning", "Confirm", "Action"} <= titles, f"{name}: {titles}"
        confirm = next(section for section in sections if section.startswith("Confirm"))
        assert "```promql" in confirm and "```sh" in confirm, f"{name}: give a query and a command"
        assert f"[{name.lower()}.md]({name.lower()}.md)" in index, name


def test_thresholds_are_tagged_consistently_and_documented() -> None:
    generate = load_generate()
    found: dict[str, list[str]] = generate.thresholds(ALERT_RULES.read_text())
    assert len(found) >= 10
    readme = (ALERTS / "README.md").read_text()
    for name, values in found.items():
        assert len(set(values)) == 1, f"threshold {name} has different values: {values}"
        assert f"| `{name}` | {values[0]} |" in readme, f"threshold {name} is not documented in alerts/README.md"


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


# --- Alertmanager: amtool --------------------------------------------------------------------------------


def test_amtool_check_config() -> None:
    result = run(tool("amtool"), "check-config", str(AM_EXAMPLE))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout and "3 inhibit rules" in result.stdout


@pytest.mark.parametrize(
    ("labels", "receiver"),
    [
        (["severity=critical", "alertname=GPUFallenOffBus", "instance=n1:9400", "gpu=0"], "pager"),
        (["severity=critical", "alertname=GPUXidError", "instance=n1:9400", "gpu=3", "xid=79"], "pager"),
        (["severity=critical", "alertname=GPURecoveryActionRequired", "instance=n1:9400", "gpu=0"], "pager"),
        (["severity=warning", "alertname=GPURecoveryActionRequired", "instance=n1:9400", "gpu=1"], "chat"),
        (["severity=critical", "alertname=GPUMemoryUnrepairable", "instance=n1:9400", "gpu=0"], "pager"),
        (["severity=critical", "alertname=GPUFabricUnhealthy", "instance=n1:9400", "gpu=0"], "pager"),
        (["severity=warning", "alertname=GPUInforomInvalid", "instance=n1:9400", "gpu=0"], "chat"),
        (["severity=critical", "alertname=GPUMissing", "instance=n1:9400"], "pager"),
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


def test_alertmanager_example_groups_by_node_and_gpu() -> None:
    config = yaml.safe_load(AM_EXAMPLE.read_text())
    assert config["route"]["group_by"] == ["instance", "gpu"]
    assert all("group_by" not in route for route in config["route"]["routes"])  # inherited everywhere


# --- real Alertmanager and webhook receivers --------------------------------------------------------------


class Webhooks:
    """An HTTP server on 127.0.0.1 that records every Alertmanager webhook POST, by path."""

    def __init__(self) -> None:
        self.received: list[tuple[str, dict[str, Any]]] = []
        lock = threading.Lock()
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with lock:
                    received.append((self.path, json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def alerts(self, path: str) -> list[dict[str, Any]]:
        """Firing alerts delivered to ``path`` so far."""
        return [
            alert
            for where, payload in list(self.received)
            if where == path
            for alert in payload["alerts"]
            if alert["status"] == "firing"
        ]

    @contextmanager
    def running(self) -> Iterator[Webhooks]:
        self.thread.start()
        try:
            yield self
        finally:
            self.server.shutdown()
            self.server.server_close()
            self.thread.join(5)


def alertmanager_config(webhooks: str, group_wait: str) -> dict[str, Any]:
    """The example configuration with its receivers pointed at the test's webhooks and shorter waits."""
    config: dict[str, Any] = yaml.safe_load(AM_EXAMPLE.read_text())
    for receiver in config["receivers"]:
        for hook in receiver.get("webhook_configs", []):
            hook["url"] = f"{webhooks}/{receiver['name']}"
    config["route"].update(group_wait=group_wait, group_interval="5s", repeat_interval="1h")
    return config


@contextmanager
def alertmanager(tmp_path: Path, config: dict[str, Any]) -> Iterator[str]:
    """A real Alertmanager on 127.0.0.1 (clustering off, storage in tmp); yields its URL."""
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config))
    check = run(tool("amtool"), "check-config", str(path))
    assert check.returncode == 0, check.stdout + check.stderr
    command = [tool("prometheus-alertmanager", "alertmanager"), f"--config.file={path}",
               f"--storage.path={tmp_path / 'am-data'}", "--web.listen-address=127.0.0.1:0",
               "--cluster.listen-address="]  # fmt: skip
    with served(command, tmp_path / "alertmanager.log", "/-/ready") as url:
        yield url


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.25)


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
